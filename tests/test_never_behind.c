/* test_never_behind.c — dynapipe is never behind its candidates
 * (dyn_pipeline_plan with enable_packing, the default), and the ideal bound
 * (dyn_ideal_bound_of) against a hand computation.
 *
 *   - A batch where a baseline's plan (padding or token) is faster than
 *     everything dynapipe chose among before (the DP's plan, the planner's
 *     pick of DP or document-masked packing, packing-docmask with 1, 2, 4,
 *     8 rows): the pipeline keeps the baseline's plan, names it, and is no
 *     slower than any baseline tuned on the batch (plain packing included).
 *   - A batch where the document-masked rows win: the plan kept has
 *     document-masked attention (its shapes count each sample's own pairs),
 *     and it beats plain packing at every row count; the planner alone
 *     picks the same kind of rows by objective.
 *   - The bound of a GPT batch from FLOPs counted by hand; the small-size
 *     terms (gemm_n_half, per-layer overhead) are not charged; a pipeline
 *     result's efficiency is bound / iteration and at most 1.
 * Each configuration was found by comparing the candidates and is pinned
 * here (built-in FLAN-like lengths, seed 3): the assertions say why it
 * matters, not just what came out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/data.h"
#include "dynapipe/model_config.h"
#include "dynapipe/pipeline.h"

typedef struct fixture {
    dyn_cost_model *cm;
    dyn_dataset ds;
    dyn_sampler *smp;
    const dyn_sample *batch; /* the chosen global batch */
    int32_t n;
    int32_t L;
} fixture;

/* Global batch `which` (0-based) of `tokens` tokens of the built-in lengths
 * for preset on the "cpu" machine at max length L. */
static void fixture_open(fixture *f, const char *preset, int32_t L, int64_t tokens, int which)
{
    dyn_error err;
    dyn_model_config cfg;
    dyn_machine m;
    assert_int_equal(dyn_model_config_preset(preset, &cfg, &err), DYN_OK);
    cfg.max_seqlen = L;
    assert_int_equal(dyn_machine_resolve("cpu", &m, &err), DYN_OK);
    f->cm = dyn_cost_model_create_analytic(&cfg, &m, &err);
    assert_non_null(f->cm);
    assert_int_equal(dyn_dataset_synthetic_flan(3, 4000, L, cfg.kind, &f->ds, &err), DYN_OK);
    f->smp = dyn_sampler_create(&f->ds, tokens, &err);
    assert_non_null(f->smp);
    for (int b = 0; b <= which; b++) assert_int_equal(dyn_sampler_next(f->smp, &f->batch, &f->n, &err), DYN_OK);
    assert_true(f->n > 0);
    f->L = L;
}

static void fixture_close(fixture *f)
{
    dyn_sampler_free(f->smp);
    dyn_dataset_free(&f->ds);
    dyn_cost_model_free(f->cm);
}

static void options(const fixture *f, dyn_plan_options *o, dyn_batching method, int32_t S)
{
    dyn_plan_options_default(o);
    o->method = method;
    o->stages = S;
    o->max_seqlen = f->L;
}

static double slowest(const dyn_pipeline_result *r)
{
    double ms = 0.0;
    for (int32_t k = 0; k < r->n_replicas; k++)
        if (r->replicas[k].makespan_ms > ms) ms = r->replicas[k].makespan_ms;
    return ms;
}

/* The batch through a fresh planner + pipeline (schedule auto) with options
 * o; the result is returned (free it) or, with out NULL, only its time. */
static double plan_ms(const fixture *f, const dyn_plan_options *o, dyn_pipeline_result *out)
{
    dyn_error err;
    dyn_planner *pl = dyn_planner_create(f->cm, o, &err);
    assert_non_null(pl);
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    dyn_pipeline *pp = dyn_pipeline_create(pl, &po, &err);
    assert_non_null(pp);
    dyn_pipeline_result r;
    dyn_status st = dyn_pipeline_plan(pp, f->batch, f->n, &r, &err);
    double ms = INFINITY;
    if (st == DYN_OK) {
        ms = slowest(&r);
        /* every sample exactly once */
        int32_t *seen = calloc((size_t)f->n, sizeof *seen);
        assert_non_null(seen);
        assert_int_equal(r.batch.n_samples, f->n);
        for (int32_t i = 0; i < f->n; i++) seen[r.batch.sample_ids[i] - f->batch[0].id]++;
        for (int32_t i = 0; i < f->n; i++) assert_int_equal(seen[i], 1);
        free(seen);
        if (out) *out = r;
        else dyn_pipeline_result_free(&r);
    } else {
        assert_int_equal(st, DYN_ERR_INFEASIBLE);
    }
    dyn_pipeline_free(pp);
    dyn_planner_free(pl);
    return ms;
}

