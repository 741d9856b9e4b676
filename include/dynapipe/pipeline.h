/*
 * pipeline.h — one global batch in, every data-parallel replica's validated
 * execution plan out: the entry point the CLI (`dynapipe plan`, `dynapipe
 * simulate`), the MPI runtime's planner thread and the Python binding call.
 *
 *   dyn_planner  *pl = dyn_planner_create(cm, &plan_opt, &err);
 *   dyn_pipeline *pp = dyn_pipeline_create(pl, &pipe_opt, &err);
 *   for each global batch:
 *       dyn_pipeline_result res;
 *       dyn_pipeline_plan(pp, samples, n, &res, &err);
 *       ... res.batch (micro-batches, sample ids), res.replicas[d] (plans) ...
 *       dyn_pipeline_result_free(&res);
 *   dyn_pipeline_free(pp); dyn_planner_free(pl);
 *
 * One call does, for one global batch: the planner's micro-batching (the DP
 * or a baseline, balanced over the d replicas), then for every replica: the
 * replica's stage costs (layers assigned to stages once per run, balanced
 * for the options' split_weight or one row of max_seqlen tokens: sched.h
 * dyn_stage_assign_run), the schedule
 * (a named one, or DYN_SCHEDULE_AUTO: best schedule x micro-batch order x
 * recompute by simulation, sim.h dyn_schedule_auto), validation
 * (dyn_exec_plan_validate) and one simulation of the final plan (makespan,
 * busy time and peak memory per rank, the predicted figures a runtime
 * compares its measurements with).
 *
 * Threads: no globals and no hidden state. A dyn_pipeline holds workspaces
 * only (the borrowed planner's cost cache, stage assignments, a simulator);
 * the same inputs give the same plans, bit for bit. One handle is used by
 * one thread at a time; distinct handles (each with its own planner) may
 * run on different threads at once and may share one cost model, which is
 * read-only.
 *
 * Units: ms, MB (MiB) per device, tokens.
 */
#ifndef DYNAPIPE_PIPELINE_H
#define DYNAPIPE_PIPELINE_H

#include "dynapipe/common.h"
#include "dynapipe/plan.h"
#include "dynapipe/sched.h"
#include "dynapipe/sim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- stage costs of a global batch (src/pipeline/batch_costs.c) -------------
 * The glue between the planner's dyn_batch_plan, the cost model and
 * src/sched's layer-to-stage assignment: the layers are assigned once per
 * chunk count (sched.h dyn_stage_assign_run: the run's split weights, or
 * one row of max_seqlen tokens, no recompute) and
 * each batch's costs are built lazily per (chunks, recompute) and cached
 * until the next batch. */
typedef struct dyn_batch_costs dyn_batch_costs;

/* cm must outlive the handle. n_ranks S >= 1, chunks v >= 1 (v > 1 also
 * assigns S * v stages for the interleaved schedule, if the model has that
 * many layers). split_weight: the run's dyn_plan_options.split_weight
 * (sched.h dyn_stage_assign_run; NULL or all 0: balanced for one row of
 * max_seqlen). Errors from the assignment, e.g. more stages than layers. */
dyn_batch_costs *dyn_batch_costs_create(const dyn_cost_model *cm, int32_t n_ranks, int32_t chunks,
                                        const double *split_weight, dyn_error *err);
void dyn_batch_costs_free(dyn_batch_costs *bc);
/* Use replica `replica`'s micro-batches of bp (borrowed until the next call). */
dyn_status dyn_batch_costs_set_batch(dyn_batch_costs *bc, const dyn_batch_plan *bp, int32_t replica,
                                     dyn_error *err);
/* A dyn_costs_fn (ctx = the dyn_batch_costs): costs for chunks 1 or v. */
dyn_status dyn_batch_costs_get(void *ctx, int32_t chunks, dyn_recompute rc,
                               const dyn_stage_costs **out, dyn_error *err);
/* Chunks available: v, or 1 when S * v stages are more than the model's
 * layers (then costs for v fail with DYN_ERR_INFEASIBLE saying so). */
