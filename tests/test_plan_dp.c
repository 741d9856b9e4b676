/* test_plan_dp.c — the micro-batching DP is exact: the fast branch-and-bound
 * solver, the naive one-pass-per-candidate reference and a brute force over
 * every partition into consecutive runs agree on random instances, both on
 * raw DP problems and through the planner (GPT, Llama and T5, with memory limits
 * that bind, several S, v, d). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h" /* defines: dyn_dp_*, dyn_order_* */
#include "plan_testcost.h"      /* defines: test_cost_fn */
#include "util/rng.h"           /* defines: dyn_rng_* */

static int close_enough(double a, double b)
{
    return fabs(a - b) <= 1e-9 * (fabs(a) > fabs(b) ? fabs(a) : fabs(b)) + 1e-12;
}

/* ---- brute force over a raw DP problem ---------------------------------- */

/* The objective written out here, not taken from the implementation: a
 * pipeline of S stages with v chunks per rank and d data-parallel replicas
 * takes (S - 1) t_max / v for filling and draining and t_sum / d for the
 * steady state (docs/architecture.md). */
static double test_objective(const plan_dp_problem *pb, double tmax, double tsum)
{
    return (double)(pb->stages - 1) * tmax / (double)pb->chunks + tsum / (double)pb->dp;
}

static void brute_rec(const plan_dp_problem *pb, int32_t start, double tmax, double tsum, double *best)
{
    if (start == pb->n) {
        double v = test_objective(pb, tmax, tsum);
        if (v < *best) *best = v;
        return;
    }
    /* run covering start .. end-1, ending at j = end-1 with k = end-start */
    for (int32_t end = start + 1; end <= pb->n; end++) {
        int32_t j = end - 1, k = end - start;
        if (k > pb->width[j]) continue;
        double t = pb->time[j][k - 1];
        brute_rec(pb, end, t > tmax ? t : tmax, tsum + t, best);
    }
}

static double brute_problem(const plan_dp_problem *pb)
{
    double best = INFINITY;
    brute_rec(pb, 0, 0.0, 0.0, &best);
    return best;
}

/* Check a result's runs: they cover n, respect widths, and give its numbers. */
static void check_result(const plan_dp_problem *pb, const plan_dp_result *r)
{
    int32_t pos = 0;
    double tmax = 0, tsum = 0;
    for (int32_t i = 0; i < r->n_runs; i++) {
        int32_t k = r->run_len[i];
        assert_true(k >= 1);
        pos += k;
        assert_true(pos <= pb->n);
        assert_true(k <= pb->width[pos - 1]);
        double t = pb->time[pos - 1][k - 1];
        tsum += t;
        if (t > tmax) tmax = t;
    }
    assert_int_equal(pos, pb->n);
    assert_true(close_enough(test_objective(pb, tmax, tsum), r->objective_ms));
}

