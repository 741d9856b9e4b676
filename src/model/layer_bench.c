/* layer_bench.c — the block benchmark behind bench/bench_layer.c and
 * `dynapipe bench layer`: forward + backward of one GPT-2 block, one T5
 * decoder block or one Llama block (dyn_layer_bench_llama_dims) on random
 * weights, timed beside an sgemm of the block's
 * feed-forward shape ((B·T) × C times C × 4C) so that the GFLOP/s figure can
 * be read against what the BLAS reaches on the same machine at the same
 * moment. Padded layout with every row full (no pad), fp32. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "model/blocks.h"      /* defines: dyn_gpt_block_*, dyn_t5_dec_* */
#include "model/layer_bench.h" /* defines: dyn_layer_bench_* */
#include "model/threads.h"     /* defines: dyn_threads_set */
#include "util/rng.h"          /* defines: dyn_rng_* */
#include "util/util.h"         /* defines: dyn_calloc, dyn_calloc_huge, dyn_time_ms, dyn_median */

static void fill(float *x, size_t n, float scale, dyn_rng *rng)
{
    for (size_t i = 0; i < n; i++) x[i] = (float)((2.0 * dyn_rng_uniform(rng) - 1.0) * scale);
}

/* Everything one benchmark run owns. */
typedef struct bench_bufs {
    float *params, *grads, *acts, *work, *inp, *out, *dout, *dinp, *enc, *denc, *rel, *drel;
    float *ga, *gb, *gc; /* sgemm operands */
} bench_bufs;

static void bufs_free(bench_bufs *b)
{
    float *all[] = {b->params, b->grads, b->acts, b->work, b->inp, b->out, b->dout, b->dinp,
                    b->enc, b->denc, b->rel, b->drel, b->ga, b->gb, b->gc};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) free(all[i]);
}

#define MAX_COUNTS 8

dyn_llama_dims dyn_layer_bench_llama_dims(int hidden, int heads, int nthreads)
{
    dyn_llama_dims d;
    memset(&d, 0, sizeof d);
    d.b.C = hidden;
    d.b.NH = heads;
    d.b.HD = heads > 0 ? hidden / heads : 0;
    d.b.F = (8 * hidden / 3 + 63) / 64 * 64;
    d.b.nthreads = nthreads;
    d.KVH = heads % 4 == 0 ? heads / 4 : heads;
    d.eps = 1e-5f;
    return d;
}

dyn_status dyn_layer_bench_run(const dyn_layer_bench_cfg *cfg, dyn_layer_bench_result *res,
                               dyn_error *err)
{
    return dyn_layer_bench_compare(cfg, &cfg->threads, 1, res, NULL, err);
}

/* One benchmark: the model kind, the block's dimensions (workspace sized
 * for the largest thread count; each timed run sets its own), the buffers,
 * the Llama rotary tables, the padded layouts and the parameter views. */
typedef struct bench_ctx {
    const dyn_layer_bench_cfg *cfg;
    int gpt, llama, t5;
    int C, NH, B, T, Te;
    dyn_block_dims d;
    dyn_llama_dims ld;
    size_t N, Ne;      /* decoder and encoder positions, B*T and B*Te */
    size_t np, na, nw; /* parameter, activation and work floats */
    bench_bufs b;
    float *rcos, *rsin, *inv; /* Llama: (T, HD/2) tables and (HD/2) frequencies */
    int32_t *pos;             /* Llama: (B*T) position ids */
    dyn_rope rope;
    int32_t *lens, *elens;    /* (B) every row full */
    dyn_layout *lay, *elay;
    dyn_gpt_block_params gp, gg;
    dyn_gpt_block_acts ga;
    dyn_t5_dec_params tp, tg;
    dyn_t5_dec_acts ta;
    dyn_llama_block_params lp, lg;
    dyn_llama_block_acts la;
    double *t_blk, *t_gemm, *t_ratio; /* [count][repeat] ms, ms and speed-up */
} bench_ctx;

static void bench_ctx_free(bench_ctx *x)
{
    free(x->rcos);
    free(x->rsin);
    free(x->inv);
    free(x->pos);
    free(x->lens);
    free(x->elens);
    free(x->t_blk);
    free(x->t_gemm);
    free(x->t_ratio);
    dyn_layout_free(x->lay);
    dyn_layout_free(x->elay);
    bufs_free(&x->b);
}