int32_t dyn_batch_costs_chunks(const dyn_batch_costs *bc);
/* The current batch's micro-batch shapes, [*n_microbatches]. */
const dyn_mb_shape *dyn_batch_costs_shapes(const dyn_batch_costs *bc, int32_t *n_microbatches);
/* Multiply the times of every stage held by pipeline rank r (plan stage s
 * with s % S == r) by fwd[r] (forward) and bwd[r] (backward and both of its
 * halves), fwd and bwd of S = n_ranks factors each (> 0, finite), from the
 * next batch on: the online calibration's per-rank correction on top of
 * the cost model's. NULL arrays: back to 1. */
dyn_status dyn_batch_costs_set_rank_scale(dyn_batch_costs *bc, const double *fwd, const double *bwd,
                                          dyn_error *err);

/* ---- the entry point ------------------------------------------------------ */

typedef struct dyn_pipeline_options {
    dyn_schedule schedule;     /* dyn_schedule, or DYN_SCHEDULE_AUTO */
    int32_t order_groups; /* auto's micro-batch order search, 1..DYN_ORDER_MAX_GROUPS */
} dyn_pipeline_options;

/* DYN_SCHEDULE_AUTO with 4 order groups. */
void dyn_pipeline_options_default(dyn_pipeline_options *opt);

/* One replica's execution plan and what it was built from. Micro-batch j
 * of plan, costs and mb_index is the same micro-batch. */
typedef struct dyn_replica_plan {
    int32_t replica;        /* 0..d-1 */
    int32_t n_microbatches; /* M; 0: an idle replica (nothing below is set) */
    dyn_exec_plan plan;     /* validated; plan.replica == replica */
    dyn_stage_costs costs;  /* per (micro-batch, stage) costs the plan was built and
                               simulated with (ms, MB), under `recompute` and `chunks` */
    int32_t *mb_index;      /* [M]: index in dyn_pipeline_result.batch.mbs of plan
                               micro-batch j (dyn_replica_plan_from_costs: index in the
                               caller's micro-batch order) */
    dyn_schedule schedule;  /* built (auto: chosen) */
    dyn_recompute recompute;
    int32_t chunks;         /* v the plan uses: n_stages = n_ranks * chunks */
    double makespan_ms;     /* simulated, link model of the cost model's machine */
    double max_peak_mb;     /* simulated, max over ranks; within the memory limit */
    double *rank_busy_ms;   /* [n_ranks] compute time per rank, simulated */
    double *rank_peak_mb;   /* [n_ranks] peak memory per rank, simulated */
} dyn_replica_plan;

/* Release r's arrays and zero it (safe on a zeroed struct). */
void dyn_replica_plan_free(dyn_replica_plan *r);

/* ---- the ideal bound (src/pipeline/bound.c) --------------------------------
 * How fast a global batch could run at best on S stages x d replicas: every
 * sample's own compute at the cost model's rates -- no padding, no
 * attention across documents, the kernels' rates at that sample's size,
 * nothing recomputed -- spread perfectly over the S * d devices, plus one
 * optimizer step over 1/S of the parameters. A sample's compute is the
 * marginal cost of a row of its shape through every layer, fwd + bwd:
 * (cost of 2K such rows - cost of K rows) / K with K = 64, so the fixed
 * per-launch costs (the analytic model's gemm_n_half rows and per-layer
 * overhead) that batching amortises are not charged to each sample. Any
 * plan's iteration (its slowest replica's makespan plus its busiest rank's
 * optimizer step) is at least this, so efficiency = bound / iteration is
 * at most 1 (up to a table model's interpolation). */
typedef struct dyn_ideal_bound {
    double compute_ms; /* sum over samples of their fwd + bwd through every layer / (S * d), ms */
    double step_ms;    /* optimizer step over the model's parameters / S, ms */
    double bound_ms;   /* compute_ms + step_ms */
} dyn_ideal_bound;

