/* planner.h — the planner thread of world rank 0: it plans global batches
 * ahead of training (sampler -> micro-batches -> schedule per replica ->
 * validated plans -> work messages) into a bounded queue that the main
 * thread drains. It makes no MPI calls (MPI_THREAD_FUNNELED). */
#ifndef DYN_RUNTIME_PLANNER_H
#define DYN_RUNTIME_PLANNER_H

#include <stddef.h>
#include <stdint.h>

#include "dynapipe/data.h"
#include "runtime/calibrate.h" /* defines: RT_CALIB_DIRS */
#include "runtime/train.h"

/* One planned iteration: a packed work message per replica. */
typedef struct rt_planned {
    int64_t iteration;
    int32_t dp;
    uint8_t **msg;    /* [dp] dyn_rt_work_pack output */
    size_t *len;      /* [dp] */
    double plan_ms;   /* planner wall time for this global batch, ms */
    int32_t schedule; /* replica 0's schedule (dyn_schedule) */
    int32_t n_mb;     /* micro-batches over all replicas */
    int64_t sampler_pos; /* the sampler's position after this batch (what a checkpoint
                          * saved after this iteration records) */
    int32_t *ids;        /* [n_ids] the batch's dataset indices, in training order */
    int32_t n_ids;
    /* the planner's own: its state before this batch, to plan it again */
    int64_t sampler_before;
    struct rt_alloc *alloc_before; /* with --calibrate only, else NULL */
} rt_planned;

void rt_planned_free(rt_planned *p);

typedef struct rt_planner rt_planner;

/* lengths: the dataset (borrowed; must outlive the planner). */
rt_planner *rt_planner_create(const dyn_train_options *o, const dyn_dataset *lengths, dyn_error *err);
/* Resume: plan iterations from first_step on, with the sampler at pos
 * (a checkpoint's sampler position). Before rt_planner_start only. */
dyn_status rt_planner_seek(rt_planner *p, int64_t first_step, int64_t pos, dyn_error *err);
/* Start the thread; it plans iterations first_step..o->steps-1 (first_step
 * 0 unless seeked), at most o->plan_ahead ahead of the consumer, and stays
 * until rt_planner_free to plan the last ones again after a correction. */
dyn_status rt_planner_start(rt_planner *p, dyn_error *err);
/* Iteration k's plans (taken in order, k = 0, 1, ...). block = 0: *out =
 * NULL when not ready yet. block = 1: wait up to timeout_s, then
 * DYN_ERR_INTERNAL "planner: no plan for iteration k after T s". A planning
 * error (e.g. a sample that fits no micro-batch) is returned as the
 * planner reported it. */
dyn_status rt_planner_take(rt_planner *p, int64_t k, int block, double timeout_s, rt_planned **out,
                           dyn_error *err);
/* Samples per epoch: the dataset less the held-out split (o->eval_split). */
int32_t rt_planner_train_count(const rt_planner *p);
/* Batches planned again after a correction so far (calibration only), and
 * batches planned and waiting to be taken now. */
int64_t rt_planner_replanned(rt_planner *p);
int32_t rt_planner_queued(rt_planner *p);
/* Stop the thread (it finishes the batch it is planning) and free. */
void rt_planner_free(rt_planner *p);

/* Online calibration (calibrate.h): from the next batch it plans, pipeline
 * rank r's predictions carry factor[r * RT_CALIB_DIRS + d] for direction d
 * (forward, backward, optimizer step), S = o->plan.stages ranks. The cost
 * model's layer kinds (what the DP sees) take the mean over ranks per
 * direction, the pipeline's stage costs each rank's own
 * (dyn_pipeline_set_rank_scale). Batches planned but not taken yet are
 * planned again with the new factors (the same samples: the sampler and
 * the allocation model go back to where they were before the first of
 * them), so a correction reaches the very next iteration not sent.
 * Thread-safe; any thread. */
void rt_planner_set_time_scale(rt_planner *p, const double *factor);

/* What iteration k's predictions carried, for the calibration: factor[S *
 * RT_CALIB_DIRS] as above, and opt_ms[S] the optimizer step predicted per
 * pipeline rank. 1 when k is still known (the last 128 planned), else 0. */
int rt_planner_carried(rt_planner *p, int64_t k, double *factor, double *opt_ms);
/* The optimizer step included in iteration k's predicted_ms (the slowest
 * rank's), ms; 0 when k is no longer known. */
double rt_planner_step_ms(rt_planner *p, int64_t k);

/* Plan one iteration synchronously on the calling thread (what the thread
 * runs; tests call it directly). */
dyn_status rt_planner_plan_one(rt_planner *p, int64_t k, rt_planned **out, dyn_error *err);

#endif
