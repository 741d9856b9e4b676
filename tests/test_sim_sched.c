/* test_sim_sched.c — the simulator on the real schedules of src/sched:
 * 1F1B's closed form, wait-free cyclic never worse than cyclic on the same
 * order, every schedule runs to completion on random instances, the
 * simulated peak memory equals src/sched's static memory model, and
 * `--schedule auto` is its two phases: never worse than any schedule in the
 * planner's order, and equal to the order search on the best of those;
 * its lower-bound pruning never changes the winner. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/sched.h" /* defines: dyn_schedule_build, dyn_exec_plan_* */
#include "dynapipe/sim.h"   /* defines: dyn_sim_*, dyn_schedule_search, dyn_schedule_auto */
#include "sim/sim_internal.h" /* defines: sim_makespan_lower_bound */
#include "sim_testlib.h"    /* defines: tcosts_uniform */
#include "util/rng.h"       /* defines: dyn_rng_* */

static const dyn_sim_options no_comm = {0.0, 0.0, 0, 0, 0};

static void random_costs(dyn_rng *rng, dyn_stage_costs *c, int32_t M, int32_t S)
{
    tcosts_uniform(c, M, S, 0, 0);
    for (int32_t mb = 0; mb < M; mb++) {
        double size = 0.2 + 3.0 * dyn_rng_uniform(rng);
        for (int32_t s = 0; s < S; s++) {
            int32_t i = mb * S + s;
            c->fwd_ms[i] = size * (0.8 + 0.4 * dyn_rng_uniform(rng));
            c->bwd_input_ms[i] = c->fwd_ms[i] * (0.8 + 0.4 * dyn_rng_uniform(rng));
            c->bwd_weight_ms[i] = c->fwd_ms[i] * (0.8 + 0.4 * dyn_rng_uniform(rng));
            c->bwd_ms[i] = c->bwd_input_ms[i] + c->bwd_weight_ms[i];
            c->stored_mb[i] = 10 * size;
            c->peak_mb[i] = 2 * size;
            c->send_mb[i] = 0.5 * size;
        }
    }
    for (int32_t s = 0; s < S; s++) c->states_mb[s] = 100;
}

static dyn_status build(dyn_schedule k, const dyn_stage_costs *c, int32_t S, int32_t v,
                        dyn_exec_plan *plan, dyn_error *err)
{
    dyn_sched_options so;
    dyn_sched_options_default(&so);
    so.n_ranks = S;
    so.chunks = v;
    memset(plan, 0, sizeof *plan);
    return dyn_schedule_build(k, c, NULL, &so, plan, err);
}

static void test_1f1b_closed_form_on_sched_plans(void **state)
{
    (void)state;
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    for (int32_t S = 1; S <= 8; S++)
        for (int32_t M = 1; M <= 12; M += 1) {
            dyn_stage_costs c;
            tcosts_uniform(&c, M, S, 1.5, 2.75);
            dyn_exec_plan plan;
            assert_int_equal(build(DYN_SCHEDULE_1F1B, &c, S, 1, &plan, &err), DYN_OK);
            const dyn_sim_result *res;
            assert_int_equal(dyn_sim_run(sim, &plan, &c, &no_comm, &res, &err), DYN_OK);
            assert_true(fabs(res->makespan_ms - (M + S - 1) * (1.5 + 2.75)) < 1e-9);
            dyn_exec_plan_free(&plan);
            dyn_stage_costs_free(&c);
        }
    dyn_sim_free(sim);
}