static void test_dp_fast_equals_naive_and_brute_force(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 11);
    enum { NMAX = 12 };
    double rows[NMAX][NMAX];
    const double *time[NMAX];
    int32_t width[NMAX], run_a[NMAX], run_b[NMAX];
    for (int trial = 0; trial < 3000; trial++) {
        int32_t n = 1 + (int32_t)dyn_rng_below(&rng, NMAX);
        int coarse = trial % 3 == 0; /* integer times: many ties */
        for (int32_t j = 0; j < n; j++) {
            width[j] = 1 + (int32_t)dyn_rng_below(&rng, (uint64_t)j + 1);
            double base = coarse ? (double)dyn_rng_below(&rng, 4) : dyn_rng_uniform(&rng) * 10;
            for (int32_t k = 1; k <= NMAX; k++) {
                base += coarse ? (double)dyn_rng_below(&rng, 3) : dyn_rng_uniform(&rng) * 3;
                rows[j][k - 1] = base + (coarse ? 1.0 : 0.5);
            }
            time[j] = rows[j];
        }
        /* Half the instances have the planner's property (a run is no
         * faster than any of its samples alone): raise each row to the
         * largest single-sample time of the samples it covers. */
        int singles = trial % 2;
        if (singles)
            for (int32_t j = 0; j < n; j++)
                for (int32_t k = 1; k <= width[j]; k++)
                    for (int32_t i = j - k + 1; i <= j; i++)
                        if (rows[i][0] > rows[j][k - 1]) rows[j][k - 1] = rows[i][0];
        if (singles) /* restore monotone rows after raising */
            for (int32_t j = 0; j < n; j++)
                for (int32_t k = 2; k <= NMAX; k++)
                    if (rows[j][k - 2] > rows[j][k - 1]) rows[j][k - 1] = rows[j][k - 2];
        plan_dp_problem pb = {n, width, time, 1 + (int32_t)dyn_rng_below(&rng, 8),
                             1 + (int32_t)dyn_rng_below(&rng, 3), 1 + (int32_t)dyn_rng_below(&rng, 4),
                             singles, INFINITY, NULL, NULL, NULL, NULL, NULL};
        plan_dp_result fast = {.run_len = run_a}, naive = {.run_len = run_b};
        dyn_error err;
        assert_int_equal(plan_dp_solve(&pb, &fast, &err), DYN_OK);
        assert_int_equal(plan_dp_solve_naive(&pb, &naive, &err), DYN_OK);
        double brute = brute_problem(&pb);
        check_result(&pb, &fast);
        check_result(&pb, &naive);
        assert_true(close_enough(fast.objective_ms, brute));
        assert_true(close_enough(naive.objective_ms, brute));
        assert_true(fast.n_evals <= naive.n_evals + 2);
    }
}

/* Positions that share a row (GPT: equal padded lengths) take the affine
 * fast path when the row is affine in k; mix affine rows, nearly affine ones
 * and clearly curved ones, with widths capped by "memory". */
static void test_dp_shared_rows_affine_and_not(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 13);
    enum { NMAX = 12, GMAX = 4 };
    double rows[GMAX][NMAX];
    const double *time[NMAX];
    int32_t width[NMAX], run_a[NMAX], run_b[NMAX];
    int affine_seen = 0;
    for (int trial = 0; trial < 3000; trial++) {
        int32_t n = 1 + (int32_t)dyn_rng_below(&rng, NMAX);
        int32_t g = 0, left = 0, cap = 0;
        double base = 0.0;
        for (int32_t j = 0; j < n; j++) {
            if (left == 0 && g < GMAX) { /* a new group with a new row */
                left = 1 + (int32_t)dyn_rng_below(&rng, 6);
                cap = 1 + (int32_t)dyn_rng_below(&rng, NMAX);
                double c = dyn_rng_uniform(&rng) * 5, a = 0.1 + dyn_rng_uniform(&rng) * 3;
                base += dyn_rng_uniform(&rng); /* later groups are longer: costlier */
                int shape = (int)dyn_rng_below(&rng, 3); /* 0 affine, 1 convex, 2 concave */
                for (int32_t k = 1; k <= NMAX; k++) {
                    double x = (double)k;
                    double curve = shape == 1 ? 0.05 * x * x : shape == 2 ? 2.0 * sqrt(x) : 0.0;
                    rows[g][k - 1] = base + c + a * x + curve;
                }
                /* rows start no lower than the previous group's (lengths
                 * grow along the order), so a run never costs less than any
                 * of its samples alone: the planner's singles_bound */
                double lift = g > 0 && rows[g - 1][0] > rows[g][0] ? rows[g - 1][0] - rows[g][0] : 0.0;
                for (int32_t k = 1; k <= NMAX; k++) rows[g][k - 1] += lift;
                affine_seen += shape == 0;
                g++;
            }
            left = left > 0 ? left - 1 : 0;
            time[j] = rows[g - 1];
            width[j] = cap < j + 1 ? cap : j + 1;
        }
        plan_dp_problem pb = {n, width, time, 1 + (int32_t)dyn_rng_below(&rng, 8),
                             1 + (int32_t)dyn_rng_below(&rng, 3), 1 + (int32_t)dyn_rng_below(&rng, 4),
                             trial % 2, INFINITY, NULL, NULL, NULL, NULL, NULL};
        plan_dp_result fast = {.run_len = run_a}, naive = {.run_len = run_b};
        assert_int_equal(plan_dp_solve(&pb, &fast, NULL), DYN_OK);
        assert_int_equal(plan_dp_solve_naive(&pb, &naive, NULL), DYN_OK);
        double brute = brute_problem(&pb);
        check_result(&pb, &fast);
        assert_true(close_enough(fast.objective_ms, brute));
        assert_true(close_enough(naive.objective_ms, brute));
    }
    assert_true(affine_seen > 1000);
}