/* Check the shape and the thread counts; the largest count in *max_t. */
static dyn_status bench_check(bench_ctx *x, const int *threads, int n_threads, int *max_t, dyn_error *err)
{
    const dyn_layer_bench_cfg *cfg = x->cfg;
    int bad_t = n_threads < 1 || n_threads > MAX_COUNTS;
    *max_t = 0;
    for (int i = 0; !bad_t && i < n_threads; i++) {
        bad_t |= threads[i] < 1;
        *max_t = threads[i] > *max_t ? threads[i] : *max_t;
    }
    if (x->C < 1 || x->NH < 1 || x->C % x->NH != 0 || x->B < 1 || x->T < 1 || (x->t5 && x->Te < 1) || bad_t ||
        cfg->repeat < 1 || (x->llama && (x->C / x->NH) % 2 != 0))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "bench layer: need hidden divisible by heads%s and positive batch, "
                             "seq%s, threads, repeat",
                             x->llama ? " into an even head dim" : "", x->t5 ? ", enc-seq" : "");
    return DYN_OK;
}

/* The dimensions and the buffer sizes of the block for max_t threads. */
static void bench_size(bench_ctx *x, int max_t)
{
    int gpt = x->gpt, llama = x->llama, B = x->B, T = x->T, Te = x->Te;
    x->d = (dyn_block_dims){x->C, x->NH, x->C / x->NH, 4 * x->C, max_t};
    x->ld = dyn_layer_bench_llama_dims(x->C, x->NH, max_t);
    dyn_block_dims d = x->d;
    dyn_llama_dims ld = x->ld;
    x->N = (size_t)B * T;
    x->Ne = (size_t)B * Te;
    x->np = gpt ? dyn_gpt_block_params_count(d) : llama ? dyn_llama_block_params_count(ld) : dyn_t5_dec_params_count(d);
    x->na = gpt ? dyn_gpt_block_act_floats(d, B, T)
            : llama ? dyn_llama_block_act_floats(ld, B, T) : dyn_t5_dec_act_floats(d, B, T, Te);
    x->nw = gpt ? dyn_gpt_block_work_floats(d, B, T)
            : llama ? dyn_llama_block_work_floats(ld, B, T) : dyn_t5_dec_work_floats(d, B, T, Te);
}

/* Allocate the buffers (on huge pages where offered, as the model's
 * parameters and arenas: util.h dyn_calloc_huge) and fill them from a fixed
 * seed. */
static dyn_status bench_bufs_init(bench_ctx *x, dyn_error *err)
{
    bench_bufs *b = &x->b;
    size_t N = x->N, Ne = x->Ne, C = (size_t)x->C, NH = (size_t)x->NH;
    b->params = dyn_calloc_huge(x->np, 4, "bench params", err);
    b->grads = dyn_calloc_huge(x->np, 4, "bench grads", err);
    b->acts = dyn_calloc_huge(x->na, 4, "bench activations", err);
    b->work = dyn_calloc_huge(x->nw, 4, "bench work", err);
    b->inp = dyn_calloc_huge(N * C, 4, "bench input", err);
    b->out = dyn_calloc_huge(N * C, 4, "bench output", err);
    b->dout = dyn_calloc_huge(N * C, 4, "bench dout", err);
    b->dinp = dyn_calloc_huge(N * C, 4, "bench dinp", err);
    b->enc = dyn_calloc_huge(Ne + 1, C * 4, "bench enc", err);
    b->denc = dyn_calloc_huge(Ne + 1, C * 4, "bench denc", err);
    b->rel = dyn_calloc_huge(NH * DYN_T5_NUM_BUCKETS, 4, "bench rel", err);
    b->drel = dyn_calloc_huge(NH * DYN_T5_NUM_BUCKETS, 4, "bench drel", err);
    b->ga = dyn_calloc_huge(N * C, 4, "bench sgemm a", err);
    b->gb = dyn_calloc_huge(4 * C * C, 4, "bench sgemm b", err);
    b->gc = dyn_calloc_huge(N * 4 * C, 4, "bench sgemm c", err);
    if (!b->params || !b->grads || !b->acts || !b->work || !b->inp || !b->out || !b->dout || !b->dinp ||
        !b->enc || !b->denc || !b->rel || !b->drel || !b->ga || !b->gb || !b->gc)
        return DYN_ERR_NOMEM;
    dyn_rng rng;
    dyn_rng_seed(&rng, 1234);
    fill(b->params, x->np, 0.05f, &rng);
    fill(b->inp, N * C, 1.0f, &rng);
    fill(b->dout, N * C, 1.0f, &rng);
    fill(b->enc, Ne * C, 1.0f, &rng);
    fill(b->rel, NH * DYN_T5_NUM_BUCKETS, 1.0f, &rng);
    fill(b->ga, N * C, 1.0f, &rng);
    fill(b->gb, 4 * C * C, 1.0f, &rng);
    return DYN_OK;
}