static void test_wait_free_cyclic_never_worse_than_cyclic(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 21);
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    int strictly_better = 0;
    for (int iter = 0; iter < 300; iter++) {
        int32_t S = 1 + (int32_t)dyn_rng_below(&rng, 8), M = 1 + (int32_t)dyn_rng_below(&rng, 16);
        dyn_stage_costs c;
        random_costs(&rng, &c, M, S);
        dyn_sim_options o = {0.05 * dyn_rng_uniform(&rng), dyn_rng_below(&rng, 2) ? 0.0 : 20.0, 0, 0, 0};
        dyn_exec_plan cyc, wf;
        assert_int_equal(build(DYN_SCHEDULE_CYCLIC, &c, S, 1, &cyc, &err), DYN_OK);
        assert_int_equal(build(DYN_SCHEDULE_WAIT_FREE_CYCLIC, &c, S, 1, &wf, &err), DYN_OK);
        const dyn_sim_result *res;
        assert_int_equal(dyn_sim_run(sim, &cyc, &c, &o, &res, &err), DYN_OK);
        double m_cyc = res->makespan_ms;
        assert_int_equal(dyn_sim_run(sim, &wf, &c, &o, &res, &err), DYN_OK);
        double m_wf = res->makespan_ms;
        if (m_wf > m_cyc + 1e-9) fprintf(stderr, "S=%d M=%d cyclic %.6f wait-free %.6f\n", S, M, m_cyc, m_wf);
        assert_true(m_wf <= m_cyc + 1e-9);
        strictly_better += m_wf < m_cyc - 1e-9;
        dyn_exec_plan_free(&cyc);
        dyn_exec_plan_free(&wf);
        dyn_stage_costs_free(&c);
    }
    assert_true(strictly_better > 0); /* the barriers do cost something */
    dyn_sim_free(sim);
}

/* Every schedule runs to completion (no deadlock), its plan validates, busy
 * time equals the sum of its compute, and the simulated peak memory equals
 * the static memory model of src/sched. */
static void test_every_schedule_simulates_and_memory_agrees(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 8);
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    for (int iter = 0; iter < 120; iter++) {
        int32_t S = 1 + (int32_t)dyn_rng_below(&rng, 8), M = 1 + (int32_t)dyn_rng_below(&rng, 16);
        int32_t v = 1 + (int32_t)dyn_rng_below(&rng, 3);
        for (int k = 0; k < DYN_SCHEDULE_COUNT; k++) {
            int32_t vk = k == DYN_SCHEDULE_INTERLEAVED ? (v > 1 ? v : 2) : 1;
            dyn_stage_costs c;
            random_costs(&rng, &c, M, S * vk);
            dyn_exec_plan plan;
            dyn_status st = build((dyn_schedule)k, &c, S, vk, &plan, &err);
            if (st != DYN_OK) fprintf(stderr, "%s S=%d M=%d v=%d: %s\n", dyn_schedule_name(k), S, M, vk, err.msg);
            assert_int_equal(st, DYN_OK);
            assert_int_equal(dyn_exec_plan_validate(&plan, &err), DYN_OK);
            dyn_sim_options o = {0.01, 50.0, 1000, 0, 0};
            const dyn_sim_result *res;
            st = dyn_sim_run(sim, &plan, &c, &o, &res, &err);
            if (st != DYN_OK) fprintf(stderr, "%s: %s\n", dyn_schedule_name(k), err.msg);
            assert_int_equal(st, DYN_OK);
            double *peak = calloc((size_t)S, sizeof(double));
            assert_int_equal(dyn_exec_plan_memory(&plan, &c, peak, &err), DYN_OK);
            double busy = 0, want = 0;
            for (int32_t r = 0; r < S; r++) {
                assert_true(fabs(res->peak_mb[r] - peak[r]) < 1e-6);
                busy += res->busy_ms[r];
            }
            for (int32_t i = 0; i < M * S * vk; i++)
                want += c.fwd_ms[i] + (k == DYN_SCHEDULE_ZB ? c.bwd_input_ms[i] + c.bwd_weight_ms[i] : c.bwd_ms[i]);
            assert_true(fabs(busy - want) < 1e-6 * want);
            assert_true(res->makespan_ms * S >= busy - 1e-9);
            free(peak);
            dyn_exec_plan_free(&plan);
            dyn_stage_costs_free(&c);
        }
    }
    dyn_sim_free(sim);
}

/* Costs provider for auto: the same random costs for v = 1 and v = 2,
 * recompute ignored. */
/* Costs per (chunks 1 or 2, recompute mode): recomputation stores less
 * and takes longer backward passes. */
typedef struct mode_costs {
    dyn_stage_costs c[2][DYN_RECOMPUTE_COUNT];
} mode_costs;

