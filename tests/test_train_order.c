/* test_train_order.c — `dynapipe train` on a user's JSONL file, as a user
 * expects: the order it trains in, its epochs and its evaluation set, read
 * back from real MPI runs (every mpirun under `timeout`) through
 * --dump-order (the samples of every step), the metrics and stderr.
 *
 *   - shuffling is a permutation: with --epochs 3 every record trains
 *     exactly once per epoch (counted here), the epochs' orders differ from
 *     each other and from the file's; --no-shuffle is the file's order every
 *     epoch; one line says when each epoch ends, at the step the dump says,
 *     and the metrics' "epoch" counts them; --steps ends the run first when
 *     it comes first.
 *   - --eval-split P holds out exactly round(P n) records, the same ones
 *     under another seed, and none of them ever trains; --eval-every and
 *     `dynapipe eval` call that loss "held-out", on those records alone.
 *   - without --eval-data or --eval-split the loss on a file is said to be
 *     a "train-data loss" (train and eval), with --eval-data a "validation"
 *     loss; a new run evaluates before its first step too ("step 0", the
 *     first record's eval_loss_before), a resumed one does not.
 *   - a run killed (--debug-kill) in its second epoch after a checkpoint and
 *     resumed trains the same samples at every step as an uninterrupted one, and its final
 *     checkpoint equals the uninterrupted one byte for byte.
 *   - --calibrate (batches planned again) trains the same samples per step.
 *   - bad values (--eval-split 1.5, --epochs 0, a missing --eval-data, a
 *     resume in another order or past --epochs): one line, non-zero exit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli_testlib.h"

#define N_RECORDS 37
#define COMMON                                                                                                      \
    "--model gpt --model-config gpt-tiny --layers 2 --stages 2 --schedule 1f1b --threads 1 --max-seqlen 64 "       \
    "--global-batch-tokens 160 --machine cpu --no-calibrate" /* fixed costs: a resumed run plans the same */

static char data_path[700];

/* `dynapipe train COMMON --data <the file> args` under timeout; its exit code. */
static int train(const char *args)
{
    char a[8192];
    int w = snprintf(a, sizeof a, COMMON " --data '%s' %s", data_path, args);
    assert_true(w > 0 && (size_t)w < sizeof a);
    return cli_train(a);
}

static void train_ok(const char *args)
{
    int rc = train(args);
    if (rc != 0) fail_msg("dynapipe train %s: exit %d: %s", args, rc, slurp(err_path));
}

/* A dumped order: step k's samples ids[first[k] .. first[k + 1]), its epoch. */
typedef struct order {
    int first_step; /* the step of the first line (a resumed run's) */
    int steps;
    int first[256];
    int epoch[256];
    int ids[8192];
} order;

static void read_order(const char *path, order *o)
{
    memset(o, 0, sizeof *o);
    char *text = slurp(path);
    int n = 0;
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        if (j == NULL) fail_msg("%s: a line does not parse: %s", path, line);
        assert_true(o->steps < 255);
        int step = (int)cJSON_GetObjectItemCaseSensitive(j, "step")->valuedouble;
        if (o->steps == 0) o->first_step = step;
        assert_int_equal(step, o->first_step + o->steps);
        o->epoch[o->steps] = (int)cJSON_GetObjectItemCaseSensitive(j, "epoch")->valuedouble;
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "samples"), *x;
        assert_true(cJSON_IsArray(s) && cJSON_GetArraySize(s) > 0);
        o->first[o->steps] = n;
        cJSON_ArrayForEach(x, s)
        {
            assert_true(n < 8192);
            o->ids[n++] = (int)x->valuedouble;
        }
        o->steps++;
        o->first[o->steps] = n;
        cJSON_Delete(j);
    }
    free(text);
}

/* The samples of epoch e in training order into ids; their count. The
 * epochs of the steps never decrease. */
static int epoch_ids(const order *o, int e, int *ids)
{
    int n = 0;
    for (int k = 0; k < o->steps; k++) {
        if (k > 0) assert_true(o->epoch[k] >= o->epoch[k - 1]);
        if (o->epoch[k] != e) continue;
        for (int i = o->first[k]; i < o->first[k + 1]; i++) ids[n++] = o->ids[i];
    }
    return n;
}

/* Every id of ids[n] in [0, N_RECORDS) exactly once, none of skip[]
 * (NULL: none skipped) and all the others. */