/* Llama: rotary tables for T positions (theta 10000), ids 0..T-1 per row.
 * Other models: an empty x->rope. */
static dyn_status bench_rope_init(bench_ctx *x, dyn_error *err)
{
    int T = x->T, HD = x->ld.b.HD;
    if (x->llama) {
        x->rcos = dyn_calloc((size_t)T * (size_t)(HD / 2), 4, "bench rope", err);
        x->rsin = dyn_calloc((size_t)T * (size_t)(HD / 2), 4, "bench rope", err);
        x->inv = dyn_calloc((size_t)(HD / 2), 4, "bench rope", err);
        x->pos = dyn_calloc(x->N, sizeof(int32_t), "bench positions", err);
        if (!x->rcos || !x->rsin || !x->inv || !x->pos) return DYN_ERR_NOMEM;
        dyn_model_config rc;
        memset(&rc, 0, sizeof rc);
        rc.rope_theta = 10000.0;
        dyn_rope_inv_freq(x->inv, HD, &rc);
        dyn_rope_tables(x->rcos, x->rsin, x->inv, T, HD);
        for (size_t i = 0; i < x->N; i++) x->pos[i] = (int32_t)(i % (size_t)T);
    }
    x->rope = (dyn_rope){T, x->rcos, x->rsin, x->pos};
    return DYN_OK;
}

/* The row lengths, the timing arrays ([count][repeat]) and the padded
 * layouts (every row full). */
static dyn_status bench_layouts_init(bench_ctx *x, size_t nt_rep, dyn_error *err)
{
    x->lens = dyn_calloc((size_t)x->B, sizeof(int32_t), "bench lens", err);
    x->elens = dyn_calloc((size_t)x->B, sizeof(int32_t), "bench lens", err);
    x->t_blk = dyn_calloc(nt_rep, sizeof(double), "bench times", err);
    x->t_gemm = dyn_calloc(nt_rep, sizeof(double), "bench times", err);
    x->t_ratio = dyn_calloc(nt_rep, sizeof(double), "bench times", err);
    if (!x->lens || !x->elens || !x->t_blk || !x->t_gemm || !x->t_ratio) return DYN_ERR_NOMEM;
    for (int i = 0; i < x->B; i++) {
        x->lens[i] = x->T;
        x->elens[i] = x->Te;
    }
    x->lay = dyn_layout_create_padded(x->lens, x->B, x->T, err);
    if (!x->lay) return err ? err->code : DYN_ERR_NOMEM;
    if (x->t5) {
        x->elay = dyn_layout_create_padded(x->elens, x->B, x->Te, err);
        if (!x->elay) return err ? err->code : DYN_ERR_NOMEM;
    }
    return DYN_OK;
}

/* Carve the parameter, gradient and activation views of the model's block. */
static void bench_views(bench_ctx *x)
{
    if (x->llama) {
        dyn_llama_block_params_layout(&x->lp, x->b.params, x->ld);
        dyn_llama_block_params_layout(&x->lg, x->b.grads, x->ld);
        dyn_llama_block_acts_layout(&x->la, x->b.acts, x->ld, x->B, x->T);
        for (int c = 0; c < x->C; c++) { /* norm gains near 1 */
            x->lp.ln1_w[c] += 1.0f;
            x->lp.ln2_w[c] += 1.0f;
        }
    } else if (x->gpt) {
        dyn_gpt_block_params_layout(&x->gp, x->b.params, x->d);
        dyn_gpt_block_params_layout(&x->gg, x->b.grads, x->d);
        dyn_gpt_block_acts_layout(&x->ga, x->b.acts, x->d, x->B, x->T);
    } else {
        dyn_t5_dec_params_layout(&x->tp, x->b.params, x->d);
        dyn_t5_dec_params_layout(&x->tg, x->b.grads, x->d);
        dyn_t5_dec_acts_layout(&x->ta, x->b.acts, x->d, x->B, x->T, x->Te);
    }
}

