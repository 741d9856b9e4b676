/* test_runtime_work.c — the runtime's MPI-free parts: the planner as its
 * thread runs it, and the work messages it sends.
 *
 * - Every sample of a global batch reaches exactly one micro-batch of one
 *   replica's work (checked against the sampler's batch, independently of
 *   the planner's bookkeeping), each micro-batch's samples fit its planned
 *   shape (the length rule recomputed here), and the messages unpack into
 *   validated plans.
 * - pack -> unpack is lossless; a truncated message, a flipped byte in the
 *   plan, a bad magic, an out-of-range sample id or row are refused with a
 *   clear error (never a crash: this runs under the sanitizers).
 * - A JSONL source's work carries the samples' tokens, read on the planner
 *   thread, equal to the corpus's (test_work_tokens). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dynapipe/corpus.h"
#include "dynapipe/cost.h"
#include "dynapipe/model_config.h"
#include "dynapipe/pipeline.h"
#include "model/threads.h"
#include "runtime/planner.h"
#include "runtime/source.h"
#include "runtime/work.h"

static dyn_train_options options(dyn_model_kind kind, dyn_batching method, int32_t schedule, int dp)
{
    dyn_train_options o;
    dyn_train_options_default(&o);
    dyn_error err;
    assert_int_equal(dyn_model_config_preset(kind == DYN_MODEL_GPT ? "gpt-tiny" : "t5-tiny", &o.model, &err), DYN_OK);
    o.model.n_layers = 4;
    if (kind == DYN_MODEL_T5) o.model.n_dec_layers = 4;
    o.model.max_seqlen = 256;
    assert_non_null(dyn_machine_builtin("cpu"));
    o.machine = *dyn_machine_builtin("cpu");
    o.plan.method = method;
    o.plan.max_seqlen = 256;
    o.plan.stages = 2;
    o.plan.dp = dp;
    o.schedule = schedule;
    o.n_samples = 800;
    o.global_batch_tokens = 4096;
    o.steps = 3;
    return o;
}

static void check_iteration(const dyn_train_options *o, rt_source *src, rt_planner *p, dyn_sampler *smp, int64_t k)
{
    dyn_error err;
    rt_planned *pl = NULL;
    if (rt_planner_plan_one(p, k, &pl, &err) != DYN_OK) fail_msg("plan %lld: %s", (long long)k, err.msg);
    const dyn_sample *batch;
    int32_t n;
    assert_int_equal(dyn_sampler_next(smp, &batch, &n, &err), DYN_OK);
    const dyn_dataset *ds = rt_source_lengths(src);
    int *seen = calloc((size_t)ds->n, sizeof(int));
    assert_non_null(seen);
    int64_t tgt = 0;
    for (int32_t i = 0; i < n; i++) tgt += batch[i].target_len;
    assert_int_equal(pl->dp, o->plan.dp);
    /* the batch's ideal bound, from the sampler's batch and a cost model of our own */
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&o->model, &o->machine, &err);
    assert_non_null(cm);
    dyn_ideal_bound ideal;
    assert_int_equal(dyn_ideal_bound_of(cm, batch, n, o->plan.stages, o->plan.dp, &ideal, &err), DYN_OK);
    dyn_cost_model_free(cm);
    assert_true(ideal.bound_ms > 0);
    int32_t total = 0;
    for (int32_t r = 0; r < pl->dp; r++) {
        dyn_rt_work w;
        if (dyn_rt_work_unpack(pl->msg[r], pl->len[r], ds->n, &w, &err) != DYN_OK) fail_msg("unpack: %s", err.msg);
        assert_int_equal(w.iteration, k);
        assert_int_equal(w.replica, r);
        assert_int_equal(w.global_target_tokens, tgt);
        /* every replica carries the whole batch's bound, which no plan beats */
        assert_true(fabs(w.ideal_ms - ideal.bound_ms) <= 1e-9 * ideal.bound_ms);
        assert_true(fabs(w.ideal_compute_ms - ideal.compute_ms) <= 1e-9 * ideal.bound_ms);
        if (w.n_mb > 0) assert_true(w.ideal_ms <= w.predicted_ms * (1 + 1e-9));
        for (int32_t j = 0; j < w.n_mb; j++) {
            const dyn_mb_shape *sh = &w.plan.mb_shape[j];
            for (int32_t q = w.mb_first[j]; q < w.mb_first[j + 1]; q++) {
                const dyn_sample *s = &ds->samples[w.samples[q].id];
                seen[s->id]++;
                total++;
                /* the sample fits where the plan put it */
                int32_t len = o->model.kind == DYN_MODEL_GPT ? s->input_len + s->target_len : s->input_len;
                assert_true(w.samples[q].offset + len <= sh->enc_len);
                if (o->model.kind == DYN_MODEL_T5) assert_true(w.samples[q].dec_offset + s->target_len <= sh->dec_len);
            }
        }
        dyn_rt_work_free(&w);
    }
    assert_int_equal(total, n);
    for (int32_t i = 0; i < n; i++) assert_int_equal(seen[batch[i].id], 1);
    free(seen);
    rt_planned_free(pl);
}