/* The bound of the n samples of one global batch on `stages` x `dp`
 * devices (both >= 1). Errors: bad arguments, the cost model's. */
dyn_status dyn_ideal_bound_of(const dyn_cost_model *cm, const dyn_sample *samples, int32_t n, int32_t stages,
                              int32_t dp, dyn_ideal_bound *out, dyn_error *err);

/* The share of a micro-batch's compute that its samples' own compute is,
 * in [0, 1]: the sum over its n samples of each one's marginal cost (as
 * in the bound) over the micro-batch shape's own marginal cost (the same
 * K rows rule, K copies of the shape). 1 - it is the padding, masked
 * attention and cross-document attention the shape adds. Errors: bad
 * arguments, the cost model's. */
dyn_status dyn_mb_useful_fraction(const dyn_cost_model *cm, const dyn_mb_shape *shape, const dyn_sample *samples,
                                  int32_t n, double *frac, dyn_error *err);

/* One global batch, planned. */
typedef struct dyn_pipeline_result {
    dyn_batch_plan batch;       /* the planner's micro-batches, sample ids, figures; batch.method
                                   and batch.knob say which candidate won (dynapipe) */
    int32_t n_replicas;         /* d */
    dyn_replica_plan *replicas; /* [d] */
    dyn_ideal_bound ideal;      /* the batch's ideal bound on S x d devices */
    double step_ms;             /* the optimizer step of the busiest rank (its stages' parameters), ms */
    double iteration_ms;        /* slowest replica's makespan + step_ms */
    double efficiency;          /* ideal.bound_ms / iteration_ms, in (0, 1] */
} dyn_pipeline_result;

/* The optimizer step of r's busiest rank, ms: parameters from the model
 * states of the stages it holds (16 bytes per parameter: weights, grads
 * and the two moments, in both precisions of the cost model). 0 for an
 * idle replica. */
double dyn_replica_plan_step_ms(const dyn_cost_model *cm, const dyn_replica_plan *r);

/* Release r's batch plan and replica plans and zero it (safe on a zeroed
 * struct and on NULL). */
void dyn_pipeline_result_free(dyn_pipeline_result *r);

typedef struct dyn_pipeline dyn_pipeline;

/* A pipeline over planner (borrowed: it must outlive the pipeline and not be
 * used elsewhere meanwhile), which must have been made by
 * dyn_planner_create (over a cost model). Stages, chunks, dp, memory limit
 * and recompute mode are the planner's options. Errors: opt out of range,
 * a custom planner, more stages than the model has layers. */
dyn_pipeline *dyn_pipeline_create(dyn_planner *planner, const dyn_pipeline_options *opt,
                                  dyn_error *err);
void dyn_pipeline_free(dyn_pipeline *p); /* NULL is a no-op; the planner is not freed */
/* dyn_batch_costs_set_rank_scale on the pipeline's stage costs: the
 * simulated plans (schedule choice, makespan, stage costs) of later
 * batches use per-rank factors fwd[S], bwd[S]; the planner's DP does not
 * see them (it sees the cost model's). */
dyn_status dyn_pipeline_set_rank_scale(dyn_pipeline *p, const double *fwd, const double *bwd, dyn_error *err);

/* Plan one global batch of n samples (ids are their positions in samples'
 * source; see dyn_planner_plan) and build every replica's plan under the
 * pipeline's schedule. dynapipe with enable_packing (the default) is never
 * behind its candidates: the planner's plan, the DP's alone, and the
 * baselines' plans -- packing-docmask, padding and token at every value of
 * the knob sequence dyn_pipeline_tune tries (so the tuned value among
 * them), up to the first that does not fit or makes one micro-batch -- are
 * each scheduled under the pipeline's schedule (auto: its search) and
 * simulated; the shortest iteration wins (res.batch.method, .knob). Plain
 * packing is no candidate: it attends across documents. out is zeroed first; on success free it with
 * dyn_pipeline_result_free; on failure nothing is left to free.
 * DYN_ERR_INFEASIBLE when the batch or a replica's schedule does not fit
 * the memory limit (the message says which replica). */
