/*
 * plan.h — micro-batching: cut one global batch into micro-batches.
 *
 * dynapipe's method orders the samples (length sort for GPT, a 2-D ordering
 * for T5) and splits the order into consecutive runs by dynamic programming,
 * minimising the predicted pipeline iteration time
 *     (S - 1) * t_max / v  +  sum over micro-batches of t(mb) / d
 * under the memory limit; the baselines (padding, packing, packing with
 * document masks, token budget) fill the same result type. Micro-batches are
 * then balanced over the d data-parallel replicas.
 *
 * Times are of one pipeline stage, fwd + bwd (ms); memory is per device (MB).
 */
#ifndef DYNAPIPE_PLAN_H
#define DYNAPIPE_PLAN_H

#include "dynapipe/common.h"
#include "dynapipe/cost.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dyn_batching {
    DYN_BATCH_DYNAPIPE = 0,
    DYN_BATCH_PADDING = 1,         /* fixed samples per micro-batch, padded to the longest */
    DYN_BATCH_PACKING = 2,         /* FFD into rows of max length; attention over whole rows */
    DYN_BATCH_PACKING_DOCMASK = 3, /* same rows; attention only within each sample */
    DYN_BATCH_TOKEN = 4            /* micro-batches filled up to a token budget */
} dyn_batching;
#define DYN_BATCHING_COUNT 5

typedef struct dyn_plan_options {
    dyn_batching method;
    int32_t stages;          /* S, pipeline stages (>= 1) */
    int32_t chunks;          /* v, model chunks per device (interleaving), >= 1 */
    int32_t dp;              /* d, data-parallel replicas (>= 1) */
    double memory_limit_mb;  /* per device; <= 0: the cost model's machine memory */
    int32_t round_to;        /* pad lengths up to a multiple of this (default 8) */
    int32_t max_seqlen;      /* longest sequence allowed (tokens) */
    dyn_recompute recompute; /* recompute mode the plan assumes */
    int32_t mb_samples;      /* padding: samples per micro-batch */
    int32_t pack_rows;       /* packing: rows per micro-batch */
    int64_t mb_tokens;       /* token-based: tokens per micro-batch */
    int32_t enable_packing;  /* dynapipe: 1 (default) = candidates: the planner also
                                packs the batch into document-masked rows (packing-docmask
                                with 1, 2, 4, ... rows per micro-batch) and keeps the
                                lower objective_ms, and dyn_pipeline_plan simulates the
                                baselines' plans too (pipeline.h) and keeps the fastest;
                                0 = the DP's plan only (the paper's method) */
    double split_weight[DYN_LAYER_KIND_COUNT]; /* layers to stages (sched.h dyn_stage_assign_run):
                                all 0 (default) = balanced for one row of max_seqlen tokens;
                                else balanced for these per-layer-kind weights (ms, from
                                dyn_pipeline_tune_split); finite and >= 0 */
    int32_t stage_objective; /* DYN_STAGE_OBJ_*: what a micro-batch's time is in the DP
                                objective (default 0, the paper's, EVEN) */
} dyn_plan_options;

/* dyn_plan_options.stage_objective (default EVEN). EVEN (the paper's):
 * layers split evenly over the stages, t(mb) = its slowest stage, objective
 * (S-1) max t / v + sum t / d. MAX: the same objective over the run's real
 * layer split, once a pipeline has given the planner its stage assignment
 * (dyn_planner_set_stage_layout). BOTTLENECK (an experiment that loses, see
 * src/plan/stage_cost.c): that split, and the sum term takes each
 * micro-batch's time on the split's bottleneck stage, (S-1) max t / v +
 * sum t_b / d. */
#define DYN_STAGE_OBJ_EVEN 0
#define DYN_STAGE_OBJ_MAX 1
#define DYN_STAGE_OBJ_BOTTLENECK 2
#define DYN_STAGE_OBJ_BOTH 3 /* EVEN, and a pipeline also simulates the DP's plan under MAX
                                (a second planner) and keeps the faster (src/pipeline/pipeline.c) */
#define DYN_STAGE_OBJ_COUNT 4

