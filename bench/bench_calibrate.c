/* bench_calibrate.c — measure this machine's single-core matrix-product
 * efficiency and the repo's own GPT block, fit the analytic cost model's
 * small-size terms (dyn_machine.matmul_gflops, gemm_n_half,
 * layer_overhead_ms) and print predicted vs measured block times side by
 * side.
 *
 *   build/bench_calibrate [repeat] [min]   (default 5; medians over the repeats,
 *                                           or with "min" the fastest repeat)
 *
 * 1. GEMM: cblas_sgemm on one thread for the products of a GPT-2 small block
 *    (hidden 768: QKV 768 -> 2304, fc1 768 -> 3072, fc2 3072 -> 768), each in
 *    its three training forms -- forward Y = X W^T, input gradient dX = dY W,
 *    weight gradient dW += dY^T X -- over n = 8 ... 4096 token rows. The fit
 *    is Hockney's: time = 2 K N (n + n_half) / peak, linear in (1/peak,
 *    n_half/peak), solved by least squares on relative error (every point
 *    counts the same whatever its size).
 * 2. Block: forward + backward of one GPT-2 small block (src/model
 *    dyn_gpt_block_*, driven by dyn_layer_bench_run, one thread) at several
 *    (batch, seq). The fixed per-layer per-pass overhead is fitted on what the
 *    GEMM fit leaves unexplained: measured = predicted(overhead 0) + 3 o
 *    (forward, input-gradient and weight-gradient pass), least squares on
 *    relative error.
 * The table then shows the measured block time against three predictions:
 * the model without small-size terms (n_half = 0, overhead 0, the built-in
 * rates), the built-in "cpu" machine as compiled, and the fit of this run.
 *
 * The machine is shared: every figure is a median of repeats, and the load
 * average is printed before and after. With "min" every figure is the
 * fastest repeat instead: when other jobs hold the cores for long stretches
 * (load average well above the core count) medians measure the load, and
 * the fastest of several short timings is the closest to the machine's own
 * speed, which is what a machine description is for. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_args.h" /* defines: bench_args_check */
#include "dynapipe/cost.h"         /* defines: dyn_cost_*, dyn_machine_builtin */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_preset */
#include "model/layer_bench.h"     /* defines: dyn_layer_bench_run */
#include "model/blas.h"            /* defines: dyn_blas_describe */
#include "model/threads.h"         /* defines: dyn_threads_set, dyn_threads_init */
#include "util/util.h"             /* defines: dyn_calloc, dyn_time_ms, dyn_median, dyn_loadavg_print */

#define MAX_REPEAT 31

enum { OP_FWD, OP_DX, OP_DW, N_OPS };
static const char *const OP_NAMES[N_OPS] = {"fwd", "dX", "dW"};