/* What dynapipe kept before its baselines became candidates: the fastest
 * of the planner's pick (DP or document-masked packing by objective), the
 * DP alone, and packing-docmask with 1, 2, 4, 8 rows. Each is scheduled by
 * a pipeline without candidates (a baseline planner, or dynapipe with
 * enable_packing 0), the planner's pick through dyn_pipeline_plan_replica. */
static double old_behaviour_ms(const fixture *f, int32_t S)
{
    dyn_plan_options o;
    options(f, &o, DYN_BATCH_DYNAPIPE, S);
    o.enable_packing = 0;
    double best = plan_ms(f, &o, NULL); /* the DP alone */
    for (int32_t rows = 1; rows <= 8; rows *= 2) {
        dyn_plan_options q;
        options(f, &q, DYN_BATCH_PACKING_DOCMASK, S);
        q.pack_rows = rows;
        double ms = plan_ms(f, &q, NULL);
        if (ms < best) best = ms;
    }
    /* the planner's own pick, scheduled as is */
    dyn_error err;
    dyn_plan_options p;
    options(f, &p, DYN_BATCH_DYNAPIPE, S);
    dyn_batch_plan bp;
    assert_int_equal(dyn_plan_batch_once(f->cm, &p, f->batch, f->n, &bp, &err), DYN_OK);
    dyn_planner *pl = dyn_planner_create(f->cm, &o, &err); /* enable_packing 0: no candidates */
    assert_non_null(pl);
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    dyn_pipeline *pp = dyn_pipeline_create(pl, &po, &err);
    assert_non_null(pp);
    dyn_replica_plan rp;
    assert_int_equal(dyn_pipeline_plan_replica(pp, &bp, 0, DYN_SCHEDULE_AUTO, &rp, &err), DYN_OK);
    if (rp.makespan_ms < best) best = rp.makespan_ms;
    dyn_replica_plan_free(&rp);
    dyn_pipeline_free(pp);
    dyn_planner_free(pl);
    dyn_batch_plan_free(&bp);
    return best;
}

/* Each baseline tuned on this batch alone (dyn_pipeline_tune) and planned
 * at its value: the chosen plan must be at least as fast as every one. */
static void check_no_slower_than_tuned(const fixture *f, int32_t S, double chosen_ms)
{
    const dyn_batching base[] = {DYN_BATCH_PADDING, DYN_BATCH_PACKING, DYN_BATCH_PACKING_DOCMASK, DYN_BATCH_TOKEN};
    for (size_t b = 0; b < sizeof base / sizeof base[0]; b++) {
        dyn_plan_options o;
        options(f, &o, base[b], S);
        dyn_pipeline_options po;
        dyn_pipeline_options_default(&po);
        dyn_tune_result t;
        dyn_error err;
        const dyn_sample *batches[1] = {f->batch};
        int32_t counts[1] = {f->n};
        assert_int_equal(dyn_pipeline_tune(f->cm, &o, &po, batches, counts, 1, &t, &err), DYN_OK);
        dyn_tune_knob_set(&o, t.value);
        double ms = plan_ms(f, &o, NULL);
        assert_true(fabs(ms - t.iter_ms) <= 1e-9 * ms); /* the tuner's figure, planned again */
        assert_true(chosen_ms <= ms * (1 + 1e-12));
    }
}

/* A baseline's plan beats every candidate of the old selection: the new
 * one keeps it, says so, and is no slower than any tuned baseline. */
