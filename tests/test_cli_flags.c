/* test_cli_flags.c — the flag tables of `dynapipe plan`, `simulate` and
 * `train` (and `profile`, `eval`) (src/cli/flags.c) as a user meets them, through the built binary
 * (env DYN_CLI):
 *   - every flag each command accepts has its --help line, and every flag
 *     --help lists is accepted (the lists below are written out here, not
 *     read from the tables);
 *   - an out-of-range value and an unknown flag each give exit 2 and one
 *     stderr line naming the flag;
 *   - --help shows the defaults each command really uses (train: 512, 2,
 *     8192, gpt-mini; plan: required);
 *   - one default shape: `dynapipe profile --model gpt` and then
 *     `dynapipe train --model gpt --cost-model <that table>` agree on the
 *     shape (train takes the table's). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_testlib.h" /* defines: cli_run, slurp, dir, out_path, err_path, cli_assert_one_line_error */

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

/* The flags each command accepted before the tables (plan_args.c's
 * parse_one, cli_plan.c, cli_simulate.c, cli_train.c's parse_train_flag). */
static const char *const planning[] = {
    "--model", "--model-config", "--layers", "--dec-layers", "--hidden", "--heads", "--head-dim", "--ffn",
    "--vocab", "--data", "--split", "--global-batch-tokens", "--max-seqlen", "--batches", "--stages", "--dp",
    "--chunks", "--cost-model", "--machine", "--memory-limit", "--recompute", "--method", "--batching",
    "--round-to", "--mb-samples", "--pack-rows", "--mb-tokens", "--untuned", "--dp-packing", "--truncate", NULL};
static const char *const plan_only[] = {"--lengths", "--synthetic", "--clip", "--json", "--quiet", "--verbose",
                                        "--show-plan", "--plan-out", "--schedule", NULL};
static const char *const sim_only[] = {"--lengths", "--synthetic", "--clip", "--schedule", "--methods",
                                       "--order-groups", "--microbatches", "--no-comm", "--skip-infeasible",
                                       "--markdown", "--trace", "--svg", "--json", NULL};
static const char *const train_only[] = {
    "--steps", "--schedule", "--threads", "--lr", "--min-lr", "--warmup", "--clip", "--adam-eps",
    "--weight-decay", "--seed", "--samples", "--timeout", "--plan-ahead", "--profile", "--calibrate",
    "--calibrate-window", "--order-groups", "--metrics", "--trace", "--save", "--save-every", "--resume",
    "--eval-every", "--eval-samples", "--hostfile", "--quiet", "--verbose", "--debug-kill", "--debug-hang",
    "--epochs", "--shuffle", "--no-shuffle", "--eval-data", "--eval-split", "--dump-order", NULL};

static const char *const profile_all[] = {
    "--model", "--model-config", "--max-seqlen", "--max-rows", "--threads", "--repeats", "--sweeps", "--quick",
    "--out", "--check", "--shapes", "--verbose", "--seed", "--max-tokens", "--quiet", "--link", NULL};
static const char *const eval_all[] = {"--checkpoint", "--data", "--split", "--samples", "--no-accuracy",
                                       "--prompt", "--max-new", "--threads", "--eval-data", "--eval-split", NULL};

/* The help line of flag in text: a line "  <flag>" followed by a space or
 * the line's end; NULL if none. */
static const char *help_line(const char *text, const char *flag)
{
    size_t n = strlen(flag);
    for (const char *p = text; (p = strstr(p, flag)) != NULL; p += n) {
        int starts = p >= text + 3 && p[-1] == ' ' && p[-2] == ' ' && p[-3] == '\n';
        if (starts && (p[n] == ' ' || p[n] == '\n')) return p;
    }
    return NULL;
}

static char *help_of(const char *cmd)
{
    assert_int_equal(cli_run(cmd, "--help"), 0);
    return slurp(out_path);
}

static void assert_listed(const char *cmd, const char *help, const char *const *flags)
{
    for (int i = 0; flags[i]; i++)
        if (help_line(help, flags[i]) == NULL) fail_msg("dynapipe %s --help has no line for %s", cmd, flags[i]);
}

