/* block_gpt.c — the GPT-2 transformer block (pre-LayerNorm, causal
 * multi-head self-attention with biases, GELU MLP, two residuals) over a
 * variable-length layout: parameter and activation layouts, forward,
 * backward, its split halves (input and weight gradients) and the FLOP count
 * the benchmark credits. Contract in blocks.h.
 *
 * Backward scratch (work, in order): dF (N,F), dC (N,C), dqkv (N,3C), then
 * the attention workspace. The residual gradient runs through dinp itself:
 * the MLP branch's input-norm backward writes dout plus its gradient there,
 * and the attention branch's adds to it, so no separate residual buffer (nor
 * a copy of dout) is needed. */
#include <math.h>
#include <string.h>

#include "model/blocks.h" /* defines: dyn_gpt_block_*, dyn_block_dims */

static dyn_attn_cfg gpt_attn_cfg(dyn_block_dims d)
{
    dyn_attn_cfg cfg = {0};
    cfg.NH = d.NH;
    cfg.HD = d.HD;
    cfg.causal = 1;
    cfg.scale = 1.0f / sqrtf((float)d.HD);
    cfg.nthreads = d.nthreads;
    return cfg;
}

size_t dyn_gpt_block_params_count(dyn_block_dims d)
{
    size_t C = (size_t)d.C, F = (size_t)d.F;
    return 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + F * C + F + C * F + C;
}

size_t dyn_gpt_block_params_layout(dyn_gpt_block_params *p, float *flat, dyn_block_dims d)
{
    size_t C = (size_t)d.C, F = (size_t)d.F;
    float *x = flat;
    p->ln1_w = x; x += C;
    p->ln1_b = x; x += C;
    p->qkv_w = x; x += 3 * C * C;
    p->qkv_b = x; x += 3 * C;
    p->proj_w = x; x += C * C;
    p->proj_b = x; x += C;
    p->ln2_w = x; x += C;
    p->ln2_b = x; x += C;
    p->fc_w = x; x += F * C;
    p->fc_b = x; x += F;
    p->fcproj_w = x; x += C * F;
    p->fcproj_b = x; x += C;
    return (size_t)(x - flat);
}

size_t dyn_gpt_block_act_floats(dyn_block_dims d, int B, int T)
{
    size_t N = (size_t)B * T, C = (size_t)d.C, F = (size_t)d.F;
    return N * C + 2 * N + N * 3 * C + N * C + (size_t)B * d.NH * T + N * C + N * C + 2 * N +
           2 * N * F;
}

void dyn_gpt_block_acts_layout(dyn_gpt_block_acts *a, float *arena, dyn_block_dims d, int B, int T)
{
    size_t N = (size_t)B * T, C = (size_t)d.C, F = (size_t)d.F;
    float *x = arena;
    a->ln1 = x; x += N * C;
    a->ln1_mean = x; x += N;
    a->ln1_rstd = x; x += N;
    a->qkv = x; x += N * 3 * C;
    a->atty = x; x += N * C;
    a->att_lse = x; x += (size_t)B * d.NH * T;
    a->x1 = x; x += N * C;
    a->ln2 = x; x += N * C;
    a->ln2_mean = x; x += N;
    a->ln2_rstd = x; x += N;
    a->fch_dgelu = x; x += N * F;
    a->fch_gelu = x; x += N * F;
}

size_t dyn_gpt_block_work_floats(dyn_block_dims d, int B, int T)
{
    size_t N = (size_t)B * T, C = (size_t)d.C, F = (size_t)d.F;
    dyn_attn_cfg cfg = gpt_attn_cfg(d);
    return N * F + N * C + N * 3 * C + dyn_attention_work_floats(B, T, T, &cfg);
}

