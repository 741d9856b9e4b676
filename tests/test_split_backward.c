/* test_split_backward.c — the zero-bubble split backward: input-gradient
 * halves (B) and weight-gradient halves (W) against the fused backward.
 *   - kernels: linear, LayerNorm, RMSNorm, LM head (several row blocks and
 *     vocabulary chunks), attention with a T5 bias table: B + W bit-identical
 *     to the fused call, accumulating onto non-zero gradients;
 *   - blocks: GPT, T5 encoder, T5 decoder, padded and document-masked
 *     layouts, with and without recompute: dinp, denc and every parameter
 *     and bias gradient bit-identical;
 *   - whole models: every single-layer range (embedding, each block kind,
 *     final norms, LM head) and multi-layer ranges of GPT and T5, padded and
 *     packed, recompute 0/1: din and the gradient buffer bit-identical; two
 *     micro-batches run B1 B2 W1 W2 equal the fused F1 B1 F2 B2; with 2
 *     threads on a shape large enough to run parallel, split = fused = the
 *     1-thread result;
 *   - split gradients against finite differences of the loss;
 *   - what B keeps: the reported bytes, the per-block formula, release by W,
 *     and misuse refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/blocks.h"    /* defines: the blocks and their split halves */
#include "model/threads.h"   /* defines: dyn_threads_set */
#include "model_testutil.h" /* defines: make_samples, model_grad_check, split_loss_and_grad, fill_uniform, lay_*, xcalloc */

static float *rnd(size_t n, float scale, dyn_rng *r)
{
    float *x = xcalloc(n, sizeof(float));
    fill_uniform(x, n, scale, r);
    return x;
}

