/* test_data.c — the FLAN-like generator (determinism, per-family statistics
 * against the documented table, clipping), the TSV reader (good files and
 * every error with its file:line) and the global-batch sampler (budget,
 * coverage, order, oversized samples). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dynapipe/data.h" /* defines: dyn_dataset_*, dyn_sampler_*, dyn_lengths_* */
#include "util/rng.h"      /* defines: dyn_rng_* */

static char g_dir[] = "/tmp/dyn_test_data_XXXXXX";

static int setup_dir(void **state)
{
    (void)state;
    return mkdtemp(g_dir) == NULL ? -1 : 0;
}

static int teardown_dir(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Write text to a fresh file in the test directory; returns its path. */
static const char *write_file(const char *name, const char *text)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(text, 1, strlen(text), fp), strlen(text));
    assert_int_equal(fclose(fp), 0);
    return path;
}

/* ---- generator ------------------------------------------------------------ */

static void test_flan_same_seed_same_samples(void **state)
{
    (void)state;
    dyn_dataset a = {0}, b = {0}, c = {0};
    dyn_error err;
    assert_int_equal(dyn_dataset_synthetic_flan(5, 2000, 2048, DYN_MODEL_GPT, &a, &err), DYN_OK);
    assert_int_equal(dyn_dataset_synthetic_flan(5, 2000, 2048, DYN_MODEL_GPT, &b, &err), DYN_OK);
    assert_int_equal(dyn_dataset_synthetic_flan(6, 2000, 2048, DYN_MODEL_GPT, &c, &err), DYN_OK);
    assert_int_equal(a.n, 2000);
    assert_memory_equal(a.samples, b.samples, sizeof(dyn_sample) * 2000);
    int differs = 0;
    for (int i = 0; i < a.n; i++) {
        assert_int_equal(a.samples[i].id, i);
        assert_true(a.samples[i].input_len >= 1 && a.samples[i].target_len >= 1);
        differs |= a.samples[i].input_len != c.samples[i].input_len;
    }
    assert_true(differs);
    dyn_dataset_free(&a);
    dyn_dataset_free(&b);
    dyn_dataset_free(&c);
}

