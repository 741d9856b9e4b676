/* block_t5.c — the T5 v1.1 encoder and decoder blocks (RMSNorm, no biases,
 * unscaled attention with the shared relative-position bias, cross-attention
 * in the decoder, gated-GELU feed-forward) over variable-length layouts,
 * with fused and split (input / weight gradient) backwards. Contract in
 * blocks.h.
 *
 * As in block_gpt.c the residual gradient runs through dinp: the FFN's
 * input-norm backward writes dout plus its gradient there and each later
 * branch's adds to it. Backward scratch (work, in
 * order): dg (N,F), dh (N,2F), dC (N,max(C,I)), dA (N,I), dqkv (N,3I), for the
 * decoder dckv (Ne,2I), then the attention workspace. */
#include <string.h>

#include "model/blocks.h" /* defines: dyn_t5_*, dyn_block_dims */

static dyn_attn_cfg t5_attn_cfg(dyn_block_dims d, int causal, int bidirectional)
{
    dyn_attn_cfg cfg = {0};
    cfg.NH = d.NH;
    cfg.HD = d.HD;
    cfg.causal = causal;
    cfg.scale = 1.0f; /* T5 folds 1/sqrt(d) into its initialisation */
    cfg.bidirectional = bidirectional;
    cfg.num_buckets = DYN_T5_NUM_BUCKETS;
    cfg.max_distance = DYN_T5_MAX_DISTANCE;
    cfg.nthreads = d.nthreads;
    return cfg;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* ---- feed-forward sub-layer shared by both blocks ----------------------
 * out = x + wo(gated_gelu(wi(rms(x)))), with ln, rstd, h, g activations. */
static void ffn_forward(float *out, const float *x, const float *ln_w, const float *wi_w,
                        const float *wo_w, float *ln, float *rstd, float *h, float *g, int N,
                        dyn_block_dims d)
{
    dyn_rmsnorm_forward(ln, rstd, x, ln_w, N, d.C);
    dyn_linear_forward(h, ln, wi_w, NULL, N, d.C, 2 * d.F);
    dyn_gated_gelu_forward(g, h, N, d.F);
    dyn_linear_forward(out, g, wo_w, NULL, N, d.F, d.C);
    dyn_residual_forward(out, out, x, (size_t)N * d.C);
}

/* The FFN sub-layer's backward, behind the fused block backward and the
 * split's B. dout (N,C) is d(out), read only; dres (N,C) receives d(x)
 * (overwritten: the block's first sub-layer, so no copy of dout is made).
 * Fused: the weight gradients gln_w, gwi_w, gwo_w are given and each is
 * added right after its input gradient (as the fused kernels do, layers.c:
 * B then W); kdout is NULL and dh (N,2F), dln (N,C) are scratch. B: the
 * weight gradients are NULL, and kdout, dh, dln are the dY slots kept for
 * ffn_backward_weight. One sequence of input-gradient operations either
 * way, so d(x) agrees to the bit. dg (N,F) is scratch. */
static void ffn_backward(float *dres, const float *dout, float *gln_w, float *gwi_w, float *gwo_w, float *kdout,
                         float *dh, float *dln, const float *x, const float *ln_w,
                         const float *wi_w, const float *wo_w, const float *ln, const float *rstd,
                         const float *h, const float *g, int N, dyn_block_dims d, float *dg)
{
    int fused = gwo_w != NULL;
    if (kdout) memcpy(kdout, dout, (size_t)N * d.C * sizeof(float));
    dyn_linear_backward_input_set(dg, dout, wo_w, N, d.F, d.C);
    if (fused) dyn_linear_backward_weight(gwo_w, NULL, dout, g, N, d.F, d.C);
    dyn_gated_gelu_backward(dh, dg, h, N, d.F);
    dyn_linear_backward_input_set(dln, dh, wi_w, N, d.C, 2 * d.F);
    if (fused) dyn_linear_backward_weight(gwi_w, NULL, dh, ln, N, d.C, 2 * d.F);
    dyn_rmsnorm_backward_input_res(dres, dout, dln, x, ln_w, rstd, N, d.C);
    if (fused) dyn_rmsnorm_backward_weight(gln_w, dln, x, rstd, N, d.C);
}

/* ---- self-attention sub-layer shared by both blocks ---------------------
 * out = x + o(attn(qkv(rms(x)))). */
static void self_forward(float *out, const float *x, const float *ln_w, const float *qkv_w,
                         const float *o_w, const float *rel_bias, float *ln, float *rstd,
                         float *qkv, float *y, float *lse, const dyn_layout *lay,
                         const dyn_attn_cfg *cfg, dyn_block_dims d, float *attn_work)
{
    int N = lay->B * lay->T, I = d.NH * d.HD;
    dyn_rmsnorm_forward(ln, rstd, x, ln_w, N, d.C);
    dyn_linear_forward(qkv, ln, qkv_w, NULL, N, d.C, 3 * I);
    dyn_attention_forward(y, lse, qkv, 3 * I, qkv + I, 3 * I, qkv + 2 * I, 3 * I, rel_bias, lay,
                          lay, cfg, attn_work);
    dyn_linear_forward(out, y, o_w, NULL, N, I, d.C);
    dyn_residual_forward(out, out, x, (size_t)N * d.C);
}

/* The self-attention sub-layer's backward, as ffn_backward: fused, the
 * weight gradients (go_w given) follow their input gradients and the bias
 * table's gradient goes to drel; kdy, krel are NULL and dqkv (N,3I), dln
 * (N,C) are scratch. B: go_w NULL; kdy, dqkv, dln are kept dYs and the bias
 * partial sums go to krel (dyn_attention_backward_input). dA (N,I) scratch. */
static void self_backward(float *dres, float *gln_w, float *gqkv_w, float *go_w, float *drel,
                          float *kdy, float *krel, const float *x, const float *ln_w,
                          const float *qkv_w, const float *o_w, const float *rel_bias,
                          const float *ln, const float *rstd, const float *qkv, const float *y,
                          const float *lse, const dyn_layout *lay, const dyn_attn_cfg *cfg,
                          dyn_block_dims d, float *dqkv, float *dln, float *dA, float *attn_work)
{
    int N = lay->B * lay->T, I = d.NH * d.HD;
    int fused = go_w != NULL;
    if (kdy) memcpy(kdy, dres, (size_t)N * d.C * sizeof(float));
    dyn_linear_backward_input_set(dA, dres, o_w, N, I, d.C);
    if (fused) dyn_linear_backward_weight(go_w, NULL, dres, y, N, I, d.C);
    if (fused)
        dyn_attention_backward(dqkv, dqkv + I, dqkv + 2 * I, drel, dA, qkv, 3 * I, qkv + I, 3 * I,
                               qkv + 2 * I, 3 * I, y, lse, rel_bias, lay, lay, cfg, attn_work);
    else
        dyn_attention_backward_input(dqkv, dqkv + I, dqkv + 2 * I, krel, dA, qkv, 3 * I, qkv + I,
                                     3 * I, qkv + 2 * I, 3 * I, y, lse, rel_bias, lay, lay, cfg,
                                     attn_work);
    dyn_linear_backward_input_set(dln, dqkv, qkv_w, N, d.C, 3 * I);
    if (fused) dyn_linear_backward_weight(gqkv_w, NULL, dqkv, ln, N, d.C, 3 * I);
    dyn_rmsnorm_backward_input(dres, dln, x, ln_w, rstd, N, d.C);
    if (fused) dyn_rmsnorm_backward_weight(gln_w, dln, x, rstd, N, d.C);
}

/* ---- parameter layout shared by both blocks ------------------------------
 * A block's parameters are consecutive runs of two shapes: an attention run
 * (norm gain (C), three (I,C) projections forming one (3I,C) matrix, output
 * (C,I)), once in the encoder and twice in the decoder (self, then cross:
 * cq, ck|cv, co), and one FFN run (norm gain (C), wi0|wi1 (2F,C), wo (C,F)).
 * Each take_* lays one run at x and returns the float after it. */
static size_t attn_run_floats(dyn_block_dims d)
{
    size_t C = (size_t)d.C, I = (size_t)d.NH * d.HD;
    return C + 3 * I * C + C * I;
}

static size_t ffn_run_floats(dyn_block_dims d)
{
    size_t C = (size_t)d.C, F = (size_t)d.F;
    return C + 2 * F * C + C * F;
}

static float *take_attn_run(float *x, float **ln, float **a, float **b, float **c, float **o,
                            dyn_block_dims d)
{
    size_t C = (size_t)d.C, I = (size_t)d.NH * d.HD;
    *ln = x; x += C;
    *a = x; x += I * C;
    *b = x; x += I * C;
    *c = x; x += I * C;
    *o = x; x += C * I;
    return x;
}

static float *take_ffn_run(float *x, float **ln, float **wi0, float **wi1, float **wo,
                           dyn_block_dims d)
{
    size_t C = (size_t)d.C, F = (size_t)d.F;
    *ln = x; x += C;
    *wi0 = x; x += F * C;
    *wi1 = x; x += F * C;
    *wo = x; x += C * F;
    return x;
}

/* ================= encoder ============================================== */

size_t dyn_t5_enc_params_count(dyn_block_dims d)
{
    return attn_run_floats(d) + ffn_run_floats(d);
}

size_t dyn_t5_enc_params_layout(dyn_t5_enc_params *p, float *flat, dyn_block_dims d)
{
    float *x = take_attn_run(flat, &p->ln1_w, &p->q_w, &p->k_w, &p->v_w, &p->o_w, d);
    x = take_ffn_run(x, &p->ln2_w, &p->wi0_w, &p->wi1_w, &p->wo_w, d);
    return (size_t)(x - flat);
}

size_t dyn_t5_enc_act_floats(dyn_block_dims d, int B, int T)
{
    size_t N = (size_t)B * T, C = (size_t)d.C, I = (size_t)d.NH * d.HD, F = (size_t)d.F;
    return N * C + N + N * 3 * I + N * I + (size_t)B * d.NH * T + N * C + N * C + N + N * 2 * F +
           N * F;
}

void dyn_t5_enc_acts_layout(dyn_t5_enc_acts *a, float *arena, dyn_block_dims d, int B, int T)
{
    size_t N = (size_t)B * T, C = (size_t)d.C, I = (size_t)d.NH * d.HD, F = (size_t)d.F;
    float *x = arena;
    a->ln1 = x; x += N * C;
    a->ln1_rstd = x; x += N;
    a->qkv = x; x += N * 3 * I;
    a->atty = x; x += N * I;
    a->att_lse = x; x += (size_t)B * d.NH * T;
    a->x1 = x; x += N * C;
    a->ln2 = x; x += N * C;
    a->ln2_rstd = x; x += N;
    a->h = x; x += N * 2 * F;
    a->g = x; x += N * F;
}

/* Scratch before the attention workspace, for Nd query rows and Ne
 * encoder rows (Ne = 0 for the encoder). */
static size_t scratch_floats(dyn_block_dims d, size_t Nd, size_t Ne)
{
    size_t C = (size_t)d.C, I = (size_t)d.NH * d.HD, F = (size_t)d.F;
    return Nd * F + Nd * 2 * F + Nd * max_sz(C, I) + Nd * I + Nd * 3 * I + Ne * 2 * I;
}

size_t dyn_t5_enc_work_floats(dyn_block_dims d, int B, int T)
{
    dyn_attn_cfg cfg = t5_attn_cfg(d, 0, 1);
    return scratch_floats(d, (size_t)B * T, 0) + dyn_attention_work_floats(B, T, T, &cfg);
}

void dyn_t5_enc_forward(float *out, const float *inp, const dyn_t5_enc_params *p,
                        const float *rel_bias, dyn_t5_enc_acts *a, const dyn_layout *lay,
                        dyn_block_dims d, float *work)
{
    int N = lay->B * lay->T;
    dyn_attn_cfg cfg = t5_attn_cfg(d, 0, 1);
    float *attn_work = work + scratch_floats(d, (size_t)N, 0);
    self_forward(a->x1, inp, p->ln1_w, p->q_w, p->o_w, rel_bias, a->ln1, a->ln1_rstd, a->qkv,
                 a->atty, a->att_lse, lay, &cfg, d, attn_work);
    ffn_forward(out, a->x1, p->ln2_w, p->wi0_w, p->wo_w, a->ln2, a->ln2_rstd, a->h, a->g, N, d);
}

void dyn_t5_enc_backward(float *dinp, const dyn_t5_enc_params *g, float *drel_bias,
                         const float *dout, const float *inp, const dyn_t5_enc_params *p,
                         const float *rel_bias, dyn_t5_enc_acts *a, const dyn_layout *lay,
                         dyn_block_dims d, int recompute, float *work)
{
    size_t N = (size_t)lay->B * lay->T, C = (size_t)d.C, I = (size_t)d.NH * d.HD;
    size_t F = (size_t)d.F;
    dyn_attn_cfg cfg = t5_attn_cfg(d, 0, 1);
    float *dg = work, *dh = dg + N * F, *dC = dh + N * 2 * F, *dA = dC + N * max_sz(C, I);
    float *dqkv = dA + N * I, *attn_work = work + scratch_floats(d, N, 0);
    if (recompute) dyn_t5_enc_forward(dinp, inp, p, rel_bias, a, lay, d, work);
    ffn_backward(dinp, dout, g->ln2_w, g->wi0_w, g->wo_w, NULL, dh, dC, a->x1, p->ln2_w, p->wi0_w,
                 p->wo_w, a->ln2, a->ln2_rstd, a->h, a->g, (int)N, d, dg);
    self_backward(dinp, g->ln1_w, g->q_w, g->o_w, drel_bias, NULL, NULL, inp, p->ln1_w, p->q_w,
                  p->o_w, rel_bias, a->ln1, a->ln1_rstd, a->qkv, a->atty, a->att_lse, lay, &cfg, d,
                  dqkv, dC, dA, attn_work);
}

/* ================= decoder ============================================== */

size_t dyn_t5_dec_params_count(dyn_block_dims d)
{
    return 2 * attn_run_floats(d) + ffn_run_floats(d);
}

size_t dyn_t5_dec_params_layout(dyn_t5_dec_params *p, float *flat, dyn_block_dims d)
{
    float *x = take_attn_run(flat, &p->ln1_w, &p->q_w, &p->k_w, &p->v_w, &p->o_w, d);
    x = take_attn_run(x, &p->ln2_w, &p->cq_w, &p->ck_w, &p->cv_w, &p->co_w, d);
    x = take_ffn_run(x, &p->ln3_w, &p->wi0_w, &p->wi1_w, &p->wo_w, d);
    return (size_t)(x - flat);
}

size_t dyn_t5_dec_act_floats(dyn_block_dims d, int B, int Td, int Te)
{
    size_t Nd = (size_t)B * Td, Ne = (size_t)B * Te, C = (size_t)d.C;
    size_t I = (size_t)d.NH * d.HD, F = (size_t)d.F, lse = (size_t)B * d.NH * Td;
    return Nd * C + Nd + Nd * 3 * I + Nd * I + lse + Nd * C      /* self */
           + Nd * C + Nd + Nd * I + Ne * 2 * I + Nd * I + lse + Nd * C /* cross */
           + Nd * C + Nd + Nd * 2 * F + Nd * F;                  /* ffn */
}

void dyn_t5_dec_acts_layout(dyn_t5_dec_acts *a, float *arena, dyn_block_dims d, int B, int Td,
                            int Te)
{
    size_t Nd = (size_t)B * Td, Ne = (size_t)B * Te, C = (size_t)d.C;
    size_t I = (size_t)d.NH * d.HD, F = (size_t)d.F, lse = (size_t)B * d.NH * Td;
    float *x = arena;
    a->ln1 = x; x += Nd * C;
    a->ln1_rstd = x; x += Nd;
    a->qkv = x; x += Nd * 3 * I;
    a->sa_y = x; x += Nd * I;
    a->sa_lse = x; x += lse;
    a->x1 = x; x += Nd * C;
    a->ln2 = x; x += Nd * C;
    a->ln2_rstd = x; x += Nd;
    a->cq = x; x += Nd * I;
    a->ckv = x; x += Ne * 2 * I;
    a->ca_y = x; x += Nd * I;
    a->ca_lse = x; x += lse;
    a->x2 = x; x += Nd * C;
    a->ln3 = x; x += Nd * C;
    a->ln3_rstd = x; x += Nd;
    a->h = x; x += Nd * 2 * F;
    a->g = x; x += Nd * F;
}

size_t dyn_t5_dec_work_floats(dyn_block_dims d, int B, int Td, int Te)
{
    dyn_attn_cfg self = t5_attn_cfg(d, 1, 0), cross = t5_attn_cfg(d, 0, 0);
    cross.num_buckets = 0; /* no bias: no bias table or slots */
    size_t s = dyn_attention_work_floats(B, Td, Td, &self);
    size_t c = dyn_attention_work_floats(B, Td, Te, &cross);
    return scratch_floats(d, (size_t)B * Td, (size_t)B * Te) + max_sz(s, c);
}

void dyn_t5_dec_forward(float *out, const float *inp, const float *enc,
                        const dyn_t5_dec_params *p, const float *rel_bias, dyn_t5_dec_acts *a,
                        const dyn_layout *dlay, const dyn_layout *elay, dyn_block_dims d,
                        float *work)
{
    int Nd = dlay->B * dlay->T, Ne = elay->B * elay->T, I = d.NH * d.HD;
    dyn_attn_cfg self = t5_attn_cfg(d, 1, 0), cross = t5_attn_cfg(d, 0, 0);
    float *attn_work = work + scratch_floats(d, (size_t)Nd, (size_t)Ne);
    self_forward(a->x1, inp, p->ln1_w, p->q_w, p->o_w, rel_bias, a->ln1, a->ln1_rstd, a->qkv,
                 a->sa_y, a->sa_lse, dlay, &self, d, attn_work);
    /* Cross-attention: queries from the decoder, keys/values from enc. */
    dyn_rmsnorm_forward(a->ln2, a->ln2_rstd, a->x1, p->ln2_w, Nd, d.C);
    dyn_linear_forward(a->cq, a->ln2, p->cq_w, NULL, Nd, d.C, I);
    dyn_linear_forward(a->ckv, enc, p->ck_w, NULL, Ne, d.C, 2 * I);
    dyn_attention_forward(a->ca_y, a->ca_lse, a->cq, I, a->ckv, 2 * I, a->ckv + I, 2 * I, NULL,
                          dlay, elay, &cross, attn_work);
    dyn_linear_forward(a->x2, a->ca_y, p->co_w, NULL, Nd, I, d.C);
    dyn_residual_forward(a->x2, a->x2, a->x1, (size_t)Nd * d.C);
    ffn_forward(out, a->x2, p->ln3_w, p->wi0_w, p->wo_w, a->ln3, a->ln3_rstd, a->h, a->g, Nd, d);
}

/* The decoder's cross-attention sub-layer backward (dres holds d(x2) on
 * entry, d(x1) on return; denc (Ne,C) += the encoder output's gradient
 * when not NULL), as ffn_backward: fused, the weight gradients (gco_w
 * given) follow their input gradients, kdx2 is NULL and dcq (Nd,I), dckv
 * (Ne,2I), dln (Nd,C) are scratch; B: gco_w NULL, kdx2, dcq, dckv, dln are
 * the kept dYs. dA (Nd,I) scratch. */
static void cross_backward(float *dres, float *denc, float *gln_w, float *gcq_w, float *gck_w,
                           float *gco_w, float *kdx2, float *dcq, float *dckv, float *dln,
                           const float *enc, const dyn_t5_dec_params *p, const dyn_t5_dec_acts *a,
                           const dyn_layout *dlay, const dyn_layout *elay, const dyn_attn_cfg *cfg,
                           dyn_block_dims d, float *dA, float *attn_work)
{
    int Nd = dlay->B * dlay->T, Ne = elay->B * elay->T, C = d.C, I = d.NH * d.HD;
    int fused = gco_w != NULL;
    if (kdx2) memcpy(kdx2, dres, (size_t)Nd * C * sizeof(float));
    dyn_linear_backward_input_set(dA, dres, p->co_w, Nd, I, C);
    if (fused) dyn_linear_backward_weight(gco_w, NULL, dres, a->ca_y, Nd, I, C);
    dyn_attention_backward(dcq, dckv, dckv + I, NULL, dA, a->cq, I, a->ckv, 2 * I, a->ckv + I,
                           2 * I, a->ca_y, a->ca_lse, NULL, dlay, elay, cfg, attn_work);
    if (denc) dyn_linear_backward_input(denc, dckv, p->ck_w, Ne, C, 2 * I);
    if (fused) dyn_linear_backward_weight(gck_w, NULL, dckv, enc, Ne, C, 2 * I);
    dyn_linear_backward_input_set(dln, dcq, p->cq_w, Nd, C, I);
    if (fused) dyn_linear_backward_weight(gcq_w, NULL, dcq, a->ln2, Nd, C, I);
    dyn_rmsnorm_backward_input(dres, dln, a->x1, p->ln2_w, a->ln2_rstd, Nd, C);
    if (fused) dyn_rmsnorm_backward_weight(gln_w, dln, a->x1, a->ln2_rstd, Nd, C);
}

void dyn_t5_dec_backward(float *dinp, float *denc, const dyn_t5_dec_params *g, float *drel_bias,
                         const float *dout, const float *inp, const float *enc,
                         const dyn_t5_dec_params *p, const float *rel_bias, dyn_t5_dec_acts *a,
                         const dyn_layout *dlay, const dyn_layout *elay, dyn_block_dims d,
                         int recompute, float *work)
{
    size_t Nd = (size_t)dlay->B * dlay->T, Ne = (size_t)elay->B * elay->T, C = (size_t)d.C;
    size_t I = (size_t)d.NH * d.HD, F = (size_t)d.F;
    dyn_attn_cfg self = t5_attn_cfg(d, 1, 0), cross = t5_attn_cfg(d, 0, 0);
    float *dg = work, *dh = dg + Nd * F, *dC = dh + Nd * 2 * F, *dA = dC + Nd * max_sz(C, I);
    float *dqkv = dA + Nd * I, *dckv = dqkv + Nd * 3 * I;
    float *attn_work = work + scratch_floats(d, Nd, Ne);
    if (recompute) dyn_t5_dec_forward(dinp, inp, enc, p, rel_bias, a, dlay, elay, d, work);
    ffn_backward(dinp, dout, g->ln3_w, g->wi0_w, g->wo_w, NULL, dh, dC, a->x2, p->ln3_w, p->wi0_w,
                 p->wo_w, a->ln3, a->ln3_rstd, a->h, a->g, (int)Nd, d, dg);
    /* dqkv's first Nd*I floats serve as d(cq). */
    cross_backward(dinp, denc, g->ln2_w, g->cq_w, g->ck_w, g->co_w, NULL, dqkv, dckv, dC, enc, p,
                   a, dlay, elay, &cross, d, dA, attn_work);
    self_backward(dinp, g->ln1_w, g->q_w, g->o_w, drel_bias, NULL, NULL, inp, p->ln1_w, p->q_w,
                  p->o_w, rel_bias, a->ln1, a->ln1_rstd, a->qkv, a->sa_y, a->sa_lse, dlay, &self, d,
                  dqkv, dC, dA, attn_work);
}

double dyn_t5_dec_flops(dyn_block_dims d, int B, int Td, int Te)
{
    double Nd = (double)B * Td, Ne = (double)B * Te, C = d.C, I = (double)d.NH * d.HD, F = d.F;
    double fwd = 2.0 * Nd * C * 3.0 * I + 2.0 * Nd * I * C         /* self qkv, o */
                 + 4.0 * (double)B * Td * Td * I                   /* self QKᵀ, PV (full) */
                 + 2.0 * Nd * C * I + 2.0 * Ne * C * 2.0 * I       /* cross q, kv */
                 + 4.0 * (double)B * Td * Te * I + 2.0 * Nd * I * C /* cross QKᵀ, PV, o */
                 + 2.0 * Nd * C * 2.0 * F + 2.0 * Nd * F * C;      /* wi0|wi1, wo */
    return 3.0 * fwd;
}

/* ---- split backward (blocks.h "split backward") ------------------------
 * B is the fused backward's own sub-layer sequence (ffn_backward,
 * cross_backward, self_backward with the dY slots of k and no weight
 * gradients); W is the weight halves below, in the fused order. Work layout
 * as in the fused backward. */

static void ffn_backward_weight(float *gln_w, float *gwi_w, float *gwo_w, const float *kdout,
                                const float *kdh, const float *kdln, const float *x,
                                const float *ln, const float *rstd, const float *g, int N,
                                dyn_block_dims d)
{
    dyn_linear_backward_weight(gwo_w, NULL, kdout, g, N, d.F, d.C);
    dyn_linear_backward_weight(gwi_w, NULL, kdh, ln, N, d.C, 2 * d.F);
    dyn_rmsnorm_backward_weight(gln_w, kdln, x, rstd, N, d.C);
}

static void self_backward_weight(float *gln_w, float *gqkv_w, float *go_w, float *drel,
                                 const float *kdy, const float *kdqkv, const float *kdln,
                                 const float *krel, const float *x, const float *ln,
                                 const float *rstd, const float *y, const dyn_layout *lay,
                                 const dyn_attn_cfg *cfg, dyn_block_dims d)
{
    int N = lay->B * lay->T, I = d.NH * d.HD;
    dyn_linear_backward_weight(go_w, NULL, kdy, y, N, I, d.C);
    if (drel) dyn_attention_rel_bias_backward_weight(drel, krel, lay, lay, cfg);
    dyn_linear_backward_weight(gqkv_w, NULL, kdqkv, ln, N, d.C, 3 * I);
    dyn_rmsnorm_backward_weight(gln_w, kdln, x, rstd, N, d.C);
}

size_t dyn_t5_enc_dy_floats(dyn_block_dims d, const dyn_layout *lay)
{
    size_t N = (size_t)lay->B * lay->T, C = (size_t)d.C, I = (size_t)d.NH * d.HD, F = (size_t)d.F;
    dyn_attn_cfg cfg = t5_attn_cfg(d, 0, 1);
    return N * (4 * C + 3 * I + 2 * F) + dyn_attention_rel_items_floats(lay, lay, &cfg);
}

void dyn_t5_enc_dy_layout(dyn_t5_enc_dy *k, float *arena, dyn_block_dims d, const dyn_layout *lay)
{
    size_t N = (size_t)lay->B * lay->T, C = (size_t)d.C, I = (size_t)d.NH * d.HD, F = (size_t)d.F;
    float *x = arena;
    k->dout = x; x += N * C;
    k->dh = x; x += N * 2 * F;
    k->dln2 = x; x += N * C;
    k->dx1 = x; x += N * C;
    k->dqkv = x; x += N * 3 * I;
    k->dln1 = x; x += N * C;
    k->drel = x;
}

void dyn_t5_enc_backward_input(float *dinp, dyn_t5_enc_dy *k, const float *dout,
                               const float *inp, const dyn_t5_enc_params *p,
                               const float *rel_bias, dyn_t5_enc_acts *a, const dyn_layout *lay,
                               dyn_block_dims d, int recompute, float *work)
{
    size_t N = (size_t)lay->B * lay->T, C = (size_t)d.C, I = (size_t)d.NH * d.HD;
    size_t F = (size_t)d.F;
    dyn_attn_cfg cfg = t5_attn_cfg(d, 0, 1);
    float *dg = work, *dA = dg + N * F + N * 2 * F + N * max_sz(C, I);
    float *attn_work = work + scratch_floats(d, N, 0);
    if (recompute) dyn_t5_enc_forward(dinp, inp, p, rel_bias, a, lay, d, work);
    ffn_backward(dinp, dout, NULL, NULL, NULL, k->dout, k->dh, k->dln2, a->x1, p->ln2_w, p->wi0_w,
                 p->wo_w, a->ln2, a->ln2_rstd, a->h, a->g, (int)N, d, dg);
    self_backward(dinp, NULL, NULL, NULL, NULL, k->dx1, k->drel, inp, p->ln1_w, p->q_w, p->o_w,
                  rel_bias, a->ln1, a->ln1_rstd, a->qkv, a->atty, a->att_lse, lay, &cfg, d, k->dqkv,
                  k->dln1, dA, attn_work);
}

void dyn_t5_enc_backward_weight(const dyn_t5_enc_params *g, float *drel_bias,
                                const dyn_t5_enc_dy *k, const float *inp,
                                const dyn_t5_enc_acts *a, const dyn_layout *lay,
                                dyn_block_dims d)
{
    int N = lay->B * lay->T;
    dyn_attn_cfg cfg = t5_attn_cfg(d, 0, 1);
    ffn_backward_weight(g->ln2_w, g->wi0_w, g->wo_w, k->dout, k->dh, k->dln2, a->x1, a->ln2,
                        a->ln2_rstd, a->g, N, d);
    self_backward_weight(g->ln1_w, g->q_w, g->o_w, drel_bias, k->dx1, k->dqkv, k->dln1, k->drel,
                         inp, a->ln1, a->ln1_rstd, a->atty, lay, &cfg, d);
}

size_t dyn_t5_dec_dy_floats(dyn_block_dims d, const dyn_layout *dlay, const dyn_layout *elay)
{
    size_t Nd = (size_t)dlay->B * dlay->T, Ne = (size_t)elay->B * elay->T, C = (size_t)d.C;
    size_t I = (size_t)d.NH * d.HD, F = (size_t)d.F;
    dyn_attn_cfg self = t5_attn_cfg(d, 1, 0);
    return Nd * (6 * C + 4 * I + 2 * F) + Ne * 2 * I + dyn_attention_rel_items_floats(dlay, dlay, &self);
}

void dyn_t5_dec_dy_layout(dyn_t5_dec_dy *k, float *arena, dyn_block_dims d,
                          const dyn_layout *dlay, const dyn_layout *elay)
{
    size_t Nd = (size_t)dlay->B * dlay->T, Ne = (size_t)elay->B * elay->T, C = (size_t)d.C;
    size_t I = (size_t)d.NH * d.HD, F = (size_t)d.F;
    float *x = arena;
    k->dout = x; x += Nd * C;
    k->dh = x; x += Nd * 2 * F;
    k->dln3 = x; x += Nd * C;
    k->dx2 = x; x += Nd * C;
    k->dcq = x; x += Nd * I;
    k->dckv = x; x += Ne * 2 * I;
    k->dln2 = x; x += Nd * C;
    k->dx1 = x; x += Nd * C;
    k->dqkv = x; x += Nd * 3 * I;
    k->dln1 = x; x += Nd * C;
    k->drel = x;
}

void dyn_t5_dec_backward_input(float *dinp, float *denc, dyn_t5_dec_dy *k, const float *dout,
                               const float *inp, const float *enc, const dyn_t5_dec_params *p,
                               const float *rel_bias, dyn_t5_dec_acts *a,
                               const dyn_layout *dlay, const dyn_layout *elay, dyn_block_dims d,
                               int recompute, float *work)
{
    size_t Nd = (size_t)dlay->B * dlay->T, Ne = (size_t)elay->B * elay->T, C = (size_t)d.C;
    size_t I = (size_t)d.NH * d.HD, F = (size_t)d.F;
    dyn_attn_cfg self = t5_attn_cfg(d, 1, 0), cross = t5_attn_cfg(d, 0, 0);
    float *dg = work, *dA = dg + Nd * F + Nd * 2 * F + Nd * max_sz(C, I);
    float *attn_work = work + scratch_floats(d, Nd, Ne);
    if (recompute) dyn_t5_dec_forward(dinp, inp, enc, p, rel_bias, a, dlay, elay, d, work);
    ffn_backward(dinp, dout, NULL, NULL, NULL, k->dout, k->dh, k->dln3, a->x2, p->ln3_w, p->wi0_w,
                 p->wo_w, a->ln3, a->ln3_rstd, a->h, a->g, (int)Nd, d, dg);
    cross_backward(dinp, denc, NULL, NULL, NULL, NULL, k->dx2, k->dcq, k->dckv, k->dln2, enc, p, a,
                   dlay, elay, &cross, d, dA, attn_work);
    self_backward(dinp, NULL, NULL, NULL, NULL, k->dx1, k->drel, inp, p->ln1_w, p->q_w, p->o_w,
                  rel_bias, a->ln1, a->ln1_rstd, a->qkv, a->sa_y, a->sa_lse, dlay, &self, d,
                  k->dqkv, k->dln1, dA, attn_work);
}

void dyn_t5_dec_backward_weight(const dyn_t5_dec_params *g, float *drel_bias,
                                const dyn_t5_dec_dy *k, const float *inp, const float *enc,
                                const dyn_t5_dec_acts *a, const dyn_layout *dlay,
                                const dyn_layout *elay, dyn_block_dims d)
{
    int Nd = dlay->B * dlay->T, Ne = elay->B * elay->T, C = d.C, I = d.NH * d.HD;
    dyn_attn_cfg self = t5_attn_cfg(d, 1, 0);
    ffn_backward_weight(g->ln3_w, g->wi0_w, g->wo_w, k->dout, k->dh, k->dln3, a->x2, a->ln3,
                        a->ln3_rstd, a->g, Nd, d);
    dyn_linear_backward_weight(g->co_w, NULL, k->dx2, a->ca_y, Nd, I, C);
    dyn_linear_backward_weight(g->ck_w, NULL, k->dckv, enc, Ne, C, 2 * I);
    dyn_linear_backward_weight(g->cq_w, NULL, k->dcq, a->ln2, Nd, C, I);
    dyn_rmsnorm_backward_weight(g->ln2_w, k->dln2, a->x1, a->ln2_rstd, Nd, C);
    self_backward_weight(g->ln1_w, g->q_w, g->o_w, drel_bias, k->dx1, k->dqkv, k->dln1, k->drel,
                         inp, a->ln1, a->ln1_rstd, a->sa_y, dlay, &self, d);
}