static void check_baseline_wins(const char *preset, int32_t L, int64_t tokens, int which, int32_t S)
{
    fixture f;
    fixture_open(&f, preset, L, tokens, which);
    double old = old_behaviour_ms(&f, S);
    dyn_plan_options o;
    options(&f, &o, DYN_BATCH_DYNAPIPE, S);
    assert_int_equal(o.enable_packing, 1); /* the default */
    dyn_pipeline_result r;
    double ms = plan_ms(&f, &o, &r);
    /* the configuration's point: a baseline, strictly faster than the old choice */
    assert_true(r.batch.method == DYN_BATCH_PADDING || r.batch.method == DYN_BATCH_TOKEN);
    assert_true(r.batch.knob > 0);
    assert_true(ms < old * (1 - 1e-6));
    /* it is that baseline's plan at that knob, planned on its own */
    dyn_plan_options q;
    options(&f, &q, (dyn_batching)r.batch.method, S);
    dyn_tune_knob_set(&q, r.batch.knob);
    assert_true(fabs(plan_ms(&f, &q, NULL) - ms) <= 1e-9 * ms);
    check_no_slower_than_tuned(&f, S, ms);
    dyn_pipeline_result_free(&r);
    /* without the candidates: the DP's plan */
    o.enable_packing = 0;
    plan_ms(&f, &o, &r);
    assert_int_equal(r.batch.method, DYN_BATCH_DYNAPIPE);
    assert_true(slowest(&r) >= old * (1 - 1e-12));
    dyn_pipeline_result_free(&r);
    fixture_close(&f);
}

static void test_padding_wins_gpt(void **state)
{
    (void)state;
    check_baseline_wins("gpt-tiny", 2048, 16384, 3, 2);
}

static void test_token_wins_t5(void **state)
{
    (void)state;
    check_baseline_wins("t5-tiny", 2048, 16384, 0, 4);
}

/* Every micro-batch of bp has document-masked attention: its shape counts
 * exactly each of its samples' own (query, key) pairs, fewer than its dense
 * rows x length^2. */
static void check_docmask_shapes(const fixture *f, const dyn_batch_plan *bp)
{
    for (int32_t m = 0; m < bp->n_microbatches; m++) {
        const dyn_plan_microbatch *mb = &bp->mbs[m];
        int64_t pairs = 0;
        for (int32_t k = mb->first; k < mb->first + mb->n_samples; k++) {
            const dyn_sample *s = &f->batch[bp->sample_ids[k] - f->batch[0].id];
            int64_t a = (int64_t)s->input_len + s->target_len; /* GPT: the whole sequence */
            pairs += a * a;
        }
        assert_true(mb->shape.enc_attn > 0);
        assert_true(mb->shape.enc_attn == pairs);
        if (mb->n_samples > 1)
            assert_true(mb->shape.enc_attn < (int64_t)mb->shape.rows * mb->shape.enc_len * mb->shape.enc_len);
    }
}

/* The document-masked rows win over the DP and over plain packing (the
 * same rows attending across documents) at every row count. On this batch
 * the planner's objective prefers the DP's plan, so the rows come from the
 * pipeline's packing-docmask candidates. */
static void test_docmask_rows_win_gpt(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, "gpt-tiny", 2048, 32768, 4);
    const int32_t S = 2;
    dyn_plan_options o;
    options(&f, &o, DYN_BATCH_DYNAPIPE, S);
    dyn_pipeline_result r;
    double ms = plan_ms(&f, &o, &r);
    assert_int_equal(r.batch.method, DYN_BATCH_PACKING_DOCMASK);
    check_docmask_shapes(&f, &r.batch);
    for (int32_t rows = 1; rows <= 8; rows *= 2) {
        dyn_plan_options q;
        options(&f, &q, DYN_BATCH_PACKING, S);
        q.pack_rows = rows;
        assert_true(ms < plan_ms(&f, &q, NULL) * (1 - 1e-6));
    }
    dyn_plan_options dp;
    options(&f, &dp, DYN_BATCH_DYNAPIPE, S);
    dp.enable_packing = 0;
    assert_true(ms < plan_ms(&f, &dp, NULL) * (1 - 1e-6));
    check_no_slower_than_tuned(&f, S, ms);
    dyn_pipeline_result_free(&r);
    dyn_error err;
    dyn_batch_plan bp;
    assert_int_equal(dyn_plan_batch_once(f.cm, &o, f.batch, f.n, &bp, &err), DYN_OK);
    assert_int_equal(bp.method, DYN_BATCH_DYNAPIPE); /* the planner alone would not have */
    dyn_batch_plan_free(&bp);
    fixture_close(&f);
}