static dyn_status get_costs(void *ctx, int32_t chunks, dyn_recompute rc, const dyn_stage_costs **out,
                            dyn_error *err)
{
    (void)err;
    mode_costs *t = ctx;
    *out = &t->c[chunks > 1][rc];
    return DYN_OK;
}

static void make_mode_costs(dyn_rng *rng, mode_costs *t, int32_t M, int32_t S)
{
    for (int a = 0; a < 2; a++) {
        int32_t st = S * (a ? 2 : 1);
        random_costs(rng, &t->c[a][0], M, st);
        for (int rc = 1; rc < DYN_RECOMPUTE_COUNT; rc++) {
            tcosts_uniform(&t->c[a][rc], M, st, 0, 0);
            const dyn_stage_costs *b = &t->c[a][0];
            dyn_stage_costs *c = &t->c[a][rc];
            for (int32_t i = 0; i < M * st; i++) {
                c->fwd_ms[i] = b->fwd_ms[i];
                c->bwd_input_ms[i] = b->bwd_input_ms[i] + (rc == 1 ? 0.3 : 1.0) * b->fwd_ms[i];
                c->bwd_weight_ms[i] = b->bwd_weight_ms[i];
                c->bwd_ms[i] = c->bwd_input_ms[i] + c->bwd_weight_ms[i];
                c->stored_mb[i] = b->stored_mb[i] * (rc == 1 ? 0.5 : 0.1);
                c->peak_mb[i] = b->peak_mb[i];
                c->send_mb[i] = b->send_mb[i];
            }
            for (int32_t q = 0; q < st; q++) c->states_mb[q] = b->states_mb[q];
        }
    }
}

/* Auto is its two phases, checked independently: never worse than any
 * schedule x recompute mode in the planner's order, and equal to the
 * better of that and the order search on the phase-1 winner; with a memory
 * limit that rules out plain storage, a recompute mode wins. */
static void test_auto_two_phases(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 13);
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    int recomputed = 0;
    for (int iter = 0; iter < 24; iter++) {
        int32_t S = 2 + (int32_t)dyn_rng_below(&rng, 4), M = 4 + (int32_t)dyn_rng_below(&rng, 10);
        mode_costs t;
        make_mode_costs(&rng, &t, M, S);
        /* Every other instance: a limit a little above the states + one
         * micro-batch's recomputed storage, so storing everything cannot fit. */
        double limit = 0;
        if (iter % 2) {
            double max_stored = 0;
            for (int32_t i = 0; i < M * S; i++)
                if (t.c[0][0].stored_mb[i] > max_stored) max_stored = t.c[0][0].stored_mb[i];
            limit = 100 + 1.2 * max_stored; /* states 100 per stage */
        }
        dyn_auto_options ao = {S, 2, limit, 3, 0, 0, 1}; /* unpruned: the phases as described */
        int32_t *order = calloc((size_t)M, sizeof(int32_t)), *o2 = calloc((size_t)M, sizeof(int32_t));
        dyn_auto_choice ch = {.order = order};
        dyn_exec_plan best;
        dyn_stage_costs best_costs;
        dyn_status ast = dyn_schedule_auto(sim, get_costs, &t, NULL, &ao, &no_comm, &ch, &best, &best_costs, &err);
        double first_ms = INFINITY;
        int first = -1, first_rc = 0;
        for (int rc = 0; rc < DYN_RECOMPUTE_COUNT; rc++)
            for (int k = 0; k < DYN_SCHEDULE_COUNT; k++) {
                dyn_sched_options so;
                dyn_sched_options_default(&so);
                so.n_ranks = S;
                so.chunks = k == DYN_SCHEDULE_INTERLEAVED ? 2 : 1;
                so.memory_limit_mb = limit;
                so.recompute = (dyn_recompute)rc;
                dyn_order_result res = {.order = o2};
                dyn_status st = dyn_schedule_search(sim, (dyn_schedule)k, &t.c[so.chunks > 1][rc], NULL, &so,
                                                    &no_comm, 1, &res, NULL, NULL, &err);
                if (st == DYN_ERR_INFEASIBLE) continue;
                assert_int_equal(st, DYN_OK);
                assert_int_equal(ast, DYN_OK);
                assert_true(ch.makespan_ms <= res.makespan_ms); /* never worse than any as planned */
                if (k != DYN_SCHEDULE_CYCLIC && res.makespan_ms < first_ms) { /* auto skips cyclic */
                    first_ms = res.makespan_ms;
                    first = k;
                    first_rc = rc;
                }
            }
        if (first < 0) {
            assert_int_equal(ast, DYN_ERR_INFEASIBLE);
        } else {
            assert_int_equal(ast, DYN_OK);
            dyn_sched_options so;
            dyn_sched_options_default(&so);
            so.n_ranks = S;
            so.chunks = first == DYN_SCHEDULE_INTERLEAVED ? 2 : 1;
            so.memory_limit_mb = limit;
            so.recompute = (dyn_recompute)first_rc;
            dyn_order_result res = {.order = o2};
            assert_int_equal(dyn_schedule_search(sim, (dyn_schedule)first, &t.c[so.chunks > 1][first_rc], NULL,
                                                 &so, &no_comm, 3, &res, NULL, NULL, &err),
                             DYN_OK);
            double want = res.makespan_ms < first_ms ? res.makespan_ms : first_ms;
            assert_true(ch.makespan_ms == want);
            recomputed += ch.recompute != DYN_RECOMPUTE_NONE;
            const dyn_sim_result *r;
            assert_int_equal(dyn_sim_run(sim, &best, &best_costs, &no_comm, &r, &err), DYN_OK);
            assert_true(r->makespan_ms == ch.makespan_ms);
            assert_true(limit <= 0 || r->max_peak_mb <= limit);
            assert_int_equal(dyn_exec_plan_validate(&best, &err), DYN_OK);
            dyn_exec_plan_free(&best);
            dyn_stage_costs_free(&best_costs);
        }
        for (int a = 0; a < 2; a++)
            for (int rc = 0; rc < DYN_RECOMPUTE_COUNT; rc++) dyn_stage_costs_free(&t.c[a][rc]);
        free(order);
        free(o2);
    }
    assert_true(recomputed > 0);
    dyn_sim_free(sim);
}

