/* test_cli_data.c — `dynapipe data convert|stats|show|batches` and `--data`
 * in plan and simulate, run as a user would (the built binary, env DYN_CLI):
 * JSONL -> Megatron -> stats, whose TSV of lengths equals the library's
 * lengths and plans exactly like the source itself; percentiles on a file
 * with known lengths; batches are the greedy token-budget batches worked
 * out here from stats' lengths, with the corpus's tokens, and what `train`
 * consumes (its --metrics token counts per step); and bad input: one
 * stderr line naming the problem, exit 1 or 2, no output files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dynapipe/corpus.h" /* defines: dyn_corpus_* */
#include "dynapipe/data.h"   /* defines: dyn_dataset_read_tsv */
#include "cli_testlib.h"     /* defines: cli_run, slurp, write_file, dir, out_path, err_path */

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

/* slurp behind a call GCC 12 cannot see through: inlined, it takes the
 * returned buffer for a dangling pointer into slurp's frame. */
static __attribute__((noinline)) char *read_text(const char *path) { return slurp(path); }

static int exists(const char *name)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* A JSONL of 100 pairs: input i+1 bytes, target (i % 7) + 1 bytes; as tokens
 * (bytes, no template) one more each: sep after the input, eos after the target. */
static void write_hundred(char *path, size_t cap)
{
    static char text[40000];
    size_t n = 0;
    for (int i = 0; i < 100; i++) {
        n += (size_t)snprintf(text + n, sizeof text - n, "{\"input\": \"");
        for (int k = 0; k <= i; k++) text[n++] = (char)('a' + k % 26);
        n += (size_t)snprintf(text + n, sizeof text - n, "\", \"target\": \"");
        for (int k = 0; k <= i % 7; k++) text[n++] = 'z';
        n += (size_t)snprintf(text + n, sizeof text - n, "\"}\n");
    }
    text[n] = '\0';
    write_file("hundred.jsonl", text, path, cap);
}

/* The row "name mean min p50 p90 p99 max" of stats' table. */
static void stats_row(const char *out, const char *name, double *mean, int v[5])
{
    char key[32];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(out, key);
    assert_non_null(p);
    assert_int_equal(sscanf(p + strlen(key), "%lf %d %d %d %d %d", mean, &v[0], &v[1], &v[2], &v[3], &v[4]), 6);
}

/* Nearest-rank percentiles of 1..100 are p itself (of the input lengths 2..101,
 * p + 1). */
static void test_stats_percentiles_and_tsv(void **state)
{
    (void)state;
    char jsonl[700], args[2000], tsv[700];
    write_hundred(jsonl, sizeof jsonl);
    snprintf(tsv, sizeof tsv, "%s/hundred.tsv", dir);
    snprintf(args, sizeof args, "stats '%s' --tsv '%s'", jsonl, tsv);
    assert_int_equal(cli_run("data", args), 0);
    char *out = read_text(out_path);
    char want[128];
    int tgt_tokens = 0;
    for (int i = 0; i < 100; i++) tgt_tokens += i % 7 + 2;
    snprintf(want, sizeof want, "100 samples, 5150 input + %d target tokens", tgt_tokens);
    assert_non_null(strstr(out, want));
    double mean;
    int v[5];
    stats_row(out, "input", &mean, v);
    assert_true(mean > 51.49 && mean < 51.51);
    assert_int_equal(v[0], 2);
    assert_int_equal(v[1], 51);
    assert_int_equal(v[2], 91);
    assert_int_equal(v[3], 100);
    assert_int_equal(v[4], 101);
    free(out);
    /* the TSV reads back as the library's lengths of the same file */
    dyn_dataset a = {0}, b = {0};
    dyn_error err;
    assert_int_equal(dyn_dataset_read_tsv(tsv, 4096, DYN_MODEL_GPT, 0, &a, &err), DYN_OK);
    dyn_corpus *c = dyn_corpus_open(jsonl, NULL, &err);
    assert_non_null(c);
    assert_int_equal(dyn_corpus_lengths(c, &b, &err), DYN_OK);
    assert_int_equal(a.n, 100);
    assert_int_equal(b.n, 100);
    for (int i = 0; i < 100; i++) {
        assert_int_equal(a.samples[i].input_len, b.samples[i].input_len);
        assert_int_equal(a.samples[i].target_len, b.samples[i].target_len);
        assert_int_equal(a.samples[i].input_len, i + 2);
        assert_int_equal(a.samples[i].target_len, i % 7 + 2);
    }
    dyn_dataset_free(&a);
    dyn_dataset_free(&b);
    dyn_corpus_free(c);
}