/* The planner alone (no simulation) keeps document-masked rows when their
 * DP objective is lower, and dyn_planner_plan_as plans them with their
 * masks (plain packing without). */
static void test_planner_docmask_rows_gpt(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, "gpt-tiny", 2048, 16384, 1);
    dyn_plan_options o;
    options(&f, &o, DYN_BATCH_DYNAPIPE, 2);
    dyn_error err;
    dyn_batch_plan bp;
    assert_int_equal(dyn_plan_batch_once(f.cm, &o, f.batch, f.n, &bp, &err), DYN_OK);
    assert_int_equal(bp.method, DYN_BATCH_PACKING_DOCMASK);
    check_docmask_shapes(&f, &bp);
    double packed_obj = bp.objective_ms;
    dyn_batch_plan_free(&bp);
    o.enable_packing = 0;
    assert_int_equal(dyn_plan_batch_once(f.cm, &o, f.batch, f.n, &bp, &err), DYN_OK);
    assert_int_equal(bp.method, DYN_BATCH_DYNAPIPE);
    assert_true(packed_obj < bp.objective_ms);
    dyn_batch_plan_free(&bp);
    o.enable_packing = 1;
    dyn_planner *pl = dyn_planner_create(f.cm, &o, &err);
    assert_non_null(pl);
    assert_int_equal(dyn_planner_plan_as(pl, DYN_BATCH_PACKING_DOCMASK, 2, f.batch, f.n, &bp, &err), DYN_OK);
    assert_int_equal(bp.method, DYN_BATCH_PACKING_DOCMASK);
    assert_int_equal(bp.knob, 2);
    check_docmask_shapes(&f, &bp);
    dyn_batch_plan_free(&bp);
    /* plain packing through the same call attends over whole rows */
    assert_int_equal(dyn_planner_plan_as(pl, DYN_BATCH_PACKING, 2, f.batch, f.n, &bp, &err), DYN_OK);
    for (int32_t m = 0; m < bp.n_microbatches; m++) assert_true(bp.mbs[m].shape.enc_attn == 0);
    dyn_batch_plan_free(&bp);
    assert_int_equal(dyn_planner_plan_as(pl, (dyn_batching)7, 0, f.batch, f.n, &bp, &err), DYN_ERR_INVALID_ARG);
    dyn_planner_free(pl);
    fixture_close(&f);
}

/* ---- the ideal bound ---------------------------------------------------- */

/* A small GPT on a machine whose memory traffic is free (so only FLOPs
 * count) but whose matrix products pay 64 extra rows and whose layers pay a
 * fixed overhead: the bound must charge neither. */
static dyn_cost_model *hand_model(double mem_gbps)
{
    dyn_model_config c = {.kind = DYN_MODEL_GPT, .n_layers = 3, .n_dec_layers = 0, .hidden = 64, .heads = 2,
                          .head_dim = 32, .ffn = 256, .vocab = 100, .max_seqlen = 256};
    dyn_machine m;
    memset(&m, 0, sizeof m);
    strcpy(m.name, "hand");
    m.matmul_gflops = 1000.0; /* 1e9 FLOP per ms */
    m.attn_gflops = 500.0;    /* 5e8 FLOP per ms */
    m.mem_gbps = mem_gbps;
    m.bytes_per_elem = 4;
    m.device_memory_mb = 1e6;
    m.link_latency_ms = 0.001;
    m.link_gbps = 10.0;
    m.dp_link_gbps = 10.0;
    m.gemm_n_half = 64.0;
    m.layer_overhead_ms = 0.25;
    dyn_error err;
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&c, &m, &err);
    if (cm == NULL) fail_msg("%s", err.msg);
    return cm;
}

