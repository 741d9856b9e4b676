/* test_plan_stageobj.c — the stage-aware DP objective (plan.h
 * DYN_STAGE_OBJ_BOTTLENECK, src/plan/stage_cost.c):
 *   - the DP with a separate sum-term row (plan_dp_problem.cost) finds the
 *     optimum of (S-1) max t / v + sum c / d, fast and naive solvers
 *     against a brute force over every partition;
 *   - through the planner, on a deliberately imbalanced layer split
 *     (dyn_planner_set_stage_layout), the plan is the best of every split of
 *     the ordered samples into micro-batches, each scored here by an
 *     independent per-stage evaluation (its own sums of per-layer costs);
 *   - the paper's even-split objective is not: on the same instances it
 *     picks splits this evaluation scores worse;
 *   - DYN_STAGE_OBJ_BOTH's pipeline is never slower than EVEN's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/model_config.h" /* defines: dyn_model_config_preset */
#include "dynapipe/pipeline.h"     /* defines: dyn_pipeline_* */
#include "plan/plan_internal.h"    /* defines: plan_dp_*, plan_order_*, struct dyn_planner */
#include "util/rng.h"              /* defines: dyn_rng_* */

static int close_enough(double a, double b)
{
    return fabs(a - b) <= 1e-9 * (fabs(a) > fabs(b) ? fabs(a) : fabs(b)) + 1e-12;
}

/* ---- the DP with a sum-term row ------------------------------------------ */

typedef struct brute_pb {
    const plan_dp_problem *pb;
    double best;
} brute_pb;

static void brute_rec(brute_pb *b, int32_t start, double tmax, double csum)
{
    const plan_dp_problem *pb = b->pb;
    if (start == pb->n) {
        double v = (double)(pb->stages - 1) * tmax / pb->chunks + csum / pb->dp;
        if (v < b->best) b->best = v;
        return;
    }
    for (int32_t end = start + 1; end <= pb->n; end++) {
        int32_t j = end - 1, k = end - start;
        if (k > pb->width[j]) continue;
        double t = pb->time[j][k - 1];
        brute_rec(b, end, t > tmax ? t : tmax, csum + pb->cost[j][k - 1]);
    }
}

static void test_dp_cost_rows_brute_force(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 27);
    enum { NMAX = 11 };
    double trow[NMAX][NMAX], crow[NMAX][NMAX];
    const double *time[NMAX], *cost[NMAX];
    int32_t width[NMAX], run_a[NMAX], run_b[NMAX];
    for (int trial = 0; trial < 2000; trial++) {
        int32_t n = 1 + (int32_t)dyn_rng_below(&rng, NMAX);
        int shared = trial % 3 == 0; /* runs of positions sharing one affine row pair */
        for (int32_t j = 0; j < n; j++) {
            /* as the planner's: a run ending at j + 1 holds one ending at j */
            width[j] = 1 + (int32_t)dyn_rng_below(&rng, (uint64_t)(j == 0 ? 1 : width[j - 1] + 1));
            if (shared && j > 0 && dyn_rng_below(&rng, 3) != 0) {
                time[j] = time[j - 1];
                cost[j] = cost[j - 1];
                continue;
            }
            /* time: the slowest stage; cost: another stage's, at most it,
             * with its own slope (affine when shared) */
            double t0 = 1 + dyn_rng_uniform(&rng) * 10, c0 = t0 * dyn_rng_uniform(&rng);
            double bt = 0.5 + dyn_rng_uniform(&rng) * 3, bc = bt * dyn_rng_uniform(&rng);
            for (int32_t k = 1; k <= NMAX; k++) {
                trow[j][k - 1] = t0 + bt * (k - 1) + (shared ? 0.0 : dyn_rng_uniform(&rng));
                crow[j][k - 1] = c0 + bc * (k - 1);
                if (k > 1 && trow[j][k - 1] < trow[j][k - 2]) trow[j][k - 1] = trow[j][k - 2];
            }
            time[j] = trow[j];
            cost[j] = crow[j];
        }
        plan_dp_problem pb = {n, width, time, 1 + (int32_t)dyn_rng_below(&rng, 8),
                             1 + (int32_t)dyn_rng_below(&rng, 3), 1 + (int32_t)dyn_rng_below(&rng, 4),
                             0, INFINITY, NULL, NULL, NULL, NULL, cost};
        plan_dp_result fast = {.run_len = run_a}, naive = {.run_len = run_b};
        dyn_error err;
        assert_int_equal(plan_dp_solve(&pb, &fast, &err), DYN_OK);
        assert_int_equal(plan_dp_solve_naive(&pb, &naive, &err), DYN_OK);
        brute_pb b = {&pb, INFINITY};
        brute_rec(&b, 0, 0.0, 0.0);
        assert_true(close_enough(fast.objective_ms, b.best));
        assert_true(close_enough(naive.objective_ms, b.best));
        /* the runs score what the solver says */
        double tmax = 0, csum = 0;
        for (int32_t i = 0, pos = 0; i < fast.n_runs; i++) {
            pos += fast.run_len[i];
            double t = time[pos - 1][fast.run_len[i] - 1];
            if (t > tmax) tmax = t;
            csum += cost[pos - 1][fast.run_len[i] - 1];
        }
        assert_true(close_enough(fast.objective_ms, (pb.stages - 1) * tmax / pb.chunks + csum / pb.dp));
    }
}