static void assert_permutation(const int *ids, int n, const unsigned char *skip, const char *what)
{
    int seen[N_RECORDS] = {0}, want = 0;
    for (int i = 0; i < N_RECORDS; i++) want += !(skip && skip[i]);
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= N_RECORDS) fail_msg("%s: id %d out of range", what, ids[i]);
        if (skip && skip[ids[i]]) fail_msg("%s: held-out record %d trained", what, ids[i]);
        if (seen[ids[i]]++) fail_msg("%s: record %d twice in one epoch", what, ids[i]);
    }
    if (n != want) fail_msg("%s: %d records in the epoch, want %d", what, n, want);
}

/* The last step whose batch is in epoch e (0-based), + 1: when it ended. */
static int epoch_end_step(const order *o, int e)
{
    int end = -1;
    for (int k = 0; k < o->steps; k++)
        if (o->epoch[k] == e) end = k + 1;
    return end;
}

static void test_shuffle_is_a_permutation_per_epoch(void **state)
{
    (void)state;
    char dump[700], metrics[700], args[2048];
    snprintf(dump, sizeof dump, "%s/order.jsonl", dir);
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", dir);
    snprintf(args, sizeof args, "--epochs 3 --seed 11 --dump-order '%s' --metrics '%s'", dump, metrics);
    train_ok(args);
    order o;
    read_order(dump, &o);
    int ids[3][N_RECORDS * 2];
    for (int e = 0; e < 3; e++) {
        char what[32];
        snprintf(what, sizeof what, "epoch %d", e);
        assert_permutation(ids[e], epoch_ids(&o, e, ids[e]), NULL, what);
    }
    assert_int_equal(o.epoch[o.steps - 1], 2); /* --epochs 3 alone ends the run after the third */
    int identity = 1;
    for (int i = 0; i < N_RECORDS; i++) identity &= ids[0][i] == i;
    if (identity) fail_msg("epoch 0 is the file's order: not shuffled");
    if (memcmp(ids[0], ids[1], sizeof ids[0]) == 0 || memcmp(ids[1], ids[2], sizeof ids[1]) == 0)
        fail_msg("two epochs in the same order");
    /* one line per epoch end, at the step the dump says */
    char *err = slurp(err_path);
    for (int e = 0; e < 3; e++) {
        char line[128];
        snprintf(line, sizeof line, "dynapipe train: epoch %d of 3 done at step %d (%d samples each)", e + 1,
                 epoch_end_step(&o, e), N_RECORDS);
        if (strstr(err, line) == NULL) fail_msg("no '%s' in: %s", line, err);
    }
    free(err);
    /* the metrics count the epochs: 3 after the last step, whole exactly at the ends */
    char *text = slurp(metrics);
    int k = 0;
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n"), k++) {
        cJSON *j = cJSON_Parse(line);
        assert_non_null(j);
        double ep = cJSON_GetObjectItemCaseSensitive(j, "epoch")->valuedouble;
        int ended = k + 1 == epoch_end_step(&o, o.epoch[k]);
        if (ended && fabs(ep - (o.epoch[k] + 1)) > 1e-9) fail_msg("step %d ends epoch %d, metrics say %g", k, o.epoch[k], ep);
        if (!ended && (ep <= o.epoch[k] || ep >= o.epoch[k] + 1)) fail_msg("step %d: epoch %g", k, ep);
        cJSON_Delete(j);
    }
    free(text);
    assert_int_equal(k, o.steps);

    /* --calibrate plans batches again with corrected times: the same samples at every step */
    snprintf(args, sizeof args, "--epochs 3 --seed 11 --calibrate --quiet --dump-order '%s'", dump);
    train_ok(args);
    order c;
    read_order(dump, &c);
    assert_int_equal(c.steps, o.steps);
    assert_memory_equal(c.first, o.first, sizeof o.first);
    assert_memory_equal(c.ids, o.ids, (size_t)o.first[o.steps] * sizeof(int));

    /* --steps first: the run ends there */
    snprintf(args, sizeof args, "--epochs 3 --steps 4 --seed 11 --dump-order '%s'", dump);
    train_ok(args);
    order s;
    read_order(dump, &s);
    assert_int_equal(s.steps, 4);
    assert_memory_equal(s.ids, o.ids, (size_t)s.first[4] * sizeof(int)); /* the same order, cut */

    /* --no-shuffle: the file's order, every epoch */
    snprintf(args, sizeof args, "--epochs 2 --no-shuffle --dump-order '%s' --quiet", dump);
    train_ok(args);
    read_order(dump, &s);
    for (int e = 0; e < 2; e++) {
        int n = epoch_ids(&s, e, ids[e]);
        assert_int_equal(n, N_RECORDS);
        for (int i = 0; i < n; i++) assert_int_equal(ids[e][i], i);
    }
}

