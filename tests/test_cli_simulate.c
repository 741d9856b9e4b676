/* test_cli_simulate.c — `dynapipe simulate` as a user runs it: the built
 * binary (env DYN_CLI). Bad input (malformed micro-batch or machine file,
 * unknown schedule, infeasible memory limit, stages more than layers) gives
 * a non-zero exit, exactly one line "dynapipe simulate: ..." on stderr and
 * no output file (nor a temporary one) left behind. Good runs: the what-if
 * file against a hand-computed makespan, the JSON structure, the trace and
 * the SVG. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_testlib.h" /* defines: cli_run, slurp, write_file, dir, out_path, err_path */

static char json_path[600], trace_path[600], svg_path[600];

static int setup(void **state)
{
    (void)state;
    if (cli_setup_dir() != 0) return -1;
    snprintf(json_path, sizeof json_path, "%s/sim.json", dir);
    snprintf(trace_path, sizeof trace_path, "%s/trace.json", dir);
    snprintf(svg_path, sizeof svg_path, "%s/timeline.svg", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return cli_teardown_dir();
}

static int run_sim(const char *args) { return cli_run("simulate", args); }

/* Only the files the test wrote itself and stdout/stderr remain. */
static void assert_no_outputs(void)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        assert_null(strstr(e->d_name, ".tmp"));
        assert_true(strcmp(e->d_name, "sim.json") != 0);
        assert_true(strcmp(e->d_name, "trace.json") != 0);
        assert_true(strcmp(e->d_name, "timeline.svg") != 0);
    }
    closedir(d);
}

/* Exit code want, one stderr line starting "dynapipe simulate: " and
 * containing `needle`, no outputs left. */
static void expect_failure(const char *args, int want, const char *needle)
{
    char full[4096];
    snprintf(full, sizeof full, "%s --json '%s' --trace '%s' --svg '%s'", args, json_path, trace_path, svg_path);
    cli_assert_one_line_error("simulate", args, run_sim(full), want, needle);
    assert_no_outputs();
}

#define WHATIF                                                                                     \
    "mb stage fwd_ms bwd_ms tokens\n"                                                              \
    "0 0 1 2 100\n0 1 1 2 100\n1 0 1 2 100\n1 1 1 2 100\n2 0 1 2 100\n2 1 1 2 100\n"

/* 3 equal micro-batches, 2 stages, f = 1, b = 2, on a machine with free
 * links: 1F1B takes (3 + 2 - 1) * 3 = 12 ms; 300 tokens / 12 ms = 25000/s. */
static void test_whatif_hand_computed(void **state)
{
    (void)state;
    char mb[700], machine[700];
    write_file("mb.tsv", WHATIF, mb, sizeof mb);
    write_file("m.json", "{\"base\": \"cpu\", \"name\": \"free\", \"link_latency_ms\": 0, \"link_gbps\": 1e9}",
               machine, sizeof machine);
    char args[4096];
    snprintf(args, sizeof args, "--microbatches '%s' --machine '%s' --schedule 1f1b,wait-free-cyclic --json '%s' --trace '%s' --svg '%s'",
             mb, machine, json_path, trace_path, svg_path);
    int rc = run_sim(args);
    char *err = slurp(err_path);
    if (rc != 0) fprintf(stderr, "%s", err);
    free(err);
    assert_int_equal(rc, 0);
    char *out = slurp(out_path);
    assert_non_null(strstr(out, "what-if"));
    assert_non_null(strstr(out, "1f1b"));
    free(out);
    char *text = slurp(json_path);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    cJSON *batches = cJSON_GetObjectItemCaseSensitive(root, "global_batches");
    assert_int_equal(cJSON_GetArraySize(batches), 1);
    cJSON *results = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(batches, 0), "results");
    assert_int_equal(cJSON_GetArraySize(results), 2);
    cJSON *r0 = cJSON_GetArrayItem(results, 0);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(r0, "schedule")->valuestring, "1f1b");
    double makespan = cJSON_GetObjectItemCaseSensitive(r0, "makespan_ms")->valuedouble;
    assert_true(fabs(makespan - 12.0) < 1e-6);
    assert_true(fabs(cJSON_GetObjectItemCaseSensitive(r0, "tokens_per_s")->valuedouble - 25000.0) < 1e-3);
    assert_true(fabs(cJSON_GetObjectItemCaseSensitive(r0, "bubble_fraction")->valuedouble - 0.25) < 1e-9);
    cJSON *peaks = cJSON_GetObjectItemCaseSensitive(r0, "peak_memory_mb");
    assert_int_equal(cJSON_GetArraySize(peaks), 2);
    cJSON_Delete(root);
    free(text);
    char *trace = slurp(trace_path);
    cJSON *t = cJSON_Parse(trace);
    assert_non_null(t);
    cJSON_Delete(t);
    free(trace);
    char *svg = slurp(svg_path);
    assert_true(strncmp(svg, "<svg", 4) == 0);
    free(svg);
}