/* One micro-batch. Its samples are plan->sample_ids[first .. first+n_samples);
 * sample k of the plan sits in row plan->sample_row[k] at token offset
 * plan->sample_offset[k] (0 unless packed). */
typedef struct dyn_plan_microbatch {
    int32_t first;
    int32_t n_samples;
    int32_t replica;    /* data-parallel replica that runs it, 0..dp-1 */
    dyn_mb_shape shape; /* padded shape the model runs */
    double time_ms;     /* predicted fwd+bwd time on one pipeline stage */
    double stored_mb;   /* activations one stage stores for it */
    double peak_mb;     /* predicted peak memory of one stage while it runs */
} dyn_plan_microbatch;

typedef struct dyn_batch_plan {
    int32_t n_microbatches;
    dyn_plan_microbatch *mbs; /* in execution order within each replica */
    int32_t n_samples;
    int32_t *sample_ids;    /* sample ids, grouped by micro-batch */
    int32_t *sample_row;    /* parallel to sample_ids */
    int32_t *sample_offset; /* parallel to sample_ids */
    double objective_ms;    /* predicted iteration time (the DP objective) */
    double plan_time_ms;    /* wall time spent planning this batch */
    int32_t *sample_dec_offset; /* T5 packing: token offset in the decoder row; else 0 */
    double balanced_ms;     /* (S-1)*t_max/v + max over replicas of its sum of t(mb) */
    double device_peak_mb;  /* model states + (in flight - 1) * max stored + max peak: with S in
                               flight; may exceed the limit when a one-sample micro-batch is over
                               its share (the schedules then keep fewer in flight) */
    int64_t real_tokens;    /* input + target tokens of the samples */
    int64_t padded_tokens;  /* tokens the model runs: rows * (enc_len + dec_len) summed */
    int32_t method;         /* dyn_batching that made this plan: DYN_BATCH_DYNAPIPE for the
                               DP's, else the baseline's (dynapipe's candidates may win) */
    int64_t knob;           /* that baseline's size knob as planned (mb_samples, pack_rows
                               or mb_tokens; 0: the most that fit); 0 for the DP */
} dyn_batch_plan;

/* Defaults: method dynapipe, S = v = d = 1, memory limit 0 (the machine's),
 * round_to 8, max_seqlen 2048, no recompute, baseline knobs 0 (the most that
 * fit), enable_packing 1, stage_objective EVEN. Set stages and max_seqlen
 * for the run; the planner checks ranges (DYN_ERR_INVALID_ARG naming the field)
 * when it is created. */
void dyn_plan_options_default(dyn_plan_options *opt);

/* ---- Planner handle --------------------------------------------------------
 * A planner caches the cost of every (padded length, rows) micro-batch shape
 * it has evaluated, so planning a stream of global batches costs a few table
 * lookups per DP step instead of cost-model calls. dyn_plan_batch_once is
 * create + plan + free. */

/* Cost of one micro-batch on the bottleneck pipeline stage. */
typedef struct dyn_mb_cost {
    double time_ms;   /* fwd + bwd of the slowest stage */
    double stored_mb; /* activations that stage stores until backward */
    double peak_mb;   /* stored + transient working memory while it runs */
    double sum_ms;    /* what it adds to the objective's sum term (ms): its time on the
                         bottleneck stage; 0 = time_ms (a cost function may leave it 0) */
} dyn_mb_cost;

/* A micro-batch cost function: fills out for shape mb (rows, lengths in
 * tokens, already padded). Must be pure, and non-decreasing in rows and in
 * every length (time and memory) -- the planner relies on that to stop
 * growing a micro-batch at the first one that does not fit. */
typedef dyn_status (*dyn_mb_cost_fn)(void *ctx, const dyn_mb_shape *mb, dyn_mb_cost *out,
                                     dyn_error *err);

typedef struct dyn_planner dyn_planner;

/* Planner over cost model cm (kept by reference; must outlive the planner).
 * Stage costs derive from per-layer costs as docs/architecture.md "Planner"
 * says: transformer layers split evenly over S stages (earlier stages take
 * the remainder), embedding on the first, LM head on the last; t(mb) is the
 * slowest stage. Model states of the fullest stage are subtracted from the
 * memory limit. */