dyn_status dyn_pipeline_plan(dyn_pipeline *p, const dyn_sample *samples, int32_t n,
                             dyn_pipeline_result *out, dyn_error *err);

/* Replica `replica`'s plan of an already planned batch bp (made by this
 * pipeline's planner) under `schedule` (dyn_schedule or DYN_SCHEDULE_AUTO),
 * whatever the pipeline's option: for comparing schedules on one batch.
 * out as dyn_pipeline_plan's replicas (free with dyn_replica_plan_free). */
dyn_status dyn_pipeline_plan_replica(dyn_pipeline *p, const dyn_batch_plan *bp, int32_t replica,
                                      dyn_schedule schedule, dyn_replica_plan *out, dyn_error *err);

/* Chunks the stage assignment allows: the planner's v, or 1 when S * v
 * stages are more than the model's layers (then the interleaved schedule
 * fails with DYN_ERR_INFEASIBLE saying so, and auto leaves it out). */
int32_t dyn_pipeline_chunks(const dyn_pipeline *p);

/* ---- the step under it, for costs from elsewhere ----------------------------
 * Build, validate and simulate one replica's plan from a cost function (sim.h
 * dyn_costs_fn: costs per chunk count and recompute mode, in the caller's
 * micro-batch order), e.g. a what-if file's costs. */
typedef struct dyn_replica_request {
    dyn_schedule schedule;        /* dyn_schedule, or DYN_SCHEDULE_AUTO */
    int32_t n_ranks;         /* S */
    int32_t chunks;          /* v of the interleaved schedule (>= 2 to use it) */
    int32_t auto_chunks;     /* chunks auto may try (1: no interleaved) */
    double memory_limit_mb;  /* per device, MB; <= 0: none */
    dyn_recompute recompute; /* of a named schedule (auto chooses its own) */
    int32_t order_groups;    /* auto's order search, 1..DYN_ORDER_MAX_GROUPS */
    int32_t replica;         /* recorded in the plan */
} dyn_replica_request;

/* shapes [M] (or NULL: zero shapes) are the micro-batches' padded shapes in
 * the caller's order; simopt the link model (its events are not recorded).
 * out is zeroed first; on failure nothing is left to free. The simulated
 * peak must be within the limit, else DYN_ERR_INFEASIBLE. */
dyn_status dyn_replica_plan_from_costs(dyn_sim *sim, const dyn_replica_request *rq, dyn_costs_fn costs_fn,
                                  void *costs_ctx, const dyn_mb_shape *shapes,
                                  const dyn_sim_options *simopt, dyn_replica_plan *out,
                                  dyn_error *err);

/* ---- tuned baselines (src/pipeline/tune.c) ----------------------------------
 * A baseline's size knob (padding mb_samples, packing and packing-docmask
 * pack_rows, token mb_tokens) left at 0 is tuned: the value with the smallest
 * mean simulated iteration time over the given global batches, each batch
 * planned and scheduled as dyn_pipeline_plan does (pipe_opt: normally auto,
 * which also chooses recompute), under opt's memory limit. Candidates: powers
 * of two (token: from a quarter of one max_seqlen row, T5 counting both
 * sides) and the most that fit, up to the first value some batch cannot plan
 * or the first at which every batch is one micro-batch. A value that leaves
 * a data-parallel replica idle is chosen only if every value does. */
#define DYN_TUNE_MAX_TRIED 40

typedef struct dyn_tune_result {
    int64_t value;           /* chosen knob: samples, rows or tokens per micro-batch */
    double iter_ms;          /* its mean simulated iteration time, ms */
    int32_t all_replicas_busy; /* the chosen value gives every replica work on every batch */
    int32_t n_tried;
    int64_t tried[DYN_TUNE_MAX_TRIED];    /* values in the order tried */
    double tried_ms[DYN_TUNE_MAX_TRIED];  /* their mean iteration ms; INFINITY: infeasible */
} dyn_tune_result;