static int cmp_int(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

static double median_of(int *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_int);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* With no effective length limit, each family's share, median lengths and the
 * spread of log(input) must match the documented log-normal parameters. */
static void test_flan_family_statistics_match_table(void **state)
{
    (void)state;
    enum { N = 120000 };
    int32_t nf = 0;
    const dyn_task_family *fam = dyn_flan_families(&nf);
    assert_true(nf >= 6);
    double wsum = 0;
    for (int f = 0; f < nf; f++) wsum += fam[f].weight;
    assert_true(fabs(wsum - 1.0) < 1e-12);

    dyn_dataset ds = {0};
    assert_int_equal(dyn_dataset_synthetic_flan(11, N, 1 << 24, DYN_MODEL_T5, &ds, NULL), DYN_OK);
    int *in = malloc(sizeof(int) * N), *tg = malloc(sizeof(int) * N);
    assert_non_null(in);
    assert_non_null(tg);
    for (int f = 0; f < nf; f++) {
        int n = 0;
        double sl = 0, sl2 = 0;
        for (int i = 0; i < N; i++) {
            if (ds.samples[i].task != f) continue;
            in[n] = ds.samples[i].input_len;
            tg[n] = ds.samples[i].target_len;
            double l = log(in[n]);
            sl += l;
            sl2 += l * l;
            n++;
        }
        double share = (double)n / N;
        assert_true(fabs(share - fam[f].weight) < 0.01);
        double mean = sl / n, sd = sqrt(sl2 / n - mean * mean);
        assert_true(fabs(mean - fam[f].input_mu) < 0.03);
        assert_true(fabs(sd - fam[f].input_sigma) < 0.05 * fam[f].input_sigma);
        double med_in = median_of(in, n), want_in = exp(fam[f].input_mu);
        assert_true(fabs(med_in - want_in) <= 0.05 * want_in);
        double med_tg = median_of(tg, n), want_tg = exp(fam[f].target_mu);
        double tol = 0.05 * want_tg > 1.0 ? 0.05 * want_tg : 1.0;
        assert_true(fabs(med_tg - want_tg) <= tol);
    }
    /* The mixture's point: inputs and targets two orders of magnitude apart
     * (a few-shot prompt vs a classification label). */
    int max_in = 0, min_tg = 1 << 30;
    for (int i = 0; i < N; i++) {
        if (ds.samples[i].input_len > max_in) max_in = ds.samples[i].input_len;
        if (ds.samples[i].target_len < min_tg) min_tg = ds.samples[i].target_len;
    }
    assert_true(max_in >= 100 * min_tg);
    free(in);
    free(tg);
    dyn_dataset_free(&ds);
}

static void test_lengths_clip_rule_hand_worked(void **state)
{
    (void)state;
    int32_t i = 90, t = 30;
    dyn_lengths_clip(DYN_MODEL_GPT, 100, &i, &t); /* shorten the input first */
    assert_int_equal(i, 70);
    assert_int_equal(t, 30);
    i = 10, t = 200;
    dyn_lengths_clip(DYN_MODEL_GPT, 100, &i, &t); /* target keeps all but one token */
    assert_int_equal(i, 1);
    assert_int_equal(t, 99);
    i = 300, t = 5;
    dyn_lengths_clip(DYN_MODEL_T5, 100, &i, &t); /* each side on its own */
    assert_int_equal(i, 100);
    assert_int_equal(t, 5);
    i = 40, t = 60;
    dyn_lengths_clip(DYN_MODEL_GPT, 100, &i, &t); /* exactly at the limit: unchanged */
    assert_int_equal(i, 40);
    assert_int_equal(t, 60);
    assert_true(dyn_lengths_fit(DYN_MODEL_GPT, 100, 40, 60));
    assert_false(dyn_lengths_fit(DYN_MODEL_GPT, 100, 41, 60));
    assert_true(dyn_lengths_fit(DYN_MODEL_T5, 100, 100, 100));
    assert_false(dyn_lengths_fit(DYN_MODEL_T5, 100, 101, 1));
    assert_false(dyn_lengths_fit(DYN_MODEL_T5, 100, 0, 1));
}

/* A limit changes only the samples over it, and those by the clip rule. */
static void test_flan_clipping_to_max_seqlen(void **state)
{
    (void)state;
    enum { N = 20000 };
    dyn_model_kind kinds[2] = {DYN_MODEL_GPT, DYN_MODEL_T5};
    for (int k = 0; k < 2; k++) {
        dyn_dataset full = {0}, cut = {0};
        assert_int_equal(dyn_dataset_synthetic_flan(3, N, 1 << 24, kinds[k], &full, NULL), DYN_OK);
        assert_int_equal(dyn_dataset_synthetic_flan(3, N, 512, kinds[k], &cut, NULL), DYN_OK);
        int clipped = 0;
        for (int i = 0; i < N; i++) {
            const dyn_sample *a = &full.samples[i], *b = &cut.samples[i];
            assert_true(dyn_lengths_fit(kinds[k], 512, b->input_len, b->target_len));
            assert_int_equal(a->task, b->task);
            if (dyn_lengths_fit(kinds[k], 512, a->input_len, a->target_len)) {
                assert_int_equal(a->input_len, b->input_len);
                assert_int_equal(a->target_len, b->target_len);
            } else {
                clipped++;
                int32_t in = a->input_len, tg = a->target_len;
                dyn_lengths_clip(kinds[k], 512, &in, &tg);
                assert_int_equal(in, b->input_len);
                assert_int_equal(tg, b->target_len);
            }
        }
        assert_true(clipped > 0); /* the long tail reaches past 512 */
        dyn_dataset_free(&full);
        dyn_dataset_free(&cut);
    }
    dyn_dataset ds = {0};
    dyn_error err;
    assert_int_equal(dyn_dataset_synthetic_flan(1, 10, 1, DYN_MODEL_GPT, &ds, &err), DYN_ERR_INVALID_ARG);
    assert_int_equal(dyn_dataset_synthetic_flan(1, -1, 100, DYN_MODEL_GPT, &ds, &err), DYN_ERR_INVALID_ARG);
}

/* ---- TSV ------------------------------------------------------------------ */

static void test_tsv_reads_comments_header_blank_crlf(void **state)
{
    (void)state;
    const char *p = write_file("good.tsv",
                               "# lengths of a toy set\n"
                               "input_len\ttarget_len\n"
                               "12\t3\n"
                               "\n"
                               "# a comment between samples\n"
                               "700\t64\r\n"
                               "  5 \t 1\n"
                               "40\t44"); /* no final newline */
    dyn_dataset ds = {0};
    dyn_error err;
    assert_int_equal(dyn_dataset_read_tsv(p, 2048, DYN_MODEL_GPT, 0, &ds, &err), DYN_OK);
    assert_int_equal(ds.n, 4);
    int want[4][2] = {{12, 3}, {700, 64}, {5, 1}, {40, 44}};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(ds.samples[i].id, i);
        assert_int_equal(ds.samples[i].task, -1);
        assert_int_equal(ds.samples[i].input_len, want[i][0]);
        assert_int_equal(ds.samples[i].target_len, want[i][1]);
    }
    dyn_dataset_free(&ds);
    /* Without a header too; an empty file is an empty dataset. */
    p = write_file("nohdr.tsv", "3\t4\n");
    assert_int_equal(dyn_dataset_read_tsv(p, 2048, DYN_MODEL_T5, 0, &ds, &err), DYN_OK);
    assert_int_equal(ds.n, 1);
    dyn_dataset_free(&ds);
    p = write_file("empty.tsv", "# nothing\n");
    assert_int_equal(dyn_dataset_read_tsv(p, 2048, DYN_MODEL_T5, 0, &ds, &err), DYN_OK);
    assert_int_equal(ds.n, 0);
    dyn_dataset_free(&ds);
}