dyn_planner *dyn_planner_create(const dyn_cost_model *cm, const dyn_plan_options *opt,
                                dyn_error *err);
/* Planner over a custom cost function (tests, other cost sources).
 * states_mb: model states per device, MB. opt->memory_limit_mb <= 0 means
 * no limit here (there is no machine to take it from). */
dyn_planner *dyn_planner_create_custom(dyn_model_kind kind, dyn_mb_cost_fn fn, void *ctx,
                                       double states_mb, const dyn_plan_options *opt,
                                       dyn_error *err);
/* Plan one global batch (see dyn_plan_batch_once). */
dyn_status dyn_planner_plan(dyn_planner *p, const dyn_sample *samples, int32_t n,
                            dyn_batch_plan *out, dyn_error *err);
/* Plan one global batch as `method` with size knob `knob` (padding
 * mb_samples, packing rows, token mb_tokens; 0: the most that fit; ignored
 * for dynapipe), whatever p's own method: the plan a planner made with p's
 * options but that method and knob (and enable_packing 0: for dynapipe the
 * DP's plan alone) would give, from p's cost cache. dynapipe's candidates
 * (dyn_pipeline_plan) are planned this way. */
dyn_status dyn_planner_plan_as(dyn_planner *p, dyn_batching method, int64_t knob, const dyn_sample *samples,
                               int32_t n, dyn_batch_plan *out, dyn_error *err);
/* Give a dyn_planner_create planner the layers each of its opt->stages
 * stages really holds (the runtime's split, src/sched dyn_stage_assign_run,
 * flattened as dyn_stage_assignment: layer_kind[n_layers], stage_first[S +
 * 1]). Used when opt->stage_objective is MAX or BOTTLENECK (else a no-op):
 * the cost cache is emptied, model states and memory limits follow the
 * fullest stage. DYN_ERR_INVALID_ARG on a custom planner or a bad layout. */
dyn_status dyn_planner_set_stage_layout(dyn_planner *p, int32_t n_stages, int32_t n_layers,
                                        const int32_t *layer_kind, const int32_t *stage_first,
                                        dyn_error *err);
void dyn_planner_free(dyn_planner *p); /* NULL is a no-op; the cost model is not freed */
/* The options the planner runs with (memory_limit_mb resolved: the
 * machine's memory when the caller gave <= 0; +inf for a custom planner
 * without a limit). */
const dyn_plan_options *dyn_planner_options(const dyn_planner *p);
/* The cost model of a dyn_planner_create planner (borrowed); NULL for a
 * custom planner. */
const dyn_cost_model *dyn_planner_cost_model(const dyn_planner *p);
/* Model states per device (MB) and the per-micro-batch limits derived from
 * the memory limit: stored activations and peak, MB per stage. */
double dyn_planner_states_mb(const dyn_planner *p);
double dyn_planner_stored_limit_mb(const dyn_planner *p);
double dyn_planner_peak_limit_mb(const dyn_planner *p);
/* Rows of max_seqlen tokens (T5: both sides) one micro-batch may hold under
 * the memory limit with S in flight (0: not even one; a single row may still
 * run alone, the memory rule's exception). */
dyn_status dyn_planner_fit_rows(const dyn_planner *p, int32_t *rows, dyn_error *err);

/* Plan one global batch of n samples. On DYN_ERR_INFEASIBLE the message names
 * the sample that cannot fit and the numbers. out is freed with
 * dyn_batch_plan_free (also safe on a zeroed struct). */
dyn_status dyn_plan_batch_once(const dyn_cost_model *cm, const dyn_plan_options *opt,
                          const dyn_sample *samples, int32_t n, dyn_batch_plan *out,
                          dyn_error *err);
/* Free the plan's arrays and zero it (NULL and a zeroed struct are no-ops). */
void dyn_batch_plan_free(dyn_batch_plan *plan);

/* Static name of a method ("dynapipe", "padding", ...); "unknown" out of range. */
const char *dyn_batching_name(dyn_batching m);
/* Parse "dynapipe", "padding", "packing", "packing-docmask", "token". */
dyn_status dyn_batching_parse(const char *name, dyn_batching *out, dyn_error *err);

#ifdef __cplusplus
}
#endif
#endif /* DYNAPIPE_PLAN_H */