/* ---- brute force through the planner ----------------------------------- */

typedef struct bf_ctx {
    dyn_model_kind kind;
    const dyn_sample *s;
    const int32_t *order;
    int32_t n;
    const dyn_plan_options *o;
    double stored_lim, peak_lim;
    test_cost tc;
    double best;
} bf_ctx;

/* Cost of the run order[a..b) computed from scratch; INFINITY if it does
 * not fit the memory limits. */
static double bf_run(const bf_ctx *c, int32_t a, int32_t b)
{
    dyn_mb_shape sh = {0};
    sh.rows = b - a;
    for (int32_t i = a; i < b; i++) {
        const dyn_sample *x = &c->s[c->order[i]];
        int32_t e = dyn_model_kind_decoder_only(c->kind) ? x->input_len + x->target_len : x->input_len;
        if (e > sh.enc_len) sh.enc_len = e;
        if (c->kind == DYN_MODEL_T5 && x->target_len > sh.dec_len) sh.dec_len = x->target_len;
    }
    int32_t r = c->o->round_to;
    sh.enc_len = (sh.enc_len + r - 1) / r * r;
    sh.dec_len = (sh.dec_len + r - 1) / r * r;
    dyn_mb_cost mc;
    test_cost_fn((void *)&c->tc, &sh, &mc, NULL);
    if (mc.stored_mb > c->stored_lim || mc.peak_mb > c->peak_lim) return INFINITY;
    return mc.time_ms;
}

static void bf_rec(bf_ctx *c, int32_t start, double tmax, double tsum)
{
    if (start == c->n) {
        double v = (c->o->stages - 1) * tmax / c->o->chunks + tsum / c->o->dp;
        if (v < c->best) c->best = v;
        return;
    }
    for (int32_t end = start + 1; end <= c->n; end++) {
        double t = bf_run(c, start, end);
        if (!isfinite(t)) break; /* longer runs do not fit either */
        bf_rec(c, end, t > tmax ? t : tmax, tsum + t);
    }
}

static double bf_best(bf_ctx *c)
{
    c->best = INFINITY;
    bf_rec(c, 0, 0, 0);
    return c->best;
}

static int few_shapes; /* draw lengths from a handful of values (shapes repeat) */

static void random_samples(dyn_rng *rng, dyn_sample *s, int32_t n, int32_t maxlen, dyn_model_kind kind)
{
    for (int32_t i = 0; i < n; i++) {
        if (few_shapes) {
            static const int32_t in[] = {5, 8, 30, 31}, tg[] = {3, 16, 17};
            s[i] = (dyn_sample){i, -1, in[dyn_rng_below(rng, 4)], tg[dyn_rng_below(rng, 3)]};
            continue;
        }
        s[i].id = i;
        s[i].task = -1;
        if (dyn_model_kind_decoder_only(kind)) {
            s[i].input_len = 1 + (int32_t)dyn_rng_below(rng, (uint64_t)maxlen - 1);
            s[i].target_len = 1 + (int32_t)dyn_rng_below(rng, (uint64_t)(maxlen - s[i].input_len));
        } else {
            s[i].input_len = 1 + (int32_t)dyn_rng_below(rng, (uint64_t)maxlen);
            s[i].target_len = 1 + (int32_t)dyn_rng_below(rng, (uint64_t)maxlen);
        }
    }
}

