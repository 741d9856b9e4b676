/*
 * auto.c — `--schedule auto`: per global batch, the best schedule x
 * micro-batch order x recompute mode, chosen by simulation; and the plain
 * "this schedule, best order" search it is built from.
 *
 * The schedules come from src/sched (dyn_schedule_build); this file adapts
 * them to the order search's generator interface (permuting the micro-batch
 * shapes along with the costs, so the winning plan carries the right shapes
 * for the runtime) and loops over the candidates.
 *
 * Search: phase 1 schedules every candidate schedule under every recompute
 * mode in the planner's order and simulates it; phase 2 runs the order
 * search (dyn_order_search) on the phase-1 winner only. Searching orders for
 * every schedule would cost (schedules x modes x candidates) generations and
 * simulations, ~10x the 5 ms budget; the choice of schedule and recompute
 * mode depends far more on the micro-batch sizes and the memory limit than
 * on the order, so the order search goes where it pays. All three recompute
 * modes are tried because recomputation is not always slower: under a tight
 * memory limit a schedule throttles (fewer micro-batches in flight) and
 * recomputing can buy back more pipelining than it costs.
 */
#include <stdlib.h>
#include <string.h>

#include "dynapipe/sim.h"
#include "util/util.h" /* defines: dyn_calloc */

typedef struct sched_gen_ctx {
    dyn_schedule kind;
    dyn_sched_options opt;
    const dyn_mb_shape *shapes; /* [M] in the given order, or NULL */
    dyn_mb_shape *scratch;      /* [M] shapes in the candidate order */
} sched_gen_ctx;

static dyn_status gen_build(void *vctx, const dyn_stage_costs *costs, const int32_t *order,
                            dyn_exec_plan *out, dyn_error *err)
{
    sched_gen_ctx *ctx = vctx;
    const dyn_mb_shape *shapes = NULL;
    if (ctx->shapes) {
        for (int32_t i = 0; i < costs->n_microbatches; i++) ctx->scratch[i] = ctx->shapes[order[i]];
        shapes = ctx->scratch;
    }
    return dyn_schedule_build(ctx->kind, costs, shapes, &ctx->opt, out, err);
}

static void gen_free(void *vctx, dyn_exec_plan *plan)
{
    (void)vctx;
    dyn_exec_plan_free(plan);
}

dyn_status dyn_schedule_search(dyn_sim *sim, dyn_schedule kind, const dyn_stage_costs *costs,
                               const dyn_mb_shape *shapes, const dyn_sched_options *sopt,
                               const dyn_sim_options *simopt, int32_t order_groups,
                               dyn_order_result *res, dyn_exec_plan *best_plan,
                               dyn_stage_costs *best_costs, dyn_error *err)
{
    sched_gen_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.kind = kind;
    ctx.opt = *sopt;
    ctx.shapes = shapes;
    if (shapes) {
        ctx.scratch = dyn_calloc((size_t)costs->n_microbatches, sizeof(dyn_mb_shape), "shapes", err);
        if (ctx.scratch == NULL) return DYN_ERR_NOMEM;
    }
    dyn_sched_gen gen = {gen_build, gen_free, &ctx};
    dyn_status st = dyn_order_search(sim, &gen, costs, simopt, order_groups, sopt->memory_limit_mb,
                                     res, best_plan, best_costs, err);
    free(ctx.scratch);
    return st;
}

/* The running best of an auto search: owns its plan and costs. */
typedef struct auto_best {
    int have;
    dyn_exec_plan plan;
    dyn_stage_costs costs;
} auto_best;

/* Search schedule k (chunks v, recompute rc) with `groups` order groups and
 * keep it in *best / *choice if it beats them. Returns DYN_OK also when it
 * does not fit (then *fits = 0); other errors as dyn_schedule_search. */
static dyn_status try_schedule(dyn_sim *sim, dyn_costs_fn costs_fn, void *costs_ctx,
                               const dyn_mb_shape *shapes, const dyn_auto_options *ao,
                               const dyn_sim_options *simopt, int k, int32_t v, dyn_recompute rc,
                               int32_t groups, int32_t *order, dyn_auto_choice *choice,
                               auto_best *best, int *fits, double *makespan, char *why, dyn_error *err)
{
    const dyn_stage_costs *costs = NULL;
    dyn_status st = costs_fn(costs_ctx, v, rc, &costs, err);
    if (st != DYN_OK) return st;
    dyn_sched_options so;
    dyn_sched_options_default(&so);
    so.n_ranks = ao->n_ranks;
    so.chunks = v;
    so.memory_limit_mb = ao->memory_limit_mb;
    so.recompute = rc;
    so.replica = ao->replica;
    dyn_order_result res;
    memset(&res, 0, sizeof res);
    res.order = order;
    dyn_exec_plan plan;
    dyn_stage_costs pcosts;
    memset(&plan, 0, sizeof plan);
    memset(&pcosts, 0, sizeof pcosts);
    dyn_error e;
    st = dyn_schedule_search(sim, (dyn_schedule)k, costs, shapes, &so, simopt, groups, &res, &plan, &pcosts, &e);
    *fits = 0;
    if (st == DYN_ERR_INFEASIBLE) {
        snprintf(why, DYN_ERROR_MSG_MAX, "%s", e.msg);
        return DYN_OK;
    }
    if (st != DYN_OK) {
        if (err) *err = e;
        return st;
    }
    *fits = 1;
    *makespan = res.makespan_ms;
    choice->n_simulations += res.n_candidates;
    if (best->have && res.makespan_ms >= choice->makespan_ms) {
        dyn_exec_plan_free(&plan);
        dyn_stage_costs_free(&pcosts);
        return DYN_OK;
    }
    if (best->have) {
        dyn_exec_plan_free(&best->plan);
        dyn_stage_costs_free(&best->costs);
    }
    best->plan = plan;
    best->costs = pcosts;
    best->have = 1;
    choice->schedule = (dyn_schedule)k;
    choice->recompute = rc;
    choice->chunks = v;
    choice->makespan_ms = res.makespan_ms;
    choice->max_peak_mb = res.max_peak_mb;
    choice->order_candidate = res.candidate;
    memcpy(choice->order, order, sizeof(int32_t) * (size_t)costs->n_microbatches);
    return DYN_OK;
}