/* Every flag at the start of a help line is one the command parses: given
 * without its value or with a bad one, the error is not "unknown flag". */
static void assert_all_known(const char *cmd, const char *help)
{
    int n = 0;
    for (const char *p = help; (p = strstr(p, "\n  --")) != NULL; p++) {
        char flag[64];
        size_t k = 0;
        for (const char *q = p + 3; *q && *q != ' ' && *q != '\n' && *q != ',' && k + 1 < sizeof flag; q++)
            flag[k++] = *q;
        flag[k] = '\0';
        if (strcmp(flag, "--help") == 0) continue;
        char args[128];
        snprintf(args, sizeof args, "%s", flag);
        int rc = cli_run(cmd, args);
        char *err = slurp(err_path);
        if (strstr(err, "unknown flag") != NULL) fail_msg("dynapipe %s %s: %s", cmd, flag, err);
        (void)rc;
        free(err);
        n++;
    }
    assert_true(n >= 8);
}

static void test_every_flag_has_its_help_line(void **state)
{
    (void)state;
    char *h = help_of("plan");
    assert_listed("plan", h, planning);
    assert_listed("plan", h, plan_only);
    assert_all_known("plan", h);
    free(h);
    h = help_of("simulate");
    assert_listed("simulate", h, planning);
    assert_listed("simulate", h, sim_only);
    assert_all_known("simulate", h);
    free(h);
    h = help_of("train");
    assert_listed("train", h, planning);
    assert_listed("train", h, train_only);
    assert_all_known("train", h);
    /* train's --clip is the gradient clip: the planning --clip (another
     * name for --truncate) is not listed a second time */
    const char *clip = help_line(h, "--clip");
    assert_non_null(clip);
    assert_null(help_line(clip + 1, "--clip"));
    free(h);
    /* profile and eval use the tables too (profile's flags are not tried
     * alone: --link alone would start measuring) */
    h = help_of("profile");
    assert_listed("profile", h, profile_all);
    free(h);
    h = help_of("eval");
    assert_listed("eval", h, eval_all);
    assert_all_known("eval", h);
    free(h);
}

/* The default each --help line shows. */
static void assert_default(const char *help, const char *flag, const char *want)
{
    const char *line = help_line(help, flag);
    assert_non_null(line);
    /* the row: up to the next line that starts a flag or a section */
    const char *end = strstr(line, "\n  --");
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char row[1024];
    snprintf(row, sizeof row, "%.*s", (int)(len < sizeof row - 1 ? len : sizeof row - 1), line);
    if (strstr(row, want) == NULL) fail_msg("%s: want '%s' in '%s'", flag, want, row);
}

static void test_help_defaults_agree(void **state)
{
    (void)state;
    char *h = help_of("train");
    assert_default(h, "--max-seqlen", "(default 512)");
    assert_default(h, "--stages", "(default 2)");
    assert_default(h, "--global-batch-tokens", "(default 8192)");
    assert_default(h, "--data", "(default builtin)");
    assert_default(h, "--model-config", "(default gpt-mini / t5-mini");
    assert_default(h, "--steps", "(default 20)");
    assert_default(h, "--lr", "(default 0.001)");
    assert_default(h, "--order-groups", "(default 2)");
    assert_null(strstr(h, "gpt2-124m /"));
    free(h);
    h = help_of("plan");
    assert_default(h, "--max-seqlen", "(required)");
    assert_default(h, "--stages", "(required)");
    assert_default(h, "--global-batch-tokens", "(required)");
    assert_default(h, "--model-config", "(default gpt2-124m / t5-base");
    assert_default(h, "--round-to", "(default 8)");
    free(h);
    h = help_of("simulate");
    assert_default(h, "--order-groups", "(default 3)");
    free(h);
}

#define PLAN_OK "--model gpt --model-config gpt-tiny --synthetic flan --global-batch-tokens 4096 --max-seqlen 256"