/* One call of product op on n rows, weight W (N, K) as nn.Linear stores it. */
static void gemm(int op, int n, int K, int N, const float *X, const float *W, const float *dY,
                 float *Y, float *dX, float *dW)
{
    if (op == OP_FWD) /* Y (n,N) = X (n,K) W^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, N, K, 1.0f, X, K, W, K, 0.0f, Y, N);
    else if (op == OP_DX) /* dX (n,K) = dY (n,N) W (N,K) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, K, N, 1.0f, dY, N, W, K, 0.0f, dX, K);
    else /* dW (N,K) += dY^T (N,n) X (n,K) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, n, 1.0f, dY, N, X, K, 1.0f, dW, K);
}

static int g_use_min; /* "min" on the command line: fastest repeat, not median */

static double stat_of(double *t, int n)
{
    if (!g_use_min) return dyn_median(t, n);
    double m = t[0];
    for (int i = 1; i < n; i++) m = t[i] < m ? t[i] : m;
    return m;
}

/* Median ms of one call over `repeat` timings, each looping for >= 20 ms;
 * with "min" the fastest of timings looping for >= 4 ms (short enough to fit
 * in one undisturbed time slice now and then). */
static double time_gemm(int op, int n, int K, int N, float *const bufs[6], int repeat)
{
    double t[MAX_REPEAT];
    gemm(op, n, K, N, bufs[0], bufs[1], bufs[2], bufs[3], bufs[4], bufs[5]); /* warm-up */
    for (int r = 0; r < repeat; r++) {
        int iters = 0;
        double t0 = dyn_time_ms(), el;
        do {
            gemm(op, n, K, N, bufs[0], bufs[1], bufs[2], bufs[3], bufs[4], bufs[5]);
            iters++;
        } while ((el = dyn_time_ms() - t0) < (g_use_min ? 4.0 : 20.0));
        t[r] = el / iters;
    }
    return stat_of(t, repeat);
}

/* Least squares of y ~ a x1 + b x2 weighting residual i by 1/scale[i]
 * (scale = the measured time: relative error). Returns 0, or -1 if the
 * system is singular. */
static int fit2(const double *y, const double *x1, const double *x2, const double *scale, int n,
                double *a, double *b)
{
    double s11 = 0, s12 = 0, s22 = 0, s1y = 0, s2y = 0;
    for (int i = 0; i < n; i++) {
        double w = 1.0 / (scale[i] * scale[i]);
        s11 += w * x1[i] * x1[i];
        s12 += w * x1[i] * x2[i];
        s22 += w * x2[i] * x2[i];
        s1y += w * x1[i] * y[i];
        s2y += w * x2[i] * y[i];
    }
    double det = s11 * s22 - s12 * s12;
    if (!(fabs(det) > 0)) return -1;
    *a = (s1y * s22 - s2y * s12) / det;
    *b = (s2y * s11 - s1y * s12) / det;
    return 0;
}

/* Predicted fwd + bwd ms of one GPT-2 block of width h (h/64 heads, ffn
 * 4h; no recompute). */
static double predict_block(const dyn_machine *m, int h, int b, int s)
{
    dyn_model_config cfg;
    dyn_error err;
    if (dyn_model_config_preset("gpt2-124m", &cfg, &err) != DYN_OK) return NAN;
    cfg.max_seqlen = 4096;
    cfg.hidden = h;
    cfg.heads = h / 64;
    cfg.head_dim = 64;
    cfg.ffn = 4 * h;
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, m, &err);
    if (cm == NULL) {
        fprintf(stderr, "bench_calibrate: %s\n", err.msg);
        return NAN;
    }
    dyn_mb_shape mb = {.rows = b, .enc_len = s};
    dyn_layer_cost c;
    double t = dyn_cost_layer(cm, DYN_LAYER_ENCODER, &mb, DYN_RECOMPUTE_NONE, &c, &err) == DYN_OK
                   ? c.fwd_ms + c.bwd_ms
                   : NAN;
    dyn_cost_model_free(cm);
    return t;
}

#define N_ROWS 10
#define N_SHAPES 3
#define N_BLOCKS 18