/* auto's lower bound is a bound: never above the simulated makespan of any
 * schedule on random instances (random orders, with and without a memory
 * limit that throttles, with and without a link model); and it is exact on
 * the hand-worked case, M equal micro-batches under 1F1B without
 * communication: (M + S - 1) * (f + b). */
static void test_lower_bound_is_a_bound(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 31);
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    const dyn_sim_options link = {0.05, 2.0, 0, 0, 1};
    int checked = 0;
    for (int iter = 0; iter < 120; iter++) {
        int32_t S = 1 + (int32_t)dyn_rng_below(&rng, 6), M = 1 + (int32_t)dyn_rng_below(&rng, 24);
        int k = (int)dyn_rng_below(&rng, DYN_SCHEDULE_COUNT);
        int32_t v = k == DYN_SCHEDULE_INTERLEAVED ? 2 : 1;
        dyn_stage_costs c;
        random_costs(&rng, &c, M, S * v);
        sim_lb_job *jobs = calloc((size_t)M, sizeof *jobs);
        double lb = sim_makespan_lower_bound(&c, k, S, jobs);
        dyn_sched_options so;
        dyn_sched_options_default(&so);
        so.n_ranks = S;
        so.chunks = v;
        if (iter % 3 == 2) so.memory_limit_mb = 100 + 25 + 60 * dyn_rng_uniform(&rng);
        dyn_exec_plan plan;
        memset(&plan, 0, sizeof plan);
        dyn_status st = dyn_schedule_build((dyn_schedule)k, &c, NULL, &so, &plan, &err);
        if (st == DYN_OK) {
            const dyn_sim_result *res;
            assert_int_equal(dyn_sim_run(sim, &plan, &c, iter % 2 ? &link : &no_comm, &res, &err), DYN_OK);
            assert_true(lb > 0);
            assert_true(lb <= res->makespan_ms * (1 + 1e-12));
            checked++;
            dyn_exec_plan_free(&plan);
        } else {
            assert_int_equal(st, DYN_ERR_INFEASIBLE);
        }
        free(jobs);
        dyn_stage_costs_free(&c);
    }
    assert_true(checked > 80);
    for (int32_t S = 1; S <= 6; S++)
        for (int32_t M = 1; M <= 9; M += 4) {
            dyn_stage_costs c;
            tcosts_uniform(&c, M, S, 2.0, 3.0);
            sim_lb_job *jobs = calloc((size_t)M, sizeof *jobs);
            assert_true(fabs(sim_makespan_lower_bound(&c, DYN_SCHEDULE_1F1B, S, jobs) - (M + S - 1) * 5.0) < 1e-9);
            free(jobs);
            dyn_stage_costs_free(&c);
        }
    dyn_sim_free(sim);
}