/* ---- through the planner: an independent per-stage evaluation ------------ */

enum { NS = 9, MAXL = 16 };

/* A layout and the per-stage evaluation of a micro-batch under it. */
typedef struct stage_eval {
    const dyn_cost_model *cm;
    int t5;
    int32_t n_layers;
    int32_t kind[MAXL];
    int32_t first[3]; /* two stages */
    int32_t bneck;    /* the heaviest stage for one max_seqlen row */
} stage_eval;

static double stage_ms(const stage_eval *e, int32_t s, const dyn_mb_shape *sh)
{
    double t = 0.0;
    for (int32_t l = e->first[s]; l < e->first[s + 1]; l++) {
        dyn_layer_cost lc;
        assert_int_equal(dyn_cost_layer(e->cm, (dyn_layer_kind)e->kind[l], sh, DYN_RECOMPUTE_NONE, &lc, NULL), DYN_OK);
        t += lc.fwd_ms + lc.bwd_ms;
    }
    return t;
}

/* Imbalanced on purpose: stage 0 holds all but one transformer block. */
static void layout_make(stage_eval *e, const dyn_cost_model *cm)
{
    const dyn_model_config *cfg = dyn_cost_model_config(cm);
    e->cm = cm;
    e->t5 = cfg->kind == DYN_MODEL_T5;
    int32_t n = 0;
    e->kind[n++] = DYN_LAYER_EMBED;
    for (int32_t i = 0; i < cfg->n_layers; i++) e->kind[n++] = DYN_LAYER_ENCODER;
    if (e->t5) e->kind[n++] = DYN_LAYER_BRIDGE;
    for (int32_t i = 0; e->t5 && i < cfg->n_dec_layers; i++) e->kind[n++] = DYN_LAYER_DECODER;
    e->kind[n++] = DYN_LAYER_LM_HEAD;
    e->n_layers = n;
    e->first[0] = 0;
    e->first[1] = n - 2; /* stage 1: the last block and the head */
    e->first[2] = n;
    dyn_mb_shape ref = {.rows = 1, .enc_len = cfg->max_seqlen, .dec_len = e->t5 ? cfg->max_seqlen : 0};
    e->bneck = stage_ms(e, 1, &ref) > stage_ms(e, 0, &ref) ? 1 : 0;
}

/* The micro-batch of samples perm[a..b) as the model runs it. */
static dyn_mb_shape run_shape(const stage_eval *e, const dyn_sample *s, const int32_t *perm, int32_t a, int32_t b)
{
    dyn_mb_shape sh = {.rows = b - a};
    for (int32_t i = a; i < b; i++) {
        const dyn_sample *x = &s[perm[i]];
        int32_t in = e->t5 ? x->input_len : x->input_len + x->target_len;
        if (in > sh.enc_len) sh.enc_len = in;
        if (e->t5 && x->target_len > sh.dec_len) sh.dec_len = x->target_len;
    }
    sh.enc_len = plan_round_up(sh.enc_len, 8);
    sh.dec_len = plan_round_up(sh.dec_len, 8);
    return sh;
}

