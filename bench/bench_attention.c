/* bench_attention.c — the tiled attention kernel alone: causal GPT-shaped
 * self-attention (8 heads × 64, one padded row of S tokens, fused qkv
 * buffer), forward and backward timed separately, beside an sgemm of
 * (S × 64) · (64 × S) timed in the same loop; then the same tokens as
 * document-masked samples of 128 and as one row padded to S/2, to show that
 * masked tiles cost nothing. Rates count the work actually
 * done under the causal mask: forward 2 · S² · HD · NH FLOPs (QKᵀ and PV on
 * the lower triangle), backward 5 · S² · HD · NH (score recompute, dV, dP,
 * dQ, dK).
 *
 * usage: bench_attention [seq] [repeat] [threads]   (default 2048 5 1) */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_args.h" /* defines: bench_args_check */
#include "model/layers.h"  /* defines: dyn_attention_* */
#include "model/blas.h"    /* defines: dyn_blas_describe */
#include "model/threads.h" /* defines: dyn_threads_set, dyn_threads_init */
#include "util/rng.h"     /* defines: dyn_rng_* */
#include "util/util.h"    /* defines: dyn_time_ms */

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    bench_args_check(argc, argv, "usage: bench_attention [seq >= 1] [repeat 1..1000] [threads >= 1]\n  times fused self-attention forward and backward (8 heads x 64, one row of seq tokens) against the reference", NULL);
    dyn_threads_init(); /* sleeping idle workers, the right BLAS kernel (threads.h); may re-execute */
    int T = argc > 1 ? atoi(argv[1]) : 2048, R = argc > 2 ? atoi(argv[2]) : 5;
    int nt = argc > 3 ? atoi(argv[3]) : 1;
    if (T < 1 || R < 1 || R > 1000 || nt < 1) {
        fprintf(stderr, "usage: bench_attention [seq >= 1] [repeat 1..1000] [threads >= 1]\n");
        return 2;
    }
    dyn_threads_set(nt);
    const int NH = 8, HD = 64, C = NH * HD;
    int32_t len = T;
    dyn_layout *lay = dyn_layout_create_padded(&len, 1, T, NULL);
    dyn_attn_cfg cfg = {NH, HD, 1, 0.125f, 0, 32, 128, nt, 0};
    size_t N = (size_t)T;
    float *qkv = calloc(N * 3 * C, 4), *dqkv = calloc(N * 3 * C, 4), *o = calloc(N * C, 4);
    float *d = calloc(N * C, 4), *lse = calloc(N * NH, 4);
    float *w = calloc(dyn_attention_work_floats(1, T, T, &cfg), 4);
    float *ga = calloc(N * HD, 4), *gc = calloc(N * N, 4);
    double *tf = calloc((size_t)R, 8), *tb = calloc((size_t)R, 8), *tg = calloc((size_t)R, 8);
    if (!lay || !qkv || !dqkv || !o || !d || !lse || !w || !ga || !gc || !tf || !tb || !tg) {
        fprintf(stderr, "bench_attention: out of memory\n");
        return 1;
    }
    dyn_rng rng;
    dyn_rng_seed(&rng, 7);
    for (size_t i = 0; i < N * 3 * C; i++) qkv[i] = (float)dyn_rng_uniform(&rng) - 0.5f;
    for (size_t i = 0; i < N * C; i++) d[i] = (float)dyn_rng_uniform(&rng) - 0.5f;
    for (size_t i = 0; i < N * HD; i++) ga[i] = (float)dyn_rng_uniform(&rng) - 0.5f;
    for (int r = -1; r < R; r++) {
        double t0 = dyn_time_ms();
        dyn_attention_forward(o, lse, qkv, 3 * C, qkv + C, 3 * C, qkv + 2 * C, 3 * C, NULL, lay,
                              lay, &cfg, w);
        double t1 = dyn_time_ms();
        dyn_attention_backward(dqkv, dqkv + C, dqkv + 2 * C, NULL, d, qkv, 3 * C, qkv + C, 3 * C,
                               qkv + 2 * C, 3 * C, o, lse, NULL, lay, lay, &cfg, w);
        double t2 = dyn_time_ms();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, 1.0f, ga, HD, ga, HD, 0.0f,
                    gc, T);
        double t3 = dyn_time_ms();
        if (r >= 0) {
            tf[r] = t1 - t0;
            tb[r] = t2 - t1;
            tg[r] = t3 - t2;
        }
    }
    qsort(tf, (size_t)R, 8, cmp);
    qsort(tb, (size_t)R, 8, cmp);
    qsort(tg, (size_t)R, 8, cmp);
    double unit = (double)T * T * HD * NH * 1e-9; /* GFLOP per S²·HD·NH */
    double fwd = tf[R / 2], bwd = tb[R / 2], gem = tg[R / 2];
    printf("blas: %s\n", dyn_blas_describe());
    printf("seq %d heads %d head_dim %d threads %d repeat %d (medians)\n", T, NH, HD, nt, R);
    printf("forward   %8.2f ms  %6.1f GFLOP/s\n", fwd, 2.0 * unit / (fwd * 1e-3));
    printf("backward  %8.2f ms  %6.1f GFLOP/s\n", bwd, 5.0 * unit / (bwd * 1e-3));
    printf("sgemm     %8.2f ms  %6.1f GFLOP/s (S x 64 times 64 x S, same run)\n", gem,
           2.0 * T * (double)T * HD * 1e-9 / (gem * 1e-3));
    /* The same tokens as document-masked samples of 128 (or padded to half
     * the row): tiles outside the segments are skipped, so the time should
     * drop with the attended pairs. */
    int nseg = T / 128 > 0 ? T / 128 : 1;
    int32_t *lens = calloc((size_t)nseg, sizeof(int32_t)), cnt = nseg, half = T / 2 > 0 ? T / 2 : 1;
    if (!lens) return 1;
    for (int i = 0; i < nseg; i++) lens[i] = T / nseg;
    dyn_layout *dm = dyn_layout_create_packed(lens, &cnt, 1, T, 1, NULL);
    dyn_layout *pad = dyn_layout_create_padded(&half, 1, T, NULL);
    const dyn_layout *alt[2] = {dm, pad};
    const char *name[2] = {"docmask", "half pad"};
    for (int a = 0; a < 2; a++) {
        if (!alt[a]) return 1;
        for (int r = -1; r < R; r++) {
            double t0 = dyn_time_ms();
            dyn_attention_forward(o, lse, qkv, 3 * C, qkv + C, 3 * C, qkv + 2 * C, 3 * C, NULL,
                                  alt[a], alt[a], &cfg, w);
            dyn_attention_backward(dqkv, dqkv + C, dqkv + 2 * C, NULL, d, qkv, 3 * C, qkv + C,
                                   3 * C, qkv + 2 * C, 3 * C, o, lse, NULL, alt[a], alt[a], &cfg, w);
            if (r >= 0) tf[r] = dyn_time_ms() - t0;
        }
        qsort(tf, (size_t)R, 8, cmp);
        printf("%-8s  %8.2f ms fwd+bwd, %.3f of the dense causal time; attended pairs %.3f of dense\n",
               name[a], tf[R / 2], tf[R / 2] / (fwd + bwd),
               (double)dyn_layout_attn_pairs(alt[a]) / ((double)T * T));
    }
    dyn_layout_free(dm);
    dyn_layout_free(pad);
    free(lens);
    dyn_layout_free(lay);
    free(qkv); free(dqkv); free(o); free(d); free(lse); free(w); free(ga); free(gc);
    free(tf); free(tb); free(tg);
    return 0;
}
