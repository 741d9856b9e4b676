/* machine_auto.h — `--machine auto`: a description of the machine at hand
 * for the analytic cost model (dyn_machine), fitted to layer times measured
 * here, and its cache.
 *
 * Why: the built-in "cpu" machine was fitted on one Xeon; on any other CPU
 * (another vendor, another BLAS kernel, another thread count) its relative
 * costs -- matrix products against attention against per-layer overhead --
 * are wrong, and so is every prediction. A profile table (`dynapipe profile`)
 * is the most faithful answer but takes minutes; this takes seconds.
 *
 * What is measured: the model's own layers (src/model/profile.h's profiler:
 * embedding, blocks, T5 bridge, LM head) forward and backward at a handful of
 * micro-batch shapes chosen so that the analytic model's terms separate
 * (same tokens at short and long lengths for attention, one row and many
 * rows for the small-size term), the model's block products alone at
 * several token counts (the product rate as a function of size), and the
 * optimizer step; a shape whose
 * measurement the profiler's reference kernel shows slowed by other work is
 * measured once more (the faster kept) while the first 20 s last. The analytic model
 * is linear in (1/matmul_gflops, gemm_n_half/matmul_gflops, 1/attn_gflops,
 * 1/mem_gbps, layer_overhead_ms), so those five are fitted by non-negative
 * least squares on relative error, times far off the fit weighted down,
 * the first two from the products alone (dyn_machine_fit). Links, memory size and
 * element size come from the built-in "cpu" machine.
 *
 * Ranks beside: a run's ranks share the machine's caches, memory bandwidth
 * and clock (2 ranks on 2 cores each ran 10-25 % slower than one rank alone
 * on the Xeon this was found on). So the caller runs ranks - 1 copies of
 * the same measurement beside the one it keeps (src/cli/cli_machine.c, in
 * processes of their own), and ranks is part of the key.
 *
 * Cache: one JSON file per key (CPU model, BLAS kernel, threads per rank,
 * ranks at once, model shape and longest length: the shapes are the
 * model's), written
 * atomically; a file that does not parse, has another key or an invalid
 * machine is refused with one line and measured again. */
#ifndef DYN_MODEL_MACHINE_AUTO_H
#define DYN_MODEL_MACHINE_AUTO_H

#include <stdint.h>
#include <stdio.h>

#include "dynapipe/common.h"
#include "dynapipe/cost.h"

/* One measured layer: kind, dense shape and its forward and whole-backward
 * times (ms). */
typedef struct dyn_machine_obs {
    dyn_layer_kind kind;
    dyn_mb_shape mb;
    double fwd_ms, bwd_ms;
} dyn_machine_obs;

/* One measured set of matrix products alone (no layer around them): the
 * model's block products at `tokens` token rows, forward, input gradient
 * and weight gradient, in `ms`. flops = 2 t sum(K N) over the products and
 * passes; row_flops = 2 sum(K N), what one more token row costs (the
 * analytic model's gemm_n_half counts in these rows). */
typedef struct dyn_machine_gemm_obs {
    int32_t tokens;
    double flops, row_flops;
    double ms;
} dyn_machine_gemm_obs;

/* How well a fit reproduces its own measurements: relative error of each
 * forward and backward time (and the optimizer step), median and worst. */
typedef struct dyn_machine_fit_stats {
    int32_t n;
    double median_err, worst_err;
} dyn_machine_fit_stats;

/* Fit matmul_gflops, gemm_n_half, attn_gflops, mem_gbps and
 * layer_overhead_ms of the analytic model of cfg, by non-negative least
 * squares on relative error (then refitted three times with each time
 * beyond twice the median error weighted down by how far beyond it lies).
 *
 * With n_gemm > 0 products measured alone, in two steps: matmul_gflops and
 * gemm_n_half from the products alone, then the other three from the n_obs
 * layer times less the products' share and (when opt_params > 0 and
 * opt_ms > 0) one optimizer step over opt_params parameters taking opt_ms.
 * Why two steps: inside a block the products' FLOPs and the elementwise
 * bytes both grow with the tokens, in a fixed ratio, and gemm_n_half and the
 * per-layer overhead are both a fixed cost per pass; only the embedding,
 * the head and the optimizer step, kernels of their own, tell them apart,
 * so a joint fit trades the product rate against the memory rate (78 and
 * 99 GFLOP/s from two measurements of one machine). The products alone
 * pin the first two. With n_gemm == 0 all five are fitted jointly.
 *
 * The optimizer step's rate, opt_ms / opt_params per million parameters,
 * goes into optimizer_ms_per_mparam as measured (0 without one). Every
 * other field comes from base; the name is "auto". A term the fit
 * leaves at zero gets a rate of DYN_MACHINE_AUTO_RATE_CAP (it costs nothing
 * on these shapes). stats (may be NULL) is over every time fitted.
 * DYN_ERR_INVALID_ARG when nothing can be fitted (no matrix products
 * measured, or no positive matrix rate explains them). Pure. */