/* Remove the wall-clock figures ("planned in X ms", "mean plan time X
 * ms/batch") from text, in place. */
static void strip_timing(char *s)
{
    const char *marks[2] = {"planned in ", "mean plan time "};
    for (int k = 0; k < 2; k++) {
        char *p;
        while ((p = strstr(s, marks[k])) != NULL) {
            char *e = strstr(p, " ms");
            assert_non_null(e);
            e += 3;
            while (*e && *e != ',' && *e != '\n') e++; /* "/batch" */
            memmove(p, e, strlen(e) + 1);
        }
    }
}

static char *plan_output(const char *data_flag)
{
    char args[2000];
    snprintf(args, sizeof args,
             "--model t5 --model-config t5-tiny %s --global-batch-tokens 600 --max-seqlen 128 --stages 2", data_flag);
    int rc = cli_run("plan", args);
    if (rc != 0) {
        char *e = read_text(err_path);
        fprintf(stderr, "%s", e);
        free(e);
    }
    assert_int_equal(rc, 0);
    char *out = read_text(out_path);
    strip_timing(out);
    return out;
}

/* JSONL -> convert -> stats --tsv: the Megatron pair, the JSONL and the TSV
 * give the same plan. */
static void test_convert_then_plan(void **state)
{
    (void)state;
    char jsonl[700], args[2000], prefix[700], tsv[700], flag[2100];
    write_hundred(jsonl, sizeof jsonl);
    snprintf(prefix, sizeof prefix, "%s/conv", dir);
    snprintf(args, sizeof args, "convert '%s' --out '%s'", jsonl, prefix);
    assert_int_equal(cli_run("data", args), 0);
    assert_true(exists("conv_input.idx") && exists("conv_input.bin"));
    assert_true(exists("conv_target.idx") && exists("conv_target.bin"));
    snprintf(tsv, sizeof tsv, "%s/conv.tsv", dir);
    snprintf(args, sizeof args, "stats '%s' --tsv '%s'", prefix, tsv);
    assert_int_equal(cli_run("data", args), 0);
    snprintf(flag, sizeof flag, "--data '%s'", jsonl);
    char *a = plan_output(flag);
    snprintf(flag, sizeof flag, "--data '%s_input,%s_target'", prefix, prefix);
    char *b = plan_output(flag);
    snprintf(flag, sizeof flag, "--lengths '%s'", tsv);
    char *c = plan_output(flag);
    assert_non_null(strstr(a, "global batch 0:"));
    if (strcmp(a, b) != 0 || strcmp(a, c) != 0) fprintf(stderr, "A:\n%s\nB:\n%s\nC:\n%s\n", a, b, c);
    assert_string_equal(a, b);
    assert_string_equal(a, c);
    free(a);
    free(b);
    free(c);
}

