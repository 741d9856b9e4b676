/* alloc.h — what each rank's interpreter (exec.c) will have allocated,
 * predicted from the plans and the cost model: the figure beside the
 * measured `peak_mem_mb` of `dynapipe train` (predicted_peak_mem_mb).
 *
 * The interpreter's memory is pools that only grow: an activation arena
 * per (micro-batch, stage) in flight, taken from a pool at FORWARD (best
 * fit, rt_arena_prefer) and given back after the last backward part, each
 * growing to the largest stored + working memory it ever held, with a
 * second buffer for what a split backward keeps from B to W; and a buffer
 * per slot index growing to the largest tensor it held. So a rank's
 * allocation is the sum over arenas and slots of their largest use so
 * far, not one iteration's live peak: the model walks every rank's
 * instructions the way the interpreter does, iteration after iteration,
 * and keeps the same pools. Per (micro-batch, stage) it uses the plan's
 * stage costs (stored_mb, peak_mb) and the cost model's kept_mb of the
 * stage's layers. */
#ifndef DYN_RUNTIME_ALLOC_H
#define DYN_RUNTIME_ALLOC_H

#include <stdint.h>

#include "dynapipe/cost.h"
#include "dynapipe/pipeline.h"

typedef struct rt_alloc rt_alloc;

/* The size key of a micro-batch's arena: its padded tokens. Activations
 * grow linearly with them (attention keeps a row log-sum-exp, not scores),
 * so the arena that held the most tokens is the largest. */
static inline double rt_arena_key(const dyn_mb_shape *s)
{
    return (double)s->rows * ((double)s->enc_len + (double)s->dec_len);
}

/* Which free arena a FORWARD takes, by the largest key each has held: 1
 * when one that held a is preferred to one that held b. Best fit: the
 * smallest that already held `key` (no growth), else the largest (the
 * least growth). Why not the first free one: with many micro-batches in
 * flight (zero-bubble schedules run ahead) first-free hands large shapes
 * to small arenas, and every arena regrows (freshly faulted pages) each
 * iteration. exec.c and the model of it here must choose alike. */
static inline int rt_arena_prefer(double key, double a, double b)
{
    int fa = a >= key, fb = b >= key;
    if (fa != fb) return fa;
    return fa ? a < b : a > b;
}

/* cm (borrowed, must outlive the handle): the planner's cost model;
 * n_ranks pipeline ranks, dp replicas; split_weight: the run's
 * dyn_plan_options.split_weight (copied; NULL: all 0), so the layers per
 * stage are the planner's. NULL on bad arguments (err set). */
rt_alloc *rt_alloc_create(const dyn_cost_model *cm, int32_t n_ranks, int32_t dp, const double *split_weight,
                          dyn_error *err);
void rt_alloc_free(rt_alloc *a);

/* A copy of a's pools (the same cost model borrowed): the planner keeps
 * one from before each queued iteration, to go back to when it plans the
 * iteration again. NULL when out of memory (err set). */
rt_alloc *rt_alloc_copy(const rt_alloc *a, dyn_error *err);

/* One iteration of replica `replica` with plan rp (validated, costs
 * attached): the pools grow as the interpreter's would, and peak_mb[r]
 * (n_ranks values) gets rank r's allocation after it, MB: model states of
 * the stages it holds + arenas + kept buffers + slots. An idle replica
 * (rp->n_microbatches == 0) leaves the pools as they were. */
dyn_status rt_alloc_iteration(rt_alloc *a, int32_t replica, const dyn_replica_plan *rp, double *peak_mb,
                              dyn_error *err);

#endif