/* Each bad file must fail with DYN_ERR_PARSE and a message that starts with
 * "path:line:" and says what is wrong. */
static void expect_tsv_error(const char *name, const char *text, int line, const char *what,
                             int32_t max_seqlen, dyn_model_kind kind)
{
    const char *p = write_file(name, text);
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%s:%d: ", p, line);
    dyn_dataset ds = {0};
    dyn_error err;
    dyn_error_clear(&err);
    assert_int_equal(dyn_dataset_read_tsv(p, max_seqlen, kind, 0, &ds, &err), DYN_ERR_PARSE);
    assert_int_equal(err.code, DYN_ERR_PARSE);
    if (strncmp(err.msg, prefix, strlen(prefix)) != 0 || strstr(err.msg, what) == NULL)
        fail_msg("message '%s' should start with '%s' and mention '%s'", err.msg, prefix, what);
    assert_null(ds.samples);
}

static void test_tsv_errors_name_file_and_line(void **state)
{
    (void)state;
    expect_tsv_error("one_field.tsv", "# c\n1\t2\n5\n", 3, "expected 2 tab-separated fields", 100, DYN_MODEL_GPT);
    expect_tsv_error("extra.tsv", "1\t2\n\n5\t6\t7\n", 3, "got 3", 100, DYN_MODEL_GPT);
    expect_tsv_error("float.tsv", "in\tout\n5\t3.5\n", 2, "not an integer", 100, DYN_MODEL_GPT);
    expect_tsv_error("word.tsv", "1\t2\nabc\t2\n", 2, "not an integer", 100, DYN_MODEL_GPT);
    expect_tsv_error("second_header.tsv", "in\tout\nin\tout\n", 2, "not an integer", 100, DYN_MODEL_GPT);
    expect_tsv_error("zero.tsv", "0\t5\n", 1, "must be positive", 100, DYN_MODEL_GPT);
    expect_tsv_error("neg.tsv", "4\t1\n5\t-2\n", 2, "target_len -2 must be >= 0", 100, DYN_MODEL_GPT);
    /* T5 needs a target; GPT does not (test_cli_plan reads a zero target). */
    expect_tsv_error("t5_zero.tsv", "4\t1\n5\t0\n", 2, "target_len 0 must be positive", 100, DYN_MODEL_T5);
    expect_tsv_error("empty_field.tsv", "4\t\n", 1, "empty field", 100, DYN_MODEL_GPT);
    expect_tsv_error("huge.tsv", "99999999999\t1\n", 1, "out of range", 100, DYN_MODEL_GPT);
    expect_tsv_error("space_sep.tsv", "4 5\n", 1, "expected 2 tab-separated fields", 100, DYN_MODEL_GPT);
    /* over the limit: GPT counts input + target, T5 each side */
    expect_tsv_error("gpt_long.tsv", "1\t1\n60\t41\n", 2, "input_len + target_len = 101", 100, DYN_MODEL_GPT);
    expect_tsv_error("t5_long.tsv", "1\t1\n1\t1\n100\t101\n", 3, "target_len = 101", 100, DYN_MODEL_T5);
}

