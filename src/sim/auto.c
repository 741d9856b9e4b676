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
 * Recompute modes are tried in the order none, selective, full, and the loop
 * stops at the first mode under which some schedule fits the memory limit:
 * recomputation only adds time (the cost model's bwd_ms includes the
 * recomputed forward), so a feasible plan without it is what we want, and
 * skipping the other modes keeps auto within its time budget.
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
    int have = 0;
    dyn_status st = DYN_OK;
    dyn_exec_plan plan;
    dyn_stage_costs pcosts;
    memset(&plan, 0, sizeof plan);
    memset(&pcosts, 0, sizeof pcosts);
    int32_t M = 0;
    int32_t *order = NULL;
    char last_infeasible[DYN_ERROR_MSG_MAX] = "";
    choice->n_simulations = 0;
    for (int rc = 0; rc < DYN_RECOMPUTE_COUNT && !have; rc++) {
        for (int k = 0; k < DYN_SCHEDULE_COUNT; k++) {
            if (!(mask & (1u << k))) continue;
            int32_t v = k == DYN_SCHED_INTERLEAVED ? ao->chunks : 1;
            const dyn_stage_costs *costs = NULL;
            if ((st = costs_fn(costs_ctx, v, (dyn_recompute)rc, &costs, err)) != DYN_OK) goto done;
            if (order == NULL) {
                M = costs->n_microbatches;
                order = dyn_calloc((size_t)M, sizeof(int32_t), "auto schedule", err);
                if (order == NULL) {
                    st = DYN_ERR_NOMEM;
                    goto done;
                }
            }
            dyn_sched_options so;
            dyn_sched_options_default(&so);
            so.n_ranks = ao->n_ranks;
            so.chunks = v;
            so.memory_limit_mb = ao->memory_limit_mb;
            so.recompute = (dyn_recompute)rc;
            so.replica = ao->replica;
            dyn_order_result res;
            memset(&res, 0, sizeof res);
            res.order = order;
            dyn_error e;
            st = dyn_schedule_search(sim, (dyn_schedule)k, costs, shapes, &so, simopt, ao->order_groups,
                                     &res, &plan, &pcosts, &e);
            if (st == DYN_ERR_INFEASIBLE) {
                snprintf(last_infeasible, sizeof last_infeasible, "%s", e.msg);
                st = DYN_OK;
                continue;
            }
            if (st != DYN_OK) {
                if (err) *err = e;
                goto done;
            }
            choice->n_simulations += res.n_candidates;
            if (!have || res.makespan_ms < choice->makespan_ms) {
                if (have) {
                    if (best_plan) dyn_exec_plan_free(best_plan);
                    if (best_costs) dyn_stage_costs_free(best_costs);
                }
                choice->schedule = (dyn_schedule)k;
                choice->recompute = (dyn_recompute)rc;
                choice->chunks = v;
                choice->makespan_ms = res.makespan_ms;
                choice->max_peak_mb = res.max_peak_mb;
                choice->order_candidate = res.candidate;
                memcpy(choice->order, order, sizeof(int32_t) * (size_t)M);
                if (best_plan) *best_plan = plan; else dyn_exec_plan_free(&plan);
                if (best_costs) *best_costs = pcosts; else dyn_stage_costs_free(&pcosts);
                memset(&plan, 0, sizeof plan);
                memset(&pcosts, 0, sizeof pcosts);
                have = 1;
            } else {
                dyn_exec_plan_free(&plan);
                dyn_stage_costs_free(&pcosts);
            }
        }
    }
    if (!have)
        st = dyn_error_set(err, DYN_ERR_INFEASIBLE,
                           "no schedule fits the memory limit under any recompute mode (%s)",
                           last_infeasible[0] ? last_infeasible : "no schedule to try");
done:
    if (st != DYN_OK && have) {
        if (best_plan) dyn_exec_plan_free(best_plan);
        if (best_costs) dyn_stage_costs_free(best_costs);
    }
    free(order);
    return st;
}