static void run_planner(dyn_model_kind kind, dyn_batching method, int32_t schedule, int dp)
{
    dyn_train_options o = options(kind, method, schedule, dp);
    dyn_error err;
    rt_source *src = rt_source_open(&o, &err);
    assert_non_null(src);
    rt_planner *p = rt_planner_create(&o, rt_source_lengths(src), &err);
    if (p == NULL) fail_msg("%s", err.msg);
    dyn_sampler *smp = dyn_sampler_create(rt_source_lengths(src), o.global_batch_tokens, &err);
    for (int64_t k = 0; k < o.steps; k++) check_iteration(&o, src, p, smp, k);
    dyn_sampler_free(smp);
    rt_planner_free(p);
    rt_source_free(src);
}

static void test_planner_covers_batch(void **state)
{
    (void)state;
    run_planner(DYN_MODEL_GPT, DYN_BATCH_DYNAPIPE, DYN_SCHEDULE_AUTO, 1);
    run_planner(DYN_MODEL_GPT, DYN_BATCH_PACKING_DOCMASK, DYN_SCHEDULE_1F1B, 2);
    run_planner(DYN_MODEL_T5, DYN_BATCH_DYNAPIPE, DYN_SCHEDULE_ZB, 2);
    run_planner(DYN_MODEL_T5, DYN_BATCH_PACKING, DYN_SCHEDULE_CYCLIC, 1);
    run_planner(DYN_MODEL_GPT, DYN_BATCH_PADDING, DYN_SCHEDULE_AUTO, 1);
}

/* The thread hands out the same plans as planning inline, in order. */
static void test_planner_thread(void **state)
{
    (void)state;
    dyn_train_options o = options(DYN_MODEL_GPT, DYN_BATCH_DYNAPIPE, DYN_SCHEDULE_AUTO, 1);
    o.plan_ahead = 2;
    dyn_error err;
    rt_source *src = rt_source_open(&o, &err);
    rt_planner *a = rt_planner_create(&o, rt_source_lengths(src), &err), *b = rt_planner_create(&o, rt_source_lengths(src), &err);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(rt_planner_start(a, &err), DYN_OK);
    for (int64_t k = 0; k < o.steps; k++) {
        rt_planned *x = NULL, *y = NULL;
        assert_int_equal(rt_planner_take(a, k, 1, 30, &x, &err), DYN_OK);
        assert_int_equal(rt_planner_plan_one(b, k, &y, &err), DYN_OK);
        assert_int_equal(x->len[0], y->len[0]);
        /* plan_ms differs between the two; everything else must not */
        dyn_rt_work wx, wy;
        assert_int_equal(dyn_rt_work_unpack(x->msg[0], x->len[0], 800, &wx, &err), DYN_OK);
        assert_int_equal(dyn_rt_work_unpack(y->msg[0], y->len[0], 800, &wy, &err), DYN_OK);
        assert_int_equal(wx.n_samples, wy.n_samples);
        assert_memory_equal(wx.samples, wy.samples, (size_t)wx.n_samples * sizeof(dyn_rt_sample));
        assert_int_equal(wx.plan.ranks[0].n_instrs, wy.plan.ranks[0].n_instrs);
        dyn_rt_work_free(&wx);
        dyn_rt_work_free(&wy);
        rt_planned_free(x);
        rt_planned_free(y);
    }
    rt_planned *z = NULL;
    assert_int_not_equal(rt_planner_take(a, o.steps, 1, 5, &z, &err), DYN_OK); /* no more: an error, not a hang */
    rt_planner_free(a);
    rt_planner_free(b);
    rt_source_free(src);
}

