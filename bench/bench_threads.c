/* bench_threads.c — one training step (zero grads, forward, backward, AdamW)
 * of whole models with 1 and 2 threads side by side: every repeat runs the
 * step once with each count in turn on the same model, so both see the same
 * machine load. Prints the median ms of each count and the median over
 * repeats of the per-repeat ratio time(1 thread) / time(2 threads) (> 1:
 * two threads are faster), with the load average before and after, and
 * beside it the same ratio for OpenBLAS's own threaded sgemm timed between
 * the steps ("sgemm 2/1"): what the machine allowed two threads at that
 * moment (other processes on a shared machine take cores).
 *
 * Models: the toy-test GPT and T5 (tiny shapes, where threading must not
 * hurt much: most kernels stay below DYN_PAR_MIN_WORK and run on one
 * thread), and moderate GPTs and T5 (every kernel goes parallel).
 *
 * usage: bench_threads [repeats (default 7)] */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_args.h" /* defines: bench_args_check */
#include "model/model.h"   /* defines: dyn_model_*, dyn_microbatch_* */
#include "model/threads.h" /* defines: dyn_threads_* */
#include "util/rng.h"      /* defines: dyn_rng_* */
#include "util/util.h"     /* defines: dyn_time_ms, dyn_median, dyn_loadavg_print */

/* One training step; returns its wall time in ms, or -1 on error. */
static double step(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, float dloss)
{
    dyn_error err;
    dyn_adamw_config ac = dyn_adamw_default();
    double loss, t0 = dyn_time_ms();
    dyn_model_zero_grad(m);
    if (dyn_model_forward(m, a, mb, 0, &loss, NULL, &err) != DYN_OK ||
        dyn_model_backward(m, a, mb, dloss, &err) != DYN_OK) {
        fprintf(stderr, "bench_threads: %s\n", err.msg);
        return -1.0;
    }
    dyn_model_adamw_step(m, 1e-4f, &ac, 1.0);
    return dyn_time_ms() - t0;
}

