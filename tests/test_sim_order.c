/* test_sim_order.c — the micro-batch order search, with the test's own 1F1B
 * generator: exhaustive (equal to brute force over all orders) when every
 * micro-batch is its own group, never worse than the given order, the
 * winner's reported makespan is what re-simulating it gives, the memory limit
 * is honoured and an impossible one is reported. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/sim.h" /* defines: dyn_order_search, dyn_sim_* */
#include "sim/sim_internal.h" /* defines: sim_stage_costs_permute */
#include "sim_testlib.h"  /* defines: tplan_*, tcosts_uniform */
#include "util/rng.h"     /* defines: dyn_rng_* */

static dyn_status gen_1f1b(void *ctx, const dyn_stage_costs *c, const int32_t *order,
                           dyn_exec_plan *out, dyn_error *err)
{
    (void)ctx;
    (void)order;
    (void)err;
    tplan t;
    tplan_1f1b(&t, c->n_stages, c->n_microbatches, 4096);
    *out = t.p;
    return DYN_OK;
}

static void free_1f1b(void *ctx, dyn_exec_plan *p)
{
    (void)ctx;
    tplan t;
    memset(&t, 0, sizeof t);
    t.p = *p;
    tplan_free(&t);
    memset(p, 0, sizeof *p);
}

static const dyn_sched_gen gen = {gen_1f1b, free_1f1b, NULL};
static const dyn_sim_options opt = {0.0, 0.0, 0, 0, 0};

static double simulate_order(dyn_sim *sim, const dyn_stage_costs *c, const int32_t *order, double *peak)
{
    dyn_error err;
    dyn_stage_costs p;
    assert_int_equal(sim_stage_costs_permute(c, order, &p, &err), DYN_OK);
    dyn_exec_plan plan;
    assert_int_equal(gen_1f1b(NULL, &p, order, &plan, &err), DYN_OK);
    const dyn_sim_result *res;
    assert_int_equal(dyn_sim_run(sim, &plan, &p, &opt, &res, &err), DYN_OK);
    double m = res->makespan_ms;
    if (peak) *peak = res->max_peak_mb;
    free_1f1b(NULL, &plan);
    dyn_stage_costs_free(&p);
    return m;
}

static void random_costs(dyn_rng *rng, dyn_stage_costs *c, int32_t M, int32_t S)
{
    tcosts_uniform(c, M, S, 0, 0);
    for (int32_t mb = 0; mb < M; mb++) {
        double size = 0.2 + 3.0 * dyn_rng_uniform(rng); /* micro-batches differ in size */
        for (int32_t s = 0; s < S; s++) {
            c->fwd_ms[mb * S + s] = size * (0.9 + 0.2 * dyn_rng_uniform(rng));
            c->bwd_ms[mb * S + s] = 2 * c->fwd_ms[mb * S + s];
            c->stored_mb[mb * S + s] = 10 * size;
        }
    }
}

/* Every permutation of 4 items, by Heap's algorithm (independent of the
 * search's lexicographic enumeration). */
static double brute_force_4(dyn_sim *sim, const dyn_stage_costs *c)
{
    int32_t a[4] = {0, 1, 2, 3}, cnt[4] = {0};
    double best = simulate_order(sim, c, a, NULL);
    int i = 0;
    while (i < 4) {
        if (cnt[i] < i) {
            int j = i % 2 == 0 ? 0 : cnt[i];
            int32_t t = a[j]; a[j] = a[i]; a[i] = t;
            double m = simulate_order(sim, c, a, NULL);
            if (m < best) best = m;
            cnt[i]++;
            i = 0;
        } else {
            cnt[i] = 0;
            i++;
        }
    }
    return best;
}

static void test_exhaustive_when_each_microbatch_is_a_group(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 3);
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    for (int iter = 0; iter < 20; iter++) {
        int32_t S = 2 + (int32_t)dyn_rng_below(&rng, 4);
        dyn_stage_costs c;
        random_costs(&rng, &c, 4, S);
        int32_t order[4];
        dyn_order_result res = {.order = order};
        assert_int_equal(dyn_order_search(sim, &gen, &c, &opt, 4, 0, &res, NULL, NULL, &err), DYN_OK);
        assert_true(fabs(res.makespan_ms - brute_force_4(sim, &c)) < 1e-9);
        assert_int_equal(res.n_candidates, 24 + 2); /* identity is one of the 24 */
        dyn_stage_costs_free(&c);
    }
    dyn_sim_free(sim);
}

