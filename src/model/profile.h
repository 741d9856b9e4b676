/* profile.h — the layer profiler behind `dynapipe profile`: runs each layer
 * kind of a model (embedding, GPT block / T5 encoder block, T5 bridge, T5
 * decoder block, LM head) forward, backward and split backward, per recompute mode, on
 * random weights and inputs, and measures its time (median of repeats after
 * warm-up) and activation memory, over a grid of micro-batch rows and
 * lengths; the result is written in the cost-table format through src/cost's
 * writer, so the planning library stays free of model code.
 *
 * What each layer kind runs (model layer indices as in model.h):
 *   GPT: embed = layer 0; encoder = layer 1 (a block); lm_head = layer n+1.
 *   T5:  embed = layer 0 (the encoder embedding); encoder = layer 1;
 *        bridge = layers ne+1..ne+2 (the encoder's final norm and the
 *        decoder embedding, which run on the last encoder block's stage);
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

/* on != 0: grid runs do not time full recompute (the --quick profile;
 * about a third less time). The embedding, the bridge and the head run the
 * same with and without it (only blocks recompute), so they take their plain
 * points; a block's full-recompute forward and weight-gradient half take
 * the plain ones, its backward and input-gradient half the plain ones
 * plus the forward (recompute runs the forward again first: measured at
 * 1.02-1.05 times that sum, medians over the quick grid), and its memory
 * is measured in one untimed pass. */
void dyn_profiler_set_derive_full(dyn_profiler *p, int on);

/* on != 0: grid runs time T5's bridge and head only on two planes, the
 * shortest target (dec_len index 0) and the shortest input (enc_len index
 * 0); elsewhere a point's times are the sum of the two planes' points at
 * its rows and lengths less their common corner, and its memory is
 * measured in one untimed pass (what `dynapipe profile` does). Each kind's
 * time is an input part plus a target part: the bridge normalizes the
 * encoder output and embeds the targets in separate layers, the head
 * reads only the targets and passes the encoder output through.
 * Timed at every point, the head's input part (a copy, about 4 % of it)
 * is lost in the noise, which the monotone fit turns into a rise along
 * the input axis (t5-tiny: 33 % from the shortest input to the longest).
 * GPT: no effect. */
void dyn_profiler_set_sum_planes(dyn_profiler *p, int on);

/* What such a grid run does to its points after filling the planes (and
 * any coarse grid's other points): for T5's bridge and head, every
 * mode, each point off the two planes takes as its four times the point
 * at its rows and input with the shortest target, plus the one at its
 * rows and target with the shortest input, less the one with both
 * shortest; its memory is left as it is. Other kinds and GPT: unchanged.
 * On a coarse grid's blend this is the same as blending the coarse
 * points' sums (both are linear). */
void dyn_profile_points_sum_planes(const dyn_model_config *cfg, const dyn_cost_grid *g, dyn_layer_cost *points);

/* Measure every kind but the embedding and T5's bridge only at the grid
 * points whose every
 * coordinate is also on the coarse grid (each of its axes a subset of the
 * run's, with the same first and last values; the --quick grid of the
 * run's default grid), and fill the others by multilinear interpolation
 * from those: what the table reader would compute from a coarse table, so
 * those kinds cost and predict as with a coarse profile. The embedding
 * (and the bridge, a norm and an embedding) is cheap to measure (gpt-mini's whole grid: about 14 s a sweep, against
 * about 95 s for the blocks on the quick grid of seven lengths, about a
 * third less on six) and its cost per token steps up where its
 * activations leave the caches (a cell of the coarse grid straddling the
 * step is 20-30 % off inside), so it gets every point.
 * The axes are copied; NULL: measure every kind at every point. */
dyn_status dyn_profiler_set_coarse(dyn_profiler *p, const dyn_cost_grid *coarse, dyn_error *err);

/* The reference kernel: a fixed matrix product (256 x 256 by 256 x 1024,
 * in the caches) that dyn_profiler_measure times just before and just after
 * each measurement. On a shared machine the speed of every kernel moves by
 * 10-50 % in spells of seconds that nothing inside the VM shows (load
 * average, /proc/stat); a measurement whose reference ran slow was likely
 * slowed too. Last: the slower of the two around the last measurement (ms);
 * best: the fastest this profiler has seen. */
double dyn_profiler_probe_last_ms(const dyn_profiler *p);
double dyn_profiler_probe_best_ms(const dyn_profiler *p);