static void run_planner_vs_brute(dyn_model_kind kind, uint64_t seed, int trials)
{
    dyn_rng rng;
    dyn_rng_seed(&rng, seed);
    enum { NMAX = 11 };
    dyn_sample s[NMAX];
    int32_t order[NMAX], lex[NMAX];
    int binding = 0;
    for (int trial = 0; trial < trials; trial++) {
        int32_t n = 1 + (int32_t)dyn_rng_below(&rng, NMAX);
        random_samples(&rng, s, n, 64, kind);
        dyn_plan_options o;
        dyn_plan_options_default(&o);
        o.enable_packing = 0; /* the DP alone */
        o.max_seqlen = 64;
        o.stages = 1 + (int32_t)dyn_rng_below(&rng, 6);
        o.chunks = 1 + (int32_t)dyn_rng_below(&rng, 2);
        o.dp = 1 + (int32_t)dyn_rng_below(&rng, 3);
        o.round_to = trial % 2 ? 8 : 1;
        test_cost tc = test_cost_default;
        tc.overhead_ms = 0.5 + dyn_rng_uniform(&rng) * 6;
        double states = 100.0;
        /* Limit: between "the largest sample alone just fits" and roomy. */
        int32_t longest_tokens = 0;
        for (int32_t i = 0; i < n; i++) {
            int32_t t = s[i].input_len + s[i].target_len;
            if (dyn_model_kind_decoder_only(kind)) t = (t + 7) / 8 * 8;
            else t = 2 * 64;
            if (t > longest_tokens) longest_tokens = t;
        }
        double single_peak = 1.25 * tc.token_mb * longest_tokens + 1e-4 * 3 * 64 * 64;
        double per_mb = single_peak * (1.0 + dyn_rng_uniform(&rng) * 4);
        o.memory_limit_mb = states + per_mb * o.stages;
        dyn_error err;
        dyn_planner *p = dyn_planner_create_custom(kind, test_cost_fn, &tc, states, &o, &err);
        assert_non_null(p);
        dyn_batch_plan plan;
        dyn_status st = dyn_planner_plan(p, s, n, &plan, &err);
        assert_int_equal(st, DYN_OK);
        /* The order the planner used: ids grouped by micro-batch; with dp > 1
         * the micro-batches are regrouped by replica, so rebuild it from the
         * per-micro-batch sample lists sorted back into planning order. For
         * GPT that order is the length sort; for T5 one of the orderings. */
        bf_ctx c = {kind, s, order, n, &o, 0, 0, tc, 0};
        double A = o.memory_limit_mb - states;
        c.stored_lim = A / o.stages;
        c.peak_lim = A - (o.stages - 1) * c.stored_lim;
        if (dyn_model_kind_decoder_only(kind)) {
            for (int32_t i = 0; i < n; i++) order[i] = i;
            for (int32_t i = 1; i < n; i++) { /* insertion sort by (length, id) */
                int32_t x = order[i], j = i - 1;
                int32_t lx = s[x].input_len + s[x].target_len;
                while (j >= 0 && (s[order[j]].input_len + s[order[j]].target_len > lx)) {
                    order[j + 1] = order[j];
                    j--;
                }
                order[j + 1] = x;
            }
            double bf = bf_best(&c);
            assert_true(close_enough(plan.objective_ms, bf));
        } else {
            /* Optimal for its own order when dp == 1 (order is kept). */
            if (o.dp == 1) {
                for (int32_t i = 0; i < n; i++) order[i] = plan.sample_ids[i];
                assert_true(close_enough(plan.objective_ms, bf_best(&c)));
            }
            /* And never worse than the best partition of the lexicographic order. */
            assert_int_equal(plan_order_t5_lex(s, n, lex, &err), DYN_OK);
            c.order = lex;
            assert_true(plan.objective_ms <= bf_best(&c) * (1 + 1e-9));
        }
        for (int32_t m = 0; m < plan.n_microbatches; m++) {
            assert_true(plan.mbs[m].stored_mb <= c.stored_lim);
            assert_true(plan.mbs[m].peak_mb <= c.peak_lim);
        }
        /* Does the limit bind? (the unconstrained optimum would be one mb) */
        if (plan.n_microbatches > 1 && o.stages == 1) binding++;
        dyn_batch_plan_free(&plan);
        dyn_planner_free(p);
    }
    assert_true(binding > trials / 20);
}

static void test_planner_gpt_equals_brute_force(void **state)
{
    (void)state;
    run_planner_vs_brute(DYN_MODEL_GPT, 5, 600);
}