/* (S - 1) max over micro-batches of the slowest stage + the sum of the
 * bottleneck stage's times (S = 2, v = d = 1), for the split whose runs end
 * where bit i of cuts is set (after position i). */
static double split_value(const stage_eval *e, const dyn_sample *s, const int32_t *perm, int32_t n, uint32_t cuts)
{
    double tmax = 0.0, tb = 0.0;
    for (int32_t a = 0, i = 0; i < n; i++) {
        if (i < n - 1 && !(cuts >> i & 1u)) continue;
        dyn_mb_shape sh = run_shape(e, s, perm, a, i + 1);
        double t0 = stage_ms(e, 0, &sh), t1 = stage_ms(e, 1, &sh);
        double t = t0 > t1 ? t0 : t1;
        if (t > tmax) tmax = t;
        tb += e->bneck ? t1 : t0;
        a = i + 1;
    }
    return tmax + tb;
}

/* The plan's split of the order as cut bits. */
static uint32_t plan_cuts(const dyn_batch_plan *bp)
{
    uint32_t cuts = 0;
    int32_t pos = 0;
    for (int32_t m = 0; m < bp->n_microbatches; m++) {
        pos += bp->mbs[m].n_samples;
        if (pos < bp->n_samples) cuts |= 1u << (pos - 1);
    }
    return cuts;
}

/* One instance: the DP's plan under objective `mode` scored by split_value,
 * and the best score over all 2^(n-1) splits. */
static void plan_one(const stage_eval *e, int mode, const dyn_sample *s, int32_t n, double *chosen, double *best)
{
    const dyn_model_config *cfg = dyn_cost_model_config(e->cm);
    dyn_plan_options o;
    dyn_plan_options_default(&o);
    o.stages = 2;
    o.max_seqlen = cfg->max_seqlen;
    o.memory_limit_mb = 1e9;
    o.stage_objective = mode;
    dyn_error err;
    dyn_planner *p = dyn_planner_create(e->cm, &o, &err);
    assert_non_null(p);
    assert_int_equal(dyn_planner_set_stage_layout(p, 2, e->n_layers, e->kind, e->first, &err), DYN_OK);
    p->t5_lex_only = 1; /* one order, the one enumerated here */
    dyn_batch_plan bp;
    assert_int_equal(dyn_planner_plan_as(p, DYN_BATCH_DYNAPIPE, 0, s, n, &bp, &err), DYN_OK);
    int32_t perm[NS];
    assert_int_equal(e->t5 ? plan_order_t5_lex(s, n, perm, &err) : plan_order_gpt(s, n, perm, &err), DYN_OK);
    for (int32_t i = 0; i < n; i++) assert_int_equal(bp.sample_ids[i], s[perm[i]].id); /* that order */
    *chosen = split_value(e, s, perm, n, plan_cuts(&bp));
    if (mode == DYN_STAGE_OBJ_BOTTLENECK) assert_true(close_enough(bp.objective_ms, *chosen));
    *best = INFINITY;
    for (uint32_t c = 0; c < 1u << (n - 1); c++) {
        double v = split_value(e, s, perm, n, c);
        if (v < *best) *best = v;
    }
    dyn_batch_plan_free(&bp);
    dyn_planner_free(p);
}

/* Random batches of NS samples, short and long on either side. Returns how
 * many instances mode's choice scored worse than the best split; with
 * must_be_best, asserts it is none. */
static int run_model(const char *preset, int mode, int must_be_best)
{
    dyn_model_config cfg;
    dyn_error err;
    assert_int_equal(dyn_model_config_preset(preset, &cfg, NULL), DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), &err);
    assert_non_null(cm);
    stage_eval e;
    layout_make(&e, cm);
    dyn_rng rng;
    dyn_rng_seed(&rng, 5);
    int worse = 0;
    for (int trial = 0; trial < 40; trial++) {
        dyn_sample s[NS];
        memset(s, 0, sizeof s);
        int32_t cap = e.t5 ? cfg.max_seqlen : cfg.max_seqlen / 2;
        for (int32_t i = 0; i < NS; i++) {
            s[i].id = 100 + i;
            int lin = dyn_rng_below(&rng, 2), lt = dyn_rng_below(&rng, 2);
            s[i].input_len = 1 + (int32_t)dyn_rng_below(&rng, (uint64_t)(lin ? cap : cap / 8));
            s[i].target_len = 1 + (int32_t)dyn_rng_below(&rng, (uint64_t)(lt ? cap : cap / 8));
        }
        double chosen, best;
        plan_one(&e, mode, s, NS, &chosen, &best);
        if (must_be_best) assert_true(chosen <= best * (1 + 1e-9));
        worse += chosen > best * (1 + 1e-9);
    }
    dyn_cost_model_free(cm);
    return worse;
}

