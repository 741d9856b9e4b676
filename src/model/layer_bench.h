/* layer_bench.h — measure forward + backward of one transformer block (GPT-2,
 * T5 decoder or Llama) beside a plain sgemm in the same run, for bench/bench_layer.c
 * and `dynapipe bench layer`. Timings are medians over repeats; the sgemm
 * reference is timed between the block repeats so both see the same machine
 * load. */
#ifndef DYN_MODEL_LAYER_BENCH_H
#define DYN_MODEL_LAYER_BENCH_H

#include "dynapipe/common.h"
#include "model/blocks.h" /* defines: dyn_llama_dims */

typedef struct dyn_layer_bench_cfg {
    dyn_model_kind model; /* DYN_MODEL_GPT, DYN_MODEL_T5 (decoder block) or DYN_MODEL_LLAMA */
    int hidden;           /* C; GPT: F = 4C, HD = C/heads; T5: d_kv = C/heads, d_ff = 4C;
                           * Llama: dyn_layer_bench_llama_dims */
    int heads;
    int batch;            /* rows B */
    int seq;              /* T (T5: decoder length) */
    int enc_seq;          /* T5 encoder length Te (ignored for GPT) */
    int threads;          /* OpenMP and OpenBLAS threads */
    int repeat;           /* timed repeats (>= 1); one untimed warm-up first */
} dyn_layer_bench_cfg;

typedef struct dyn_layer_bench_result {
    double ms;            /* median ms per forward + backward */
    double ms_min;        /* fastest repeat, ms */
    double gflop;         /* FLOPs credited per forward + backward, 1e9 */
    double gflops;        /* gflop / median seconds */
    double sgemm_gflops;  /* median sgemm rate in the same run, GFLOP/s */
    double act_mb;        /* block activation arena, MB (2^20 bytes) */
} dyn_layer_bench_result;

/* The Llama block the benchmark runs for hidden C and heads NH: HD = C/NH,
 * key/value heads NH/4 when 4 divides NH (Llama 3's ratio) else NH,
 * intermediate F = 8C/3 rounded up to a multiple of 64 (so the SwiGLU's
 * three matrices cost about GPT's two of 4C), eps 1e-5, rope theta 10000,
 * causal, every row full, position ids 0..T-1. */
dyn_llama_dims dyn_layer_bench_llama_dims(int hidden, int heads, int nthreads);

/* Run the benchmark; DYN_ERR_INVALID_ARG for bad shapes, DYN_ERR_NOMEM if the
 * buffers cannot be allocated. Sets the process-wide thread count to
 * cfg->threads (dyn_threads_set). */
dyn_status dyn_layer_bench_run(const dyn_layer_bench_cfg *cfg, dyn_layer_bench_result *res,
                               dyn_error *err);

/* Thread counts side by side: every repeat runs the block (and the sgemm)
 * once with each of threads[0..n_threads-1] in turn, on the same buffers, so
 * all counts see the same machine load; cfg->threads is ignored. res[i] is
 * the result for threads[i]; speedup[i] (may be NULL) is the median over
 * repeats of time(threads[0]) / time(threads[i]) within the same repeat.
 * Leaves the thread count at threads[n_threads-1]. 1 <= n_threads <= 8. */
dyn_status dyn_layer_bench_compare(const dyn_layer_bench_cfg *cfg, const int *threads,
                                   int n_threads, dyn_layer_bench_result *res, double *speedup,
                                   dyn_error *err);

#endif
