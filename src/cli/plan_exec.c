/* plan_exec.c — one replica's validated execution plan for a named schedule
 * or auto (see plan_exec.h). */
#include "cli/plan_exec.h"

#include <stdlib.h>
#include <string.h>

#include "util/util.h" /* defines: dyn_calloc */

static dyn_status build_auto(dyn_sim *sim, const plan_exec_request *rq, dyn_costs_fn costs_fn,
                             void *costs_ctx, const dyn_mb_shape *shapes, const dyn_sim_options *simopt,
                             plan_exec_result *out, dyn_error *err)
{
    const dyn_stage_costs *c1;
    dyn_status st = costs_fn(costs_ctx, 1, DYN_RECOMPUTE_NONE, &c1, err);
    if (st != DYN_OK) return st;
    dyn_auto_options ao;
    memset(&ao, 0, sizeof ao);
    ao.n_ranks = rq->n_ranks;
    ao.chunks = rq->auto_chunks;
    ao.memory_limit_mb = rq->memory_limit_mb;
    ao.order_groups = rq->order_groups;
    ao.replica = rq->replica;
    dyn_auto_choice choice;
    memset(&choice, 0, sizeof choice);
    choice.order = dyn_calloc((size_t)c1->n_microbatches, sizeof(int32_t), "schedule order", err);
    if (choice.order == NULL) return DYN_ERR_NOMEM;
    st = dyn_schedule_auto(sim, costs_fn, costs_ctx, shapes, &ao, simopt, &choice, &out->plan, &out->own, err);
    free(choice.order);
    if (st != DYN_OK) return st;
    out->costs = &out->own;
    out->schedule = choice.schedule;
    out->recompute = choice.recompute;
    return DYN_OK;
}

static dyn_status build_named(const plan_exec_request *rq, dyn_costs_fn costs_fn, void *costs_ctx,
                              const dyn_mb_shape *shapes, plan_exec_result *out, dyn_error *err)
{
    dyn_schedule kind = (dyn_schedule)rq->schedule;
    int32_t v = kind == DYN_SCHED_INTERLEAVED ? rq->chunks : 1;
    if (kind == DYN_SCHED_INTERLEAVED && v < 2)
        return dyn_error_set(err, DYN_ERR_INFEASIBLE, "the interleaved schedule needs --chunks 2 or more");
    dyn_status st = costs_fn(costs_ctx, v, rq->recompute, &out->costs, err);
    if (st != DYN_OK) return st;
    dyn_sched_options so;
    dyn_sched_options_default(&so);
    so.n_ranks = rq->n_ranks;
    so.chunks = v;
    so.memory_limit_mb = rq->memory_limit_mb;
    so.recompute = rq->recompute;
    so.replica = rq->replica;
    if ((st = dyn_schedule_build(kind, out->costs, shapes, &so, &out->plan, err)) != DYN_OK) return st;
    out->schedule = kind;
    out->recompute = rq->recompute;
    return DYN_OK;
}

dyn_status plan_exec_build(dyn_sim *sim, const plan_exec_request *rq, dyn_costs_fn costs_fn,
                           void *costs_ctx, const dyn_mb_shape *shapes, const dyn_sim_options *simopt,
                           plan_exec_result *out, dyn_error *err)
{
    memset(out, 0, sizeof *out);
    dyn_status st = rq->schedule == PLAN_EXEC_AUTO
                        ? build_auto(sim, rq, costs_fn, costs_ctx, shapes, simopt, out, err)
                        : build_named(rq, costs_fn, costs_ctx, shapes, out, err);
    /* A plan is validated before anyone uses it. */
    if (st == DYN_OK) st = dyn_exec_plan_validate(&out->plan, err);
    if (st != DYN_OK) plan_exec_result_free(out);
    return st;
}

void plan_exec_result_free(plan_exec_result *r)
{
    dyn_exec_plan_free(&r->plan);
    dyn_stage_costs_free(&r->own);
    memset(r, 0, sizeof *r);
}