static void test_planner_bottleneck_is_best(void **state)
{
    (void)state;
    run_model("t5-tiny", DYN_STAGE_OBJ_BOTTLENECK, 1);
    run_model("gpt-mini", DYN_STAGE_OBJ_BOTTLENECK, 1);
}

/* The paper's objective (an even split, every micro-batch at its slowest
 * stage) on the same imbalanced split: not the best under the evaluation
 * above on some instances, so the test above fails with it. */
static void test_planner_even_objective_is_not(void **state)
{
    (void)state;
    int worse = run_model("t5-tiny", DYN_STAGE_OBJ_EVEN, 0) + run_model("gpt-mini", DYN_STAGE_OBJ_EVEN, 0);
    assert_true(worse > 0);
}

/* The planner's fast paths (time caps, T5 bands and affine segments, GPT
 * rows shared by equal lengths) with sum-term rows: the same optimum as the
 * naive DP over whole bands, on batches whose padded shapes repeat. */
static void test_planner_fast_equals_naive(void **state)
{
    (void)state;
    const char *presets[] = {"t5-tiny", "gpt-mini"};
    for (int m = 0; m < 2; m++) {
        dyn_model_config cfg;
        dyn_error err;
        assert_int_equal(dyn_model_config_preset(presets[m], &cfg, NULL), DYN_OK);
        dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), &err);
        assert_non_null(cm);
        stage_eval e;
        layout_make(&e, cm);
        dyn_rng rng;
        dyn_rng_seed(&rng, 9 + m);
        for (int trial = 0; trial < 6; trial++) {
            enum { N = 120 };
            dyn_sample s[N];
            memset(s, 0, sizeof s);
            for (int32_t i = 0; i < N; i++) { /* few distinct lengths: shapes repeat */
                s[i].id = i;
                s[i].input_len = 8 * (1 + (int32_t)dyn_rng_below(&rng, e.t5 ? 6 : 40));
                s[i].target_len = 8 * (1 + (int32_t)dyn_rng_below(&rng, e.t5 ? 4 : 2));
            }
            double obj[2];
            for (int naive = 0; naive < 2; naive++) {
                dyn_plan_options o;
                dyn_plan_options_default(&o);
                o.stages = 2 + trial % 2;
                o.dp = 1 + trial / 4;
                o.max_seqlen = cfg.max_seqlen;
                o.memory_limit_mb = 1e9;
                o.stage_objective = DYN_STAGE_OBJ_BOTTLENECK;
                dyn_planner *p = dyn_planner_create(cm, &o, &err);
                assert_non_null(p);
                if (o.stages == 2)
                    assert_int_equal(dyn_planner_set_stage_layout(p, 2, e.n_layers, e.kind, e.first, &err), DYN_OK);
                p->use_naive_dp = naive;
                dyn_batch_plan bp;
                assert_int_equal(dyn_planner_plan_as(p, DYN_BATCH_DYNAPIPE, 0, s, N, &bp, &err), DYN_OK);
                obj[naive] = bp.objective_ms;
                dyn_batch_plan_free(&bp);
                dyn_planner_free(p);
            }
            assert_true(close_enough(obj[0], obj[1]));
        }
        dyn_cost_model_free(cm);
    }
}

/* One batch through a pipeline whose planner has stage_objective obj:
 * the simulated iteration (ms). */
static double pipeline_ms(const dyn_cost_model *cm, int obj, const dyn_sample *s, int32_t n)
{
    dyn_plan_options o;
    dyn_plan_options_default(&o);
    o.stages = 2;
    o.max_seqlen = dyn_cost_model_config(cm)->max_seqlen;
    o.stage_objective = obj;
    dyn_error err;
    dyn_planner *pl = dyn_planner_create(cm, &o, &err);
    assert_non_null(pl);
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    po.schedule = DYN_SCHEDULE_1F1B;
    dyn_pipeline *pp = dyn_pipeline_create(pl, &po, &err);
    assert_non_null(pp);
    dyn_pipeline_result res;
    assert_int_equal(dyn_pipeline_plan(pp, s, n, &res, &err), DYN_OK);
    double ms = res.iteration_ms;
    dyn_pipeline_result_free(&res);
    dyn_pipeline_free(pp);
    dyn_planner_free(pl);
    return ms;
}