/* Records never trained by the run of args (one epoch dumped to dump):
 * held[i] = 1. Their count. */
static int untrained(const char *args, const char *dump, unsigned char *held, int epochs)
{
    train_ok(args);
    order o;
    read_order(dump, &o);
    int trained[N_RECORDS] = {0}, n = 0;
    for (int i = 0; i < o.first[o.steps]; i++) trained[o.ids[i]]++;
    for (int i = 0; i < N_RECORDS; i++) {
        held[i] = trained[i] == 0;
        n += held[i];
        if (trained[i] != 0 && trained[i] != epochs) fail_msg("record %d trained %d times in %d epochs", i, trained[i], epochs);
    }
    int ids[N_RECORDS];
    for (int e = 0; e < epochs; e++) assert_permutation(ids, epoch_ids(&o, e, ids), held, "held-out epoch");
    return n;
}

static void test_eval_split_never_trains(void **state)
{
    (void)state;
    char dump[700], ck[700], args[2048];
    snprintf(dump, sizeof dump, "%s/split.jsonl", dir);
    snprintf(ck, sizeof ck, "%s/split-ck", dir);
    unsigned char held_a[N_RECORDS], held_b[N_RECORDS];
    snprintf(args, sizeof args, "--epochs 2 --eval-split 0.25 --seed 5 --eval-every 3 --eval-samples 100 "
                                "--dump-order '%s' --save '%s'", dump, ck);
    int n = untrained(args, dump, held_a, 2);
    assert_int_equal(n, (int)lround(0.25 * N_RECORDS)); /* 9 of 37 */
    char *err = slurp(err_path);
    if (strstr(err, "held-out loss") == NULL || strstr(err, "train-data") != NULL) fail_msg("train said: %s", err);
    free(err);
    /* another seed: another order, the same records held out */
    snprintf(args, sizeof args, "--epochs 2 --eval-split 0.25 --seed 6 --dump-order '%s' --quiet", dump);
    assert_int_equal(untrained(args, dump, held_b, 2), n);
    assert_memory_equal(held_a, held_b, sizeof held_a);
    /* eval of the checkpoint: the held-out records alone, said so */
    snprintf(args, sizeof args, "--checkpoint '%s' --no-accuracy --samples 1000", ck);
    assert_int_equal(cli_run("eval", args), 0);
    char *out = slurp(out_path), want[64];
    snprintf(want, sizeof want, ", never trained), %d samples: held-out loss ", n);
    if (strstr(out, "held-out 0.25 of ") == NULL || strstr(out, want) == NULL) fail_msg("eval said: %s", out);
    free(out);
    /* a larger fraction than the checkpoint's is not all held out, and not called so */
    snprintf(args, sizeof args, "--checkpoint '%s' --no-accuracy --samples 1000 --eval-split 0.5", ck);
    assert_int_equal(cli_run("eval", args), 0);
    out = slurp(out_path);
    if (strstr(out, "some of these trained") == NULL || strstr(out, "held-out") != NULL) fail_msg("eval said: %s", out);
    free(out);
}

/* Without --eval-data or --eval-split the loss is on the training file,
 * and train and eval say so; --eval-data is a validation set. */