/* Llama is decoder-only: its samples are one sequence (input + target),
 * ordered by that length, with no decoder side -- the same DP as GPT's. */
static void test_planner_llama_equals_brute_force(void **state)
{
    (void)state;
    run_planner_vs_brute(DYN_MODEL_LLAMA, 7, 300);
}

static void test_planner_t5_equals_brute_force(void **state)
{
    (void)state;
    run_planner_vs_brute(DYN_MODEL_T5, 6, 400);
}

/* Repeated padded shapes: the T5 order by padded lengths and its shared
 * cost rows come into play (GPT: the affine shortcut on long groups). */
static void test_planner_repeated_shapes_equal_brute_force(void **state)
{
    (void)state;
    few_shapes = 1;
    run_planner_vs_brute(DYN_MODEL_T5, 8, 400);
    run_planner_vs_brute(DYN_MODEL_GPT, 9, 400);
    few_shapes = 0;
}

/* T5 batches too large for the brute force (20..48 samples): the planner
 * (fast DP, time cap from the best chunking and from earlier orders' optima)
 * reaches the same objective as the planner with the naive DP over every
 * run of every order. */
static void test_planner_t5_fast_equals_naive(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 11);
    enum { NMAX = 48 };
    dyn_sample s[NMAX];
    for (int trial = 0; trial < 120; trial++) {
        int32_t n = 20 + (int32_t)dyn_rng_below(&rng, NMAX - 19);
        few_shapes = trial % 3 == 0;
        random_samples(&rng, s, n, 64, DYN_MODEL_T5);
        few_shapes = 0;
        dyn_plan_options o;
        dyn_plan_options_default(&o);
        o.enable_packing = 0; /* the DP alone */
        o.max_seqlen = 64;
        o.stages = 2 + (int32_t)dyn_rng_below(&rng, 7);
        o.chunks = 1 + (int32_t)dyn_rng_below(&rng, 2);
        o.dp = 1 + (int32_t)dyn_rng_below(&rng, 3);
        o.round_to = trial % 2 ? 8 : 4;
        test_cost tc = test_cost_default;
        tc.overhead_ms = dyn_rng_uniform(&rng) * 6;
        double states = 100.0, single_peak = 1.25 * tc.token_mb * 2 * 64 + 1e-4 * 3 * 64 * 64;
        o.memory_limit_mb = states + single_peak * (1.0 + dyn_rng_uniform(&rng) * 12) * o.stages;
        dyn_error err;
        dyn_planner *fast = dyn_planner_create_custom(DYN_MODEL_T5, test_cost_fn, &tc, states, &o, &err);
        dyn_planner *naive = dyn_planner_create_custom(DYN_MODEL_T5, test_cost_fn, &tc, states, &o, &err);
        assert_non_null(fast);
        assert_non_null(naive);
        naive->use_naive_dp = 1;
        dyn_batch_plan a, b;
        assert_int_equal(dyn_planner_plan(fast, s, n, &a, &err), DYN_OK);
        assert_int_equal(dyn_planner_plan(naive, s, n, &b, &err), DYN_OK);
        if (!close_enough(a.objective_ms, b.objective_ms))
            fail_msg("trial %d n=%d S=%d: fast %.17g, naive %.17g", trial, n, o.stages,
                     a.objective_ms, b.objective_ms);
        dyn_batch_plan_free(&a);
        dyn_batch_plan_free(&b);
        dyn_planner_free(fast);
        dyn_planner_free(naive);
    }
}

/* Near-equal candidate times (closer than the reference's 5 ms merge) must
 * still be told apart: here the optimum needs t_max = 10.000001, not 10. */
