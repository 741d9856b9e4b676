/* bench_layer.c — forward + backward of one GPT-2 block (hidden 512, 8 heads,
 * fp32) at (batch, seq) = (16,128), (4,512), (1,2048), (8,256) and one T5
 * decoder block (decoder 128, encoder 512, batch 4) and one Llama block
 * (8 heads over 2 key/value heads, SwiGLU 1408) at (16,128) and (4,512),
 * with one thread and with
 * two side by side (each repeat runs both counts in turn, so both see the
 * same machine load), printed beside the sgemm rate measured in the same run
 * and the 2-thread / 1-thread speed-up (median of the per-repeat ratios).
 * The header names the BLAS kernel in use and the measured FMA peak of one
 * core; "1T/peak" is the one-thread block rate over that peak.
 *
 * usage: bench_layer [repeat]   (default 5; medians over the repeats) */
#include <stdio.h>
#include <stdlib.h>

#include "bench_args.h" /* defines: bench_args_check */
#include "model/blas.h"        /* defines: dyn_blas_describe, dyn_cpu_fma_peak_gflops */
#include "model/layer_bench.h" /* defines: dyn_layer_bench_compare */
#include "model/threads.h"     /* defines: dyn_threads_blas_kind */
#include "util/util.h" /* defines: dyn_loadavg_print */

int main(int argc, char **argv)
{
    bench_args_check(argc, argv, "usage: bench_layer [repeat >= 1]\n  times one GPT, one T5 and one Llama layer forward and backward at several (batch, seq) shapes", NULL);
    dyn_threads_init(); /* sleeping idle workers, the right BLAS kernel (threads.h); may re-execute */
    int repeat = argc > 1 ? atoi(argv[1]) : 5;
    if (repeat < 1) {
        fprintf(stderr, "usage: bench_layer [repeat >= 1]\n");
        return 2;
    }
    const struct { dyn_model_kind m; int b, s, e; } shapes[] = {
        {DYN_MODEL_GPT, 16, 128, 0}, {DYN_MODEL_GPT, 4, 512, 0}, {DYN_MODEL_GPT, 1, 2048, 0},
        {DYN_MODEL_GPT, 8, 256, 0},  {DYN_MODEL_T5, 4, 128, 512}, {DYN_MODEL_LLAMA, 16, 128, 0},
        {DYN_MODEL_LLAMA, 4, 512, 0},
    };
    const int threads[2] = {1, 2};
    printf("bench_layer: medians of %d repeats, 1 and 2 threads alternating; OpenBLAS %s, OMP_WAIT_POLICY %s\n",
           repeat, dyn_threads_blas_kind(), getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "unset");
    printf("blas: %s\n", dyn_blas_describe());
    double peak = dyn_cpu_fma_peak_gflops(40.0);
    printf("fma peak: %.1f GFLOP/s per core (measured)\n", peak);
    dyn_loadavg_print("before");
    printf("%-5s %5s %5s %5s %9s %9s %8s %8s %9s %9s %8s %7s %7s\n", "model", "batch", "seq", "enc",
           "ms 1T", "ms 2T", "GF/s 1T", "GF/s 2T", "sgemm 1T", "sgemm 2T", "1T/sgm", "2T/1T", "1T/peak");
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        dyn_layer_bench_cfg cfg = {shapes[i].m, 512, 8, shapes[i].b, shapes[i].s, shapes[i].e,
                                   1, repeat};
        dyn_layer_bench_result r[2];
        double speedup[2];
        dyn_error err;
        if (dyn_layer_bench_compare(&cfg, threads, 2, r, speedup, &err) != DYN_OK) {
            fprintf(stderr, "bench_layer: %s\n", err.msg);
            return 1;
        }
        printf("%-5s %5d %5d %5d %9.2f %9.2f %8.1f %8.1f %9.1f %9.1f %8.2f %7.2f %7.2f\n",
               shapes[i].m == DYN_MODEL_GPT ? "gpt" : shapes[i].m == DYN_MODEL_T5 ? "t5" : "llama", shapes[i].b, shapes[i].s,
               shapes[i].e, r[0].ms, r[1].ms, r[0].gflops, r[1].gflops, r[0].sgemm_gflops,
               r[1].sgemm_gflops, r[0].gflops / r[0].sgemm_gflops, speedup[1],
               peak > 0.0 ? r[0].gflops / peak : 0.0);
        fflush(stdout);
    }
    dyn_loadavg_print("after");
    return 0;
}
