/* test_cli_train.c — `dynapipe train` (and the planning commands' shared
 * flags) refuse what cannot run before anything starts, and build the
 * options the documentation promises. No rank is started here: every case
 * stops at the flags, or prints the resolved options (--print-options).
 *
 *   - flags that do not apply or contradict: one line naming both, exit 2
 *     (a method knob for another method, --samples with a file, --min-lr
 *     above --lr, a cost table's max length against --max-seqlen, ...);
 *   - an empty path is a usage error naming the flag, for every path flag of
 *     train, eval, profile, plan and simulate;
 *   - outputs are checked before training: a --save, --metrics or --trace
 *     in a folder that does not exist stops the run at once, nothing made;
 *   - the defaults: the options train builds from no flags against the
 *     documented values (--help and docs), and the lr schedule's length is
 *     the run's (--steps 2 used to record 6 total steps);
 *   - the launcher: a bad hostfile (file:line), too few slots and a rank
 *     count far past the cores are refused before mpirun, naming the limit
 *     and --oversubscribe-ok; with a stand-in `mpirun` (a script first on
 *     PATH), mpirun's refusal before any rank speaks becomes one line, and
 *     an interrupt is one line and exit 130. Real MPI runs are in
 *     test_runtime*.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli_testlib.h"

static int setup(void **state)
{
    (void)state;
    return cli_setup_dir();
}

static int teardown(void **state)
{
    (void)state;
    return cli_teardown_dir();
}

/* `train ARGS --print-options`: the resolved options (the caller frees). */
static cJSON *options_of(const char *args)
{
    char full[2048];
    snprintf(full, sizeof full, "%s --print-options", args);
    int rc = cli_run("train", full);
    char *out = slurp(out_path);
    if (rc != 0) fail_msg("train %s: exit %d: %s", full, rc, slurp(err_path));
    cJSON *j = cJSON_Parse(out);
    if (j == NULL) fail_msg("train %s: not JSON: %s", full, out);
    free(out);
    return j;
}

static double num(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v)) fail_msg("no number '%s'", key);
    return v->valuedouble;
}

static void expect_num(const cJSON *j, const char *key, double want)
{
    double got = num(j, key);
    if (fabs(got - want) > 1e-6 * fabs(want)) fail_msg("%s: %.9g, documented %.9g", key, got, want);
}

/* The defaults of `dynapipe train --model gpt`, as documented (train
 * --help, docs/runtime.md, docs/model.md): written here, not read from the
 * code, so a changed default fails until the docs and this list agree. */
static void test_default_options(void **state)
{
    (void)state;
    cJSON *j = options_of("--model gpt");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m, "kind")->valuestring, "gpt");
    expect_num(m, "n_layers", 4); /* gpt-mini */
    expect_num(m, "hidden", 256);
    expect_num(m, "max_seqlen", 512);
    expect_num(j, "steps", 20);
    expect_num(j, "stages", 2);
    expect_num(j, "dp", 1);
    expect_num(j, "global_batch_tokens", 8192);
    expect_num(j, "samples", 20000);
    expect_num(j, "seed", 1);
    expect_num(j, "lr", 1e-3);
    expect_num(j, "min_lr", 1e-4);
    expect_num(j, "warmup_steps", 5);
    expect_num(j, "total_steps", 20);
    expect_num(j, "beta1", 0.9);
    expect_num(j, "beta2", 0.999);
    expect_num(j, "adam_eps", 1e-8);
    expect_num(j, "weight_decay", 0.01);
    expect_num(j, "clip", 1.0);
    expect_num(j, "timeout_s", 60);
    expect_num(j, "plan_ahead", 2);
    expect_num(j, "order_groups", 2);
    expect_num(j, "calibrate", 1); /* on by default (issue 25) */
    expect_num(j, "calibrate_window", 8);
    expect_num(j, "eval_every", 0);
    expect_num(j, "eval_samples", 64);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "method")->valuestring, "dynapipe");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "schedule")->valuestring, "auto");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "data")->valuestring, "builtin");
    cJSON_Delete(j);
    /* the flags reach the options */
    j = options_of("--model gpt --lr 0.003 --min-lr 0.0002 --weight-decay 0.1 --adam-eps 1e-6 --clip 0.5 --seed 7");
    expect_num(j, "lr", 3e-3);
    expect_num(j, "min_lr", 2e-4);
    expect_num(j, "weight_decay", 0.1);
    expect_num(j, "adam_eps", 1e-6);
    expect_num(j, "clip", 0.5);
    expect_num(j, "seed", 7);
    cJSON_Delete(j);
}