/* Pruning is exact: on random instances (with and without a memory limit
 * and a link model), auto with its lower-bound pruning picks the very
 * choice of the unpruned search (schedule, recompute, order, makespan,
 * peak), simulating no more candidates; and pruning happens. */
static void test_auto_pruning_keeps_winner(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 29);
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    const dyn_sim_options link = {0.05, 2.0, 0, 0, 1};
    int pruned = 0, fewer = 0;
    for (int iter = 0; iter < 40; iter++) {
        int32_t S = 2 + (int32_t)dyn_rng_below(&rng, 5), M = 2 + (int32_t)dyn_rng_below(&rng, 30);
        mode_costs t;
        make_mode_costs(&rng, &t, M, S);
        double limit = 0;
        if (iter % 3 == 1) {
            double max_stored = 0;
            for (int32_t i = 0; i < M * S; i++)
                if (t.c[0][0].stored_mb[i] > max_stored) max_stored = t.c[0][0].stored_mb[i];
            limit = 100 + (1.2 + 2.0 * dyn_rng_uniform(&rng)) * max_stored;
        }
        int32_t groups = 1 + (int32_t)dyn_rng_below(&rng, DYN_ORDER_MAX_GROUPS);
        const dyn_sim_options *so = iter % 2 ? &link : &no_comm;
        int32_t *o1 = calloc((size_t)M, sizeof(int32_t)), *o2 = calloc((size_t)M, sizeof(int32_t));
        dyn_auto_options ap = {S, 2, limit, groups, 0, 0, 0}, au = ap;
        au.no_prune = 1;
        dyn_auto_choice cp = {.order = o1}, cu = {.order = o2};
        dyn_exec_plan pp, pu;
        dyn_stage_costs ccp, ccu;
        dyn_status sp = dyn_schedule_auto(sim, get_costs, &t, NULL, &ap, so, &cp, &pp, &ccp, &err);
        dyn_status su = dyn_schedule_auto(sim, get_costs, &t, NULL, &au, so, &cu, &pu, &ccu, &err);
        assert_int_equal(sp, su);
        assert_int_equal(cu.n_pruned, 0);
        if (su == DYN_OK) {
            assert_int_equal(cp.schedule, cu.schedule);
            assert_int_equal(cp.recompute, cu.recompute);
            assert_int_equal(cp.chunks, cu.chunks);
            assert_true(cp.makespan_ms == cu.makespan_ms);
            assert_true(cp.max_peak_mb == cu.max_peak_mb);
            assert_int_equal(cp.order_candidate, cu.order_candidate);
            assert_memory_equal(o1, o2, sizeof(int32_t) * (size_t)M);
            assert_true(cp.n_simulations <= cu.n_simulations);
            /* the returned plan is the winner's: simulating it gives its makespan */
            const dyn_sim_result *r;
            assert_int_equal(dyn_sim_run(sim, &pp, &ccp, so, &r, &err), DYN_OK);
            assert_true(r->makespan_ms == cp.makespan_ms);
            pruned += cp.n_pruned > 0;
            fewer += cp.n_simulations < cu.n_simulations;
            dyn_exec_plan_free(&pp);
            dyn_exec_plan_free(&pu);
            dyn_stage_costs_free(&ccp);
            dyn_stage_costs_free(&ccu);
        }
        for (int a = 0; a < 2; a++)
            for (int rc = 0; rc < DYN_RECOMPUTE_COUNT; rc++) dyn_stage_costs_free(&t.c[a][rc]);
        free(o1);
        free(o2);
    }
    assert_true(pruned > 0);
    assert_true(fewer > 0);
    dyn_sim_free(sim);
}