static void test_dp_keeps_close_candidates(void **state)
{
    (void)state;
    /* 3 samples; runs: singles cost 10, 10, 10.000001; pairs cost 12, 12;
     * triple 30. S = 11: (S-1)*t_max dominates, so three singles with max
     * 10.000001 (value 100.00001 + 30.000001) beat pairs (120 + ...). */
    double r0[] = {10.0}, r1[] = {10.0, 12.0}, r2[] = {10.000001, 12.0, 30.0};
    const double *time[] = {r0, r1, r2};
    int32_t width[] = {1, 2, 3}, run[3];
    plan_dp_problem pb = {3, width, time, 11, 1, 1, 1, INFINITY, NULL, NULL, NULL, NULL, NULL};
    plan_dp_result r = {.run_len = run};
    assert_int_equal(plan_dp_solve(&pb, &r, NULL), DYN_OK);
    assert_int_equal(r.n_runs, 3);
    assert_true(close_enough(r.objective_ms, 10 * 10.000001 + 30.000001));
}

/* Hand-worked instances with chunks = 2 and dp = 2, where the objective's
 * two divisors change the best partition. Four samples; a run of k samples
 * ending at sample j costs time[j][k-1]:
 *   singles 4, 4, 4, 4; pairs 5 (samples 0-1 and 2-3; 1-2: 5 too);
 *   triples 9; all four 16.
 * S = 5, v = 1, d = 1: pairs: 4 * 5 + 10 = 30; singles: 4 * 4 + 16 = 32;
 *   all four: 4 * 16 + 16 = 80. Best: two pairs, 30.
 * S = 5, v = 2, d = 2: pairs: 4 * 5 / 2 + 10 / 2 = 15; singles: 4 * 4 / 2 +
 *   16 / 2 = 16. Best: two pairs, 15.
 * S = 9, v = 2, d = 2: pairs: 8 * 5 / 2 + 5 = 25; singles: 8 * 4 / 2 + 8 =
 *   24. Best: singles, 24 (with v = 1, d = 1 singles win too: 48 vs 50).
 * S = 3, v = 2, d = 1: pairs: 2 * 5 / 2 + 10 = 15; singles 4 + 16 = 20;
 *   one run of four: 16 + 16 = 32; triple + single: 9 + 13 = 22. Pairs, 15. */
static void test_dp_hand_worked_chunks_and_dp(void **state)
{
    (void)state;
    double r0[] = {4}, r1[] = {4, 5}, r2[] = {4, 5, 9}, r3[] = {4, 5, 9, 16};
    const double *time[] = {r0, r1, r2, r3};
    int32_t width[] = {1, 2, 3, 4}, run[4];
    struct { int32_t S, v, d, n_runs; double want; } cases[] = {
        {5, 1, 1, 2, 30}, {5, 2, 2, 2, 15}, {9, 2, 2, 4, 24}, {3, 2, 1, 2, 15},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        plan_dp_problem pb = {4, width, time, cases[i].S, cases[i].v, cases[i].d, 1, INFINITY,
                              NULL, NULL, NULL, NULL, NULL};
        plan_dp_result r = {.run_len = run};
        assert_int_equal(plan_dp_solve(&pb, &r, NULL), DYN_OK);
        if (r.n_runs != cases[i].n_runs || !close_enough(r.objective_ms, cases[i].want))
            fail_msg("S %d v %d d %d: %d runs, %.3f ms (want %d, %.3f)", cases[i].S, cases[i].v, cases[i].d,
                     r.n_runs, r.objective_ms, cases[i].n_runs, cases[i].want);
        check_result(&pb, &r);
        plan_dp_result rn = {.run_len = run};
        assert_int_equal(plan_dp_solve_naive(&pb, &rn, NULL), DYN_OK);
        assert_true(close_enough(rn.objective_ms, cases[i].want));
        assert_true(close_enough(brute_problem(&pb), cases[i].want));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dp_fast_equals_naive_and_brute_force),
        cmocka_unit_test(test_dp_keeps_close_candidates),
        cmocka_unit_test(test_dp_hand_worked_chunks_and_dp),
        cmocka_unit_test(test_dp_shared_rows_affine_and_not),
        cmocka_unit_test(test_planner_gpt_equals_brute_force),
        cmocka_unit_test(test_planner_t5_equals_brute_force),
        cmocka_unit_test(test_planner_llama_equals_brute_force),
        cmocka_unit_test(test_planner_repeated_shapes_equal_brute_force),
        cmocka_unit_test(test_planner_t5_fast_equals_naive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