/* Sample ids of replica 0's work, sorted. */
static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int32_t *work_ids(const rt_planned *pl, int32_t *n)
{
    dyn_rt_work w;
    dyn_error err;
    assert_int_equal(dyn_rt_work_unpack(pl->msg[0], pl->len[0], 800, &w, &err), DYN_OK);
    int32_t *ids = calloc((size_t)w.n_samples + 1, sizeof *ids);
    assert_non_null(ids);
    for (int32_t i = 0; i < w.n_samples; i++) ids[i] = w.samples[i].id;
    qsort(ids, (size_t)w.n_samples, sizeof *ids, cmp_i32);
    *n = w.n_samples;
    dyn_rt_work_free(&w);
    return ids;
}

/* A calibrating run of `steps` iterations planning 3 ahead. */
static dyn_train_options calib_options(int64_t steps)
{
    dyn_train_options o = options(DYN_MODEL_GPT, DYN_BATCH_DYNAPIPE, DYN_SCHEDULE_1F1B, 1);
    o.plan_ahead = 3;
    o.steps = steps;
    o.calibrate = 1;
    return o;
}

/* Start p's thread and wait (up to 5 s) until it has 3 batches queued:
 * iterations 0, 1, 2, planned with factor 1. */
static void start_queued(rt_planner *p)
{
    dyn_error err;
    assert_int_equal(rt_planner_start(p, &err), DYN_OK);
    for (int i = 0; i < 500 && rt_planner_queued(p) < 3; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(rt_planner_queued(p), 3);
}

/* A correction posted while batches wait in the queue reaches them: they
 * are planned again with the new factors (rt_planner_carried says so),
 * with the same samples and sampler positions as planning inline without
 * any correction, and the iterations still come in order. */
static void test_planner_replans_queue(void **state)
{
    (void)state;
    dyn_train_options o = calib_options(5);
    dyn_error err;
    rt_source *src = rt_source_open(&o, &err);
    rt_planner *a = rt_planner_create(&o, rt_source_lengths(src), &err), *b = rt_planner_create(&o, rt_source_lengths(src), &err);
    assert_true(a && b);
    start_queued(a);
    double f[2 * RT_CALIB_DIRS] = {2.0, 1.5, 1.0, 1.25, 1.0, 1.0}, carried[2 * RT_CALIB_DIRS], opt[2];
    rt_planner_set_time_scale(a, f);
    for (int64_t k = 0; k < o.steps; k++) {
        rt_planned *x = NULL, *y = NULL;
        assert_int_equal(rt_planner_take(a, k, 1, 30, &x, &err), DYN_OK);
        assert_int_equal(x->iteration, k);
        assert_int_equal(rt_planner_plan_one(b, k, &y, &err), DYN_OK);
        assert_true(rt_planner_carried(a, k, carried, opt));
        for (int i = 0; i < 2 * RT_CALIB_DIRS; i++)
            if (carried[i] != f[i]) fail_msg("iteration %lld factor %d: %g, not %g (replanned %lld)", (long long)k, i, carried[i], f[i], (long long)rt_planner_replanned(a));
        assert_int_equal(x->sampler_pos, y->sampler_pos);
        int32_t nx, ny;
        int32_t *ix = work_ids(x, &nx), *iy = work_ids(y, &ny);
        assert_int_equal(nx, ny);
        assert_memory_equal(ix, iy, (size_t)nx * sizeof *ix);
        free(ix), free(iy);
        rt_planned_free(x);
        rt_planned_free(y);
    }
    assert_int_equal(rt_planner_replanned(a), 3);
    rt_planner_free(a);
    rt_planner_free(b);
    rt_source_free(src);
}

/* A correction posted after the thread planned the last iteration still
 * reaches the batches waiting in the queue (the last plan_ahead iterations
 * of a run). */
static void test_planner_replans_last(void **state)
{
    (void)state;
    dyn_train_options o = calib_options(3);
    dyn_error err;
    rt_source *src = rt_source_open(&o, &err);
    rt_planner *a = rt_planner_create(&o, rt_source_lengths(src), &err);
    assert_non_null(a);
    start_queued(a); /* every iteration planned */
    double f[2 * RT_CALIB_DIRS] = {1.5, 1.5, 1.0, 1.5, 1.5, 1.0}, carried[2 * RT_CALIB_DIRS], opt[2];
    rt_planner_set_time_scale(a, f);
    for (int64_t k = 0; k < o.steps; k++) {
        rt_planned *x = NULL;
        assert_int_equal(rt_planner_take(a, k, 1, 30, &x, &err), DYN_OK);
        assert_true(rt_planner_carried(a, k, carried, opt));
        assert_memory_equal(carried, f, sizeof f);
        rt_planned_free(x);
    }
    assert_int_equal(rt_planner_replanned(a), 3);
    rt_planned *z = NULL;
    assert_int_equal(rt_planner_take(a, o.steps, 1, 30, &z, &err), DYN_ERR_INTERNAL); /* at once, not after 30 s */
    assert_non_null(strstr(err.msg, "past the last step"));
    rt_planner_free(a);
    rt_source_free(src);
}

static void test_work_corrupt(void **state)
{
    (void)state;
    dyn_train_options o = options(DYN_MODEL_GPT, DYN_BATCH_DYNAPIPE, DYN_SCHEDULE_1F1B, 1);
    dyn_error err;
    rt_source *src = rt_source_open(&o, &err);
    rt_planner *p = rt_planner_create(&o, rt_source_lengths(src), &err);
    rt_planned *pl = NULL;
    assert_int_equal(rt_planner_plan_one(p, 0, &pl, &err), DYN_OK);
    size_t len = pl->len[0];
    uint8_t *buf = malloc(len);
    dyn_rt_work w;
    /* truncated at every eighth length */
    for (size_t cut = 0; cut < len; cut += len / 8 + 1) {
        assert_int_not_equal(dyn_rt_work_unpack(pl->msg[0], cut, 800, &w, &err), DYN_OK);
        dyn_rt_work_free(&w);
    }
    /* bad magic */
    memcpy(buf, pl->msg[0], len);
    buf[0] ^= 1;
    assert_int_equal(dyn_rt_work_unpack(buf, len, 800, &w, &err), DYN_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "magic"));
    dyn_rt_work_free(&w);
    /* a message of version 1 (no ideal bound): refused by its version */
    memcpy(buf, pl->msg[0], len);
    buf[4] = 1;
    assert_int_equal(dyn_rt_work_unpack(buf, len, 800, &w, &err), DYN_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "version 1"));
    dyn_rt_work_free(&w);
    /* a NaN ideal bound (after magic, version, iteration, replica, method,
     * two token counts, plan_ms, predicted_ms: byte 56) */
    memcpy(buf, pl->msg[0], len);
    double nan_ms = NAN;
    memcpy(buf + 56, &nan_ms, sizeof nan_ms);
    assert_int_equal(dyn_rt_work_unpack(buf, len, 800, &w, &err), DYN_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "ideal bound"));
    dyn_rt_work_free(&w);
    /* a byte of the plan (its CRC catches it) */
    memcpy(buf, pl->msg[0], len);
    buf[len - 5] ^= 0x40;
    assert_int_not_equal(dyn_rt_work_unpack(buf, len, 800, &w, &err), DYN_OK);
    dyn_rt_work_free(&w);
    /* sample ids beyond the dataset */
    assert_int_equal(dyn_rt_work_unpack(pl->msg[0], len, 3, &w, &err), DYN_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "out of range"));
    dyn_rt_work_free(&w);
    /* round trip */
    assert_int_equal(dyn_rt_work_unpack(pl->msg[0], len, 800, &w, &err), DYN_OK);
    uint8_t *again = NULL;
    size_t again_len = 0;
    assert_int_equal(dyn_rt_work_pack(&w, &again, &again_len, &err), DYN_OK);
    assert_int_equal(again_len, len);
    assert_memory_equal(again, pl->msg[0], len);
    free(again);
    dyn_rt_work_free(&w);
    free(buf);
    rt_planned_free(pl);
    rt_planner_free(p);
    rt_source_free(src);
}