/* The lr schedule spans the run: the default warm-up (5) is shortened to
 * steps / 4 when it is not below --steps, and the cosine's total is
 * --steps, so it reaches --min-lr at the last step. */
static void test_lr_schedule_length(void **state)
{
    (void)state;
    static const struct { const char *args; int warmup, total; } cases[] = {
        {"--model gpt --steps 1", 0, 1},   {"--model gpt --steps 2", 0, 2},
        {"--model gpt --steps 5", 1, 5},   {"--model gpt --steps 6", 5, 6},
        {"--model gpt --steps 100", 5, 100}, {"--model gpt --steps 8 --warmup 7", 7, 8},
        {"--model gpt --steps 8 --warmup 0", 0, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *j = options_of(cases[i].args);
        if (num(j, "warmup_steps") != cases[i].warmup || num(j, "total_steps") != cases[i].total)
            fail_msg("train %s: warm-up %g, total %g; want %d, %d", cases[i].args, num(j, "warmup_steps"),
                     num(j, "total_steps"), cases[i].warmup, cases[i].total);
        cJSON_Delete(j);
    }
}

/* Contradicting or inapplicable flags: exit 2, one line naming both. */
static void test_contradictions_refused(void **state)
{
    (void)state;
    char jsonl[700];
    write_file("d.jsonl", "{\"input\": \"hello world\", \"target\": \"yes\"}\n"
                          "{\"input\": \"one two\", \"target\": \"no\"}\n",
               jsonl, sizeof jsonl);
    char with_file[900], split_file[900];
    snprintf(with_file, sizeof with_file, "--model gpt --data '%s' --samples 5", jsonl);
    snprintf(split_file, sizeof split_file, "--model gpt --data '%s' --split heldout", jsonl);
    const char *plan = "--model gpt --synthetic flan --global-batch-tokens 4096 --max-seqlen 512 --stages 2";
    char plan_knob[600], sim_knob[600], sim_ok[600];
    snprintf(plan_knob, sizeof plan_knob, "%s --mb-tokens 100", plan);
    snprintf(sim_knob, sizeof sim_knob, "%s --methods dynapipe,token --pack-rows 3", plan);
    snprintf(sim_ok, sizeof sim_ok, "%s --methods padding,packing --pack-rows 3 --batches 1", plan);
    const struct { const char *cmd, *args, *a, *b; } bad[] = {
        {"train", "--model gpt --pack-rows 4", "--pack-rows 4", "dynapipe"},
        {"train", "--model gpt --method packing --mb-samples 2", "--mb-samples 2", "packing"},
        {"train", "--model gpt --method token --pack-rows 2", "--pack-rows 2", "token"},
        {"plan", plan_knob, "--mb-tokens 100", "dynapipe"},
        {"simulate", sim_knob, "--pack-rows 3", "dynapipe, token"},
        {"train", with_file, "--samples", jsonl},
        {"train", split_file, "--split heldout", jsonl},
        {"train", "--model gpt --min-lr 0.01 --lr 0.001", "--min-lr 0.01", "--lr 0.001"},
        {"train", "--model gpt --steps 4 --warmup 4", "--warmup 4", "--steps 4"},
        {"train", "--model gpt --schedule 1f1b --order-groups 3", "--order-groups", "1f1b"},
        {"train", "--model gpt --no-calibrate --calibrate-window 4", "--calibrate-window", "--calibrate"},
        {"train", "--model gpt --eval-samples 4", "--eval-samples", "--eval-every"},
        {"train", "--model gpt --save-every 2 --save w.safetensors", "--save-every", "--save DIR"},
        {"eval", "--checkpoint x --max-new 3", "--max-new", "--prompt"},
        {"eval", "--checkpoint x --prompt hi --samples 3", "--samples", "--prompt"},
        {"eval", "--checkpoint x --prompt hi --split train", "--split", "--prompt"},
        {"profile", "--model gpt --out p.tsv --shapes 3", "--shapes", "--check"},
        {"profile", "--model gpt --out p.tsv --seed 3", "--seed", "--check"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = cli_run(bad[i].cmd, bad[i].args);
        cli_assert_one_line_error(bad[i].cmd, bad[i].args, rc, 2, bad[i].a);
        char *err = slurp(err_path);
        if (strstr(err, bad[i].b) == NULL) fail_msg("%s %s: '%s' not named: %s", bad[i].cmd, bad[i].args, bad[i].b, err);
        free(err);
    }
    /* a knob one of simulate's methods reads is accepted */
    assert_int_equal(cli_run("simulate", sim_ok), 0);
}

/* A cost table's max length is the run's: --max-seqlen may restate it;
 * another is refused naming both; without it the table's is taken. */
static void test_one_max_length(void **state)
{
    (void)state;
    char table[700], args[1500];
    snprintf(table, sizeof table, "%s/profile.tsv", dir);
    snprintf(args, sizeof args,
             "--model gpt --quick --max-seqlen 64 --max-rows 2 --repeats 1 --sweeps 1 --quiet --out '%s'", table);
    assert_int_equal(cli_run("profile", args), 0);
    snprintf(args, sizeof args, "--model gpt --cost-model '%s' --max-seqlen 128", table);
    cli_assert_one_line_error("train", args, cli_run("train", args), 2, "--max-seqlen 128");
    char *err = slurp(err_path);
    int names_table = strstr(err, table) != NULL && strstr(err, " 64") != NULL;
    free(err);
    assert_true(names_table);
    snprintf(args, sizeof args, "--model gpt --cost-model '%s'", table);
    cJSON *j = options_of(args);
    expect_num(cJSON_GetObjectItemCaseSensitive(j, "model"), "max_seqlen", 64);
    cJSON_Delete(j);
    snprintf(args, sizeof args, "--model gpt --cost-model '%s' --max-seqlen 64", table);
    j = options_of(args);
    expect_num(cJSON_GetObjectItemCaseSensitive(j, "model"), "max_seqlen", 64);
    cJSON_Delete(j);
}

/* Every path flag refuses '' as a usage error naming the flag. */
static void test_empty_paths(void **state)
{
    (void)state;
    const char *plan = "--model gpt --synthetic flan --global-batch-tokens 4096 --max-seqlen 512 --stages 2";
    static const struct { const char *cmd, *flag; } paths[] = {
        {"train", "--save"},         {"train", "--metrics"},      {"train", "--trace"},
        {"train", "--resume"},       {"train", "--hostfile"},     {"train", "--data"},
        {"train", "--cost-model"},   {"train", "--model-config"}, {"train", "--machine"},
        {"eval", "--checkpoint"},    {"eval", "--data"},          {"profile", "--out"},
        {"profile", "--check"},      {"profile", "--model-config"}, {"plan", "--json"},
        {"plan", "--plan-out"},      {"plan", "--lengths"},       {"simulate", "--trace"},
        {"simulate", "--svg"},       {"simulate", "--json"},      {"simulate", "--microbatches"},
    };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        char args[800], needle[64];
        const char *base = strcmp(paths[i].cmd, "plan") == 0 || strcmp(paths[i].cmd, "simulate") == 0 ? plan
                           : strcmp(paths[i].cmd, "eval") == 0 ? "" : "--model gpt";
        snprintf(args, sizeof args, "%s %s ''", base, paths[i].flag);
        snprintf(needle, sizeof needle, "%s: an empty path", paths[i].flag);
        cli_assert_one_line_error(paths[i].cmd, args, cli_run(paths[i].cmd, args), 2, needle);
    }
}

/* Outputs are checked before training: a folder that does not exist (or a
 * file where a folder should be) stops the run at once, naming the flag,
 * and nothing is created. */
static void test_outputs_checked_first(void **state)
{
    (void)state;
    char file[700];
    write_file("plain", "x", file, sizeof file);
    const struct { const char *flag, *path; } bad[] = {
        {"--save", "missing/w.safetensors"}, {"--save", "missing/ckpt"},  {"--metrics", "missing/m.jsonl"},
        {"--trace", "missing/t.json"},       {"--save", "plain/ckpt"},    {"--save", "plain"},
        {"--metrics", "."},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[1500];
        snprintf(args, sizeof args, "--model gpt --steps 1 %s '%s/%s'", bad[i].flag, dir, bad[i].path);
        if (strcmp(bad[i].path, ".") == 0) snprintf(args, sizeof args, "--model gpt --steps 1 %s '%s'", bad[i].flag, dir);
        cli_assert_one_line_error("train", args, cli_run("train", args), 2, bad[i].flag);
    }
    char missing[700];
    snprintf(missing, sizeof missing, "%s/missing", dir);
    struct stat st;
    assert_int_equal(stat(missing, &st), -1);
    /* profile measures for minutes before it writes */
    char args[1500];
    snprintf(args, sizeof args, "--model gpt --quick --out '%s/missing/p.tsv'", dir);
    cli_assert_one_line_error("profile", args, cli_run("profile", args), 2, "--out");
}

/* The launcher refuses before mpirun starts (a stand-in that would record
 * its start proves it did not). */
static void test_launch_refusals(void **state)
{
    (void)state;
    char hf[700], args[1500];
    const struct { const char *text, *needle; int rc; } bad[] = {
        {"\xad\x9f\x01garbage\n", ":1: byte 0xad", 1},
        {"localhost slots=abc\n", ":1: slots=abc", 1},
        {"# hosts\nlocalhost slots=0\n", ":2: slots=0", 1},
        {"", "no hosts", 1},
        {"localhost slots=1\n", "1 slot", 2}, /* 2 ranks: a usage error */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file("hosts", bad[i].text, hf, sizeof hf);
        snprintf(args, sizeof args, "--model gpt --model-config gpt-tiny --steps 1 --hostfile '%s'", hf);
        cli_assert_one_line_error("train", args, cli_run("train", args), bad[i].rc, bad[i].needle);
    }
    /* 131072 ranks on any machine this runs on: more than 8 per core */
    const char *many = "--model gpt --model-config gpt-tiny --steps 1 --dp 65536";
    cli_assert_one_line_error("train", many, cli_run("train", many), 2, "--oversubscribe-ok");
    char *err = slurp(err_path);
    int named = strstr(err, "131072 ranks") != NULL && strstr(err, "per core") != NULL;
    free(err);
    assert_true(named);
}

/* A stand-in mpirun, first on PATH: body is its shell script. */
static void fake_mpirun(const char *body, char *bin, size_t cap)
{
    snprintf(bin, cap, "%s/bin", dir);
    mkdir(bin, 0700);
    char path[800], text[2048];
    snprintf(path, sizeof path, "%s/mpirun", bin);
    snprintf(text, sizeof text, "#!/bin/sh\n%s\n", body);
    assert_int_equal(dyn_file_write_atomic(path, text, strlen(text), NULL), DYN_OK);
    assert_int_equal(chmod(path, 0700), 0);
}

/* Run `train args` with bin first on PATH, under `timeout` (signal sig after
 * secs, the launcher's own status kept). */
static int run_with(const char *bin, const char *args, const char *timeout_args)
{
    const char *cli = getenv("DYN_CLI");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "PATH='%s':\"$PATH\" timeout %s '%s' train %s >'%s' 2>'%s'", bin, timeout_args, cli,
             args, out_path, err_path);
    int st = system(cmd);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* mpirun fails before any rank said a word: its help block is one line,
 * not nothing (the launcher drops Open MPI's blocks from a normal run). */
static void test_launch_mpirun_refusal_said(void **state)
{
    (void)state;
    char bin[700];
    fake_mpirun("echo '--------------------------------------------------------------------------' >&2\n"
                "echo 'There are not enough slots available in the system to satisfy the 2' >&2\n"
                "echo 'slots that were requested by the application:' >&2\n"
                "echo '--------------------------------------------------------------------------' >&2\n"
                "exit 1",
                bin, sizeof bin);
    const char *args = "--model gpt --model-config gpt-tiny --steps 1 --quiet"; /* no setup header */
    int rc = run_with(bin, args, "60");
    cli_assert_one_line_error("train", args, rc, 1, "mpirun refused the job: There are not enough slots");
}

/* SIGINT to a run saving one file: mpirun (here a stand-in that exits 1
 * on SIGINT, as Open MPI's does) ends, and the launcher says it was
 * interrupted and exits 130, with no weights file. */
static void test_launch_interrupt_said(void **state)
{
    (void)state;
    char bin[700], args[1500], w[800];
    fake_mpirun("trap 'exit 1' INT TERM\nsleep 60 &\nwait", bin, sizeof bin);
    snprintf(w, sizeof w, "%s/w.safetensors", dir);
    snprintf(args, sizeof args, "--model gpt --model-config gpt-tiny --steps 1 --quiet --save '%s'", w);
    int rc = run_with(bin, args, "--preserve-status -s INT 3");
    cli_assert_one_line_error("train", args, rc, 130, "interrupted by SIGINT");
    assert_int_equal(access(w, F_OK), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_options),
        cmocka_unit_test(test_lr_schedule_length),
        cmocka_unit_test(test_contradictions_refused),
        cmocka_unit_test(test_one_max_length),
        cmocka_unit_test(test_empty_paths),
        cmocka_unit_test(test_outputs_checked_first),
        cmocka_unit_test(test_launch_refusals),
        cmocka_unit_test(test_launch_mpirun_refusal_said),
        cmocka_unit_test(test_launch_interrupt_said),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