dyn_status dyn_schedule_auto(dyn_sim *sim, dyn_costs_fn costs_fn, void *costs_ctx,
                             const dyn_mb_shape *shapes, const dyn_auto_options *ao,
                             const dyn_sim_options *simopt, dyn_auto_choice *choice,
                             dyn_exec_plan *best_plan, dyn_stage_costs *best_costs,
                             dyn_error *err)
{
    if (choice == NULL || choice->order == NULL || ao == NULL || costs_fn == NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "auto schedule: missing argument");
    uint32_t mask = ao->schedules ? ao->schedules : (1u << DYN_SCHEDULE_COUNT) - 1;
    if (ao->chunks <= 1) mask &= ~(1u << DYN_SCHED_INTERLEAVED); /* needs v > 1 */
    /* Wait-free cyclic runs cyclic's instruction order without the barriers,
     * so it is never slower and holds the same memory (a tested property):
     * cyclic cannot win when both are candidates. */
    if (mask & (1u << DYN_SCHED_WAIT_FREE_CYCLIC)) mask &= ~(1u << DYN_SCHED_CYCLIC);
    const dyn_stage_costs *c1 = NULL;
    dyn_status st = costs_fn(costs_ctx, 1, DYN_RECOMPUTE_NONE, &c1, err);
    if (st != DYN_OK) return st;
    int32_t M = c1->n_microbatches;
    int32_t *order = dyn_calloc((size_t)M, sizeof(int32_t), "auto schedule", err);
    if (order == NULL) return DYN_ERR_NOMEM;
    auto_best best;
    memset(&best, 0, sizeof best);
    char why[DYN_ERROR_MSG_MAX] = "no schedule to try";
    choice->n_simulations = 0;
    /* Phase 1: every schedule under every recompute mode, in the planner's
     * order. A mode whose costs are the very same array as an earlier
     * mode's (a what-if file has one set) is not tried twice. */
    int first = -1, first_rc = 0;
    double first_ms = 0;
    const dyn_stage_costs *seen[2][DYN_RECOMPUTE_COUNT] = {{NULL}};
    for (int rc = 0; rc < DYN_RECOMPUTE_COUNT; rc++) {
        for (int k = 0; k < DYN_SCHEDULE_COUNT; k++) {
            if (!(mask & (1u << k))) continue;
            int32_t v = k == DYN_SCHED_INTERLEAVED ? ao->chunks : 1;
            const dyn_stage_costs *cr = NULL;
            if ((st = costs_fn(costs_ctx, v, (dyn_recompute)rc, &cr, err)) != DYN_OK) goto done;
            int dup = 0;
            for (int q = 0; q < rc; q++) dup |= seen[v > 1][q] == cr;
            seen[v > 1][rc] = cr;
            if (dup) continue;
            int fits;
            double ms;
            st = try_schedule(sim, costs_fn, costs_ctx, shapes, ao, simopt, k, v, (dyn_recompute)rc, 1, order,
                              choice, &best, &fits, &ms, why, err);
            if (st != DYN_OK) goto done;
            if (fits && (first < 0 || ms < first_ms)) {
                first = k;
                first_rc = rc;
                first_ms = ms;
            }
        }
    }
    /* Phase 2: the order search on the best of phase 1. */
    if (first >= 0 && ao->order_groups > 1) {
        int fits;
        double ms;
        int32_t v = first == DYN_SCHED_INTERLEAVED ? ao->chunks : 1;
        st = try_schedule(sim, costs_fn, costs_ctx, shapes, ao, simopt, first, v, (dyn_recompute)first_rc,
                          ao->order_groups, order, choice, &best, &fits, &ms, why, err);
        if (st != DYN_OK) goto done;
    }
    if (!best.have) {
        st = dyn_error_set(err, DYN_ERR_INFEASIBLE,
                           "no schedule fits the memory limit under any recompute mode (%s)", why);
        goto done;
    }
    if (best_plan) {
        *best_plan = best.plan;
        memset(&best.plan, 0, sizeof best.plan);
    }
    if (best_costs) {
        *best_costs = best.costs;
        memset(&best.costs, 0, sizeof best.costs);
    }
    st = DYN_OK;
done:
    dyn_exec_plan_free(&best.plan);
    dyn_stage_costs_free(&best.costs);
    free(order);
    return st;
}