static int run(const char *name, dyn_model_config cfg, int B, int in_len, int tgt_len, int repeats)
{
    dyn_error err;
    dyn_model *m = dyn_model_create(&cfg, 1, &err);
    if (m == NULL) {
        fprintf(stderr, "bench_threads: %s\n", err.msg);
        return 1;
    }
    int32_t *tok = malloc((size_t)B * (in_len + tgt_len) * sizeof(int32_t));
    dyn_token_sample *s = malloc((size_t)B * sizeof *s);
    double *t = malloc(4 * (size_t)repeats * sizeof(double));
    if (tok == NULL || s == NULL || t == NULL) return 1;
    dyn_rng r;
    dyn_rng_seed(&r, 3);
    for (int i = 0; i < B * (in_len + tgt_len); i++) tok[i] = (int32_t)dyn_rng_below(&r, 256);
    for (int i = 0; i < B; i++) {
        s[i].input = tok + (size_t)i * (in_len + tgt_len);
        s[i].input_len = in_len;
        s[i].target = s[i].input + in_len;
        s[i].target_len = tgt_len;
    }
    dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(cfg.kind, s, B, &err);
    dyn_model_acts *a = dyn_model_acts_create(&err);
    if (mb == NULL || a == NULL) {
        fprintf(stderr, "bench_threads: %s\n", err.msg);
        return 1;
    }
    double *t1 = t, *t2 = t + repeats, *ratio = t + 2 * repeats, *gratio = t + 3 * repeats;
    float dloss = 1.0f / (float)(B * tgt_len);
    /* The machine's own 2T/1T at this moment: OpenBLAS's threaded sgemm of
     * the feed-forward shape (B*T x C times C x 4C), timed between steps. */
    int N = B * (cfg.kind == DYN_MODEL_GPT ? in_len + tgt_len : in_len), C = cfg.hidden;
    float *ga = calloc((size_t)N * C, sizeof(float)), *gb = calloc((size_t)4 * C * C, sizeof(float));
    float *gc = calloc((size_t)N * 4 * C, sizeof(float));
    if (ga == NULL || gb == NULL || gc == NULL) return 1;
    for (int rep = -1; rep < repeats; rep++) { /* rep -1: warm-up of both */
        double g[2];
        for (int th = 1; th <= 2; th++) {
            dyn_threads_set(th);
            double t0 = dyn_time_ms();
            for (int k = 0; k < 3; k++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, 4 * C, C, 1.0f, ga, C, gb,
                            C, 0.0f, gc, 4 * C);
            g[th - 1] = dyn_time_ms() - t0;
        }
        dyn_model_set_threads(m, 1);
        double a1 = step(m, a, mb, dloss);
        dyn_model_set_threads(m, 2);
        double a2 = step(m, a, mb, dloss);
        if (a1 < 0 || a2 < 0) return 1;
        if (rep >= 0) {
            t1[rep] = a1;
            t2[rep] = a2;
            ratio[rep] = a1 / a2;
            gratio[rep] = g[0] / g[1];
        }
    }
    free(ga);
    free(gb);
    free(gc);
    double m1 = dyn_median(t1, repeats), m2 = dyn_median(t2, repeats), q = dyn_median(ratio, repeats);
    printf("%-40s %10.2f %10.2f %8.2f %10.2f\n", name, m1, m2, q, dyn_median(gratio, repeats));
    fflush(stdout);
    free(t);
    dyn_model_acts_free(a);
    dyn_model_microbatch_free(mb);
    free(s);
    free(tok);
    dyn_model_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    bench_args_check(argc, argv, "usage: bench_threads [repeats >= 1]\n  times whole models with 1 and 2 threads side by side", NULL);
    dyn_threads_init(); /* sleeping idle workers, the right BLAS kernel (threads.h); may re-execute */
    int repeats = argc > 1 ? atoi(argv[1]) : 7;
    if (repeats < 1) {
        fprintf(stderr, "usage: bench_threads [repeats >= 1]\n");
        return 2;
    }
    printf("bench_threads: training step (forward+backward+AdamW), medians of %d repeats, 1 and 2 "
           "threads alternating; OpenBLAS %s, OMP_WAIT_POLICY %s\n",
           repeats, dyn_threads_blas_kind(), getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "unset");
    dyn_loadavg_print("before");
    printf("%-40s %10s %10s %8s %10s\n", "model / micro-batch", "ms 1T", "ms 2T", "2T/1T",
           "sgemm 2/1");
    dyn_model_config tg = dyn_model_config_tiny(DYN_MODEL_GPT, 2, 48, 4, 16);
    dyn_model_config tt = dyn_model_config_tiny(DYN_MODEL_T5, 2, 48, 4, 16);
    dyn_model_config mg = dyn_model_config_tiny(DYN_MODEL_GPT, 4, 256, 4, 512);
    dyn_model_config mt = dyn_model_config_tiny(DYN_MODEL_T5, 2, 256, 4, 512);
    mt.ffn = 512;
    int rc = run("tiny GPT 2x48, B=8, in 5 + tgt 6", tg, 8, 5, 6, repeats);
    if (rc == 0) rc = run("tiny T5 2+2x48, B=8, enc 5 / dec 6", tt, 8, 5, 6, repeats);
    if (rc == 0) rc = run("GPT 4x256, B=4, in 192 + tgt 64", mg, 4, 192, 64, repeats);
    if (rc == 0) rc = run("T5 2+2x256 ffn 512, B=4, enc 192 / dec 64", mt, 4, 192, 64, repeats);
    dyn_model_config lg = dyn_model_config_tiny(DYN_MODEL_GPT, 4, 512, 8, 512);
    if (rc == 0) rc = run("GPT 4x512, B=4, in 192 + tgt 64", lg, 4, 192, 64, repeats);
    dyn_loadavg_print("after");
    return rc;
}