int main(int argc, char **argv)
{
    {
        char usage[512];
        snprintf(usage, sizeof usage, "usage: bench_calibrate [repeat 1..%d]\n  measures matmul, attention and memory throughput and fits the analytic cost model machine constants", MAX_REPEAT);
        bench_args_check(argc, argv, usage, NULL);
    }
    dyn_threads_init(); /* sleeping idle workers, the right BLAS kernel (threads.h); may re-execute */
    int repeat = argc > 1 ? atoi(argv[1]) : 5;
    g_use_min = argc > 2 && strcmp(argv[2], "min") == 0;
    if (repeat < 1 || repeat > MAX_REPEAT || argc > 3 || (argc > 2 && !g_use_min)) {
        fprintf(stderr, "usage: bench_calibrate [repeat 1..%d] [min]\n", MAX_REPEAT);
        return 2;
    }
    const char *stat = g_use_min ? "fastest" : "median";
    dyn_threads_set(1);
    printf("blas: %s\n", dyn_blas_describe());
    dyn_loadavg_print("at start");

    /* ---- 1. GEMM efficiency -------------------------------------------- */
    const int rows[N_ROWS] = {8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
    const int shapes[N_SHAPES][2] = {{768, 2304}, {768, 3072}, {3072, 768}}; /* K, N */
    const int nmax = rows[N_ROWS - 1], dmax = 3072;
    dyn_error err;
    float *bufs[6];
    for (int i = 0; i < 6; i++) {
        bufs[i] = dyn_calloc((size_t)nmax * dmax, sizeof(float), "calibrate buffer", &err);
        if (bufs[i] == NULL) {
            fprintf(stderr, "bench_calibrate: %s\n", err.msg);
            return 1;
        }
        for (size_t j = 0; j < (size_t)nmax * dmax; j++) bufs[i][j] = (float)((j * 7919 % 1000) * 1e-3 - 0.5);
    }
    enum { NPTS = N_ROWS * N_SHAPES * N_OPS };
    double ms[NPTS], x_flop[NPTS], x_kn[NPTS];
    int np = 0;
    printf("\nsgemm, one thread: ms per call (%s of %d) and GFLOP/s\n", stat, repeat);
    printf("%6s", "n");
    for (int sh = 0; sh < N_SHAPES; sh++)
        for (int op = 0; op < N_OPS; op++) {
            char name[32];
            snprintf(name, sizeof name, "%dx%d %s", shapes[sh][0], shapes[sh][1], OP_NAMES[op]);
            printf(" %16s", name);
        }
    printf("\n");
    for (int ri = 0; ri < N_ROWS; ri++) {
        printf("%6d", rows[ri]);
        for (int sh = 0; sh < N_SHAPES; sh++)
            for (int op = 0; op < N_OPS; op++) {
                int K = shapes[sh][0], N = shapes[sh][1], n = rows[ri];
                double t = time_gemm(op, n, K, N, bufs, repeat);
                double flop = 2.0 * n * K * N;
                ms[np] = t;
                x_flop[np] = flop;
                x_kn[np] = 2.0 * K * N;
                np++;
                printf(" %8.4f %5.1fGF", t, flop / (t * 1e6));
            }
        printf("\n");
        fflush(stdout);
    }
    for (int i = 0; i < 6; i++) free(bufs[i]);
    /* time_ms = flop / (peak * 1e6) + 2KN * n_half / (peak * 1e6) */
    double a, b;
    if (fit2(ms, x_flop, x_kn, ms, np, &a, &b) != 0) {
        fprintf(stderr, "bench_calibrate: GEMM fit is singular\n");
        return 1;
    }
    double peak = 1.0 / (a * 1e6), n_half = b / a;
    printf("\nGEMM fit over all %d points: peak %.1f GFLOP/s, n_half %.1f rows\n", np, peak, n_half);
    for (int op = 0; op < N_OPS; op++) {
        double y[N_ROWS * N_SHAPES], f1[N_ROWS * N_SHAPES], f2[N_ROWS * N_SHAPES];
        int k = 0;
        for (int i = 0; i < np; i++)
            if (i % N_OPS == op) {
                y[k] = ms[i];
                f1[k] = x_flop[i];
                f2[k] = x_kn[i];
                k++;
            }
        double a1, b1;
        if (fit2(y, f1, f2, y, k, &a1, &b1) == 0)
            printf("  %-3s only: peak %.1f GFLOP/s, n_half %.1f rows\n", OP_NAMES[op], 1.0 / (a1 * 1e6),
                   b1 / a1);
    }
    double worst = 0, sum_abs = 0;
    for (int i = 0; i < np; i++) {
        double pred = (x_flop[i] + x_kn[i] * n_half) / (peak * 1e6);
        double e = pred / ms[i] - 1.0;
        sum_abs += fabs(e);
        if (fabs(e) > fabs(worst)) worst = e;
    }
    printf("  fit error: mean |pred/meas - 1| = %.1f%%, worst %+.1f%%\n", 100.0 * sum_abs / np,
           100.0 * worst);

    /* ---- 2. GPT-2 blocks ---------------------------------------------- */
    /* Width 768 (GPT-2 small) over a range of shapes, plus small shapes at
     * widths 256 and 1024: the fixed per-layer overhead does not grow with
     * the width while the per-product n_half term grows as h^2, so two widths
     * tell them apart. */
    const int blocks[N_BLOCKS][3] = {
        {768, 1, 8},   {768, 1, 32},  {768, 4, 32},   {768, 1, 128}, {768, 16, 32},
        {768, 4, 128}, {768, 1, 512}, {768, 8, 128},  {768, 1, 1024}, {256, 1, 8},
        {256, 1, 32},  {256, 4, 32},  {256, 1, 128},  {256, 4, 128}, {1024, 1, 8},
        {1024, 1, 32}, {1024, 4, 32}, {1024, 1, 128},
    };
    double meas[N_BLOCKS], base[N_BLOCKS], per_row[N_BLOCKS], three[N_BLOCKS];
    dyn_machine fit = *dyn_machine_builtin("cpu");
    fit.matmul_gflops = peak;
    fit.gemm_n_half = 0;
    fit.layer_overhead_ms = 0;
    dyn_machine unit = fit;
    unit.gemm_n_half = 1.0;
    printf("\nGPT-2 blocks (width h, h/64 heads, ffn 4h), forward + backward, one thread, %s of %d\n",
           stat, repeat);
    for (int i = 0; i < N_BLOCKS; i++) {
        int h = blocks[i][0], bb = blocks[i][1], ss = blocks[i][2];
        dyn_layer_bench_cfg bc = {DYN_MODEL_GPT, h, h / 64, bb, ss, 0, 1, repeat};
        dyn_layer_bench_result r;
        if (dyn_layer_bench_run(&bc, &r, &err) != DYN_OK) {
            fprintf(stderr, "bench_calibrate: %s\n", err.msg);
            return 1;
        }
        meas[i] = g_use_min ? r.ms_min : r.ms;
        /* the model is affine in (n_half, overhead): evaluate its basis */
        base[i] = predict_block(&fit, h, bb, ss);
        per_row[i] = predict_block(&unit, h, bb, ss) - base[i];
        three[i] = 3.0; /* forward, input-gradient, weight-gradient pass */
        printf("  h %4d b %2d s %4d: %9.3f ms\n", h, bb, ss, meas[i]);
        fflush(stdout);
    }
    /* measured - base = n_half * per_row + 3 * overhead, relative error */
    double y[N_BLOCKS], nh_blk, ovh;
    for (int i = 0; i < N_BLOCKS; i++) y[i] = meas[i] - base[i];
    if (fit2(y, per_row, three, meas, N_BLOCKS, &nh_blk, &ovh) != 0) {
        fprintf(stderr, "bench_calibrate: block fit is singular\n");
        return 1;
    }
    printf("\nblock least squares: gemm_n_half %.2f rows, layer_overhead_ms %.4f (negative values are"
           " clamped to 0 below)\n", nh_blk, ovh);
    fit.gemm_n_half = nh_blk > 0 ? nh_blk : 0;
    fit.layer_overhead_ms = ovh > 0 ? ovh : 0;
    printf("fit of this run (peak from the GEMM fit; n_half and overhead from the blocks):\n"
           "  matmul_gflops %.1f, gemm_n_half %.1f rows, layer_overhead_ms %.4f\n",
           fit.matmul_gflops, fit.gemm_n_half, fit.layer_overhead_ms);
    dyn_machine gemm_only = fit;
    gemm_only.gemm_n_half = n_half > 0 ? n_half : 0;
    gemm_only.layer_overhead_ms = 0;

    const dyn_machine *cpu = dyn_machine_builtin("cpu");
    dyn_machine plain = *cpu;
    plain.gemm_n_half = 0;
    plain.layer_overhead_ms = 0;
    printf("built-in cpu: matmul_gflops %.1f, gemm_n_half %.1f rows, layer_overhead_ms %.4f\n\n",
           cpu->matmul_gflops, cpu->gemm_n_half, cpu->layer_overhead_ms);
    printf("%5s %5s %5s %7s %11s | %9s %6s | %9s %6s | %9s %6s | %9s %6s\n", "h", "batch", "seq",
           "tokens", "measured ms", "no-terms", "ratio", "gemm-only", "ratio", "built-in", "ratio",
           "this fit", "ratio");
    for (int i = 0; i < N_BLOCKS; i++) {
        int h = blocks[i][0], bb = blocks[i][1], ss = blocks[i][2];
        double p0 = predict_block(&plain, h, bb, ss), pg = predict_block(&gemm_only, h, bb, ss),
               p1 = predict_block(cpu, h, bb, ss), p2 = predict_block(&fit, h, bb, ss);
        printf("%5d %5d %5d %7d %11.3f | %9.3f %6.2f | %9.3f %6.2f | %9.3f %6.2f | %9.3f %6.2f\n", h, bb,
               ss, bb * ss, meas[i], p0, p0 / meas[i], pg, pg / meas[i], p1, p1 / meas[i], p2,
               p2 / meas[i]);
    }
    printf("(ratio = predicted / measured; no-terms: built-in rates, n_half 0, overhead 0;\n"
           " gemm-only: this run's GEMM fit, overhead 0)\n\n");
    dyn_loadavg_print("at end");
    return 0;
}