static void test_planned_run_json(void **state)
{
    (void)state;
    char args[4096];
    snprintf(args, sizeof args,
             "--model gpt --model-config gpt-tiny --synthetic flan:3 --global-batch-tokens 16384 --max-seqlen 512 --stages 2 --batches 2 "
             "--methods packing,dynapipe --schedule 1f1b,auto --json '%s'", json_path);
    int rc = run_sim(args);
    char *err = slurp(err_path);
    if (rc != 0) fprintf(stderr, "%s", err);
    free(err);
    assert_int_equal(rc, 0);
    char *out = slurp(out_path);
    assert_non_null(strstr(out, "dynapipe"));
    assert_non_null(strstr(out, "auto"));
    assert_non_null(strstr(out, "1.00x")); /* packing against itself */
    free(out);
    char *text = slurp(json_path);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    cJSON *batches = cJSON_GetObjectItemCaseSensitive(root, "global_batches");
    assert_int_equal(cJSON_GetArraySize(batches), 2);
    cJSON *b;
    cJSON_ArrayForEach(b, batches) {
        cJSON *results = cJSON_GetObjectItemCaseSensitive(b, "results");
        assert_int_equal(cJSON_GetArraySize(results), 4); /* 2 methods x 2 schedules */
        cJSON *r;
        cJSON_ArrayForEach(r, results) {
            assert_true(cJSON_GetObjectItemCaseSensitive(r, "makespan_ms")->valuedouble > 0);
            double bub = cJSON_GetObjectItemCaseSensitive(r, "bubble_fraction")->valuedouble;
            assert_true(bub >= 0 && bub < 1);
            assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "peak_memory_mb")), 2);
            assert_true(cJSON_GetObjectItemCaseSensitive(r, "tokens_per_s")->valuedouble > 0);
        }
    }
    cJSON_Delete(root);
    free(text);
}

/* --model llama simulates as GPT does: every schedule, a 1 GB tied-head
 * Llama on the a100 with its real vocabulary. */
static void test_llama_planned_run(void **state)
{
    (void)state;
    char args[4096];
    snprintf(args, sizeof args,
             "--model llama --model-config llama3.2-1b --machine a100 --synthetic flan:3 --global-batch-tokens 32768 "
             "--max-seqlen 2048 --stages 4 --batches 1 --schedule all --chunks 2 --json '%s'",
             json_path);
    int rc = run_sim(args);
    if (rc != 0) {
        char *err = slurp(err_path);
        fprintf(stderr, "%s", err);
        free(err);
    }
    assert_int_equal(rc, 0);
    char *text = slurp(json_path);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "global_batches"), 0), *r;
    assert_non_null(b);
    int n = 0;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(b, "results")) {
        assert_true(cJSON_GetObjectItemCaseSensitive(r, "makespan_ms")->valuedouble > 0);
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "peak_memory_mb")), 4);
        n++;
    }
    assert_true(n >= 5); /* 1f1b, cyclic, wait-free-cyclic, interleaved, zb */
    cJSON_Delete(root);
}

/* Same inputs, same bytes: the JSON holds no wall-clock times. */
static void test_json_is_deterministic(void **state)
{
    (void)state;
    char args[4096];
    const char *flags = "--model t5 --model-config t5-tiny --synthetic flan:5 --global-batch-tokens 4096 --max-seqlen 256 "
                        "--stages 2 --batches 2 --schedule all,auto --chunks 2 --skip-infeasible";
    snprintf(args, sizeof args, "%s --json '%s'", flags, json_path);
    assert_int_equal(run_sim(args), 0);
    char *first = slurp(json_path);
    assert_int_equal(run_sim(args), 0);
    char *second = slurp(json_path);
    assert_string_equal(first, second);
    assert_non_null(strstr(first, "\"chosen_schedule\""));
    free(first);
    free(second);
}

/* Data parallelism: every replica's plan is simulated; a replica with no
 * micro-batch just waits. The whole batch's tokens count either way. */