/* By hand, for one sequence of s tokens (h 64, a 64, f 256, V 100):
 * a block's products 2 s (3ha + ah + 2hf) FLOPs run three times (forward,
 * input gradient, weight gradient); its causal attention 4 a s^2 / 2 FLOPs
 * runs three times (forward once, backward twice); the head's 2 s h V
 * three times. */
static double hand_sample_ms(double s)
{
    const double h = 64, a = 64, f = 256, V = 100, layers = 3;
    double block_mm = 2 * s * (3 * h * a + a * h + 2 * h * f);
    double block_attn = 4 * a * s * s * 0.5;
    double head = 2 * s * h * V;
    return (layers * 3 * block_mm + 3 * head) / 1e9 + layers * 3 * block_attn / 5e8;
}

static void test_ideal_bound_by_hand(void **state)
{
    (void)state;
    dyn_cost_model *cm = hand_model(1e9); /* memory traffic ~free: 1e9 GB/s */
    const dyn_sample s[3] = {{0, 0, 10, 6}, {1, 0, 100, 0}, {2, 0, 200, 56}};
    dyn_error err;
    dyn_ideal_bound b;
    assert_int_equal(dyn_ideal_bound_of(cm, s, 3, 2, 3, &b, &err), DYN_OK);
    double want = (hand_sample_ms(16) + hand_sample_ms(100) + hand_sample_ms(256)) / (2 * 3);
    assert_true(fabs(b.compute_ms - want) <= 1e-6 * want);
    /* the step: 36 bytes per parameter at the memory bandwidth, 1/S of them */
    double params = (double)dyn_model_config_params(dyn_cost_model_config(cm));
    assert_true(fabs(b.step_ms - params / 2 * 36.0 / (1e9 * 1e6)) <= 1e-9 * b.step_ms + 1e-300);
    assert_true(fabs(b.bound_ms - (b.compute_ms + b.step_ms)) <= 1e-12 * b.bound_ms);
    dyn_cost_model_free(cm);

    /* a real bandwidth: the step from it by hand, the compute only gains
     * the memory traffic (so it grows) */
    cm = hand_model(100.0);
    dyn_ideal_bound b2;
    assert_int_equal(dyn_ideal_bound_of(cm, s, 3, 2, 3, &b2, &err), DYN_OK);
    assert_true(fabs(b2.step_ms - params / 2 * 36.0 / (100.0 * 1e6)) <= 1e-9 * b2.step_ms);
    assert_true(b2.compute_ms > b.compute_ms);
    /* linear in the samples, and 1/(S d) */
    dyn_ideal_bound one, all1;
    double sum = 0;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dyn_ideal_bound_of(cm, &s[i], 1, 1, 1, &one, &err), DYN_OK);
        sum += one.compute_ms;
    }
    assert_int_equal(dyn_ideal_bound_of(cm, s, 3, 1, 1, &all1, &err), DYN_OK);
    assert_true(fabs(all1.compute_ms - sum) <= 1e-12 * sum);
    assert_true(fabs(all1.compute_ms / 6 - b2.compute_ms) <= 1e-12 * b2.compute_ms);
    /* bad input */
    assert_int_equal(dyn_ideal_bound_of(cm, s, 3, 0, 1, &one, &err), DYN_ERR_INVALID_ARG);
    const dyn_sample bad = {9, 0, 0, 4};
    assert_int_equal(dyn_ideal_bound_of(cm, &bad, 1, 1, 1, &one, &err), DYN_ERR_INVALID_ARG);
    dyn_cost_model_free(cm);
}

/* A micro-batch's useful fraction by hand (memory traffic free, so every
 * part is hand_sample_ms's): samples of 100 and 256 tokens padded to 2 rows
 * of 256; packed into one row of 356 with dense attention; and with
 * document masks (attention pairs 100^2 + 256^2), which wastes nothing. */