static float *dup(const float *x, size_t n)
{
    float *y = xcalloc(n, sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* ------------------------------------------------------------ kernels */

static void test_kernel_halves_equal_fused(void **state)
{
    (void)state;
    dyn_rng r;
    dyn_rng_seed(&r, 5);
    int N = 37, C = 19, OC = 23;
    float *dout = rnd((size_t)N * OC, 1, &r), *inp = rnd((size_t)N * C, 1, &r), *w = rnd((size_t)OC * C, 1, &r);
    float *dinp0 = rnd((size_t)N * C, 1, &r), *dw0 = rnd((size_t)OC * C, 1, &r), *db0 = rnd((size_t)OC, 1, &r);
    float *dinp1 = dup(dinp0, (size_t)N * C), *dw1 = dup(dw0, (size_t)OC * C), *db1 = dup(db0, (size_t)OC);
    dyn_linear_backward(dinp0, dw0, db0, dout, inp, w, N, C, OC);
    dyn_linear_backward_weight(dw1, db1, dout, inp, N, C, OC); /* W before B: independent */
    dyn_linear_backward_input(dinp1, dout, w, N, C, OC);
    assert_memory_equal(dinp0, dinp1, (size_t)N * C * 4);
    assert_memory_equal(dw0, dw1, (size_t)OC * C * 4);
    assert_memory_equal(db0, db1, (size_t)OC * 4);

    /* Norms: dout (N,C), gains near 1. */
    float *d = rnd((size_t)N * C, 1, &r), *g = rnd((size_t)C, 0.2f, &r), *b = rnd((size_t)C, 0.2f, &r);
    for (int c = 0; c < C; c++) g[c] += 1.0f;
    float *out = xcalloc((size_t)N * C, 4), *mean = xcalloc((size_t)N, 4), *rstd = xcalloc((size_t)N, 4);
    float *gw0 = rnd((size_t)C, 1, &r), *gb0 = rnd((size_t)C, 1, &r);
    float *gw1 = dup(gw0, (size_t)C), *gb1 = dup(gb0, (size_t)C);
    memcpy(dinp1, dinp0, (size_t)N * C * 4);
    dyn_layernorm_forward(out, mean, rstd, inp, g, b, N, C);
    dyn_layernorm_backward(dinp0, gw0, gb0, d, inp, g, mean, rstd, N, C);
    dyn_layernorm_backward_input(dinp1, d, inp, g, mean, rstd, N, C);
    dyn_layernorm_backward_weight(gw1, gb1, d, inp, mean, rstd, N, C);
    assert_memory_equal(dinp0, dinp1, (size_t)N * C * 4);
    assert_memory_equal(gw0, gw1, (size_t)C * 4);
    assert_memory_equal(gb0, gb1, (size_t)C * 4);
    dyn_rmsnorm_forward(out, rstd, inp, g, N, C);
    dyn_rmsnorm_backward(dinp0, gw0, d, inp, g, rstd, N, C);
    dyn_rmsnorm_backward_input(dinp1, d, inp, g, rstd, N, C);
    dyn_rmsnorm_backward_weight(gw1, d, inp, rstd, N, C);
    assert_memory_equal(dinp0, dinp1, (size_t)N * C * 4);
    assert_memory_equal(gw0, gw1, (size_t)C * 4);

    /* LM head: 300 rows (two row blocks of 256), V = 4500 (three chunks),
     * one row in five not a target. */
    int HN = 300, HC = 8, V = 4500;
    float *x = rnd((size_t)HN * HC, 1, &r), *hw = rnd((size_t)V * HC, 0.5f, &r);
    int32_t *tg = xcalloc((size_t)HN, sizeof(int32_t));
    float *wt = xcalloc((size_t)HN, 4), *lse = xcalloc((size_t)HN, 4);
    for (int i = 0; i < HN; i++) {
        wt[i] = i % 5 == 3 ? 0.0f : 1.0f;
        tg[i] = wt[i] != 0.0f ? (int32_t)dyn_rng_below(&r, (uint64_t)V) : 0;
    }
    float *hwork = xcalloc(dyn_lmhead_work_floats(HN, HC, V), 4);
    dyn_lmhead_ce_forward(NULL, lse, x, hw, tg, wt, HN, HC, V, hwork);
    float *dx0 = rnd((size_t)HN * HC, 1, &r), *dx1 = dup(dx0, (size_t)HN * HC);
    float *dhw0 = rnd((size_t)V * HC, 1, &r), *dhw1 = dup(dhw0, (size_t)V * HC);
    dyn_lmhead_ce_backward(dx0, dhw0, x, hw, tg, wt, lse, 0.01f, HN, HC, V, hwork);
    dyn_lmhead_ce_backward_input(dx1, x, hw, tg, wt, lse, 0.01f, HN, HC, V, hwork);
    dyn_lmhead_ce_backward_weight(dhw1, x, hw, tg, wt, lse, 0.01f, HN, HC, V, hwork);
    assert_memory_equal(dx0, dx1, (size_t)HN * HC * 4);
    assert_memory_equal(dhw0, dhw1, (size_t)V * HC * 4);

    /* Attention with a bias table on a document-masked layout, 2 threads. */
    const int32_t lens[5] = {7, 3, 9, 4, 5}, counts[2] = {3, 2};
    dyn_layout *lay = lay_packed(lens, counts, 2, 20, 1);
    dyn_attn_cfg cfg = {.NH = 2, .HD = 4, .causal = 0, .scale = 1.0f, .bidirectional = 1,
                        .num_buckets = DYN_T5_NUM_BUCKETS, .max_distance = DYN_T5_MAX_DISTANCE, .nthreads = 2};
    size_t AN = 40, W = 8, nb = (size_t)cfg.NH * DYN_T5_NUM_BUCKETS;
    float *q = rnd(AN * W, 1, &r), *k = rnd(AN * W, 1, &r), *v = rnd(AN * W, 1, &r);
    float *rel = rnd(nb, 1, &r), *ao = xcalloc(AN * W, 4), *alse = xcalloc(AN * 2, 4);
    float *awork = xcalloc(dyn_attention_work_floats(2, 20, 20, &cfg), 4), *ad = rnd(AN * W, 1, &r);
    dyn_attention_forward(ao, alse, q, (int)W, k, (int)W, v, (int)W, rel, lay, lay, &cfg, awork);
    float *dq0 = xcalloc(AN * W, 4), *dk0 = xcalloc(AN * W, 4), *dv0 = xcalloc(AN * W, 4);
    float *dq1 = xcalloc(AN * W, 4), *dk1 = xcalloc(AN * W, 4), *dv1 = xcalloc(AN * W, 4);
    float *drel0 = rnd(nb, 1, &r), *drel1 = dup(drel0, nb), *drel_init = dup(drel0, nb);
    size_t ni = dyn_attention_rel_items_floats(lay, lay, &cfg);
    assert_int_equal(ni, (size_t)5 * cfg.NH * DYN_T5_NUM_BUCKETS); /* one item per (segment, head) */
    float *items = xcalloc(ni, 4);
    dyn_attention_backward(dq0, dk0, dv0, drel0, ad, q, (int)W, k, (int)W, v, (int)W, ao, alse, rel, lay, lay, &cfg,
                           awork);
    dyn_attention_backward_input(dq1, dk1, dv1, items, ad, q, (int)W, k, (int)W, v, (int)W, ao, alse, rel, lay, lay,
                                 &cfg, awork);
    assert_memory_equal(drel1, drel_init, nb * 4); /* B leaves the table gradient alone */
    dyn_attention_rel_bias_backward_weight(drel1, items, lay, lay, &cfg);
    assert_memory_equal(dq0, dq1, AN * W * 4);
    assert_memory_equal(dk0, dk1, AN * W * 4);
    assert_memory_equal(dv0, dv1, AN * W * 4);
    assert_memory_equal(drel0, drel1, nb * 4);

    float *all[] = {dout, inp, w, dinp0, dw0, db0, dinp1, dw1, db1, d, g, b, out, mean, rstd, gw0, gb0, gw1, gb1,
                    x, hw, wt, lse, hwork, dx0, dx1, dhw0, dhw1, q, k, v, rel, ao, alse, awork, ad, dq0, dk0,
                    dv0, dq1, dk1, dv1, drel0, drel1, drel_init, items};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    free(tg);
    dyn_layout_free(lay);
}

/* ------------------------------------------------------------ blocks */

enum { GPT = 0, ENC = 1, DEC = 2 };

static size_t act_floats(int kind, dyn_block_dims d, const dyn_layout *l, const dyn_layout *el)
{
    return kind == GPT ? dyn_gpt_block_act_floats(d, l->B, l->T)
           : kind == ENC ? dyn_t5_enc_act_floats(d, l->B, l->T) : dyn_t5_dec_act_floats(d, l->B, l->T, el->T);
}

/* Fused and split backward of one block on the same inputs, starting from
 * the same non-zero gradients; every output must match bit for bit. */
static void block_case(int kind, const dyn_layout *lay, const dyn_layout *elay, int recompute)
{
    dyn_block_dims d = kind == GPT ? (dyn_block_dims){16, 2, 8, 64, 2} : (dyn_block_dims){16, 2, 6, 20, 2};
    dyn_rng r;
    dyn_rng_seed(&r, 17 + (uint64_t)kind);
    size_t np = kind == GPT ? dyn_gpt_block_params_count(d)
                : kind == ENC ? dyn_t5_enc_params_count(d) : dyn_t5_dec_params_count(d);
    size_t N = (size_t)lay->B * lay->T, Ne = elay ? (size_t)elay->B * elay->T : 0, C = (size_t)d.C;
    size_t nrel = (size_t)d.NH * DYN_T5_NUM_BUCKETS;
    float *p = rnd(np, 0.3f, &r), *inp = rnd(N * C, 1, &r), *enc = Ne ? rnd(Ne * C, 1, &r) : NULL;
    float *rel = rnd(nrel, 0.5f, &r), *dout = rnd(N * C, 1, &r);
    float *g0 = rnd(np, 1, &r), *g1 = dup(g0, np), *drel0 = rnd(nrel, 1, &r), *drel1 = dup(drel0, nrel);
    float *denc0 = Ne ? rnd(Ne * C, 1, &r) : NULL, *denc1 = Ne ? dup(denc0, Ne * C) : NULL;
    float *dinp0 = xcalloc(N * C, 4), *dinp1 = xcalloc(N * C, 4), *out = xcalloc(N * C, 4);
    size_t na = act_floats(kind, d, lay, elay);
    float *acts0 = xcalloc(na, 4), *acts1 = xcalloc(na, 4);
    size_t nw = kind == GPT ? dyn_gpt_block_work_floats(d, lay->B, lay->T)
                : kind == ENC ? dyn_t5_enc_work_floats(d, lay->B, lay->T)
                              : dyn_t5_dec_work_floats(d, lay->B, lay->T, elay->T);
    float *work = xcalloc(nw, 4);
    size_t ndy = kind == GPT ? dyn_gpt_block_dy_floats(d, lay)
                 : kind == ENC ? dyn_t5_enc_dy_floats(d, lay) : dyn_t5_dec_dy_floats(d, lay, elay);
    float *dyb = xcalloc(ndy, 4);
    if (kind == GPT) {
        dyn_gpt_block_params P, G0, G1;
        dyn_gpt_block_acts A0, A1;
        dyn_gpt_block_dy K;
        dyn_gpt_block_params_layout(&P, p, d);
        for (int c = 0; c < d.C; c++) P.ln1_w[c] += 1.0f, P.ln2_w[c] += 1.0f;
        dyn_gpt_block_params_layout(&G0, g0, d);
        dyn_gpt_block_params_layout(&G1, g1, d);
        dyn_gpt_block_acts_layout(&A0, acts0, d, lay->B, lay->T);
        dyn_gpt_block_acts_layout(&A1, acts1, d, lay->B, lay->T);
        dyn_gpt_block_dy_layout(&K, dyb, d, lay);
        dyn_gpt_block_forward(out, inp, &P, &A0, lay, d, work);
        if (!recompute) dyn_gpt_block_forward(out, inp, &P, &A1, lay, d, work);
        dyn_gpt_block_backward(dinp0, &G0, dout, inp, &P, &A0, lay, d, recompute, work);
        dyn_gpt_block_backward_input(dinp1, &K, dout, inp, &P, &A1, lay, d, recompute, work);
        dyn_gpt_block_backward_weight(&G1, &K, inp, &A1, lay, d);
    } else if (kind == ENC) {
        dyn_t5_enc_params P, G0, G1;
        dyn_t5_enc_acts A0, A1;
        dyn_t5_enc_dy K;
        dyn_t5_enc_params_layout(&P, p, d);
        dyn_t5_enc_params_layout(&G0, g0, d);
        dyn_t5_enc_params_layout(&G1, g1, d);
        dyn_t5_enc_acts_layout(&A0, acts0, d, lay->B, lay->T);
        dyn_t5_enc_acts_layout(&A1, acts1, d, lay->B, lay->T);
        dyn_t5_enc_dy_layout(&K, dyb, d, lay);
        dyn_t5_enc_forward(out, inp, &P, rel, &A0, lay, d, work);
        if (!recompute) dyn_t5_enc_forward(out, inp, &P, rel, &A1, lay, d, work);
        dyn_t5_enc_backward(dinp0, &G0, drel0, dout, inp, &P, rel, &A0, lay, d, recompute, work);
        dyn_t5_enc_backward_input(dinp1, &K, dout, inp, &P, rel, &A1, lay, d, recompute, work);
        dyn_t5_enc_backward_weight(&G1, drel1, &K, inp, &A1, lay, d);
    } else {
        dyn_t5_dec_params P, G0, G1;
        dyn_t5_dec_acts A0, A1;
        dyn_t5_dec_dy K;
        dyn_t5_dec_params_layout(&P, p, d);
        dyn_t5_dec_params_layout(&G0, g0, d);
        dyn_t5_dec_params_layout(&G1, g1, d);
        dyn_t5_dec_acts_layout(&A0, acts0, d, lay->B, lay->T, elay->T);
        dyn_t5_dec_acts_layout(&A1, acts1, d, lay->B, lay->T, elay->T);
        dyn_t5_dec_dy_layout(&K, dyb, d, lay, elay);
        dyn_t5_dec_forward(out, inp, enc, &P, rel, &A0, lay, elay, d, work);
        if (!recompute) dyn_t5_dec_forward(out, inp, enc, &P, rel, &A1, lay, elay, d, work);
        dyn_t5_dec_backward(dinp0, denc0, &G0, drel0, dout, inp, enc, &P, rel, &A0, lay, elay, d, recompute, work);
        dyn_t5_dec_backward_input(dinp1, denc1, &K, dout, inp, enc, &P, rel, &A1, lay, elay, d, recompute, work);
        assert_memory_equal(denc0, denc1, Ne * C * 4); /* B alone completes denc */
        dyn_t5_dec_backward_weight(&G1, drel1, &K, inp, enc, &A1, lay, elay, d);
    }
    assert_memory_equal(dinp0, dinp1, N * C * 4);
    assert_memory_equal(g0, g1, np * 4);
    assert_memory_equal(drel0, drel1, nrel * 4);
    float *all[] = {p, inp, enc, rel, dout, g0, g1, drel0, drel1, denc0, denc1, dinp0, dinp1, out, acts0, acts1,
                    work, dyb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

static void test_block_halves_equal_fused(void **state)
{
    (void)state;
    const int32_t lens[4] = {9, 4, 12, 6}, elens[4] = {7, 10, 3, 8};
    const int32_t pad_d[2] = {9, 12}, pad_e[2] = {7, 10};
    const int32_t rows[2] = {2, 2};
    dyn_layout *pd = lay_padded(pad_d, 2, 12), *pe = lay_padded(pad_e, 2, 10);
    dyn_layout *kd = lay_packed(lens, rows, 2, 18, 1), *ke = lay_packed(elens, rows, 2, 17, 1);
    for (int rc = 0; rc < 2; rc++) {
        block_case(GPT, pd, NULL, rc);
        block_case(GPT, kd, NULL, rc);
        block_case(ENC, pe, NULL, rc);
        block_case(ENC, ke, NULL, rc);
        block_case(DEC, pd, pe, rc);
        block_case(DEC, kd, ke, rc);
    }
    dyn_layout_free(pd);
    dyn_layout_free(pe);
    dyn_layout_free(kd);
    dyn_layout_free(ke);
}

/* ------------------------------------------------------------ models */

static dyn_model_microbatch *make_mb(dyn_model_kind kind, int packed, uint64_t seed, int32_t **store)
{
    dyn_token_sample s[4];
    make_samples(s, 4, 2, 9, 2, 6, seed, store);
    int32_t rows[2] = {3, 1};
    dyn_model_microbatch *mb = packed ? dyn_model_microbatch_create_packed(kind, s, 4, rows, 2, 0, 0, 1, NULL)
                                      : dyn_model_microbatch_create_padded(kind, s, 4, NULL);
    if (mb == NULL) abort();
    return mb;
}

static void ok(dyn_status st, const dyn_error *err)
{
    if (st != DYN_OK) fail_msg("%s", err->msg);
}

/* Layers [first, last) of m on mb: fused vs split from zeroed gradients,
 * with the real boundary input and a random boundary gradient. */
static void model_range_case(dyn_model *m, const dyn_model_microbatch *mb, int first, int last, int recompute)
{
    dyn_error err;
    int L = dyn_model_num_layers(m);
    size_t np = dyn_model_num_params(m);
    size_t nin = dyn_model_boundary_floats(m, first, mb), nout = dyn_model_boundary_floats(m, last, mb);
    dyn_rng r;
    dyn_rng_seed(&r, (uint64_t)(first * 31 + last));
    float *in = nin ? xcalloc(nin, 4) : NULL, *out = nout ? xcalloc(nout, 4) : NULL;
    float *dout = nout ? rnd(nout, 0.1f, &r) : NULL;
    float *din0 = nin ? xcalloc(nin, 4) : NULL, *din1 = nin ? xcalloc(nin, 4) : NULL;
    dyn_model_acts *a = dyn_model_acts_create(&err), *b = dyn_model_acts_create(&err);
    if (first > 0) ok(dyn_model_stage_forward(m, a, mb, 0, first, NULL, in, 0, NULL, NULL, &err), &err);
    float *g0 = xcalloc(np, 4);
    double l0 = 0, l1 = 0;
    dyn_model_zero_grad(m);
    ok(dyn_model_stage_forward(m, a, mb, first, last, in, out, recompute, &l0, NULL, &err), &err);
    ok(dyn_model_stage_backward(m, a, mb, first, last, dout, din0, 0.1f, &err), &err);
    memcpy(g0, dyn_model_grads(m), np * 4);
    dyn_model_zero_grad(m);
    ok(dyn_model_stage_forward(m, b, mb, first, last, in, out, recompute, &l1, NULL, &err), &err);
    ok(dyn_model_stage_backward_input(m, b, mb, first, last, dout, din1, 0.1f, &err), &err);
    assert_true(dyn_model_acts_kept_bytes(b) > 0);
    assert_int_equal(dyn_model_acts_kept_bytes(b), dyn_model_split_kept_bytes(m, mb, first, last, recompute));
    /* B touches no parameter gradient. */
    for (size_t i = 0; i < np; i++)
        if (dyn_model_grads(m)[i] != 0.0f) fail_msg("layers [%d, %d): B wrote gradient %zu", first, last, i);
    ok(dyn_model_stage_backward_weight(m, b, mb, first, last, &err), &err);
    assert_int_equal(dyn_model_acts_kept_bytes(b), 0);
    assert_true(l0 == l1 || last < L);
    if (nin) assert_memory_equal(din0, din1, nin * 4);
    if (memcmp(g0, dyn_model_grads(m), np * 4) != 0)
        fail_msg("layers [%d, %d) recompute %d: split gradients differ from fused", first, last, recompute);
    free(g0);
    free(in);
    free(out);
    free(dout);
    free(din0);
    free(din1);
    dyn_model_acts_free(a);
    dyn_model_acts_free(b);
}

static void run_model_split(dyn_model_kind kind)
{
    dyn_model_config c = dyn_model_config_tiny(kind, 2, 16, 2, 32);
    dyn_model *m = dyn_model_create(&c, 3, NULL);
    assert_non_null(m);
    int L = dyn_model_num_layers(m);
    for (int packed = 0; packed < 2; packed++) {
        int32_t *store;
        dyn_model_microbatch *mb = make_mb(kind, packed, 23 + (uint64_t)packed, &store);
        for (int rc = 0; rc < 2; rc++) {
            for (int l = 0; l < L; l++) model_range_case(m, mb, l, l + 1, rc); /* every layer kind alone */
            model_range_case(m, mb, 0, L, rc);
            model_range_case(m, mb, 1, L - 1, rc);
            model_range_case(m, mb, 0, L / 2, rc);
            model_range_case(m, mb, L / 2, L, rc);
        }
        dyn_model_microbatch_free(mb);
        free(store);
    }
    dyn_model_free(m);
}

static void test_gpt_split_equals_fused(void **state)
{
    (void)state;
    run_model_split(DYN_MODEL_GPT);
}

static void test_t5_split_equals_fused(void **state)
{
    (void)state;
    run_model_split(DYN_MODEL_T5);
}

/* Two micro-batches in flight: B1 B2 W1 W2 (W in micro-batch order) gives
 * the gradients of fused F1 B1 F2 B2 bit for bit. */
static void test_interleaved_microbatches(void **state)
{
    (void)state;
    for (int kind = 0; kind < 2; kind++) {
        dyn_error err;
        dyn_model_config c = dyn_model_config_tiny((dyn_model_kind)kind, 2, 16, 2, 32);
        dyn_model *m = dyn_model_create(&c, 4, &err);
        int L = dyn_model_num_layers(m);
        size_t np = dyn_model_num_params(m);
        int32_t *s1, *s2;
        dyn_model_microbatch *m1 = make_mb((dyn_model_kind)kind, 0, 61, &s1), *m2 = make_mb((dyn_model_kind)kind, 1, 62, &s2);
        dyn_model_acts *a1 = dyn_model_acts_create(&err), *a2 = dyn_model_acts_create(&err);
        dyn_model_zero_grad(m);
        loss_and_grad(m, a1, m1, 0.05f, 0, NULL);
        loss_and_grad(m, a1, m2, 0.05f, 0, NULL);
        float *g0 = dup(dyn_model_grads(m), np);
        dyn_model_zero_grad(m);
        ok(dyn_model_forward(m, a1, m1, 0, NULL, NULL, &err), &err);
        ok(dyn_model_forward(m, a2, m2, 1, NULL, NULL, &err), &err); /* recompute on one of them */
        ok(dyn_model_stage_backward_input(m, a1, m1, 0, L, NULL, NULL, 0.05f, &err), &err);
        ok(dyn_model_stage_backward_input(m, a2, m2, 0, L, NULL, NULL, 0.05f, &err), &err);
        ok(dyn_model_stage_backward_weight(m, a1, m1, 0, L, &err), &err);
        ok(dyn_model_stage_backward_weight(m, a2, m2, 0, L, &err), &err);
        assert_memory_equal(g0, dyn_model_grads(m), np * 4);
        free(g0);
        dyn_model_acts_free(a1);
        dyn_model_acts_free(a2);
        dyn_model_microbatch_free(m1);
        dyn_model_microbatch_free(m2);
        free(s1);
        free(s2);
        dyn_model_free(m);
    }
}

static void test_split_gradients_match_finite_differences(void **state)
{
    (void)state;
    for (int kind = 0; kind < 2; kind++) {
        dyn_model_config c = dyn_model_config_tiny((dyn_model_kind)kind, 2, 16, 2, 32);
        dyn_model *m = dyn_model_create(&c, 8, NULL);
        assert_non_null(m);
        for (int packed = 0; packed < 2; packed++) {
            int32_t *store;
            dyn_model_microbatch *mb = make_mb((dyn_model_kind)kind, packed, 71, &store);
            assert_int_equal(model_grad_check(m, mb, packed ? "split docmask" : "split padded", 1), 0);
            dyn_model_microbatch_free(mb);
            free(store);
        }
        dyn_model_free(m);
    }
}

/* Large enough for the parallel paths (the shape of test_threads.c: GPT
 * 2 x 256, B = 4, up to 96 + 32 tokens): with 2 threads the split halves
 * still equal the fused backward, and equal the 1-thread result. */
static float *big_gpt_grads(int threads, int split, size_t *n)
{
    dyn_error err;
    dyn_model_config c = dyn_model_config_tiny(DYN_MODEL_GPT, 2, 256, 4, 128);
    dyn_model *m = dyn_model_create(&c, 7, &err);
    assert_non_null(m);
    dyn_model_set_threads(m, threads);
    dyn_token_sample s[4];
    int32_t *store;
    make_samples(s, 4, 64, 96, 32, 32, 11, &store);
    dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(DYN_MODEL_GPT, s, 4, &err);
    dyn_model_acts *a = dyn_model_acts_create(&err);
    assert_non_null(mb);
    assert_non_null(a);
    dyn_model_zero_grad(m);
    if (split) split_loss_and_grad(m, a, mb, 1.0f / 128, 0);
    else loss_and_grad(m, a, mb, 1.0f / 128, 0, NULL);
    *n = dyn_model_num_params(m);
    float *g = dup(dyn_model_grads(m), *n);
    dyn_model_acts_free(a);
    dyn_model_microbatch_free(mb);
    free(store);
    dyn_model_free(m);
    return g;
}

static void test_split_with_two_threads(void **state)
{
    (void)state;
    size_t n0, n1, n2;
    float *fused2 = big_gpt_grads(2, 0, &n0), *split2 = big_gpt_grads(2, 1, &n1), *split1 = big_gpt_grads(1, 1, &n2);
    assert_int_equal(n0, n1);
    assert_int_equal(n0, n2);
    assert_memory_equal(fused2, split2, n0 * 4);
    assert_memory_equal(split1, split2, n0 * 4);
    free(fused2);
    free(split2);
    free(split1);
    dyn_threads_set(1);
}

/* ------------------------------------------------------------ memory, misuse */

static void test_kept_memory_and_misuse(void **state)
{
    (void)state;
    dyn_error err;
    dyn_model_config c = dyn_model_config_tiny(DYN_MODEL_GPT, 2, 16, 2, 32);
    dyn_model *m = dyn_model_create(&c, 2, &err);
    int L = dyn_model_num_layers(m);
    int32_t *store;
    dyn_model_microbatch *mb = make_mb(DYN_MODEL_GPT, 0, 81, &store);
    size_t N = (size_t)mb->lay->B * mb->lay->T, C = 16, F = 64;
    dyn_block_dims d = {16, 2, 8, 64, 1};
    /* One block: N (7C + F) floats of output gradients; with recompute its
     * recomputed activations as well. */
    assert_int_equal(dyn_model_split_kept_bytes(m, mb, 1, 2, 0), N * (7 * C + F) * 4);
    size_t act = (dyn_gpt_block_act_floats(d, mb->lay->B, mb->lay->T) + 15) / 16 * 16;
    assert_int_equal(dyn_model_split_kept_bytes(m, mb, 1, 2, 1), N * (7 * C + F) * 4 + act * 4);
    /* Whole model: both blocks, plus the embedding's and final norm's (N,C). */
    assert_int_equal(dyn_model_split_kept_bytes(m, mb, 0, L, 0), 2 * N * (7 * C + F) * 4 + 2 * N * C * 4);
    assert_int_equal(dyn_model_split_kept_bytes(m, mb, 0, L + 1, 0), 0);

    dyn_model_acts *a = dyn_model_acts_create(&err);
    size_t nb = dyn_model_boundary_floats(m, 2, mb);
    float *bnd = xcalloc(nb, 4), *gb = xcalloc(nb, 4);
    assert_int_equal(dyn_model_stage_backward_input(m, a, mb, 0, 2, gb, NULL, 1.0f, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "without the matching forward"));
    ok(dyn_model_stage_forward(m, a, mb, 0, 2, NULL, bnd, 0, NULL, NULL, &err), &err);
    assert_int_equal(dyn_model_stage_backward_weight(m, a, mb, 0, 2, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "without the matching input-gradient"));
    ok(dyn_model_stage_backward_input(m, a, mb, 0, 2, gb, NULL, 1.0f, &err), &err);
    size_t kept = dyn_model_acts_kept_bytes(a);
    printf("    GPT C=16 layers [0,2), %zu tokens: stored %zu bytes, B keeps %zu more until W (%.0f%%)\n", N,
           dyn_model_acts_stored_bytes(a), kept, 100.0 * (double)kept / (double)dyn_model_acts_stored_bytes(a));
    assert_int_equal(dyn_model_stage_forward(m, a, mb, 0, 2, NULL, bnd, 0, NULL, NULL, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "has not run yet"));
    assert_int_equal(dyn_model_stage_backward(m, a, mb, 0, 2, gb, NULL, 1.0f, &err), DYN_ERR_INVALID_ARG);
    assert_int_equal(dyn_model_stage_backward_weight(m, a, mb, 0, 1, &err), DYN_ERR_INVALID_ARG);
    ok(dyn_model_stage_backward_weight(m, a, mb, 0, 2, &err), &err);
    assert_int_equal(dyn_model_acts_kept_bytes(a), 0);
    assert_true(dyn_model_acts_keep_capacity_bytes(a) >= kept); /* kept for reuse */
    assert_int_equal(dyn_model_stage_backward_weight(m, a, mb, 0, 2, &err), DYN_ERR_INVALID_ARG);
    ok(dyn_model_stage_forward(m, a, mb, 0, 2, NULL, bnd, 0, NULL, NULL, &err), &err); /* free again */
    free(bnd);
    free(gb);
    dyn_model_acts_free(a);
    dyn_model_microbatch_free(mb);
    free(store);
    dyn_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_halves_equal_fused),
        cmocka_unit_test(test_block_halves_equal_fused),
        cmocka_unit_test(test_gpt_split_equals_fused),
        cmocka_unit_test(test_t5_split_equals_fused),
        cmocka_unit_test(test_interleaved_microbatches),
        cmocka_unit_test(test_split_gradients_match_finite_differences),
        cmocka_unit_test(test_split_with_two_threads),
        cmocka_unit_test(test_kept_memory_and_misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