static void test_builtin_sources(void **state)
{
    (void)state;
    assert_int_equal(cli_run("data", "show builtin:2 --index 3 --count 2 --max-seqlen 128"), 0);
    char *out = read_text(out_path);
    assert_non_null(strstr(out, "sample 3 "));
    assert_non_null(strstr(out, "sample 4 "));
    assert_non_null(strstr(out, "<sep>"));
    assert_non_null(strstr(out, "<eos>"));
    free(out);
    assert_int_equal(cli_run("data", "stats builtin --samples 2000 --split heldout --model t5 --max-seqlen 256"), 0);
    out = read_text(out_path);
    assert_non_null(strstr(out, "2000 samples"));
    assert_non_null(strstr(out, "classify"));
    assert_non_null(strstr(out, "histogram"));
    free(out);
    assert_int_equal(cli_run("simulate", "--model gpt --model-config gpt-tiny --data builtin:4 --global-batch-tokens 4096 "
                                         "--max-seqlen 256 --stages 2 --batches 1"),
                     0);
}

static void test_errors(void **state)
{
    (void)state;
    char bad[700], args[2000], prefix[700];
    write_file("bad.jsonl", "{\"input\": \"a\", \"target\": \"b\"}\n{\"input\": \"a\",\n", bad, sizeof bad);
    snprintf(prefix, sizeof prefix, "%s/out", dir);
    snprintf(args, sizeof args, "convert '%s' --out '%s'", bad, prefix);
    cli_assert_one_line_error("data convert", args, cli_run("data", args), 1, "bad.jsonl:2: malformed JSON");
    assert_false(exists("out_input.idx") || exists("out_input.bin") || exists("out.idx"));
    snprintf(args, sizeof args, "convert '%s'", bad);
    cli_assert_one_line_error("data convert", args, cli_run("data", args), 2, "--out PREFIX is required");
    cli_assert_one_line_error("data stats", "stats builtin --frob", cli_run("data", "stats builtin --frob"), 2,
                              "unknown option '--frob'");
    char jsonl[700];
    write_hundred(jsonl, sizeof jsonl);
    snprintf(args, sizeof args, "stats '%s' --max-seqlen 60 --tsv '%s/x.tsv'", jsonl, dir);
    cli_assert_one_line_error("data stats", args, cli_run("data", args), 1,
                              "hundred.jsonl:54: record 53: input + target = 61 tokens exceeds max_seqlen 60");
    assert_false(exists("x.tsv"));
    snprintf(args, sizeof args,
             "--model gpt --data '%s' --lengths x.tsv --global-batch-tokens 100 --max-seqlen 60 --stages 1", jsonl);
    cli_assert_one_line_error("plan", args, cli_run("plan", args), 2, "give exactly one of");
    snprintf(args, sizeof args, "--model gpt --data '%s' --global-batch-tokens 1000 --max-seqlen 60 --stages 1", bad);
    cli_assert_one_line_error("plan", args, cli_run("plan", args), 1, "--data: ");
    snprintf(args, sizeof args, "--model gpt --data '%s' --truncate --global-batch-tokens 1000 --max-seqlen 60 --stages 1",
             jsonl);
    assert_int_equal(cli_run("plan", args), 0);
}

/* Every path flag refuses an empty path (it used to be taken as a name:
 * `convert --out ''` wrote _input.idx into the current folder) and a
 * folder; a flag that does not apply to the subcommand or the source is
 * refused, not ignored. */