static void test_range_and_unknown_errors(void **state)
{
    (void)state;
    static const struct {
        const char *cmd, *args, *needle;
    } bad[] = {
        {"plan", PLAN_OK " --stages 0", "--stages: 0 is out of range [1, 4096]"},
        {"plan", PLAN_OK " --stages 2 --memory-limit 0", "--memory-limit: 0 is out of range"},
        {"plan", PLAN_OK " --stages 2 --round-to x", "--round-to: 'x' is not an integer"},
        {"plan", PLAN_OK " --stages 2 --split nowhere", "--split: 'nowhere' is not train or heldout"},
        {"plan", PLAN_OK " --stages", "--stages needs a value"},
        {"plan", PLAN_OK " --stages 2 --frob", "unknown flag '--frob' (try 'dynapipe plan --help')"},
        {"simulate", PLAN_OK " --stages 2 --order-groups 9", "--order-groups: 9 is out of range [1, 4]"},
        {"simulate", PLAN_OK " --stages 2 --frob 1", "unknown flag '--frob' (try 'dynapipe simulate --help')"},
        {"train", "--model gpt --steps 0", "--steps: 0 is out of range [1, 100000000]"},
        {"train", "--model gpt --lr 11", "--lr: 11 is out of range [0, 10]"},
        {"train", "--model gpt --plan-ahead 65", "--plan-ahead: 65 is out of range [1, 64]"},
        {"train", "--model gpt --frob", "unknown flag '--frob' (try 'dynapipe train --help')"},
        {"train", "--model gpt --debug-kill 1", "--debug-kill: expected RANK:STEP, got '1'"},
        {"train", "--model gpt --synthetic flan", "--synthetic gives lengths only"},
        {"profile", "--model gpt --max-rows 0", "--max-rows: 0 is out of range [1, 65536]"},
        {"profile", "--model gpt --frob", "unknown flag '--frob' (try 'dynapipe profile --help')"},
        {"eval", "--checkpoint x --samples 0", "--samples: 0 is out of range [1, 100000000]"},
        {"eval", "--checkpoint x --split all", "--split: 'all' is not train or heldout"},
        {"eval", "--frob", "unknown flag '--frob' (try 'dynapipe eval --help')"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cli_assert_one_line_error(bad[i].cmd, bad[i].args, cli_run(bad[i].cmd, bad[i].args), 2, bad[i].needle);
}

/* `dynapipe profile --model gpt` (its default shape) and then `dynapipe
 * train --model gpt --cost-model <table>` without --model-config: train
 * takes the table's shape. --resume of a folder that does not exist stops
 * the run after the flags and the cost model were checked, before any rank
 * starts, so the message says which check came last. */
static void test_profile_then_train_agree_on_the_shape(void **state)
{
    (void)state;
    char table[700], args[1500];
    snprintf(table, sizeof table, "%s/profile.tsv", dir);
    snprintf(args, sizeof args,
             "--model gpt --quick --max-seqlen 64 --max-rows 2 --repeats 1 --sweeps 1 --quiet --out '%s'", table);
    assert_int_equal(cli_run("profile", args), 0);
    snprintf(args, sizeof args, "--model gpt --cost-model '%s' --max-seqlen 64 --resume '%s/none'", table, dir);
    int rc = cli_run("train", args);
    char *err = slurp(err_path);
    if (strstr(err, "another shape") != NULL || strstr(err, "--resume") == NULL)
        fail_msg("train %s: exit %d: %s", args, rc, err);
    free(err);
    assert_int_equal(rc, 1);
    /* plan and simulate take the table's shape too, and shape flags apply
     * over it: restating it is accepted, another is refused */
    snprintf(args, sizeof args,
             "--model gpt --cost-model '%s' --synthetic flan --global-batch-tokens 2048 --max-seqlen 64 --stages 2 "
             "--batches 1",
             table);
    assert_int_equal(cli_run("plan", args), 0);
    assert_int_equal(cli_run("simulate", args), 0);
    char more[1600];
    snprintf(more, sizeof more, "%s --layers 2", args);
    assert_int_equal(cli_run("plan", more), 0);
    snprintf(more, sizeof more, "%s --layers 3", args);
    cli_assert_one_line_error("plan", more, cli_run("plan", more), 2, "another shape");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_flag_has_its_help_line),
        cmocka_unit_test(test_help_defaults_agree),
        cmocka_unit_test(test_range_and_unknown_errors),
        cmocka_unit_test(test_profile_then_train_agree_on_the_shape),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
