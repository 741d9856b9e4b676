/* step.h — this rank's stage models and the optimizer step of
 * `dynapipe train` (train.c drives them).
 *
 * Stage models. A rank holds the parameters, gradients and AdamW moments of
 * its own stages only (one stage model per chunk: dyn_model_create_stage),
 * plus copies of the shared tensors those stages use (GPT's tied embedding
 * on the first and the last stage; T5's shared embedding and relative-bias
 * tables).
 *
 * The step, after the plan's last instruction: (1) each shared tensor's
 * gradient is summed over the ranks holding it (one small communicator
 * per tensor) and written back into every copy; (2) with data parallelism,
 * every held gradient is summed over the replicas of the stage (started
 * as each stage's backward finishes: rt_stages_stage_done); (3) the
 * global gradient norm is the square root of the owned tensors' squared
 * norms summed over the pipeline (dyn_model_grad_sqnorm_owned counts each
 * tensor once); (4) every rank clips by that norm and takes the same AdamW
 * step, so shared copies and replicas stay identical. */
#ifndef DYN_RUNTIME_STEP_H
#define DYN_RUNTIME_STEP_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "dynapipe/common.h"
#include "model/model.h"
#include "runtime/group.h"
#include "runtime/train.h"

/* A stage model's gradient allreduce goes in parts of at most 2^30 floats
 * (MPI counts are int). */
#define RT_DP_PARTS 8
#define RT_DP_PART_FLOATS ((size_t)1 << 30)

/* A shared tensor held by this rank: the local chunks holding a copy, and
 * the communicator of the ranks holding one (MPI_COMM_NULL when all
 * holders are on this rank). */
typedef struct rt_shared {
    char name[96];
    int32_t n_local, local[8]; /* chunk indices */
    size_t numel;
    float *sum;                /* numel scratch */
    MPI_Comm comm;
} rt_shared;

/* This rank's part of the model and what the step needs of it. */
typedef struct rt_stages {
    const dyn_train_options *o;
    const dyn_rt_group *g;
    void (*poll)(void *ctx);      /* called while the step waits (the run's poll hook) */
    void *poll_ctx;
    dyn_model **models;           /* [n_local]: chunk c holds plan stage c * S + stage_rank */
    int32_t n_local;
    int32_t *lay_first, n_stages; /* [n_stages + 1]: plan stage s = model layers [lay_first[s], lay_first[s+1]) */
    rt_shared *shared;            /* [n_shared] shared tensors this rank holds */
    int n_shared;
    MPI_Request (*dp_req)[RT_DP_PARTS]; /* [n_local]: a chunk's data-parallel allreduce in flight */
    int *dp_started;              /* [n_local] */
    double states_mb;             /* parameters, gradients and moments of the models, MB */
} rt_stages;

/* What the step reports. */
typedef struct rt_step_out {
    double grad_norm; /* the whole model's gradient norm, before clipping */
    double lr;        /* the rate of this step */
    double ms;        /* gradient norm and AdamW on this rank (the waits for sums not counted) */
} rt_step_out;

/* The plan stages' layers (the planner's own assignment, so plan stages
 * and model layers agree on every rank), this rank's stage models with
 * `threads` kernel threads, and the shared tensors among them and its
 * pipeline peers. Collective over the pipeline (MPI_Comm_split). Waits of
 * the step call poll(poll_ctx). Free with rt_stages_free, also on failure. */
dyn_status rt_stages_create(rt_stages *s, const dyn_train_options *o, const dyn_rt_group *g, int threads,
                            void (*poll)(void *), void *poll_ctx, dyn_error *err);
void rt_stages_free(rt_stages *s);

/* The interpreter's stage_done: plan stage `stage`'s weight gradients of
 * this iteration are complete, so its data-parallel allreduce starts and
 * overlaps the rest of the plan. */
dyn_status rt_stages_stage_done(rt_stages *s, int32_t stage, dyn_error *err);

/* Drive the data-parallel allreduces in flight (MPI_Test); for the poll
 * hook. */
void rt_stages_poll(rt_stages *s);

/* The step of iteration k (steps 1-4 above); *out its norm, rate, time.
 * loss_sum: this rank's summed target-token loss of the iteration (0 off
 * the last stage). A non-finite loss or gradient norm is DYN_ERR_NUMERIC
 * on every rank of the replica ("step K/N: loss is nan"), with no weight
 * touched. */
dyn_status rt_stages_step(rt_stages *s, int64_t k, double loss_sum, rt_step_out *out, dyn_error *err);

/* Replica 0's ranks send their owned tensors to rank 0, which assembles
 * the whole model into *out (NULL elsewhere): for --save FILE and
 * --eval-every. Collective over replica 0's pipeline. */
dyn_status rt_stages_gather_full(const rt_stages *s, dyn_model **out, dyn_error *err);

#endif
