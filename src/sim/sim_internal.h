/* sim_internal.h — what the simulator's files share and the public API does
 * not show: the last run's results for the trace and SVG writers. */
#ifndef DYN_SIM_INTERNAL_H
#define DYN_SIM_INTERNAL_H

#include "dynapipe/sim.h"

/* Results of sim's last successful run, or NULL before the first. */
const dyn_sim_result *sim_last_result(const dyn_sim *sim);

/* costs with micro-batches in order (out[i] = in[order[i]]); out is
 * allocated (dyn_stage_costs_free). The order search's, and the pipeline's
 * for a replica's plan in the order it runs. */
dyn_status sim_stage_costs_permute(const dyn_stage_costs *in, const int32_t *order,
                                   dyn_stage_costs *out, dyn_error *err);

/* dyn_order_search for auto's phase 2. given_ms < 0: exactly
 * dyn_order_search. given_ms >= 0: the given order (candidate 0) is known
 * to be feasible with makespan given_ms and is not built again, and only a
 * candidate strictly faster than it is kept; if none is, DYN_OK with
 * res->candidate = -1, res->makespan_ms = given_ms and no plan or costs
 * written (the caller keeps its own). */
dyn_status sim_order_search(dyn_sim *sim, const dyn_sched_gen *gen, const dyn_stage_costs *costs,
                            const dyn_sim_options *opt, int32_t max_groups, double memory_limit_mb,
                            double given_ms, dyn_order_result *res, dyn_exec_plan *best_plan,
                            dyn_stage_costs *best_costs, dyn_error *err);

/* One micro-batch as a job on one rank, for the lower bound: its work
 * there can start only after its release (its forwards through the
 * earlier stages) and, but for zero-bubble weight-gradient passes, must end
 * a delivery time before the makespan (its backwards through the earlier
 * stages). */
typedef struct sim_lb_job {
    double release, delivery; /* ms */
    double work;              /* all its compute on the rank, ms */
    double work_nw;           /* the same without weight-gradient passes */
} sim_lb_job;

/* A lower bound (ms) on the simulated makespan of schedule k (a
 * dyn_schedule) on costs c with S ranks (stage s on rank s % S), valid for
 * any plan of that schedule, micro-batch order and link model (auto.c has
 * the argument). jobs: [c->n_microbatches] scratch. */
double sim_makespan_lower_bound(const dyn_stage_costs *c, int k, int32_t S, sim_lb_job *jobs);

#endif