static void test_data_parallel_replicas(void **state)
{
    (void)state;
    const char *flags = "--model gpt --model-config gpt-tiny --synthetic flan:2 --global-batch-tokens 3000 --max-seqlen 512 "
                        "--stages 2 --batches 3 --schedule 1f1b,auto --methods dynapipe,packing";
    double tokens[2][12];
    int n[2] = {0, 0};
    for (int dp = 1; dp <= 2; dp++) {
        char args[4096];
        snprintf(args, sizeof args, "%s --dp %d --json '%s'", flags, dp, json_path);
        int rc = run_sim(args);
        if (rc != 0) {
            char *e = slurp(err_path);
            fprintf(stderr, "%s", e);
            free(e);
        }
        assert_int_equal(rc, 0);
        char *text = slurp(json_path);
        cJSON *root = cJSON_Parse(text);
        assert_non_null(root);
        cJSON *b, *r;
        cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(root, "global_batches")) {
            cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(b, "results")) {
                assert_true(n[dp - 1] < 12);
                tokens[dp - 1][n[dp - 1]++] = cJSON_GetObjectItemCaseSensitive(r, "real_tokens")->valuedouble;
                double bub = cJSON_GetObjectItemCaseSensitive(r, "bubble_fraction")->valuedouble;
                assert_true(bub >= 0 && bub < 1);
            }
        }
        cJSON_Delete(root);
        free(text);
    }
    assert_int_equal(n[0], n[1]);
    for (int i = 0; i < n[0]; i++) assert_true(tokens[0][i] == tokens[1][i] && tokens[0][i] > 0);
}

static void test_bad_input(void **state)
{
    (void)state;
    unlink(json_path); /* outputs of the good runs before */
    unlink(trace_path);
    unlink(svg_path);
    char bad_mb[700], bad_machine[700], good_mb[700];
    write_file("bad.tsv", "mb stage fwd_ms bwd_ms\n0 0 1 2\n0 1 oops 2\n", bad_mb, sizeof bad_mb);
    write_file("good.tsv", WHATIF, good_mb, sizeof good_mb);
    write_file("bad_machine.json", "{\"base\": \"cpu\", \"link_gbps\": \"fast\"}", bad_machine, sizeof bad_machine);
    char args[4096];

    snprintf(args, sizeof args, "--microbatches '%s'", bad_mb);
    expect_failure(args, 1, "bad.tsv:3: fwd_ms 'oops' is not a number");
    snprintf(args, sizeof args, "--microbatches '%s/missing.tsv'", dir);
    expect_failure(args, 1, "missing.tsv");
    snprintf(args, sizeof args, "--microbatches '%s' --machine '%s'", good_mb, bad_machine);
    expect_failure(args, 1, "link_gbps");
    snprintf(args, sizeof args, "--microbatches '%s' --schedule fastest", good_mb);
    expect_failure(args, 2, "unknown schedule 'fastest'");
    snprintf(args, sizeof args, "--microbatches '%s' --methods packing,magic", good_mb);
    expect_failure(args, 2, "magic");
    snprintf(args, sizeof args, "--microbatches '%s' --bogus", good_mb);
    expect_failure(args, 2, "unknown flag '--bogus'");
    snprintf(args, sizeof args, "--microbatches '%s' --stages 3", good_mb);
    expect_failure(args, 1, "not a multiple of --stages 3");
    /* whatif with states too big for the memory limit */
    char heavy[700];
    write_file("heavy.tsv", "mb stage fwd_ms bwd_ms stored_mb\n0 0 1 2 100\n0 1 1 2 100\n", heavy, sizeof heavy);
    snprintf(args, sizeof args, "--microbatches '%s' --memory-limit 50", heavy);
    expect_failure(args, 1, "over the 50.0 MB limit");
    /* planning: infeasible limit, stages more than layers, missing flags */
    expect_failure("--model gpt --model-config gpt-tiny --synthetic flan --global-batch-tokens 16384 --max-seqlen 512 "
                   "--stages 2 --memory-limit 1",
                   1, "MB");
    expect_failure("--model gpt --model-config gpt-tiny --synthetic flan --global-batch-tokens 16384 --max-seqlen 512 "
                   "--stages 64",
                   2, "64 pipeline stages for a model of 2 layers");
    expect_failure("--model gpt --synthetic flan --max-seqlen 512 --stages 2", 2, "--global-batch-tokens");
    /* a trace path in a directory that does not exist: nothing else written */
    snprintf(args, sizeof args, "--microbatches '%s' --json '%s' --trace '%s/nodir/t.json'", good_mb, json_path, dir);
    assert_int_equal(run_sim(args), 1);
    assert_no_outputs();
}