static void test_train_data_loss_said(void **state)
{
    (void)state;
    char ck[700], metrics[700], valid[700], args[2048];
    snprintf(ck, sizeof ck, "%s/td-ck", dir);
    snprintf(metrics, sizeof metrics, "%s/td.jsonl", dir);
    snprintf(args, sizeof args, "--steps 2 --eval-every 2 --eval-samples 4 --save '%s' --metrics '%s'", ck, metrics);
    train_ok(args);
    char *err = slurp(err_path);
    if (strstr(err, "step 2: train-data loss ") == NULL || strstr(err, "held-out loss") != NULL ||
        strstr(err, "at the measured rates; train-data loss ") == NULL) /* the summary line too */
        fail_msg("train said: %s", err);
    free(err);
    char *m = slurp(metrics);
    if (strstr(m, "\"eval_on\":\"train-data\"") == NULL) fail_msg("metrics: %s", m);
    /* a new run evaluates its starting weights too: on the first record only */
    const char *key = "\"eval_loss_before\":";
    size_t first_line = strcspn(m, "\n");
    if (m[first_line] == '\0') fail_msg("metrics: one record: %s", m);
    m[first_line] = '\0';
    if (strstr(m, key) == NULL || strstr(m + first_line + 1, key) != NULL)
        fail_msg("metrics: no eval_loss_before on the first record alone: %s\n%s", m, m + first_line + 1);
    free(m);
    err = slurp(err_path);
    if (strstr(err, "step 0: train-data loss ") == NULL) fail_msg("train said: %s", err);
    free(err);
    /* a resume continues a curve: no evaluation before its first step */
    snprintf(args, sizeof args, "--steps 3 --eval-every 2 --eval-samples 4 --resume '%s' --metrics '%s'", ck, metrics);
    train_ok(args);
    m = slurp(metrics);
    err = slurp(err_path);
    if (strstr(m, "eval_loss_before") != NULL || strstr(err, "step 0:") != NULL || strstr(err, "step 3: ") == NULL)
        fail_msg("resumed: metrics %s; train said: %s", m, err);
    free(m);
    free(err);
    snprintf(args, sizeof args, "--checkpoint '%s' --no-accuracy --samples 5", ck);
    assert_int_equal(cli_run("eval", args), 0);
    char *out = slurp(out_path);
    if (strstr(out, "the training data (not held out") == NULL || strstr(out, "5 samples: train-data loss ") == NULL)
        fail_msg("eval said: %s", out);
    free(out);
    write_file("valid.jsonl", "{\"input\": \"check one\", \"target\": \"ok\"}\n"
                              "{\"input\": \"check two\", \"target\": \"fine\"}\n",
               valid, sizeof valid);
    snprintf(args, sizeof args, "--steps 2 --eval-every 1 --eval-data '%s'", valid);
    train_ok(args);
    err = slurp(err_path);
    if (strstr(err, "step 1: validation loss ") == NULL || strstr(err, "train-data") != NULL)
        fail_msg("train said: %s", err);
    free(err);
}

static int same_file(const char *a, const char *b)
{
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    int ok = dyn_file_read_all(a, &x, &nx, NULL) == DYN_OK && dyn_file_read_all(b, &y, &ny, NULL) == DYN_OK &&
             nx == ny && memcmp(x, y, nx) == 0;
    free(x);
    free(y);
    return ok;
}

/* Killed at step 9, in the second epoch (after its checkpoint), and
 * resumed: the same samples at every step as an uninterrupted run, and the
 * same final checkpoint. */