/* One forward + backward of the block. */
static void bench_block_step(bench_ctx *x)
{
    bench_bufs *b = &x->b;
    if (x->llama) {
        dyn_llama_block_forward(b->out, b->inp, &x->lp, &x->rope, &x->la, x->lay, x->ld, b->work);
        dyn_llama_block_backward(b->dinp, &x->lg, b->dout, b->inp, &x->lp, &x->rope, &x->la, x->lay, x->ld, 0,
                                 b->work);
    } else if (x->gpt) {
        dyn_gpt_block_forward(b->out, b->inp, &x->gp, &x->ga, x->lay, x->d, b->work);
        dyn_gpt_block_backward(b->dinp, &x->gg, b->dout, b->inp, &x->gp, &x->ga, x->lay, x->d, 0, b->work);
    } else {
        dyn_t5_dec_forward(b->out, b->inp, b->enc, &x->tp, b->rel, &x->ta, x->lay, x->elay, x->d, b->work);
        dyn_t5_dec_backward(b->dinp, b->denc, &x->tg, b->drel, b->dout, b->inp, b->enc, &x->tp, b->rel, &x->ta,
                            x->lay, x->elay, x->d, 0, b->work);
    }
}

/* Every repeat runs the block and the sgemm once per thread count; repeat
 * -1 warms every count up (its pool, its caches) and is not recorded. */
static void bench_time(bench_ctx *x, const int *threads, int n_threads)
{
    int repeat = x->cfg->repeat, C = x->C;
    for (int r = -1; r < repeat; r++) {
        for (int i = 0; i < n_threads; i++) {
            dyn_threads_set(threads[i]);
            x->d.nthreads = threads[i];
            x->ld.b.nthreads = threads[i];
            double t0 = dyn_time_ms();
            bench_block_step(x);
            double t1 = dyn_time_ms();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)x->N, 4 * C, C, 1.0f, x->b.ga, C,
                        x->b.gb, C, 0.0f, x->b.gc, 4 * C);
            double t2 = dyn_time_ms();
            if (r >= 0) {
                size_t k = (size_t)i * repeat + (size_t)r;
                x->t_blk[k] = t1 - t0;
                x->t_gemm[k] = t2 - t1;
                x->t_ratio[k] = x->t_blk[(size_t)r] / x->t_blk[k]; /* count 0 ran first */
            }
        }
    }
}

/* Medians per thread count into res[] and speedup[] (may be NULL). */
static void bench_results(bench_ctx *x, int n_threads, dyn_layer_bench_result *res, double *speedup)
{
    int repeat = x->cfg->repeat, B = x->B, T = x->T, C = x->C;
    double gflop = (x->gpt ? dyn_gpt_block_flops(B, T, C)
                           : x->llama ? dyn_llama_block_flops(x->ld, B, T) : dyn_t5_dec_flops(x->d, B, T, x->Te)) *
                   1e-9;
    for (int i = 0; i < n_threads; i++) {
        double *tb = x->t_blk + (size_t)i * repeat, *tg = x->t_gemm + (size_t)i * repeat;
        dyn_layer_bench_result *o = &res[i];
        o->gflop = gflop;
        o->ms = dyn_median(tb, repeat);
        o->ms_min = tb[0]; /* sorted by dyn_median() */
        o->gflops = o->gflop / (o->ms * 1e-3);
        o->sgemm_gflops = 2.0 * (double)x->N * 4.0 * C * C * 1e-9 / (dyn_median(tg, repeat) * 1e-3);
        o->act_mb = (double)x->na * 4.0 / (1024.0 * 1024.0);
        if (speedup) speedup[i] = dyn_median(x->t_ratio + (size_t)i * repeat, repeat);
    }
}

dyn_status dyn_layer_bench_compare(const dyn_layer_bench_cfg *cfg, const int *threads,
                                   int n_threads, dyn_layer_bench_result *res, double *speedup,
                                   dyn_error *err)
{
    bench_ctx x;
    memset(&x, 0, sizeof x);
    x.cfg = cfg;
    x.gpt = cfg->model == DYN_MODEL_GPT;
    x.llama = cfg->model == DYN_MODEL_LLAMA;
    x.t5 = !x.gpt && !x.llama;
    x.C = cfg->hidden;
    x.NH = cfg->heads;
    x.B = cfg->batch;
    x.T = cfg->seq;
    x.Te = x.t5 ? cfg->enc_seq : 0;
    int max_t;
    dyn_status st = bench_check(&x, threads, n_threads, &max_t, err);
    if (st != DYN_OK) return st;
    bench_size(&x, max_t);
    if ((st = bench_bufs_init(&x, err)) == DYN_OK && (st = bench_rope_init(&x, err)) == DYN_OK &&
        (st = bench_layouts_init(&x, (size_t)n_threads * (size_t)cfg->repeat, err)) == DYN_OK) {
        bench_views(&x);
        bench_time(&x, threads, n_threads);
        bench_results(&x, n_threads, res, speedup);
    }
    bench_ctx_free(&x);
    return st;
}