static void test_never_worse_and_consistent(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 5);
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    int improved = 0;
    for (int iter = 0; iter < 30; iter++) {
        int32_t S = 2 + (int32_t)dyn_rng_below(&rng, 6), M = 5 + (int32_t)dyn_rng_below(&rng, 12);
        dyn_stage_costs c;
        random_costs(&rng, &c, M, S);
        int32_t *order = calloc((size_t)M, sizeof(int32_t)), *ident = calloc((size_t)M, sizeof(int32_t));
        for (int32_t i = 0; i < M; i++) ident[i] = i;
        int32_t groups = 1 + (int32_t)dyn_rng_below(&rng, 4);
        dyn_order_result res = {.order = order};
        dyn_exec_plan best;
        dyn_stage_costs best_costs;
        assert_int_equal(dyn_order_search(sim, &gen, &c, &opt, groups, 0, &res, &best, &best_costs, &err), DYN_OK);
        double base = simulate_order(sim, &c, ident, NULL);
        assert_true(res.makespan_ms <= base + 1e-12);
        improved += res.makespan_ms < base - 1e-9;
        /* order is a permutation */
        int32_t *seen = calloc((size_t)M, sizeof(int32_t));
        for (int32_t i = 0; i < M; i++) seen[order[i]]++;
        for (int32_t i = 0; i < M; i++) assert_int_equal(seen[i], 1);
        free(seen);
        assert_true(fabs(simulate_order(sim, &c, order, NULL) - res.makespan_ms) < 1e-12);
        /* the returned plan and costs are the winner's */
        const dyn_sim_result *r;
        assert_int_equal(dyn_sim_run(sim, &best, &best_costs, &opt, &r, &err), DYN_OK);
        assert_true(r->makespan_ms == res.makespan_ms);
        for (int32_t i = 0; i < M; i++) assert_true(best_costs.fwd_ms[i * S] == c.fwd_ms[order[i] * S]);
        int32_t fact = 1;
        for (int32_t g = 2; g <= groups; g++) fact *= g;
        assert_true(res.n_candidates <= 1 + fact + 2);
        free_1f1b(NULL, &best);
        dyn_stage_costs_free(&best_costs);
        dyn_stage_costs_free(&c);
        free(order);
        free(ident);
    }
    assert_true(improved > 5); /* reordering matters on unequal micro-batches */
    dyn_sim_free(sim);
}

static void test_memory_limit(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 9);
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    int32_t S = 4, M = 8;
    dyn_stage_costs c;
    random_costs(&rng, &c, M, S);
    int32_t order[8];
    dyn_order_result res = {.order = order};
    /* An impossible limit names the smallest peak any candidate reached; a
     * limit just above it admits only orders within it. */
    assert_int_equal(dyn_order_search(sim, &gen, &c, &opt, 3, 1e-3, &res, NULL, NULL, &err),
                     DYN_ERR_INFEASIBLE);
    const char *at = strstr(err.msg, "smallest simulated peak ");
    assert_non_null(at);
    double lo = 0;
    assert_int_equal(sscanf(at + strlen("smallest simulated peak "), "%lf", &lo), 1);
    double limit = lo + 0.5; /* message rounds to 0.1 MB */
    assert_int_equal(dyn_order_search(sim, &gen, &c, &opt, 3, limit, &res, NULL, NULL, &err), DYN_OK);
    assert_true(res.max_peak_mb <= limit);
    double peak;
    simulate_order(sim, &c, order, &peak);
    assert_true(peak <= limit);
    assert_true(res.n_feasible >= 1 && res.n_feasible <= res.n_candidates);
    dyn_stage_costs_free(&c);
    dyn_sim_free(sim);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exhaustive_when_each_microbatch_is_a_group),
        cmocka_unit_test(test_never_worse_and_consistent),
        cmocka_unit_test(test_memory_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