/* The sweeps of one grid point or held-out shape. kept holds, per time
 * column, the lowest median seen (what disturbs a measurement on a shared
 * machine only slows it), memory as first measured (it does not vary
 * between runs); fastest is the lowest total (fwd + bwd + the split
 * halves, ms) of all its measurements, and total / probe hold up to
 * DYN_SWEEP_KEEP of them with the reference kernel's time around each:
 * those with the fastest references once there are more. */
#define DYN_SWEEP_KEEP 8
typedef struct dyn_sweep_point {
    dyn_layer_cost kept;
    double fastest;
    double total[DYN_SWEEP_KEEP], probe[DYN_SWEEP_KEEP];
    int32_t n;      /* measurements so far */
    int32_t n_kept; /* entries of total / probe in use */
} dyn_sweep_point;

/* Two measurements within this fraction of each other, or this many ms
 * (a few microseconds' jitter on the smallest shapes is no disturbance
 * and no planner would notice it), are one speed. A measurement is calm
 * when its reference kernel ran within DYN_SWEEP_CALM of the fastest
 * reference seen. */
#define DYN_SWEEP_AGREE 0.05
#define DYN_SWEEP_AGREE_MS 0.01
#define DYN_SWEEP_CALM 0.10

/* Add one measurement with the reference time around it (sp zeroed before
 * the first; probe_ms 0: not known, counted as calm). */
void dyn_sweep_point_add(dyn_sweep_point *sp, const dyn_layer_cost *lc, double probe_ms);

/* Settled: the two fastest calm measurements (probe <= probe_best_ms x
 * (1 + DYN_SWEEP_CALM); all are calm when probe_best_ms is 0) are one
 * speed (within DYN_SWEEP_AGREE or DYN_SWEEP_AGREE_MS), and no
 * measurement, calm or not, was faster than that speed by more. A
 * disturbance on this machine lasts seconds and comes and goes
 * (docs/architecture.md, "Profiler and online calibration"): two calm
 * measurements that agree are the machine's speed; two slowed ones can
 * agree too, which is why the reference decides which count. */
int dyn_sweep_point_settled(const dyn_sweep_point *sp, double probe_best_ms);

/* Passes dyn_profile_grid_run makes over the whole grid, >= 1 (default 1;
 * the CLI's default is 2); with 2 or more, up to as many again over the
 * points not yet settled (dyn_sweep_point_settled). */
void dyn_profiler_set_sweeps(dyn_profiler *p, int sweeps);

/* The last dyn_profile_grid_run's measured points (kinds x modes x the
 * axes each kind uses) and how many of them it left not settled. */
void dyn_profiler_grid_stats(const dyn_profiler *p, int64_t *measured, int64_t *unsettled);

/* Of all measurements this profiler made: how many, and how many were
 * calm (reference within DYN_SWEEP_CALM of the fastest seen). */
void dyn_profiler_probe_stats(const dyn_profiler *p, int64_t *measurements, int64_t *calm);

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
 * per axis (every third length and the longest, less a kept length within
 * 1.25x of the longest). T5 uses the length axis for inputs and a coarser one (every
 * other point) for targets; GPT's dec_len axis is {0}. */
dyn_status dyn_profile_grid_default(const dyn_model_config *cfg, int quick, int32_t max_rows, dyn_cost_grid *g,
                                    dyn_error *err);
void dyn_profile_grid_free(dyn_cost_grid *g);

/* Progress callback: points done of total, ms since the start. */
typedef void (*dyn_profile_progress_fn)(void *ctx, int64_t done, int64_t total, double elapsed_ms);

/* Measure every kind and recompute mode at every grid point into points
 * (DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT * grid-size entries, indexed
 * by dyn_cost_grid_index) in dyn_profiler_set_sweeps passes over the grid
 * and then, with two or more, passes over the points not yet settled
 * until all are or as many more passes were made (each time column keeps
 * the lowest of a point's medians: dyn_sweep_point), fill the points
 * dyn_profiler_set_coarse leaves unmeasured, then make them monotone
 * (dyn_cost_points_make_monotone). T5's encoder, which does not depend on
 * dec_len, is measured once per (rows, enc_len) and copied along it.
 * states_mb: per-layer model states (16 bytes/param). */
dyn_status dyn_profile_grid_run(dyn_profiler *p, const dyn_cost_grid *g, dyn_layer_cost *points,
                                double states_mb[DYN_LAYER_KIND_COUNT], dyn_profile_progress_fn fn, void *ctx,
                                dyn_error *err);

/* What this machine is: host name and CPU model (from /proc/cpuinfo;
 * "unknown" when not found), dtype "fp32", threads and repeats. */
void dyn_profile_meta_fill(dyn_profile_meta *m, int threads, int repeats);

#endif