void dyn_gpt_block_forward(float *out, const float *inp, const dyn_gpt_block_params *p,
                           dyn_gpt_block_acts *a, const dyn_layout *lay, dyn_block_dims d,
                           float *work)
{
    int N = lay->B * lay->T, C = d.C, F = d.F;
    size_t NC = (size_t)N * C;
    dyn_attn_cfg cfg = gpt_attn_cfg(d);
    float *attn_work = work + (size_t)N * F + NC + 3 * NC;
    dyn_layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, inp, p->ln1_w, p->ln1_b, N, C);
    dyn_linear_forward(a->qkv, a->ln1, p->qkv_w, p->qkv_b, N, C, 3 * C);
    dyn_attention_forward(a->atty, a->att_lse, a->qkv, 3 * C, a->qkv + C, 3 * C, a->qkv + 2 * C,
                          3 * C, NULL, lay, lay, &cfg, attn_work);
    dyn_linear_forward(a->x1, a->atty, p->proj_w, p->proj_b, N, C, C);
    dyn_residual_layernorm_forward(a->x1, inp, a->ln2, a->ln2_mean, a->ln2_rstd, p->ln2_w, p->ln2_b,
                                   N, C);
    dyn_linear_forward(a->fch_dgelu, a->ln2, p->fc_w, p->fc_b, N, C, F);
    dyn_gelu_forward_keep_grad(a->fch_gelu, a->fch_dgelu, (size_t)N * F);
    dyn_linear_forward(out, a->fch_gelu, p->fcproj_w, p->fcproj_b, N, F, C);
    dyn_residual_forward(out, out, a->x1, NC);
}

/* The block backward's one chain of input gradients, behind the fused
 * backward (g given, k NULL) and the split's B (k given, g NULL). Fused,
 * each linear's and norm's weight gradient follows its input gradient at
 * once, as the fused kernels do (layers.c: B then W), and the intermediate
 * gradients live in work, dC reused; B instead keeps every dY in k for W
 * and copies out dout and dx1, which the fused path reads in place. Either
 * way the input-gradient arithmetic is this one sequence, so dinp agrees to
 * the bit. Work: dF (N,F), dC (N,C), dqkv (N,3C), attention workspace; B
 * uses only dC and the attention workspace, at the same offsets. */
static void gpt_block_backward_run(float *dinp, const dyn_gpt_block_params *g, dyn_gpt_block_dy *k,
                                   const float *dout, const float *inp, const dyn_gpt_block_params *p,
                                   dyn_gpt_block_acts *a, const dyn_layout *lay, dyn_block_dims d,
                                   int recompute, float *work)
{
    int N = lay->B * lay->T, C = d.C, F = d.F;
    size_t NC = (size_t)N * C, NF = (size_t)N * F;
    dyn_attn_cfg cfg = gpt_attn_cfg(d);
    float *dC = work + NF, *attn_work = dC + 4 * NC;
    float *dF = k ? k->dfch : work, *dln2 = k ? k->dln2 : dC;
    float *dqkv = k ? k->dqkv : dC + NC, *dln1 = k ? k->dln1 : dC;
    /* dinp doubles as the recomputed block output: it is overwritten next. */
    if (recompute) dyn_gpt_block_forward(dinp, inp, p, a, lay, d, work);
    if (k) memcpy(k->dout, dout, NC * sizeof(float));

    /* MLP branch: out = x1 + fcproj(gelu(fc(ln2(x1)))), read from dout in
     * place; ln2's backward writes dinp = dout + its gradient. */
    dyn_linear_backward_input_set(dF, dout, p->fcproj_w, N, F, C);
    if (g) dyn_linear_backward_weight(g->fcproj_w, g->fcproj_b, dout, a->fch_gelu, N, F, C);
    /* fc's bias gradient is the column sums of dF: taken in the GELU pass
     * that makes dF rather than in a pass of its own. */
    dyn_gelu_backward_kept(dF, g ? g->fc_b : NULL, a->fch_dgelu, N, F);
    dyn_linear_backward_input_set(dln2, dF, p->fc_w, N, C, F);
    if (g) dyn_linear_backward_weight(g->fc_w, NULL, dF, a->ln2, N, C, F);
    dyn_layernorm_backward_input_res(dinp, dout, dln2, a->x1, p->ln2_w, a->ln2_mean, a->ln2_rstd, N, C);
    if (g) dyn_layernorm_backward_weight(g->ln2_w, g->ln2_b, dln2, a->x1, a->ln2_mean, a->ln2_rstd, N, C);

    /* Attention branch: x1 = x + proj(attn(ln1(x))). dinp holds dx1. */
    if (k) memcpy(k->dx1, dinp, NC * sizeof(float));
    dyn_linear_backward_input_set(dC, dinp, p->proj_w, N, C, C);
    if (g) dyn_linear_backward_weight(g->proj_w, g->proj_b, dinp, a->atty, N, C, C);
    dyn_attention_backward(dqkv, dqkv + C, dqkv + 2 * C, NULL, dC, a->qkv, 3 * C, a->qkv + C,
                           3 * C, a->qkv + 2 * C, 3 * C, a->atty, a->att_lse, NULL, lay, lay,
                           &cfg, attn_work);
    dyn_linear_backward_input_set(dln1, dqkv, p->qkv_w, N, C, 3 * C);
    if (g) dyn_linear_backward_weight(g->qkv_w, g->qkv_b, dqkv, a->ln1, N, C, 3 * C);
    dyn_layernorm_backward_input(dinp, dln1, inp, p->ln1_w, a->ln1_mean, a->ln1_rstd, N, C);
    if (g) dyn_layernorm_backward_weight(g->ln1_w, g->ln1_b, dln1, inp, a->ln1_mean, a->ln1_rstd, N, C);
}