/* Flag name of a method's knob without dashes ("mb-samples", "pack-rows",
 * "mb-tokens"); NULL for dynapipe. */
const char *dyn_tune_knob_name(dyn_batching m);
/* The knob of opt->method (0: tune), and setting it. */
int64_t dyn_tune_knob_get(const dyn_plan_options *opt);
void dyn_tune_knob_set(dyn_plan_options *opt, int64_t value);
/* Tune opt->method's knob (opt's own knob value is ignored) on n_batches
 * global batches (batches[b], batch_n[b] samples each). cm must be the
 * analytic or table model the run plans with. DYN_ERR_INFEASIBLE when no
 * value plans every batch; DYN_ERR_INVALID_ARG for dynapipe. */
dyn_status dyn_pipeline_tune(const dyn_cost_model *cm, const dyn_plan_options *opt,
                             const dyn_pipeline_options *pipe_opt, const dyn_sample *const *batches,
                             const int32_t *batch_n, int32_t n_batches, dyn_tune_result *out,
                             dyn_error *err);

/* ---- the layer split, tuned (src/pipeline/tune.c) ----------------------------
 * The layers-to-stages split balanced for the run's own lengths rather than
 * one max_seqlen row: the given global batches are planned as
 * dyn_pipeline_plan plans them with opt's split_weight (normally all 0: the
 * max-row split), the weights of the micro-batches they were planned into
 * are taken (sched.h dyn_stage_weights_of_shapes, each replica's under its
 * chosen recompute mode), and the batches are planned and simulated again
 * with the split those weights give; once more from that round's
 * micro-batches if it changes the split. The weights are kept only if
 * their mean simulated iteration time over the batches is lower than the
 * starting split's (infeasible under the memory limit counts as slower).
 * dynapipe with enable_packing (its candidates, dyn_pipeline_plan) also
 * tries the splits its candidate baselines' own tuning ends with: for each
 * of them (packing-docmask, padding, token) at each value of the knob
 * sequence dyn_pipeline_tune tries, that baseline's tuned split (this
 * function on it) is simulated for dynapipe, each distinct split once, and
 * the fastest of all is kept. Under a baseline's split dynapipe's
 * candidates include that baseline at every knob value, so on these
 * batches dynapipe's tuned mean is never above a candidate baseline's
 * tuned (knob, split) mean.
 * Deterministic: the same inputs give the same weights (no timing). */
#define DYN_SPLIT_TUNE_ROUNDS 2

typedef struct dyn_split_tune_result {
    int32_t kept;        /* 1: weight is the split to use (faster); 0: keep opt's */
    double weight[DYN_LAYER_KIND_COUNT]; /* kept ? the tuned weights : opt's split_weight */
    double base_ms;      /* mean simulated iteration time with opt's split, ms */
    double tuned_ms;     /* the best tuned split's mean (INFINITY: none planned every batch) */
    int32_t n_rounds;    /* own tuned splits simulated, 0..DYN_SPLIT_TUNE_ROUNDS */
    int32_t n_candidate_splits; /* dynapipe: its baselines' distinct splits simulated for it */
    dyn_batching source; /* kept: whose micro-batches the split was balanced for (opt's
                            method, or for dynapipe one of its candidate baselines) */
    int64_t source_knob; /* that baseline's knob value; 0 when source is opt's method */
} dyn_split_tune_result;

/* Tune the split for opt (its knob as it will run: tune the knob first) on
 * n_batches >= 1 global batches (batches[b], batch_n[b] samples each).
 * Errors: the planner's and pipeline's for opt, and DYN_ERR_INFEASIBLE
 * when opt's own split cannot plan a batch. */
dyn_status dyn_pipeline_tune_split(const dyn_cost_model *cm, const dyn_plan_options *opt,
                                   const dyn_pipeline_options *pipe_opt, const dyn_sample *const *batches,
                                   const int32_t *batch_n, int32_t n_batches, dyn_split_tune_result *out,
                                   dyn_error *err);

#ifdef __cplusplus
}
#endif
#endif /* DYNAPIPE_PIPELINE_H */