static void test_paths_and_flags(void **state)
{
    (void)state;
    char args[2000], jsonl[700];
    struct {
        const char *args, *needle;
    } usage[] = {
        {"convert builtin --samples 4 --max-seqlen 128 --out ''", "--out: the path is empty"},
        {"stats builtin --samples 4 --max-seqlen 128 --tsv ''", "--tsv: the path is empty"},
        {"stats ''", "the source is empty"},
        {"show ''", "the source is empty"},
        {"convert builtin --samples 4 --max-seqlen 128 --out /tmp/", "--out: '/tmp/' names a folder"},
        {"stats builtin --samples 4 --max-seqlen 128 --tsv /tmp/", "--tsv: '/tmp/' names a folder"},
        {"convert builtin --samples 4 --max-seqlen 128 --out /tmp", "--out: '/tmp' names a folder"},
        {"stats builtin --samples 4 --max-seqlen 128 --tsv /tmp", "--tsv: '/tmp' names a folder"},
        {"show builtin --samples 4 --max-seqlen 128 --tsv x.tsv", "--tsv does not apply to data show"},
        {"stats builtin --samples 4 --max-seqlen 128 --out x", "--out does not apply to data stats"},
        {"convert builtin --samples 4 --max-seqlen 128 --out x --index 2", "--index does not apply"},
        {"stats builtin --samples 4 --max-seqlen 128 --count 2", "--count does not apply"},
        {"convert builtin --samples 0 --max-seqlen 128 --out x", "--samples: 0 is out of range [1, "},
        {"stats flan --samples 0", "--samples: 0 is out of range [1, "},
        {"stats flan --split heldout", "--split applies to builtin only"},
    };
    for (size_t k = 0; k < sizeof usage / sizeof usage[0]; k++) {
        const char *sub = strncmp(usage[k].args, "convert", 7) == 0 ? "data convert"
                          : strncmp(usage[k].args, "stats", 5) == 0 ? "data stats"
                                                                      : "data show";
        cli_assert_one_line_error(sub, usage[k].args, cli_run("data", usage[k].args), 2, usage[k].needle);
    }
    assert_int_equal(access("_input.idx", F_OK), -1); /* nothing in the current folder */
    assert_int_equal(access(".idx", F_OK), -1);
    write_hundred(jsonl, sizeof jsonl);
    snprintf(args, sizeof args, "stats '%s' --samples 10", jsonl);
    cli_assert_one_line_error("data stats", args, cli_run("data", args), 2, "--samples applies to builtin and flan");
    snprintf(args, sizeof args, "show '%s' --split train", jsonl);
    cli_assert_one_line_error("data show", args, cli_run("data", args), 2, "--split applies to builtin only");
}

/* show: an index past the end is an error naming the count (it printed
 * nothing and exited 0); --count is clipped to what is left, and the
 * largest accepted --count does not overflow index + count (it wrapped
 * negative and printed nothing; UBSan: signed overflow). */
static void test_show_range(void **state)
{
    (void)state;
    const char *a = "show builtin --samples 5 --max-seqlen 128 --index 5";
    cli_assert_one_line_error("data show", a, cli_run("data", a), 1,
                              "--index 5 is past the last sample: builtin has 5 (indices 0..4)");
    a = "show builtin --samples 5 --max-seqlen 128 --index 9223372036854775807";
    cli_assert_one_line_error("data show", a, cli_run("data", a), 1, "has 5");
    assert_int_equal(cli_run("data", "show builtin --samples 5 --max-seqlen 128 --index 1 --count 9223372036854775807"),
                     0);
    char *out = read_text(out_path);
    int shown = 0;
    for (const char *p = out; (p = strstr(p, "\nsample ")) != NULL; p++) shown++;
    assert_int_equal(strncmp(out, "sample 1 ", 9), 0);
    assert_int_equal(shown, 3); /* samples 2, 3, 4 after the first line's sample 1 */
    assert_null(strstr(out, "sample 5"));
    free(out);
    assert_int_equal(cli_run("data", "show builtin --samples 5 --max-seqlen 128 --index 4"), 0);
    out = read_text(out_path);
    assert_int_equal(strncmp(out, "sample 4 ", 9), 0);
    free(out);
}

/* ---- batches --------------------------------------------------------------- */

/* 24 samples make about five 1024-token batches: 8 of them wrap past the end. */
#define BATCH_DATA "builtin:3 --max-seqlen 256 --samples 24"
#define BATCH_COUNT 8

/* The lines of a JSONL file as cJSON objects into j[cap]; their count. */
static int read_jsonl(const char *path, cJSON **j, int cap)
{
    char *text = read_text(path);
    int n = 0;
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        assert_true(n < cap);
        j[n] = cJSON_Parse(line);
        if (j[n] == NULL) fail_msg("%s: line %d is not JSON", path, n + 1);
        n++;
    }
    free(text);
    return n;
}

