/* block_llama.c — the Llama-family transformer block (RMSNorm with the
 * config's epsilon, rotary position embedding on q and k, grouped-query
 * causal attention, SwiGLU feed-forward, no biases except Qwen2's optional
 * q/k/v ones) over a variable-length layout: parameter and activation
 * layouts, forward, backward, its split halves (input and weight
 * gradients) and the FLOP count the benchmark credits. Contract in blocks.h.
 *
 * Attention is the tiled kernel of attention.c: q and k are rotated in place
 * in the fused qkv activation after the projection (so the kernel and the
 * backward see the rotated values), and GQA is the kernel's kv_heads head
 * mapping, so no repeated k/v copy exists. Backward: the attention gradient
 * with respect to the rotated q and k is turned back by the inverse
 * rotation, in place, giving dY of the q|k|v projection.
 *
 * As in block_gpt.c the residual gradient runs through dinp: the FFN's
 * input-norm backward writes dout plus its gradient there and the attention
 * branch's adds to it. Backward scratch (work, in order): dg (N,F), dh
 * (N,2F), dC (N,C), dA (N,I), dqkv (N,QKV), then the attention workspace;
 * the split's B keeps dh, dln2, dln1 and dqkv in its dy arena instead. */
#include <math.h>
#include <string.h>

#include "model/blocks.h" /* defines: dyn_llama_*, dyn_rope */

static dyn_attn_cfg llama_attn_cfg(dyn_llama_dims d)
{
    dyn_attn_cfg cfg = {0};
    cfg.NH = d.b.NH;
    cfg.HD = d.b.HD;
    cfg.kv_heads = d.KVH;
    cfg.causal = 1;
    cfg.scale = 1.0f / sqrtf((float)d.b.HD);
    cfg.nthreads = d.b.nthreads;
    return cfg;
}

/* Attention widths: I = NH*HD (queries, output), KV = KVH*HD, QKV. */
static size_t width_i(dyn_llama_dims d) { return (size_t)d.b.NH * d.b.HD; }
static size_t width_kv(dyn_llama_dims d) { return (size_t)d.KVH * d.b.HD; }
static size_t width_qkv(dyn_llama_dims d) { return width_i(d) + 2 * width_kv(d); }

size_t dyn_llama_block_params_count(dyn_llama_dims d)
{
    size_t C = (size_t)d.b.C, F = (size_t)d.b.F, I = width_i(d), QKV = width_qkv(d);
    return C + QKV * C + (d.qkv_bias ? QKV : 0) + C * I + C + 2 * F * C + C * F;
}

size_t dyn_llama_block_params_layout(dyn_llama_block_params *p, float *flat, dyn_llama_dims d)
{
    size_t C = (size_t)d.b.C, F = (size_t)d.b.F, I = width_i(d), KV = width_kv(d);
    float *x = flat;
    p->ln1_w = x; x += C;
    p->q_w = x; x += I * C;
    p->k_w = x; x += KV * C;
    p->v_w = x; x += KV * C;
    p->q_b = p->k_b = p->v_b = NULL;
    if (d.qkv_bias) {
        p->q_b = x; x += I;
        p->k_b = x; x += KV;
        p->v_b = x; x += KV;
    }
    p->o_w = x; x += C * I;
    p->ln2_w = x; x += C;
    p->gate_w = x; x += F * C;
    p->up_w = x; x += F * C;
    p->down_w = x; x += C * F;
    return (size_t)(x - flat);
}

size_t dyn_llama_block_act_floats(dyn_llama_dims d, int B, int T)
{
    size_t N = (size_t)B * T, C = (size_t)d.b.C, F = (size_t)d.b.F;
    return N * C + N + N * width_qkv(d) + N * width_i(d) + (size_t)B * d.b.NH * T + N * C + N * C + N +
           N * 2 * F + N * F;
}

void dyn_llama_block_acts_layout(dyn_llama_block_acts *a, float *arena, dyn_llama_dims d, int B, int T)
{
    size_t N = (size_t)B * T, C = (size_t)d.b.C, F = (size_t)d.b.F;
    float *x = arena;
    a->ln1 = x; x += N * C;
    a->ln1_rstd = x; x += N;
    a->qkv = x; x += N * width_qkv(d);
    a->atty = x; x += N * width_i(d);
    a->att_lse = x; x += (size_t)B * d.b.NH * T;
    a->x1 = x; x += N * C;
    a->ln2 = x; x += N * C;
    a->ln2_rstd = x; x += N;
    a->h = x; x += N * 2 * F;
    a->g = x;
}

/* Scratch before the attention workspace (see the top of the file). */
static size_t scratch_floats(dyn_llama_dims d, size_t N)
{
    size_t C = (size_t)d.b.C, F = (size_t)d.b.F;
    return N * F + N * 2 * F + N * C + N * width_i(d) + N * width_qkv(d);
}

