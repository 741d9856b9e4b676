/* plan_exec.h — the execution plan of one replica's micro-batches for a
 * named schedule or for `auto` (best schedule x order x recompute by
 * simulation), validated: the step `dynapipe plan --show-plan/--plan-out`
 * and `dynapipe simulate` share. */
#ifndef DYN_CLI_PLAN_EXEC_H
#define DYN_CLI_PLAN_EXEC_H

#include "dynapipe/sched.h"
#include "dynapipe/sim.h"

#define PLAN_EXEC_AUTO DYN_SCHEDULE_COUNT /* pseudo-schedule: --schedule auto */

typedef struct plan_exec_request {
    int32_t schedule;        /* dyn_schedule, or PLAN_EXEC_AUTO */
    int32_t n_ranks;         /* S */
    int32_t chunks;          /* v of the interleaved schedule (--chunks) */
    int32_t auto_chunks;     /* chunks auto may try (1: no interleaved) */
    double memory_limit_mb;  /* per device, MB */
    dyn_recompute recompute; /* of a named schedule (auto chooses its own) */
    int32_t order_groups;    /* auto's order search, 1..4 */
    int32_t replica;         /* recorded in the plan */
} plan_exec_request;

typedef struct plan_exec_result {
    dyn_exec_plan plan;            /* validated */
    const dyn_stage_costs *costs;  /* the costs the plan was built for (own, or costs_fn's) */
    dyn_stage_costs own;           /* auto's reordered costs */
    dyn_schedule schedule;         /* what was built (auto: what it chose) */
    dyn_recompute recompute;
} plan_exec_result;

/* Build and validate. out is zeroed first and, on success, released with
 * plan_exec_result_free; on failure nothing is left to free. */
dyn_status plan_exec_build(dyn_sim *sim, const plan_exec_request *rq, dyn_costs_fn costs_fn,
                           void *costs_ctx, const dyn_mb_shape *shapes, const dyn_sim_options *simopt,
                           plan_exec_result *out, dyn_error *err);
void plan_exec_result_free(plan_exec_result *r);

#endif