static long long jnum(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v)) fail_msg("no number '%s'", key);
    return (long long)v->valuedouble;
}

/* ids (a JSON array) equal want[n]. */
static void expect_ids(const cJSON *ids, const int32_t *want, int32_t n)
{
    assert_true(cJSON_IsArray(ids));
    assert_int_equal(cJSON_GetArraySize(ids), n);
    int32_t k = 0;
    for (const cJSON *v = ids->child; v != NULL; v = v->next, k++) assert_int_equal((int32_t)v->valuedouble, want[k]);
}

/* `data batches` against the rule worked out here: from the first sample,
 * a global batch takes samples while input + target tokens add up to at
 * most the budget, and at the end of the data starts again from sample 0
 * (the next epoch). Lengths from `data stats --tsv`, tokens from the
 * corpus; then `train` on the same flags must have trained exactly those
 * tokens and target tokens at every step. */
static void test_batches_are_what_train_consumes(void **state)
{
    (void)state;
    char args[2000], tsv[700], jsonl[700], metrics[700];
    snprintf(jsonl, sizeof jsonl, "%s/batches.jsonl", dir);
    snprintf(args, sizeof args, "batches " BATCH_DATA " --global-batch-tokens 1024 --count %d --out '%s'", BATCH_COUNT,
             jsonl);
    int rc = cli_run("data", args);
    if (rc != 0) fail_msg("data %s: exit %d: %s", args, rc, read_text(err_path));
    snprintf(tsv, sizeof tsv, "%s/b.tsv", dir);
    snprintf(args, sizeof args, "stats " BATCH_DATA " --tsv '%s'", tsv);
    assert_int_equal(cli_run("data", args), 0);
    dyn_dataset ds = {0};
    dyn_error err;
    assert_int_equal(dyn_dataset_read_tsv(tsv, 256, DYN_MODEL_GPT, 0, &ds, &err), DYN_OK);
    assert_int_equal(ds.n, 24);
    dyn_corpus_options o;
    dyn_corpus_options_default(&o);
    o.builtin_samples = 24;
    o.max_seqlen = 256;
    dyn_corpus *c = dyn_corpus_open("builtin:3", &o, &err);
    assert_non_null(c);

    cJSON *b[BATCH_COUNT + 1];
    assert_int_equal(read_jsonl(jsonl, b, BATCH_COUNT + 1), BATCH_COUNT);
    int32_t next = 0; /* the next sample of the rule */
    long long epoch = 0;
    for (int k = 0; k < BATCH_COUNT; k++) {
        assert_int_equal(jnum(b[k], "batch"), k);
        if (next == ds.n) {
            next = 0;
            epoch++;
        }
        assert_int_equal(jnum(b[k], "epoch"), epoch);
        long long tokens = 0, target = 0;
        const cJSON *samples = cJSON_GetObjectItemCaseSensitive(b[k], "samples");
        assert_true(cJSON_IsArray(samples));
        for (const cJSON *s = samples->child; s != NULL; s = s->next) {
            assert_true(next < ds.n);
            assert_int_equal(jnum(s, "id"), next);
            dyn_corpus_sample cs;
            assert_int_equal(dyn_corpus_read(c, next, &cs, &err), DYN_OK);
            expect_ids(cJSON_GetObjectItemCaseSensitive(s, "input_ids"), cs.input, cs.input_len);
            expect_ids(cJSON_GetObjectItemCaseSensitive(s, "target_ids"), cs.target, cs.target_len);
            tokens += ds.samples[next].input_len + ds.samples[next].target_len;
            target += ds.samples[next].target_len;
            next++;
        }
        assert_true(tokens <= 1024);
        /* full, unless the data ended: the next sample would not have fit */
        if (next < ds.n) assert_true(tokens + ds.samples[next].input_len + ds.samples[next].target_len > 1024);
        assert_int_equal(jnum(b[k], "tokens"), tokens);
        assert_int_equal(jnum(b[k], "target_tokens"), target);
    }
    assert_true(epoch >= 1); /* the run wrapped: 24 samples are fewer than 8 batches hold */
    dyn_corpus_free(c);
    dyn_dataset_free(&ds);

    /* train on the same flags (one stage: the batches do not depend on it) */
    snprintf(metrics, sizeof metrics, "%s/m.jsonl", dir);
    setenv("ASAN_OPTIONS", "detect_leaks=0", 1); /* mpirun, as every MPI run of the suite */
    snprintf(args, sizeof args,
             "--model gpt --model-config gpt-tiny --data " BATCH_DATA " --global-batch-tokens 1024 --steps %d "
             "--stages 1 --machine cpu --quiet --metrics '%s'",
             BATCH_COUNT, metrics);
    rc = cli_run("train", args);
    if (rc != 0) fail_msg("train %s: exit %d: %s", args, rc, read_text(err_path));
    cJSON *m[BATCH_COUNT + 1];
    assert_int_equal(read_jsonl(metrics, m, BATCH_COUNT + 1), BATCH_COUNT);
    for (int k = 0; k < BATCH_COUNT; k++) {
        assert_int_equal(jnum(m[k], "step"), k);
        assert_int_equal(jnum(m[k], "tokens"), jnum(b[k], "tokens"));
        assert_int_equal(jnum(m[k], "target_tokens"), jnum(b[k], "target_tokens"));
        cJSON_Delete(m[k]);
        cJSON_Delete(b[k]);
    }
}

