/* profile.h — the layer profiler behind `dynapipe profile`: runs each layer
 * kind of a model (embedding, GPT block / T5 encoder block, T5 decoder block,
 * LM head) forward, backward and split backward, per recompute mode, on
 * random weights and inputs, and measures its time (median of repeats after
 * warm-up) and activation memory, over a grid of micro-batch rows and
 * lengths; the result is written in the cost-table format through src/cost's
 * writer, so the planning library stays free of model code.
 *
 * What each layer kind runs (model layer indices as in model.h):
 *   GPT: embed = layer 0; encoder = layer 1 (a block); lm_head = layer n+1.
 *   T5:  embed = layer 0 (encoder embedding) plus layers ne+1..ne+2 (the
 *        encoder's final norm and the decoder embedding: the planner's layer
 *        list has one embedding, on the first stage); encoder = layer 1;
 *        decoder = layer ne+3 (self + cross attention, reads the encoder
 *        output); lm_head = the last layer.
 * Recompute: NONE and SELECTIVE run the model without recomputation (its
 * attention never stores probabilities, which is what selective saves: the
 * runtime maps both the same way), FULL with it.
 * Memory: stored_mb = the acts' stored bytes after forward (for a block
 * under full recompute only its input: the region it re-runs into is
 * shared by the stage's blocks and counted as working memory); peak_mb = the
 * rest of the arena and the split backward's kept buffer at their largest
 * (scratch and gradients) — both from a fresh arena per shape; output_mb =
 * the boundary activation leaving the layer. */
#ifndef DYN_MODEL_PROFILE_H
#define DYN_MODEL_PROFILE_H

#include <stdint.h>

#include "dynapipe/common.h"
#include "dynapipe/cost.h"

typedef struct dyn_profiler dyn_profiler;

/* Profiler for model cfg with `threads` kernel threads (sets the
 * process-wide OpenMP / OpenBLAS count), `repeats` timed runs per
 * measurement (median kept) after `warmup` untimed ones; a measurement
 * whose timed runs add up to less than 30 ms gets more, up to 41 (a small
 * shape takes microseconds, where one preemption is a large fraction).
 * NULL and err on a bad config or no memory. */
dyn_profiler *dyn_profiler_create(const dyn_model_config *cfg, int threads, int repeats, int warmup,
                                  dyn_error *err);
void dyn_profiler_free(dyn_profiler *p);

/* Measure one layer of `kind` on a dense micro-batch of `rows` rows of
 * enc_len tokens (GPT: the whole sequence; T5: the input) and dec_len
 * target tokens (T5; ignored for GPT) under recompute rc into *out (ms, MB).
 * GPT sequences are half input, half target. */
dyn_status dyn_profiler_measure(dyn_profiler *p, dyn_layer_kind kind, dyn_recompute rc, int32_t rows,
                                int32_t enc_len, int32_t dec_len, dyn_layer_cost *out, dyn_error *err);

/* Grid points (dyn_profile_grid_run) of more than max_tokens rows x
 * tokens (T5: rows x (input + target)) are not measured but scaled in
 * proportion to the rows from the point with the next fewer rows; the
 * one-row points are always measured. 0 (the default): measure all. */
void dyn_profiler_set_max_tokens(dyn_profiler *p, int64_t max_tokens);

/* A second measurement of the same layer and shape: *acc keeps, per time
 * column, the lower of its own and again's (what disturbs a measurement
 * on a shared machine only slows it); memory as it was (it does not vary
 * between runs). What the profiler's and --check's sweeps combine with. */
void dyn_layer_cost_keep_faster(dyn_layer_cost *acc, const dyn_layer_cost *again);

/* Passes dyn_profile_grid_run makes over the grid, >= 1 (default 1; the
 * CLI's default is 2). */
void dyn_profiler_set_sweeps(dyn_profiler *p, int sweeps);

/* The optimizer step as the runtime runs it after every iteration
 * (gradient norm, AdamW with clipping, zeroing the gradients), per million
 * parameters, ms (median of the repeats after the warm-up): measured on a
 * stage model of the whole model when it has at most 2^25 parameters (so
 * that the states are as far from the caches as a rank's), else on one
 * block. */
dyn_status dyn_profiler_measure_optimizer(dyn_profiler *p, double *ms_per_mparam, dyn_error *err);

/* The default grid for cfg (each axis malloc'ed; free with free()): rows
 * {1,2,3,4,6,8,12,16,...} up to max_rows; lengths every 8 tokens up to 64,
 * then denser where cost changes shape (short lengths) and geometric
 * (about x1.25) up to cfg->max_seqlen; quick: about a third as many points
 * per axis. T5 uses the length axis for inputs and a coarser one (every
 * other point) for targets; GPT's dec_len axis is {0}. */
dyn_status dyn_profile_grid_default(const dyn_model_config *cfg, int quick, int32_t max_rows, dyn_cost_grid *g,
                                    dyn_error *err);
void dyn_profile_grid_free(dyn_cost_grid *g);

/* Progress callback: points done of total, ms since the start. */
typedef void (*dyn_profile_progress_fn)(void *ctx, int64_t done, int64_t total, double elapsed_ms);

/* Measure every kind and recompute mode at every grid point into points
 * (DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT * grid-size entries, indexed
 * by dyn_cost_grid_index) in dyn_profiler_set_sweeps passes over the grid
 * (each time column keeps the lowest of a point's medians: what disturbs a
 * measurement on a shared machine only slows it, and seldom hits one point
 * in two passes minutes apart), then make them monotone
 * (dyn_cost_points_make_monotone). Kinds that do not depend on an axis
 * (the encoder on dec_len, the T5 head on enc_len) are measured once and
 * copied along it. states_mb: per-layer model states (16 bytes/param). */
dyn_status dyn_profile_grid_run(dyn_profiler *p, const dyn_cost_grid *g, dyn_layer_cost *points,
                                double states_mb[DYN_LAYER_KIND_COUNT], dyn_profile_progress_fn fn, void *ctx,
                                dyn_error *err);

/* What this machine is: host name and CPU model (from /proc/cpuinfo;
 * "unknown" when not found), dtype "fp32", threads and repeats. */
void dyn_profile_meta_fill(dyn_profile_meta *m, int threads, int repeats);

#endif