/* A JSONL source: the planner thread sends every sample's tokens with the
 * work (the ranks do not parse or encode the file), and they are the
 * corpus's tokens of that sample, read here through a handle of our own;
 * the built-in dataset's work carries none. A token count past the bytes
 * left is refused; pack -> unpack is lossless with tokens too. */
static void test_work_tokens(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "/tmp/dyn_test_work_%ld.jsonl", (long)getpid());
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    for (int i = 0; i < 300; i++) fprintf(fp, "{\"input\": \"question %d %.*s\", \"target\": \"a%d\"}\n", i, i % 40,
                                         "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz", i % 13);
    assert_int_equal(fclose(fp), 0);
    dyn_train_options o = options(DYN_MODEL_GPT, DYN_BATCH_DYNAPIPE, DYN_SCHEDULE_1F1B, 2);
    o.data_spec = path;
    o.global_batch_tokens = 2048;
    dyn_error err;
    rt_source *src = rt_source_open(&o, &err);
    if (src == NULL) fail_msg("%s", err.msg);
    rt_planner *p = rt_planner_create(&o, rt_source_lengths(src), &err);
    if (p == NULL) fail_msg("%s", err.msg);
    dyn_corpus_options co;
    dyn_corpus_options_default(&co);
    co.max_seqlen = o.model.max_seqlen;
    co.vocab = o.model.vocab;
    dyn_corpus *c = dyn_corpus_open(path, &co, &err);
    assert_non_null(c);
    rt_planned *pl = NULL;
    assert_int_equal(rt_planner_plan_one(p, 0, &pl, &err), DYN_OK);
    int64_t checked = 0;
    for (int32_t r = 0; r < pl->dp; r++) {
        dyn_rt_work w;
        assert_int_equal(dyn_rt_work_unpack(pl->msg[r], pl->len[r], 300, &w, &err), DYN_OK);
        if (w.n_mb > 0) assert_non_null(w.tokens);
        int64_t at = 0;
        for (int32_t k = 0; k < w.n_samples; k++) {
            dyn_corpus_sample cs;
            assert_int_equal(dyn_corpus_read(c, w.samples[k].id, &cs, &err), DYN_OK);
            assert_true(at + cs.input_len + cs.target_len <= w.n_tokens);
            assert_memory_equal(w.tokens + at, cs.input, (size_t)cs.input_len * sizeof(int32_t));
            assert_memory_equal(w.tokens + at + cs.input_len, cs.target, (size_t)cs.target_len * sizeof(int32_t));
            at += cs.input_len + cs.target_len;
        }
        assert_int_equal(at, w.n_tokens);
        checked += at;
        if (r == 0) {
            uint8_t *again = NULL;
            size_t again_len = 0;
            assert_int_equal(dyn_rt_work_pack(&w, &again, &again_len, &err), DYN_OK);
            assert_int_equal(again_len, pl->len[0]);
            assert_memory_equal(again, pl->msg[0], again_len);
            free(again);
        }
        dyn_rt_work_free(&w);
    }
    assert_true(checked > 0);
    /* the token count of replica 0 made larger than the message holds; its
     * place by work.h's layout: 88 header bytes, the micro-batch counts, the
     * sample table, the costs, the allocations and the useful fractions */
    dyn_rt_work w;
    assert_int_equal(dyn_rt_work_unpack(pl->msg[0], pl->len[0], 300, &w, &err), DYN_OK);
    size_t at_n = 88 + 4 * (size_t)w.n_mb + 16 * (size_t)w.n_samples + 16 * (size_t)w.n_mb * (size_t)w.n_stages +
                  8 * (size_t)w.n_ranks + 8 * (size_t)w.n_mb;
    int64_t was;
    memcpy(&was, pl->msg[0] + at_n, 8);
    assert_int_equal(was, w.n_tokens);
    dyn_rt_work_free(&w);
    uint8_t *buf = malloc(pl->len[0]);
    assert_non_null(buf);
    memcpy(buf, pl->msg[0], pl->len[0]);
    int64_t huge = (int64_t)pl->len[0];
    memcpy(buf + at_n, &huge, 8);
    assert_int_equal(dyn_rt_work_unpack(buf, pl->len[0], 300, &w, &err), DYN_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "tokens where"));
    dyn_rt_work_free(&w);
    free(buf);
    rt_planned_free(pl);
    rt_planner_free(p);
    dyn_corpus_free(c);
    rt_source_free(src);
    remove(path);
    /* the built-in dataset: the ranks read it, no tokens travel */
    o = options(DYN_MODEL_GPT, DYN_BATCH_DYNAPIPE, DYN_SCHEDULE_1F1B, 1);
    src = rt_source_open(&o, &err);
    p = rt_planner_create(&o, rt_source_lengths(src), &err);
    assert_int_equal(rt_planner_plan_one(p, 0, &pl, &err), DYN_OK);
    assert_int_equal(dyn_rt_work_unpack(pl->msg[0], pl->len[0], 800, &w, &err), DYN_OK);
    assert_int_equal(w.n_tokens, 0);
    assert_null(w.tokens);
    dyn_rt_work_free(&w);
    rt_planned_free(pl);
    rt_planner_free(p);
    rt_source_free(src);
}

int main(void)
{
    dyn_threads_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_planner_covers_batch),
        cmocka_unit_test(test_planner_thread),
        cmocka_unit_test(test_planner_replans_queue),
        cmocka_unit_test(test_planner_replans_last),
        cmocka_unit_test(test_work_corrupt),
        cmocka_unit_test(test_work_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