/* Corrupt valid plans at random (an op, micro-batch, stage, peer, slot or
 * byte count at a time): the simulator returns DYN_OK or
 * DYN_ERR_INVALID_ARG, never crashes, hangs or reads out of bounds (ASan).
 * And random bytes as a what-if file are rejected or accepted cleanly. */
static void test_corrupted_plans_never_crash(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 99);
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    int rejected = 0;
    for (int iter = 0; iter < 400; iter++) {
        int32_t S = 1 + (int32_t)dyn_rng_below(&rng, 4), M = 1 + (int32_t)dyn_rng_below(&rng, 6);
        int k = (int)dyn_rng_below(&rng, DYN_SCHEDULE_COUNT);
        int32_t v = k == DYN_SCHEDULE_INTERLEAVED ? 2 : 1;
        dyn_stage_costs c;
        random_costs(&rng, &c, M, S * v);
        dyn_exec_plan plan;
        assert_int_equal(build((dyn_schedule)k, &c, S, v, &plan, &err), DYN_OK);
        for (int hit = 0; hit < 1 + (int)dyn_rng_below(&rng, 3); hit++) {
            dyn_rank_plan *rp = &plan.ranks[dyn_rng_below(&rng, (uint64_t)S)];
            if (rp->n_instrs == 0) continue;
            dyn_instr *in = &rp->instrs[dyn_rng_below(&rng, (uint64_t)rp->n_instrs)];
            int32_t junk = (int32_t)dyn_rng_below(&rng, 40) - 10;
            switch (dyn_rng_below(&rng, 7)) {
            case 0: in->op = (uint8_t)dyn_rng_below(&rng, 20); break;
            case 1: in->microbatch = junk; break;
            case 2: in->stage = junk; break;
            case 3: in->peer = junk; break;
            case 4: in->buf_in = junk; break;
            case 5: in->buf_out = junk; break;
            default: in->bytes = (int64_t)junk * 1000; break;
            }
        }
        dyn_sim_options o = {0.01, 10.0, 100, (int32_t)dyn_rng_below(&rng, 2), 0};
        dyn_status st = dyn_sim_run(sim, &plan, &c, &o, NULL, &err);
        assert_true(st == DYN_OK || st == DYN_ERR_INVALID_ARG);
        rejected += st != DYN_OK;
        dyn_exec_plan_free(&plan);
        dyn_stage_costs_free(&c);
    }
    assert_true(rejected > 100);
    for (int iter = 0; iter < 300; iter++) {
        char text[256];
        const char *alphabet = "0123456789 \t\n.-#eabmsfdwktgp_";
        size_t n = dyn_rng_below(&rng, sizeof text - 40);
        int off = snprintf(text, sizeof text, "%s", iter % 2 ? "mb stage fwd_ms bwd_ms\n" : "");
        for (size_t i = 0; i < n; i++) text[off + i] = alphabet[dyn_rng_below(&rng, strlen(alphabet))];
        text[off + n] = '\0';
        dyn_stage_costs c;
        int64_t tokens;
        dyn_status st = dyn_whatif_parse("fuzz", text, &c, &tokens, &err);
        assert_true(st == DYN_OK || st == DYN_ERR_PARSE);
        if (st == DYN_OK) dyn_stage_costs_free(&c);
    }
    dyn_sim_free(sim);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_1f1b_closed_form_on_sched_plans),
        cmocka_unit_test(test_wait_free_cyclic_never_worse_than_cyclic),
        cmocka_unit_test(test_every_schedule_simulates_and_memory_agrees),
        cmocka_unit_test(test_auto_two_phases),
        cmocka_unit_test(test_auto_pruning_keeps_winner),
        cmocka_unit_test(test_lower_bound_is_a_bound),
        cmocka_unit_test(test_corrupted_plans_never_crash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