static void test_kill_resume_same_order(void **state)
{
    (void)state;
    char a[700], b[700], da[700], db[700], args[4096];
    snprintf(a, sizeof a, "%s/ra", dir);
    snprintf(b, sizeof b, "%s/rb", dir);
    snprintf(da, sizeof da, "%s/ra.jsonl", dir);
    snprintf(db, sizeof db, "%s/rb.jsonl", dir);
    snprintf(args, sizeof args, "--epochs 2 --seed 3 --quiet --save '%s' --save-every 1 --dump-order '%s'", a, da);
    train_ok(args);
    order full, resumed;
    read_order(da, &full);
    assert_true(full.epoch[9] == 1 && full.steps > 10); /* the kill falls in epoch 1 */
    snprintf(args, sizeof args, "--epochs 2 --seed 3 --quiet --save '%s' --save-every 1 --debug-kill 1:9", b);
    assert_int_not_equal(train(args), 0);
    char latest[800];
    snprintf(latest, sizeof latest, "%s/latest", b);
    char *l = slurp(latest);
    assert_string_equal(l, "step-00000009\n");
    free(l);
    snprintf(args, sizeof args, "--epochs 2 --seed 3 --quiet --save '%s' --resume '%s' --dump-order '%s'", b, b, db);
    train_ok(args);
    read_order(db, &resumed);
    /* the resumed run's dump holds steps 9.. */
    assert_int_equal(resumed.first_step, 9);
    assert_int_equal(resumed.steps, full.steps - 9);
    for (int k = 0; k < resumed.steps; k++) {
        int n = full.first[k + 10] - full.first[k + 9], m = resumed.first[k + 1] - resumed.first[k];
        assert_int_equal(n, m);
        assert_int_equal(full.epoch[k + 9], resumed.epoch[k]);
        assert_memory_equal(full.ids + full.first[k + 9], resumed.ids + resumed.first[k], (size_t)n * sizeof(int));
    }
    char fa[900], fb[900];
    snprintf(fa, sizeof fa, "%s/step-%08d", a, full.steps);
    snprintf(fb, sizeof fb, "%s/step-%08d", b, full.steps);
    DIR *d = opendir(fa);
    assert_non_null(d);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char pa[1200], pb[1200];
        snprintf(pa, sizeof pa, "%s/%s", fa, e->d_name);
        snprintf(pb, sizeof pb, "%s/%s", fb, e->d_name);
        if (!same_file(pa, pb)) fail_msg("%s differs from %s", pb, pa);
        files++;
    }
    closedir(d);
    assert_int_equal(files, 7);
    /* the trainer state says where the order stands */
    char ts[1000];
    snprintf(ts, sizeof ts, "%s/trainer_state.json", fa);
    char *t = slurp(ts);
    if (strstr(t, "\"order\"") == NULL || strstr(t, "\"samples_per_epoch\":\t37") == NULL)
        fail_msg("trainer state: %s", t);
    free(t);
    /* a resume in another order is refused, naming it */
    snprintf(args, sizeof args, "--epochs 2 --seed 3 --no-shuffle --save '%s' --resume '%s/step-00000009'", b, b);
    cli_assert_one_line_error("train", args, train(args), 1, "order would differ");
    snprintf(args, sizeof args, "--epochs 2 --seed 4 --save '%s' --resume '%s/step-00000009'", b, b);
    cli_assert_one_line_error("train", args, train(args), 1, "--seed 3");
    snprintf(args, sizeof args, "--epochs 1 --seed 3 --save '%s' --resume '%s/step-00000009'", b, b);
    cli_assert_one_line_error("train", args, train(args), 1, "--epochs 1 leaves nothing to train");
}

static void test_bad_values(void **state)
{
    (void)state;
    const struct {
        const char *args, *needle;
        int rc;
    } bad[] = {
        {"--eval-split 1.5", "--eval-split: 1.5 is not a fraction in (0, 1)", 2},
        {"--eval-split 0", "--eval-split: 0 is not a fraction in (0, 1)", 2},
        {"--eval-split x", "--eval-split: 'x' is not a number", 2},
        {"--epochs 0", "--epochs: 0 is out of range", 2},
        {"--eval-every 2 --eval-data /nonexistent/valid.jsonl", "--eval-data /nonexistent/valid.jsonl", 1},
        {"--eval-data v.jsonl", "--eval-data applies to --eval-every", 2},
        {"--eval-every 2 --eval-data v.jsonl --eval-split 0.1", "give one", 2},
        {"--dump-order /nonexistent/o.jsonl", "--dump-order /nonexistent/o.jsonl", 2},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cli_assert_one_line_error("train", bad[i].args, train(bad[i].args), bad[i].rc, bad[i].needle);
    cli_assert_one_line_error("eval", "--checkpoint x --eval-split 2", cli_run("eval", "--checkpoint x --eval-split 2"),
                              2, "--eval-split: 2 is not a fraction");
}

/* N_RECORDS records of varying lengths (8..30 + 2..9 bytes). */
static int setup(void **state)
{
    (void)state;
    if (cli_setup_dir() != 0) return -1;
    snprintf(data_path, sizeof data_path, "%s/data.jsonl", dir);
    FILE *f = fopen(data_path, "w");
    if (f == NULL) return -1;
    for (int i = 0; i < N_RECORDS; i++) {
        char in[64], tg[16];
        int ni = 8 + (i * 7) % 23, nt = 2 + (i * 5) % 8;
        for (int k = 0; k < ni; k++) in[k] = (char)('a' + (i + k) % 26);
        for (int k = 0; k < nt; k++) tg[k] = (char)('A' + (i * 3 + k) % 26);
        in[ni] = tg[nt] = '\0';
        fprintf(f, "{\"input\": \"%s\", \"target\": \"%s\"}\n", in, tg);
    }
    return fclose(f) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return cli_teardown_dir();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shuffle_is_a_permutation_per_epoch),
        cmocka_unit_test(test_eval_split_never_trains),
        cmocka_unit_test(test_train_data_loss_said),
        cmocka_unit_test(test_kill_resume_same_order),
        cmocka_unit_test(test_bad_values),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