size_t dyn_llama_block_work_floats(dyn_llama_dims d, int B, int T)
{
    dyn_attn_cfg cfg = llama_attn_cfg(d);
    return scratch_floats(d, (size_t)B * T) + dyn_attention_work_floats(B, T, T, &cfg);
}

void dyn_llama_block_forward(float *out, const float *inp, const dyn_llama_block_params *p,
                             const dyn_rope *rope, dyn_llama_block_acts *a, const dyn_layout *lay,
                             dyn_llama_dims d, float *work)
{
    int N = lay->B * lay->T, C = d.b.C, F = d.b.F, HD = d.b.HD;
    int I = (int)width_i(d), KV = (int)width_kv(d), QKV = (int)width_qkv(d);
    dyn_attn_cfg cfg = llama_attn_cfg(d);
    float *attn_work = work + scratch_floats(d, (size_t)N);
    dyn_rmsnorm_forward_eps(a->ln1, a->ln1_rstd, inp, p->ln1_w, d.eps, N, C);
    dyn_linear_forward(a->qkv, a->ln1, p->q_w, p->q_b, N, C, QKV);
    dyn_rope_forward(a->qkv, QKV, d.b.NH, HD, rope->pos, rope->cos_t, rope->sin_t, N);
    dyn_rope_forward(a->qkv + I, QKV, d.KVH, HD, rope->pos, rope->cos_t, rope->sin_t, N);
    dyn_attention_forward(a->atty, a->att_lse, a->qkv, QKV, a->qkv + I, QKV, a->qkv + I + KV, QKV, NULL,
                          lay, lay, &cfg, attn_work);
    dyn_linear_forward(a->x1, a->atty, p->o_w, NULL, N, I, C);
    dyn_residual_forward(a->x1, a->x1, inp, (size_t)N * C);
    dyn_rmsnorm_forward_eps(a->ln2, a->ln2_rstd, a->x1, p->ln2_w, d.eps, N, C);
    dyn_linear_forward(a->h, a->ln2, p->gate_w, NULL, N, C, 2 * F);
    dyn_swiglu_forward(a->g, a->h, N, F);
    dyn_linear_forward(out, a->g, p->down_w, NULL, N, F, C);
    dyn_residual_forward(out, out, a->x1, (size_t)N * C);
}

/* The block backward's one chain of input gradients, behind the fused
 * backward (g given, k NULL) and the split's B (k given, g NULL), as in
 * block_gpt.c: fused, each weight gradient follows its input gradient at
 * once; B keeps every dY in k instead. The input-gradient arithmetic is one
 * sequence either way, so dinp agrees to the bit. */
static void llama_backward_run(float *dinp, const dyn_llama_block_params *g, dyn_llama_block_dy *k,
                               const float *dout, const float *inp, const dyn_llama_block_params *p,
                               const dyn_rope *rope, dyn_llama_block_acts *a, const dyn_layout *lay,
                               dyn_llama_dims d, int recompute, float *work)
{
    int N = lay->B * lay->T, C = d.b.C, F = d.b.F, HD = d.b.HD;
    int I = (int)width_i(d), KV = (int)width_kv(d), QKV = (int)width_qkv(d);
    size_t NC = (size_t)N * C, NF = (size_t)N * F;
    dyn_attn_cfg cfg = llama_attn_cfg(d);
    float *dg = work, *dh_w = dg + NF, *dC = dh_w + 2 * NF, *dA = dC + NC, *dqkv_w = dA + (size_t)N * I;
    float *attn_work = work + scratch_floats(d, (size_t)N);
    float *dh = k ? k->dh : dh_w, *dln2 = k ? k->dln2 : dC;
    float *dqkv = k ? k->dqkv : dqkv_w, *dln1 = k ? k->dln1 : dC;
    /* dinp doubles as the recomputed block output: it is overwritten next. */
    if (recompute) dyn_llama_block_forward(dinp, inp, p, rope, a, lay, d, work);
    if (k) memcpy(k->dout, dout, NC * sizeof(float));

    /* FFN branch: out = x1 + down(swiglu(gate|up(ln2(x1)))); ln2's backward
     * writes dinp = dout + its gradient. */
    dyn_linear_backward_input_set(dg, dout, p->down_w, N, F, C);
    if (g) dyn_linear_backward_weight(g->down_w, NULL, dout, a->g, N, F, C);
    dyn_swiglu_backward(dh, dg, a->h, N, F);
    dyn_linear_backward_input_set(dln2, dh, p->gate_w, N, C, 2 * F);
    if (g) dyn_linear_backward_weight(g->gate_w, NULL, dh, a->ln2, N, C, 2 * F);
    dyn_rmsnorm_backward_input_res(dinp, dout, dln2, a->x1, p->ln2_w, a->ln2_rstd, N, C);
    if (g) dyn_rmsnorm_backward_weight(g->ln2_w, dln2, a->x1, a->ln2_rstd, N, C);

    /* Attention branch: x1 = x + o(attn(...)). dinp holds dx1. */
    if (k) memcpy(k->dx1, dinp, NC * sizeof(float));
    dyn_linear_backward_input_set(dA, dinp, p->o_w, N, I, C);
    if (g) dyn_linear_backward_weight(g->o_w, NULL, dinp, a->atty, N, I, C);
    dyn_attention_backward(dqkv, dqkv + I, dqkv + I + KV, NULL, dA, a->qkv, QKV, a->qkv + I, QKV,
                           a->qkv + I + KV, QKV, a->atty, a->att_lse, NULL, lay, lay, &cfg, attn_work);
    /* Gradients of the rotated q and k back to the projection's outputs. */
    dyn_rope_backward(dqkv, QKV, d.b.NH, HD, rope->pos, rope->cos_t, rope->sin_t, N);
    dyn_rope_backward(dqkv + I, QKV, d.KVH, HD, rope->pos, rope->cos_t, rope->sin_t, N);
    dyn_linear_backward_input_set(dln1, dqkv, p->q_w, N, C, QKV);
    if (g) dyn_linear_backward_weight(g->q_w, g->q_b, dqkv, a->ln1, N, C, QKV);
    dyn_rmsnorm_backward_input(dinp, dln1, inp, p->ln1_w, a->ln1_rstd, N, C);
    if (g) dyn_rmsnorm_backward_weight(g->ln1_w, dln1, inp, a->ln1_rstd, N, C);
}