/* batches: its flags, and a sample over the budget is one line naming it,
 * no output file. */
static void test_batches_errors(void **state)
{
    (void)state;
    char args[2000];
    struct {
        const char *args, *needle;
        int rc;
    } bad[] = {
        {"batches builtin --samples 4 --out x.jsonl", "--max-seqlen L is required", 2},
        {"batches builtin --samples 4 --max-seqlen 128", "--out FILE.jsonl is required", 2},
        {"batches builtin --samples 4 --max-seqlen 128 --out /tmp", "--out: '/tmp' names a folder; give a file name inside it", 2},
        {"batches builtin --samples 4 --max-seqlen 128 --out x.jsonl --index 2", "--index does not apply", 2},
        {"batches builtin --samples 4 --max-seqlen 128 --out x.jsonl --tsv y.tsv", "--tsv does not apply", 2},
        {"batches builtin --samples 4 --max-seqlen 128 --out x.jsonl --count 0", "--count: 0 is out of range", 2},
        {"batches builtin --samples 4 --max-seqlen 128 --out x.jsonl --global-batch-tokens 0",
         "--global-batch-tokens: 0 is out of range", 2},
        {"stats builtin --samples 4 --max-seqlen 128 --global-batch-tokens 64", "--global-batch-tokens does not apply", 2},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        const char *sub = strncmp(bad[k].args, "stats", 5) == 0 ? "data stats" : "data batches";
        cli_assert_one_line_error(sub, bad[k].args, cli_run("data", bad[k].args), bad[k].rc, bad[k].needle);
    }
    assert_int_equal(access("x.jsonl", F_OK), -1);
    /* 8 tokens cannot hold a built-in sample: the sampler's error, nothing written */
    snprintf(args, sizeof args, "batches builtin --samples 4 --max-seqlen 128 --global-batch-tokens 8 --out '%s/t.jsonl'",
             dir);
    cli_assert_one_line_error("data batches", args, cli_run("data", args), 1, "sample 0");
    assert_false(exists("t.jsonl"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_percentiles_and_tsv),
        cmocka_unit_test(test_convert_then_plan),
        cmocka_unit_test(test_builtin_sources),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_paths_and_flags),
        cmocka_unit_test(test_show_range),
        cmocka_unit_test(test_batches_are_what_train_consumes),
        cmocka_unit_test(test_batches_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