static void test_useful_fraction_by_hand(void **state)
{
    (void)state;
    dyn_cost_model *cm = hand_model(1e9);
    const dyn_sample s[2] = {{1, 0, 100, 0}, {2, 0, 200, 56}};
    dyn_error err;
    double frac;
    double own = hand_sample_ms(100) + hand_sample_ms(256);
    dyn_mb_shape pad = {2, 256, 0, 0, 0, 0};
    assert_int_equal(dyn_mb_useful_fraction(cm, &pad, s, 2, &frac, &err), DYN_OK);
    assert_true(fabs(frac - own / (2 * hand_sample_ms(256))) <= 1e-6);
    dyn_mb_shape pack = {1, 356, 0, 0, 0, 0};
    assert_int_equal(dyn_mb_useful_fraction(cm, &pack, s, 2, &frac, &err), DYN_OK);
    assert_true(fabs(frac - own / hand_sample_ms(356)) <= 1e-6);
    assert_true(frac < 1.0 - 1e-3);
    dyn_mb_shape docmask = {1, 356, 0, 100 * 100 + 256 * 256, 0, 0};
    assert_int_equal(dyn_mb_useful_fraction(cm, &docmask, s, 2, &frac, &err), DYN_OK);
    assert_true(fabs(frac - 1.0) <= 1e-6);
    /* a sample alone in a row of its length */
    dyn_mb_shape exact = {1, 100, 0, 0, 0, 0};
    assert_int_equal(dyn_mb_useful_fraction(cm, &exact, s, 1, &frac, &err), DYN_OK);
    assert_true(fabs(frac - 1.0) <= 1e-6);
    dyn_mb_shape none = {0, 100, 0, 0, 0, 0};
    assert_int_equal(dyn_mb_useful_fraction(cm, &none, s, 1, &frac, &err), DYN_ERR_INVALID_ARG);
    dyn_cost_model_free(cm);
}

/* A pipeline result's efficiency is bound / (slowest makespan + busiest
 * rank's step), at most 1, for dynapipe and every baseline. */
static void test_efficiency_at_most_one(void **state)
{
    (void)state;
    const char *presets[] = {"gpt-tiny", "t5-tiny"};
    for (int p = 0; p < 2; p++) {
        fixture f;
        fixture_open(&f, presets[p], 2048, 16384, 0);
        for (int m = 0; m < DYN_BATCHING_COUNT; m++) {
            dyn_plan_options o;
            options(&f, &o, (dyn_batching)m, 2);
            o.dp = 2;
            if (m == DYN_BATCH_PADDING) o.mb_samples = 2;
            if (m == DYN_BATCH_PACKING || m == DYN_BATCH_PACKING_DOCMASK) o.pack_rows = 1;
            if (m == DYN_BATCH_TOKEN) o.mb_tokens = 4096;
            dyn_pipeline_result r;
            plan_ms(&f, &o, &r);
            dyn_ideal_bound b;
            dyn_error err;
            assert_int_equal(dyn_ideal_bound_of(f.cm, f.batch, f.n, 2, 2, &b, &err), DYN_OK);
            assert_true(fabs(r.ideal.bound_ms - b.bound_ms) <= 1e-12 * b.bound_ms);
            double step = 0;
            for (int32_t k = 0; k < r.n_replicas; k++) {
                double x = dyn_replica_plan_step_ms(f.cm, &r.replicas[k]);
                if (x > step) step = x;
            }
            assert_true(step >= b.step_ms * (1 - 1e-12)); /* the busiest rank holds at least 1/S */
            assert_true(fabs(r.step_ms - step) <= 1e-12 * step);
            assert_true(fabs(r.iteration_ms - (slowest(&r) + step)) <= 1e-12 * r.iteration_ms);
            assert_true(fabs(r.efficiency - b.bound_ms / r.iteration_ms) <= 1e-12);
            assert_true(r.efficiency > 0 && r.efficiency <= 1.0);
            dyn_pipeline_result_free(&r);
        }
        fixture_close(&f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_padding_wins_gpt),
        cmocka_unit_test(test_token_wins_t5),
        cmocka_unit_test(test_docmask_rows_win_gpt),
        cmocka_unit_test(test_planner_docmask_rows_gpt),
        cmocka_unit_test(test_ideal_bound_by_hand),
        cmocka_unit_test(test_useful_fraction_by_hand),
        cmocka_unit_test(test_efficiency_at_most_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
