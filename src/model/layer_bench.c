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
#include "util/util.h"         /* defines: dyn_calloc, dyn_time_ms, dyn_median */

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

dyn_status dyn_layer_bench_compare(const dyn_layer_bench_cfg *cfg, const int *threads,
                                   int n_threads, dyn_layer_bench_result *res, double *speedup,
                                   dyn_error *err)
{
    int gpt = cfg->model == DYN_MODEL_GPT, llama = cfg->model == DYN_MODEL_LLAMA;
    int C = cfg->hidden, NH = cfg->heads, B = cfg->batch, T = cfg->seq;
    int Te = gpt || llama ? 0 : cfg->enc_seq;
    int max_t = 0, bad_t = n_threads < 1 || n_threads > MAX_COUNTS;
    for (int i = 0; !bad_t && i < n_threads; i++) {
        bad_t |= threads[i] < 1;
        max_t = threads[i] > max_t ? threads[i] : max_t;
    }
    int t5 = !gpt && !llama;
    if (C < 1 || NH < 1 || C % NH != 0 || B < 1 || T < 1 || (t5 && Te < 1) || bad_t || cfg->repeat < 1 ||
        (llama && (C / NH) % 2 != 0))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "bench layer: need hidden divisible by heads%s and positive batch, "
                             "seq%s, threads, repeat",
                             llama ? " into an even head dim" : "", t5 ? ", enc-seq" : "");
    /* Workspace is sized for the largest count; each run passes its own. */
    dyn_block_dims d = {C, NH, C / NH, 4 * C, max_t};
    dyn_llama_dims ld = dyn_layer_bench_llama_dims(C, NH, max_t);
    size_t N = (size_t)B * T, Ne = (size_t)B * Te;
    size_t np = gpt ? dyn_gpt_block_params_count(d) : llama ? dyn_llama_block_params_count(ld) : dyn_t5_dec_params_count(d);
    size_t na = gpt ? dyn_gpt_block_act_floats(d, B, T)
                : llama ? dyn_llama_block_act_floats(ld, B, T) : dyn_t5_dec_act_floats(d, B, T, Te);
    size_t nw = gpt ? dyn_gpt_block_work_floats(d, B, T)
                : llama ? dyn_llama_block_work_floats(ld, B, T) : dyn_t5_dec_work_floats(d, B, T, Te);
    bench_bufs b = {0};
    dyn_status st = DYN_OK;
    b.params = dyn_calloc(np, 4, "bench params", err);
    b.grads = dyn_calloc(np, 4, "bench grads", err);
    b.acts = dyn_calloc(na, 4, "bench activations", err);
    b.work = dyn_calloc(nw, 4, "bench work", err);
    b.inp = dyn_calloc(N * C, 4, "bench input", err);
    b.out = dyn_calloc(N * C, 4, "bench output", err);
    b.dout = dyn_calloc(N * C, 4, "bench dout", err);
    b.dinp = dyn_calloc(N * C, 4, "bench dinp", err);
    b.enc = dyn_calloc(Ne + 1, (size_t)C * 4, "bench enc", err);
    b.denc = dyn_calloc(Ne + 1, (size_t)C * 4, "bench denc", err);
    b.rel = dyn_calloc((size_t)NH * DYN_T5_NUM_BUCKETS, 4, "bench rel", err);
    b.drel = dyn_calloc((size_t)NH * DYN_T5_NUM_BUCKETS, 4, "bench drel", err);
    b.ga = dyn_calloc(N * C, 4, "bench sgemm a", err);
    b.gb = dyn_calloc((size_t)4 * C * C, 4, "bench sgemm b", err);
    b.gc = dyn_calloc(N * 4 * C, 4, "bench sgemm c", err);
    if (!b.params || !b.grads || !b.acts || !b.work || !b.inp || !b.out || !b.dout || !b.dinp ||
        !b.enc || !b.denc || !b.rel || !b.drel || !b.ga || !b.gb || !b.gc) {
        bufs_free(&b);
        return DYN_ERR_NOMEM;
    }
    dyn_rng rng;
    dyn_rng_seed(&rng, 1234);
    fill(b.params, np, 0.05f, &rng);
    fill(b.inp, N * C, 1.0f, &rng);
    fill(b.dout, N * C, 1.0f, &rng);
    fill(b.enc, Ne * C, 1.0f, &rng);
    fill(b.rel, (size_t)NH * DYN_T5_NUM_BUCKETS, 1.0f, &rng);
    fill(b.ga, N * C, 1.0f, &rng);
    fill(b.gb, (size_t)4 * C * C, 1.0f, &rng);

    /* Llama: rotary tables for T positions (theta 10000), ids 0..T-1 per row. */
    float *rcos = NULL, *rsin = NULL, *inv = NULL;
    int32_t *pos = NULL;
    if (llama) {
        rcos = dyn_calloc((size_t)T * (size_t)(ld.b.HD / 2), 4, "bench rope", err);
        rsin = dyn_calloc((size_t)T * (size_t)(ld.b.HD / 2), 4, "bench rope", err);
        inv = dyn_calloc((size_t)(ld.b.HD / 2), 4, "bench rope", err);
        pos = dyn_calloc(N, sizeof(int32_t), "bench positions", err);
        if (!rcos || !rsin || !inv || !pos) {
            free(rcos);
            free(rsin);
            free(inv);
            free(pos);
            bufs_free(&b);
            return DYN_ERR_NOMEM;
        }
        dyn_model_config rc;
        memset(&rc, 0, sizeof rc);
        rc.rope_theta = 10000.0;
        dyn_rope_inv_freq(inv, ld.b.HD, &rc);
        dyn_rope_tables(rcos, rsin, inv, T, ld.b.HD);
        for (size_t i = 0; i < N; i++) pos[i] = (int32_t)(i % (size_t)T);
    }
    dyn_rope rope = {T, rcos, rsin, pos};
    int32_t *lens = dyn_calloc((size_t)B, sizeof(int32_t), "bench lens", err);
    int32_t *elens = dyn_calloc((size_t)B, sizeof(int32_t), "bench lens", err);
    dyn_layout *lay = NULL, *elay = NULL;
    /* [count][repeat] timings and speed-ups. */
    size_t nt_rep = (size_t)n_threads * (size_t)cfg->repeat;
    double *t_blk = dyn_calloc(nt_rep, sizeof(double), "bench times", err);
    double *t_gemm = dyn_calloc(nt_rep, sizeof(double), "bench times", err);
    double *t_ratio = dyn_calloc(nt_rep, sizeof(double), "bench times", err);
    if (!lens || !elens || !t_blk || !t_gemm || !t_ratio) {
        st = DYN_ERR_NOMEM;
        goto done;
    }
    for (int i = 0; i < B; i++) {
        lens[i] = T;
        elens[i] = Te;
    }
    lay = dyn_layout_create_padded(lens, B, T, err);
    if (!lay) {
        st = err ? err->code : DYN_ERR_NOMEM;
        goto done;
    }
    if (t5) {
        elay = dyn_layout_create_padded(elens, B, Te, err);
        if (!elay) {
            st = err ? err->code : DYN_ERR_NOMEM;
            goto done;
        }
    }

    dyn_gpt_block_params gp, gg;
    dyn_gpt_block_acts ga;
    dyn_t5_dec_params tp, tg;
    dyn_t5_dec_acts ta;
    dyn_llama_block_params lp, lg;
    dyn_llama_block_acts la;
    if (llama) {
        dyn_llama_block_params_layout(&lp, b.params, ld);
        dyn_llama_block_params_layout(&lg, b.grads, ld);
        dyn_llama_block_acts_layout(&la, b.acts, ld, B, T);
        for (int c = 0; c < C; c++) { /* norm gains near 1 */
            lp.ln1_w[c] += 1.0f;
            lp.ln2_w[c] += 1.0f;
        }
    } else if (gpt) {
        dyn_gpt_block_params_layout(&gp, b.params, d);
        dyn_gpt_block_params_layout(&gg, b.grads, d);
        dyn_gpt_block_acts_layout(&ga, b.acts, d, B, T);
    } else {
        dyn_t5_dec_params_layout(&tp, b.params, d);
        dyn_t5_dec_params_layout(&tg, b.grads, d);
        dyn_t5_dec_acts_layout(&ta, b.acts, d, B, T, Te);
    }
    for (int r = -1; r < cfg->repeat; r++) {
        for (int i = 0; i < n_threads; i++) {
            /* Repeat -1 warms every count up (its pool, its caches). */
            dyn_threads_set(threads[i]);
            d.nthreads = threads[i];
            ld.b.nthreads = threads[i];
            double t0 = dyn_time_ms();
            if (llama) {
                dyn_llama_block_forward(b.out, b.inp, &lp, &rope, &la, lay, ld, b.work);
                dyn_llama_block_backward(b.dinp, &lg, b.dout, b.inp, &lp, &rope, &la, lay, ld, 0, b.work);
            } else if (gpt) {
                dyn_gpt_block_forward(b.out, b.inp, &gp, &ga, lay, d, b.work);
                dyn_gpt_block_backward(b.dinp, &gg, b.dout, b.inp, &gp, &ga, lay, d, 0, b.work);
            } else {
                dyn_t5_dec_forward(b.out, b.inp, b.enc, &tp, b.rel, &ta, lay, elay, d, b.work);
                dyn_t5_dec_backward(b.dinp, b.denc, &tg, b.drel, b.dout, b.inp, b.enc, &tp, b.rel,
                                    &ta, lay, elay, d, 0, b.work);
            }
            double t1 = dyn_time_ms();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, 4 * C, C, 1.0f, b.ga, C,
                        b.gb, C, 0.0f, b.gc, 4 * C);
            double t2 = dyn_time_ms();
            if (r >= 0) {
                size_t k = (size_t)i * cfg->repeat + (size_t)r;
                t_blk[k] = t1 - t0;
                t_gemm[k] = t2 - t1;
                t_ratio[k] = t_blk[(size_t)r] / t_blk[k]; /* count 0 ran first */
            }
        }
    }
    double gflop = (gpt ? dyn_gpt_block_flops(B, T, C)
                        : llama ? dyn_llama_block_flops(ld, B, T) : dyn_t5_dec_flops(d, B, T, Te)) * 1e-9;
    for (int i = 0; i < n_threads; i++) {
        double *tb = t_blk + (size_t)i * cfg->repeat, *tg = t_gemm + (size_t)i * cfg->repeat;
        dyn_layer_bench_result *o = &res[i];
        o->gflop = gflop;
        o->ms = dyn_median(tb, cfg->repeat);
        o->ms_min = tb[0]; /* sorted by dyn_median() */
        o->gflops = o->gflop / (o->ms * 1e-3);
        o->sgemm_gflops = 2.0 * (double)N * 4.0 * C * C * 1e-9 / (dyn_median(tg, cfg->repeat) * 1e-3);
        o->act_mb = (double)na * 4.0 / (1024.0 * 1024.0);
        if (speedup) speedup[i] = dyn_median(t_ratio + (size_t)i * cfg->repeat, cfg->repeat);
    }
done:
    free(rcos);
    free(rsin);
    free(inv);
    free(pos);
    free(lens);
    free(elens);
    free(t_blk);
    free(t_gemm);
    free(t_ratio);
    dyn_layout_free(lay);
    dyn_layout_free(elay);
    bufs_free(&b);
    return st;
}