static void test_help(void **state)
{
    (void)state;
    assert_int_equal(run_sim("--help"), 0);
    char *out = slurp(out_path);
    assert_non_null(strstr(out, "--schedule"));
    assert_non_null(strstr(out, "--microbatches"));
    assert_non_null(strstr(out, "--global-batch-tokens"));
    free(out);
}

/* Results per schedule name in the JSON of one batch and method. */
static int count_schedule(cJSON *results, const char *name)
{
    int n = 0;
    cJSON *r;
    cJSON_ArrayForEach(r, results) {
        cJSON *s = cJSON_GetObjectItemCaseSensitive(r, "schedule");
        n += cJSON_IsString(s) && strcmp(s->valuestring, name) == 0;
    }
    return n;
}

/* `--schedule all` runs every schedule that applies: interleaved only when
 * there are chunks to interleave. */
static void test_schedule_all_leaves_out_interleaved_without_chunks(void **state)
{
    (void)state;
    const char *names[] = {"1f1b", "cyclic", "wait-free-cyclic", "interleaved", "zb"};
    for (int chunks = 1; chunks <= 2; chunks++) {
        char args[4096];
        snprintf(args, sizeof args,
                 "--model gpt --model-config gpt-tiny --layers 4 --synthetic flan:3 "
                 "--global-batch-tokens 16384 --max-seqlen 512 --stages 2 --chunks %d --batches 1 "
                 "--methods dynapipe --schedule all "
                 "--json '%s'",
                 chunks, json_path);
        assert_int_equal(run_sim(args), 0);
        char *text = slurp(json_path);
        cJSON *root = cJSON_Parse(text);
        assert_non_null(root);
        cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "global_batches"), 0);
        cJSON *results = cJSON_GetObjectItemCaseSensitive(b, "results");
        for (int k = 0; k < 5; k++)
            assert_int_equal(count_schedule(results, names[k]), k == 3 && chunks == 1 ? 0 : 1);
        cJSON_Delete(root);
        free(text);
    }
}

/* A what-if run says which memory limit and link model it used: none for a
 * file without memory columns, --no-comm for free links (the hand-computed
 * 12 ms without a machine file); planning flags are refused beside it. */
static void test_whatif_limit_links_and_contradictions(void **state)
{
    (void)state;
    char mb[700], cmd[2000];
    remove(json_path), remove(trace_path), remove(svg_path); /* an earlier test's outputs */
    write_file("mb2.tsv", WHATIF, mb, sizeof mb);
    snprintf(cmd, sizeof cmd, "--microbatches '%s' --schedule 1f1b --no-comm --json '%s'", mb, json_path);
    assert_int_equal(run_sim(cmd), 0);
    char *out = slurp(out_path);
    assert_non_null(strstr(out, "what-if: no memory limit (none: the file has no memory columns); links none (--no-comm)"));
    free(out);
    char *text = slurp(json_path);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    const cJSON *r0 = cJSON_GetArrayItem(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "global_batches"), 0), "results"), 0);
    assert_non_null(r0);
    assert_true(fabs(cJSON_GetObjectItem(r0, "makespan_ms")->valuedouble - 12.0) < 1e-9);
    cJSON_Delete(root);
    free(text);
    remove(json_path);
    snprintf(cmd, sizeof cmd, "--microbatches '%s' --memory-limit 100", mb);
    assert_int_equal(run_sim(cmd), 0);
    out = slurp(out_path);
    assert_non_null(strstr(out, "what-if: memory limit 100 MB (--memory-limit); links cpu's"));
    free(out);
    snprintf(cmd, sizeof cmd, "--microbatches '%s' --synthetic flan", mb);
    expect_failure(cmd, 2, "--synthetic has no effect with --microbatches");
    snprintf(cmd, sizeof cmd, "--microbatches '%s' --global-batch-tokens 4096", mb);
    expect_failure(cmd, 2, "--global-batch-tokens has no effect");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whatif_hand_computed),
        cmocka_unit_test(test_whatif_limit_links_and_contradictions),
        cmocka_unit_test(test_planned_run_json),
        cmocka_unit_test(test_llama_planned_run),
        cmocka_unit_test(test_json_is_deterministic),
        cmocka_unit_test(test_data_parallel_replicas),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_schedule_all_leaves_out_interleaved_without_chunks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