/* BOTH: the pipeline simulates the DP's plan over the real split as one
 * more candidate, so a batch is never slower than under EVEN, and T5
 * batches (encoder and decoder stages of unequal work) gain. */
static void test_pipeline_both_never_behind(void **state)
{
    (void)state;
    dyn_model_config cfg;
    dyn_error err;
    assert_int_equal(dyn_model_config_preset("t5-mini", &cfg, NULL), DYN_OK);
    cfg.max_seqlen = 1024;
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), &err);
    assert_non_null(cm);
    dyn_rng rng;
    dyn_rng_seed(&rng, 3);
    int better = 0;
    for (int b = 0; b < 6; b++) {
        enum { N = 48 };
        dyn_sample s[N];
        memset(s, 0, sizeof s);
        for (int32_t i = 0; i < N; i++) { /* FLAN-like: mostly short targets, a long tail of inputs */
            s[i].id = i;
            s[i].input_len = 1 + (int32_t)dyn_rng_below(&rng, i % 4 == 0 ? 1024 : 128);
            s[i].target_len = 1 + (int32_t)dyn_rng_below(&rng, i % 5 == 0 ? 512 : 16);
        }
        double even = pipeline_ms(cm, DYN_STAGE_OBJ_EVEN, s, N), both = pipeline_ms(cm, DYN_STAGE_OBJ_BOTH, s, N);
        assert_true(both <= even * (1 + 1e-12));
        better += both < even * (1 - 1e-9);
    }
    assert_true(better > 0);
    dyn_cost_model_free(cm);
}

/* Layouts that are not a split of the model are refused; a custom planner
 * has no layout to set. */
static void test_set_layout_errors(void **state)
{
    (void)state;
    dyn_model_config cfg;
    dyn_error err;
    assert_int_equal(dyn_model_config_preset("gpt-mini", &cfg, NULL), DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), &err);
    assert_non_null(cm);
    stage_eval e;
    layout_make(&e, cm);
    dyn_plan_options o;
    dyn_plan_options_default(&o);
    o.stages = 2;
    o.max_seqlen = cfg.max_seqlen;
    o.stage_objective = DYN_STAGE_OBJ_BOTTLENECK;
    dyn_planner *p = dyn_planner_create(cm, &o, &err);
    assert_non_null(p);
    int32_t bad_first[3] = {0, 1, e.n_layers}; /* stage 0: the embedding alone */
    assert_int_equal(dyn_planner_set_stage_layout(p, 2, e.n_layers, e.kind, bad_first, &err), DYN_ERR_INVALID_ARG);
    assert_int_equal(dyn_planner_set_stage_layout(p, 3, e.n_layers, e.kind, e.first, &err), DYN_ERR_INVALID_ARG);
    int32_t bad_kind[MAXL];
    memcpy(bad_kind, e.kind, sizeof bad_kind);
    bad_kind[1] = 77;
    assert_int_equal(dyn_planner_set_stage_layout(p, 2, e.n_layers, bad_kind, e.first, &err), DYN_ERR_INVALID_ARG);
    assert_int_equal(dyn_planner_set_stage_layout(p, 2, e.n_layers, e.kind, e.first, &err), DYN_OK);
    o.stage_objective = DYN_STAGE_OBJ_COUNT;
    assert_null(dyn_planner_create(cm, &o, &err));
    assert_int_equal(err.code, DYN_ERR_INVALID_ARG);
    dyn_planner_free(p);
    dyn_cost_model_free(cm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dp_cost_rows_brute_force),
        cmocka_unit_test(test_planner_bottleneck_is_best),
        cmocka_unit_test(test_planner_even_objective_is_not),
        cmocka_unit_test(test_planner_fast_equals_naive),
        cmocka_unit_test(test_pipeline_both_never_behind),
        cmocka_unit_test(test_set_layout_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