#define DYN_MACHINE_AUTO_RATE_CAP 1e6
dyn_status dyn_machine_fit(const dyn_model_config *cfg, const dyn_machine *base, const dyn_machine_obs *obs,
                           int n_obs, const dyn_machine_gemm_obs *gemm, int n_gemm, double opt_params,
                           double opt_ms, dyn_machine *out, dyn_machine_fit_stats *stats, dyn_error *err);

/* How much to measure: FULL is the default (a few seconds to ~30 s on one
 * core for the mini presets); TINY two shapes per kind and one repeat, for
 * tests (environment DYN_MACHINE_MEASURE=tiny). */
typedef enum dyn_machine_measure_level { DYN_MACHINE_MEASURE_FULL = 0, DYN_MACHINE_MEASURE_TINY = 1 } dyn_machine_measure_level;

/* What a measured machine is and how it was obtained. */
typedef struct dyn_machine_auto_info {
    char key[512];    /* what the cache is keyed on (dyn_machine_auto_key) */
    char cpu[64];     /* CPU model name */
    char blas[32];    /* OpenBLAS kernel */
    int32_t threads;  /* threads per rank it was measured with */
    int32_t ranks;    /* ranks running at once while it was measured (>= 1) */
    double measure_s; /* seconds the measurement took */
    double optimizer_ms_per_mparam; /* optimizer step measured, ms per million parameters */
    dyn_machine_fit_stats fit;
    int32_t remeasured; /* shapes measured twice (the first slowed by other work); not cached */
    int cached; /* 1: read from the cache, 0: measured by this call */
} dyn_machine_auto_info;

/* The cache key of cfg measured with `threads` threads per rank and `ranks`
 * ranks at once (values below 1 count as 1) at `level` on this CPU and BLAS
 * kernel, into key[cap] (fields '|'-separated; no newline); cpu and blas
 * (may be NULL) receive the CPU model and kernel. */
void dyn_machine_auto_key(const dyn_model_config *cfg, int threads, int ranks, dyn_machine_measure_level level,
                          char *key, size_t cap, char cpu[64], char blas[32]);

/* The cache file for key in dir: dir/machine-<16 hex digits of a hash of the
 * key>.json. DYN_ERR_INVALID_ARG if it does not fit in cap. */
dyn_status dyn_machine_auto_path(const char *dir, const char *key, char *path, size_t cap, dyn_error *err);

/* Write m and info as the cache file path (atomically; info->key is the key). */
dyn_status dyn_machine_auto_write(const char *path, const dyn_machine *m, const dyn_machine_auto_info *info,
                                  dyn_error *err);

/* Read a cache file written for key: DYN_OK with *m and *info (cached = 1);
 * DYN_ERR_IO when it does not exist or cannot be read; DYN_ERR_PARSE with one
 * line naming the file when it is not a cache file, is for another key, or
 * holds an invalid machine. */
dyn_status dyn_machine_auto_read(const char *path, const char *key, dyn_machine *m, dyn_machine_auto_info *info,
                                 dyn_error *err);

/* Measure this machine for cfg with `threads` threads (sets the process's
 * thread count) and fit it (dyn_machine_fit, base the built-in "cpu").
 * ranks: how many ranks the caller runs at once, this one included (the
 * caller starts the others; "Ranks beside" above); recorded, not started.
 * log, when not NULL, gets one line when it starts. info->cached = 0. */
dyn_status dyn_machine_measure(const dyn_model_config *cfg, int threads, int ranks, dyn_machine_measure_level level,
                               FILE *log, dyn_machine *m, dyn_machine_auto_info *info, dyn_error *err);

/* The cached machine for (cfg, threads, ranks, level) in dir, else (make != 0)
 * measured and cached there; a corrupt cache file is reported on log and
 * measured again. With make == 0 and no usable file: DYN_ERR_IO. dir is
 * created if missing. path (cap bytes) receives the cache file's path. */
dyn_status dyn_machine_auto_get(const char *dir, const dyn_model_config *cfg, int threads, int ranks,
                                dyn_machine_measure_level level, int make, FILE *log, dyn_machine *m,
                                dyn_machine_auto_info *info, char *path, size_t cap, dyn_error *err);

/* One line (no newline) saying what was measured: the fitted rates, the
 * fit's error on its own points, the optimizer step and where it came from. */
void dyn_machine_auto_describe(const dyn_machine *m, const dyn_machine_auto_info *info, char *buf, size_t cap);

#endif