static void test_tsv_over_limit_clipped_with_flag(void **state)
{
    (void)state;
    const char *p = write_file("long.tsv", "60\t41\n10\t200\n100\t100\n");
    dyn_dataset ds = {0};
    dyn_error err;
    assert_int_equal(dyn_dataset_read_tsv(p, 100, DYN_MODEL_GPT, 1, &ds, &err), DYN_OK);
    assert_int_equal(ds.n, 3);
    assert_int_equal(ds.samples[0].input_len, 59);
    assert_int_equal(ds.samples[0].target_len, 41);
    assert_int_equal(ds.samples[1].input_len, 1);
    assert_int_equal(ds.samples[1].target_len, 99);
    dyn_dataset_free(&ds);
    assert_int_equal(dyn_dataset_read_tsv(p, 100, DYN_MODEL_T5, 1, &ds, &err), DYN_OK);
    assert_int_equal(ds.samples[1].input_len, 10);
    assert_int_equal(ds.samples[1].target_len, 100);
    assert_int_equal(ds.samples[2].input_len, 100);
    dyn_dataset_free(&ds);
}

static void test_tsv_missing_file_is_io_error(void **state)
{
    (void)state;
    dyn_dataset ds = {0};
    dyn_error err;
    assert_int_equal(dyn_dataset_read_tsv("/nonexistent/x.tsv", 100, DYN_MODEL_GPT, 0, &ds, &err), DYN_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/x.tsv"));
}

/* Random byte edits of a valid file: accepted, or one parse error with
 * path:line; never a crash (run under ASan/UBSan). Accepted files obey the
 * limit. */
static void test_tsv_survives_random_edits(void **state)
{
    (void)state;
    const char *good = "# c\nin\tout\n12\t3\n700\t64\n5\t1\n40\t44\n";
    size_t n = strlen(good);
    char buf[128];
    const char alphabet[] = "0123456789 \t\n\r#-+.x";
    dyn_rng rng;
    dyn_rng_seed(&rng, 99);
    int rejected = 0;
    for (int it = 0; it < 400; it++) {
        memcpy(buf, good, n + 1);
        for (int e = 0; e < 1 + it % 3; e++)
            buf[dyn_rng_below(&rng, n)] = alphabet[dyn_rng_below(&rng, sizeof alphabet - 1)];
        const char *p = write_file("fuzz.tsv", buf);
        dyn_dataset ds = {0};
        dyn_error err;
        dyn_error_clear(&err);
        dyn_status st = dyn_dataset_read_tsv(p, 1000, DYN_MODEL_GPT, 0, &ds, &err);
        if (st == DYN_OK) {
            for (int32_t i = 0; i < ds.n; i++) {
                assert_int_equal(ds.samples[i].id, i);
                assert_true(dyn_lengths_fit(DYN_MODEL_GPT, 1000, ds.samples[i].input_len, ds.samples[i].target_len));
            }
            dyn_dataset_free(&ds);
        } else {
            rejected++;
            assert_int_equal(st, DYN_ERR_PARSE);
            assert_int_equal(strncmp(err.msg, p, strlen(p)), 0);
            assert_non_null(strchr(err.msg + strlen(p), ':'));
        }
    }
    assert_true(rejected > 50);
}

/* ---- sampler ---------------------------------------------------------------- */

static void test_sampler_budget_coverage_and_order(void **state)
{
    (void)state;
    dyn_dataset ds = {0};
    assert_int_equal(dyn_dataset_synthetic_flan(9, 5000, 2048, DYN_MODEL_GPT, &ds, NULL), DYN_OK);
    const int64_t budgets[3] = {2048, 8192, 65536};
    for (int b = 0; b < 3; b++) {
        dyn_error err;
        dyn_sampler *s = dyn_sampler_create(&ds, budgets[b], &err);
        assert_non_null(s);
        for (int pass = 0; pass < 2; pass++) { /* second pass after reset: same batches */
            int32_t next_id = 0, batches = 0;
            for (;;) {
                const dyn_sample *batch;
                int32_t n;
                assert_int_equal(dyn_sampler_next(s, &batch, &n, &err), DYN_OK);
                if (n == 0) break;
                batches++;
                int64_t tokens = 0;
                for (int32_t i = 0; i < n; i++) {
                    assert_int_equal(batch[i].id, next_id); /* consecutive, in order, once */
                    next_id++;
                    tokens += batch[i].input_len + batch[i].target_len;
                }
                assert_true(tokens <= budgets[b]);
                if (next_id < ds.n) { /* greedy: the next sample would not have fit */
                    const dyn_sample *x = &ds.samples[next_id];
                    assert_true(tokens + x->input_len + x->target_len > budgets[b]);
                }
            }
            assert_int_equal(next_id, ds.n);
            assert_true(batches > 1);
            dyn_sampler_reset(s);
        }
        dyn_sampler_free(s);
    }
    dyn_dataset_free(&ds);
}

static void test_sampler_oversized_sample_is_named(void **state)
{
    (void)state;
    dyn_sample smp[3] = {{0, -1, 10, 5}, {1, -1, 90, 20}, {2, -1, 1, 1}};
    dyn_dataset ds = {3, smp};
    dyn_error err;
    dyn_sampler *s = dyn_sampler_create(&ds, 100, &err);
    assert_non_null(s);
    const dyn_sample *batch;
    int32_t n;
    assert_int_equal(dyn_sampler_next(s, &batch, &n, &err), DYN_OK);
    assert_int_equal(n, 1);
    assert_int_equal(dyn_sampler_next(s, &batch, &n, &err), DYN_ERR_INFEASIBLE);
    assert_int_equal(n, 0);
    assert_non_null(strstr(err.msg, "sample 1 alone has 110 tokens"));
    assert_non_null(strstr(err.msg, "100"));
    dyn_sampler_free(s);
    assert_null(dyn_sampler_create(&ds, 0, &err));
    assert_int_equal(err.code, DYN_ERR_INVALID_ARG);
    /* empty dataset: the first call says "no more" */
    dyn_dataset empty = {0, NULL};
    s = dyn_sampler_create(&empty, 10, &err);
    assert_non_null(s);
    assert_int_equal(dyn_sampler_next(s, &batch, &n, &err), DYN_OK);
    assert_int_equal(n, 0);
    assert_null(batch);
    dyn_sampler_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flan_same_seed_same_samples),
        cmocka_unit_test(test_flan_family_statistics_match_table),
        cmocka_unit_test(test_lengths_clip_rule_hand_worked),
        cmocka_unit_test(test_flan_clipping_to_max_seqlen),
        cmocka_unit_test(test_tsv_reads_comments_header_blank_crlf),
        cmocka_unit_test(test_tsv_errors_name_file_and_line),
        cmocka_unit_test(test_tsv_over_limit_clipped_with_flag),
        cmocka_unit_test(test_tsv_missing_file_is_io_error),
        cmocka_unit_test(test_tsv_survives_random_edits),
        cmocka_unit_test(test_sampler_budget_coverage_and_order),
        cmocka_unit_test(test_sampler_oversized_sample_is_named),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