void dyn_gpt_block_backward(float *dinp, const dyn_gpt_block_params *g, const float *dout,
                            const float *inp, const dyn_gpt_block_params *p,
                            dyn_gpt_block_acts *a, const dyn_layout *lay, dyn_block_dims d,
                            int recompute, float *work)
{
    gpt_block_backward_run(dinp, g, NULL, dout, inp, p, a, lay, d, recompute, work);
}

double dyn_gpt_block_flops(int B, int T, int C)
{
    double b = B, s = T, h = C;
    return 3.0 * (24.0 * b * s * h * h + 4.0 * b * s * s * h);
}

/* ---- split backward (blocks.h "split backward") ------------------------ */

size_t dyn_gpt_block_dy_floats(dyn_block_dims d, const dyn_layout *lay)
{
    size_t N = (size_t)lay->B * lay->T, C = (size_t)d.C, F = (size_t)d.F;
    return N * (7 * C + F);
}

void dyn_gpt_block_dy_layout(dyn_gpt_block_dy *k, float *arena, dyn_block_dims d,
                             const dyn_layout *lay)
{
    size_t N = (size_t)lay->B * lay->T, C = (size_t)d.C, F = (size_t)d.F;
    float *x = arena;
    k->dout = x; x += N * C;
    k->dfch = x; x += N * F;
    k->dln2 = x; x += N * C;
    k->dx1 = x; x += N * C;
    k->dqkv = x; x += N * 3 * C;
    k->dln1 = x;
}

void dyn_gpt_block_backward_input(float *dinp, dyn_gpt_block_dy *k, const float *dout,
                                  const float *inp, const dyn_gpt_block_params *p,
                                  dyn_gpt_block_acts *a, const dyn_layout *lay, dyn_block_dims d,
                                  int recompute, float *work)
{
    gpt_block_backward_run(dinp, NULL, k, dout, inp, p, a, lay, d, recompute, work);
}

void dyn_gpt_block_backward_weight(const dyn_gpt_block_params *g, const dyn_gpt_block_dy *k,
                                   const float *inp, const dyn_gpt_block_acts *a,
                                   const dyn_layout *lay, dyn_block_dims d)
{
    int N = lay->B * lay->T, C = d.C, F = d.F;
    dyn_linear_backward_weight(g->fcproj_w, g->fcproj_b, k->dout, a->fch_gelu, N, F, C);
    dyn_linear_backward_weight(g->fc_w, g->fc_b, k->dfch, a->ln2, N, C, F);
    dyn_layernorm_backward_weight(g->ln2_w, g->ln2_b, k->dln2, a->x1, a->ln2_mean, a->ln2_rstd, N, C);
    dyn_linear_backward_weight(g->proj_w, g->proj_b, k->dx1, a->atty, N, C, C);
    dyn_linear_backward_weight(g->qkv_w, g->qkv_b, k->dqkv, a->ln1, N, C, 3 * C);
    dyn_layernorm_backward_weight(g->ln1_w, g->ln1_b, k->dln1, inp, a->ln1_mean, a->ln1_rstd, N, C);
}