void dyn_llama_block_backward(float *dinp, const dyn_llama_block_params *g, const float *dout,
                              const float *inp, const dyn_llama_block_params *p,
                              const dyn_rope *rope, dyn_llama_block_acts *a,
                              const dyn_layout *lay, dyn_llama_dims d, int recompute, float *work)
{
    llama_backward_run(dinp, g, NULL, dout, inp, p, rope, a, lay, d, recompute, work);
}

double dyn_llama_block_flops(dyn_llama_dims d, int B, int T)
{
    double N = (double)B * T, C = d.b.C, F = d.b.F, I = (double)width_i(d), QKV = (double)width_qkv(d);
    return 3.0 * (2.0 * N * C * QKV + 2.0 * N * I * C + 6.0 * N * C * F + 4.0 * (double)B * T * T * I);
}

/* ---- split backward (blocks.h "split backward") ------------------------ */

size_t dyn_llama_block_dy_floats(dyn_llama_dims d, const dyn_layout *lay)
{
    size_t N = (size_t)lay->B * lay->T, C = (size_t)d.b.C, F = (size_t)d.b.F;
    return N * (4 * C + 2 * F + width_qkv(d));
}

void dyn_llama_block_dy_layout(dyn_llama_block_dy *k, float *arena, dyn_llama_dims d,
                               const dyn_layout *lay)
{
    size_t N = (size_t)lay->B * lay->T, C = (size_t)d.b.C, F = (size_t)d.b.F;
    float *x = arena;
    k->dout = x; x += N * C;
    k->dh = x; x += N * 2 * F;
    k->dln2 = x; x += N * C;
    k->dx1 = x; x += N * C;
    k->dqkv = x; x += N * width_qkv(d);
    k->dln1 = x;
}

void dyn_llama_block_backward_input(float *dinp, dyn_llama_block_dy *k, const float *dout,
                                    const float *inp, const dyn_llama_block_params *p,
                                    const dyn_rope *rope, dyn_llama_block_acts *a,
                                    const dyn_layout *lay, dyn_llama_dims d, int recompute,
                                    float *work)
{
    llama_backward_run(dinp, NULL, k, dout, inp, p, rope, a, lay, d, recompute, work);
}

void dyn_llama_block_backward_weight(const dyn_llama_block_params *g, const dyn_llama_block_dy *k,
                                     const float *inp, const dyn_llama_block_acts *a,
                                     const dyn_layout *lay, dyn_llama_dims d)
{
    int N = lay->B * lay->T, C = d.b.C, F = d.b.F;
    int I = (int)width_i(d), QKV = (int)width_qkv(d);
    dyn_linear_backward_weight(g->down_w, NULL, k->dout, a->g, N, F, C);
    dyn_linear_backward_weight(g->gate_w, NULL, k->dh, a->ln2, N, C, 2 * F);
    dyn_rmsnorm_backward_weight(g->ln2_w, k->dln2, a->x1, a->ln2_rstd, N, C);
    dyn_linear_backward_weight(g->o_w, NULL, k->dx1, a->atty, N, I, C);
    dyn_linear_backward_weight(g->q_w, g->q_b, k->dqkv, a->ln1, N, C, QKV);
    dyn_rmsnorm_backward_weight(g->ln1_w, k->dln1, inp, a->ln1_rstd, N, C);
}
