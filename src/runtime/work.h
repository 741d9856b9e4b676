/* work.h — one rank's work for one training iteration, as the planner sends
 * it: the validated execution plan of the rank's data-parallel replica and,
 * for each of the plan's micro-batches (in the plan's numbering), the
 * dataset samples it holds and where they sit in its rows.
 *
 * Wire form (little-endian, field by field; built and read here only, so
 * the planner and the ranks agree by construction):
 *   u32 magic "DYNW", u32 version,
 *   i64 iteration, i32 replica, i32 method (dyn_batching),
 *   i64 global_target_tokens, i64 global_real_tokens,
 *   f64 plan_ms, f64 predicted_ms, f64 ideal_ms, f64 ideal_compute_ms (version 2 on),
 *   i32 n_mb, i32 n_samples, i32 n_stages, i32 mb_count[n_mb],
 *   n_samples x (i32 id, i32 row, i32 offset, i32 dec_offset),
 *   n_mb * n_stages x (f64 fwd_ms, f64 bwd_ms): the predicted stage costs,
 *   n_ranks x f64 predicted allocation per pipeline rank (MB, alloc.h),
 *   n_mb x f64 useful fraction per micro-batch (version 2 on),
 *   i64 n_tokens, n_tokens x i32: the samples' tokens (version 3 on; 0 when
 *       the ranks read them from their source),
 *   u64 plan_len, plan_len bytes of dyn_exec_plan_serialize.
 * A replica with no micro-batches this iteration (n_mb = 0) has no plan
 * (plan_len 0, n_stages 0 costs); its ranks only join the step.
 * The reader bounds-checks every count against the bytes left, the plan
 * through dyn_exec_plan_deserialize (magic, version, CRC) and then
 * dyn_exec_plan_validate, and the sample table against the plan (counts
 * match the micro-batch count; rows inside each micro-batch's shape). */
#ifndef DYN_RUNTIME_WORK_H
#define DYN_RUNTIME_WORK_H

#include <stddef.h>
#include <stdint.h>

#include "dynapipe/plan.h"
#include "dynapipe/sched.h"

typedef struct dyn_rt_sample {
    int32_t id;         /* index in the dataset */
    int32_t row;        /* row of its micro-batch */
    int32_t offset;     /* token offset in the row (GPT sequence / T5 encoder); 0 unless packed */
    int32_t dec_offset; /* T5 packing: offset in the decoder row; else 0 */
} dyn_rt_sample;

typedef struct dyn_rt_work {
    int64_t iteration;
    int32_t replica;
    int32_t method;               /* dyn_batching: how samples sit in rows */
    int64_t global_target_tokens; /* target tokens of the whole global batch (all replicas) */
    int64_t global_real_tokens;   /* input + target tokens of the whole global batch */
    double plan_ms;               /* planner wall time spent on this global batch */
    double predicted_ms;          /* simulated makespan of this replica's plan + the optimizer step */
    double ideal_ms;              /* the global batch's ideal bound (pipeline.h dyn_ideal_bound), ms:
                                   * what the iteration is measured against (efficiency) */
    double ideal_compute_ms;      /* its compute part (the rest is the optimizer step), ms */
    int32_t n_mb;                 /* = plan.n_microbatches */
    int32_t *mb_first;            /* [n_mb + 1]: micro-batch j's samples are [first[j], first[j+1]) */
    int32_t n_samples;
    dyn_rt_sample *samples;       /* [n_samples] grouped by micro-batch, in row order */
    int32_t n_stages, n_ranks;    /* of the plan (0 when n_mb = 0) */
    double *fwd_ms, *bwd_ms;      /* [n_mb * n_stages]: predicted times (ms), whole backward */
    double *peak_mb;              /* [n_ranks]: predicted allocation per pipeline rank (alloc.h), MB */
    double *useful;               /* [n_mb]: share of each micro-batch's compute that is its samples'
                                   * own (pipeline.h dyn_mb_useful_fraction), in [0, 1] */
    int64_t n_tokens;             /* 0, or the tokens of every sample: */
    int32_t *tokens;              /* [n_tokens]: sample by sample (in samples' order), its input then
                                   * its target; tokenised by the planner thread (text JSONL), so
                                   * the ranks do not read or encode the file; NULL when 0 */
    dyn_exec_plan plan;           /* the replica's validated plan */
} dyn_rt_work;

/* Serialise w into a malloc'ed buffer (*buf, *len). */
dyn_status dyn_rt_work_pack(const dyn_rt_work *w, uint8_t **buf, size_t *len, dyn_error *err);
/* Parse and validate a buffer into *out (zeroed first; free with
 * dyn_rt_work_free, also on failure). n_dataset: samples in the dataset
 * (ids must be below it). */
dyn_status dyn_rt_work_unpack(const uint8_t *buf, size_t len, int64_t n_dataset, dyn_rt_work *out,
                              dyn_error *err);
void dyn_rt_work_free(dyn_rt_work *w);

#endif
