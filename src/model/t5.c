/* t5.c — the T5 v1.1 model: parameter table with Hugging Face names, and
 * the layers run forward and backward over any contiguous range (a pipeline
 * stage), fused or as the split backward's B and W halves. Blocks come from
 * blocks.h.
 *
 * Layers (ne encoder, nd decoder blocks; E = ne+1, D = ne+2, H = ne+nd+3):
 *   0 encoder embedding | 1..ne encoder blocks | E encoder final RMSNorm |
 *   D decoder embedding | D+1..D+nd decoder blocks | H final RMSNorm + lm_head
 * hid[l] is the encoder hidden (N,C) entering l for 1 <= l <= E and the
 * decoder hidden (Nd,C) entering l for D+1 <= l <= H; encout is the
 * normalised encoder output every decoder block attends to. The relative
 * position bias is computed in the first layer of each stack and shared:
 * one (NH, 32) table per stack, stored with block 0 as Hugging Face does,
 * and passed to every block of that stack. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model_impl.h"
#include "util/util.h" /* defines: dyn_calloc */

#define T5_ENC_REL "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
#define T5_DEC_REL "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"

enum { T5_NORMAL_Q, T5_NORMAL_KV, T5_NORMAL_O, T5_NORMAL_WI, T5_NORMAL_WO, T5_ONES };

/* HF T5 _init_weights with initializer_factor 1. */
static float t5_std(const dyn_model_config *c, int kind)
{
    double C = c->hidden, HD = c->head_dim, NH = c->heads, F = c->ffn;
    switch (kind) {
    case T5_NORMAL_Q: return (float)(1.0 / sqrt(C * HD));
    case T5_NORMAL_KV: return (float)(1.0 / sqrt(C));
    case T5_NORMAL_O: return (float)(1.0 / sqrt(NH * HD));
    case T5_NORMAL_WI: return (float)(1.0 / sqrt(C));
    case T5_NORMAL_WO: return (float)(1.0 / sqrt(F));
    default: return -1.0f; /* ones */
    }
}

typedef struct t5_spec {
    const char *suffix;
    int rows, cols; /* 0 none, 1 C, 2 I, 3 F */
    int kind;
} t5_spec;

/* Struct order of dyn_t5_enc_params / dyn_t5_dec_params. */
static const t5_spec enc_spec[] = {
    {"layer.0.layer_norm.weight", 1, 0, T5_ONES},          {"layer.0.SelfAttention.q.weight", 2, 1, T5_NORMAL_Q},
    {"layer.0.SelfAttention.k.weight", 2, 1, T5_NORMAL_KV}, {"layer.0.SelfAttention.v.weight", 2, 1, T5_NORMAL_KV},
    {"layer.0.SelfAttention.o.weight", 1, 2, T5_NORMAL_O},  {"layer.1.layer_norm.weight", 1, 0, T5_ONES},
    {"layer.1.DenseReluDense.wi_0.weight", 3, 1, T5_NORMAL_WI},
    {"layer.1.DenseReluDense.wi_1.weight", 3, 1, T5_NORMAL_WI},
    {"layer.1.DenseReluDense.wo.weight", 1, 3, T5_NORMAL_WO},
};
static const t5_spec dec_spec[] = {
    {"layer.0.layer_norm.weight", 1, 0, T5_ONES},           {"layer.0.SelfAttention.q.weight", 2, 1, T5_NORMAL_Q},
    {"layer.0.SelfAttention.k.weight", 2, 1, T5_NORMAL_KV},  {"layer.0.SelfAttention.v.weight", 2, 1, T5_NORMAL_KV},
    {"layer.0.SelfAttention.o.weight", 1, 2, T5_NORMAL_O},   {"layer.1.layer_norm.weight", 1, 0, T5_ONES},
    {"layer.1.EncDecAttention.q.weight", 2, 1, T5_NORMAL_Q}, {"layer.1.EncDecAttention.k.weight", 2, 1, T5_NORMAL_KV},
    {"layer.1.EncDecAttention.v.weight", 2, 1, T5_NORMAL_KV}, {"layer.1.EncDecAttention.o.weight", 1, 2, T5_NORMAL_O},
    {"layer.2.layer_norm.weight", 1, 0, T5_ONES},
    {"layer.2.DenseReluDense.wi_0.weight", 3, 1, T5_NORMAL_WI},
    {"layer.2.DenseReluDense.wi_1.weight", 3, 1, T5_NORMAL_WI},
    {"layer.2.DenseReluDense.wo.weight", 1, 3, T5_NORMAL_WO},
};

static dyn_status add_stack(dyn_model *m, const char *stack, const t5_spec *spec, size_t n_spec, int nblocks,
                            int layer0, dyn_error *err)
{
    const dyn_model_config *c = &m->cfg;
    int64_t dim[4] = {0, c->hidden, (int64_t)c->heads * c->head_dim, c->ffn};
    dyn_status st = DYN_OK;
    char name[96];
    for (int i = 0; i < nblocks && st == DYN_OK; i++) {
        if (i == 0) {
            /* HF: Embedding(num_buckets, n_heads); we keep (NH, buckets). */
            snprintf(name, sizeof name, "%s.block.0.layer.0.SelfAttention.relative_attention_bias.weight", stack);
            st = model_add_tensor(m, name, 2, c->heads, DYN_T5_NUM_BUCKETS, 1, 1, t5_std(c, T5_NORMAL_KV), layer0, err);
        }
        for (size_t k = 0; k < n_spec && st == DYN_OK; k++) {
            snprintf(name, sizeof name, "%s.block.%d.%s", stack, i, spec[k].suffix);
            int nd = spec[k].cols ? 2 : 1;
            st = model_add_tensor(m, name, nd, dim[spec[k].rows], dim[spec[k].cols], 0, nd == 2,
                                  t5_std(c, spec[k].kind), layer0 + i, err);
        }
    }
    return st;
}

static dyn_status t5_build(dyn_model *m, dyn_error *err)
{
    const dyn_model_config *c = &m->cfg;
    int ne = c->n_layers, nd = c->n_dec_layers;
    int E = ne + 1, D = ne + 2, H = ne + nd + 3;
    m->L = H + 1;
    dyn_status st = model_add_tensor(m, "shared.weight", 2, c->vocab, c->hidden, 0, 1, 1.0f, 0, err);
    if (st == DYN_OK) st = add_stack(m, "encoder", enc_spec, sizeof enc_spec / sizeof enc_spec[0], ne, 1, err);
    if (st == DYN_OK) st = model_add_tensor(m, "encoder.final_layer_norm.weight", 1, c->hidden, 0, 0, 0, -1.0f, E, err);
    if (st == DYN_OK) st = add_stack(m, "decoder", dec_spec, sizeof dec_spec / sizeof dec_spec[0], nd, D + 1, err);
    if (st == DYN_OK) st = model_add_tensor(m, "decoder.final_layer_norm.weight", 1, c->hidden, 0, 0, 0, -1.0f, H, err);
    if (st == DYN_OK) st = model_add_tensor(m, "lm_head.weight", 2, c->vocab, c->hidden, 0, 1, 1.0f, H, err);
    return st;
}

static dyn_status t5_bind(dyn_model *m, dyn_error *err)
{
    int ne = m->cfg.n_layers, nd = m->cfg.n_dec_layers;
    m->shared = model_tensor_ptr(m, "shared.weight");
    m->enc_rel = model_tensor_ptr(m, T5_ENC_REL);
    m->dec_rel = model_tensor_ptr(m, T5_DEC_REL);
    m->enc_lnf = model_tensor_ptr(m, "encoder.final_layer_norm.weight");
    m->dec_lnf = model_tensor_ptr(m, "decoder.final_layer_norm.weight");
    m->lm_head = model_tensor_ptr(m, "lm_head.weight");
    m->ep = dyn_calloc((size_t)ne, sizeof *m->ep, "encoder block parameters", err);
    m->eg = dyn_calloc((size_t)ne, sizeof *m->eg, "encoder block gradients", err);
    m->dp = dyn_calloc((size_t)nd, sizeof *m->dp, "decoder block parameters", err);
    m->dg = dyn_calloc((size_t)nd, sizeof *m->dg, "decoder block gradients", err);
    if (!m->ep || !m->eg || !m->dp || !m->dg) return DYN_ERR_NOMEM;
    for (int i = 0; i < ne; i++) {
        float *base = model_block_tensor_ptr(m, "encoder.block.", i, "layer.0.layer_norm.weight");
        if (base == NULL) continue; /* a stage model without this block */
        size_t used = dyn_t5_enc_params_layout(&m->ep[i], base, m->dims);
        dyn_t5_enc_params_layout(&m->eg[i], model_grad_of(m, base), m->dims);
        float *wo = model_block_tensor_ptr(m, "encoder.block.", i, "layer.1.DenseReluDense.wo.weight");
        float *v = model_block_tensor_ptr(m, "encoder.block.", i, "layer.0.SelfAttention.v.weight");
        if (used != dyn_t5_enc_params_count(m->dims) || m->ep[i].wo_w != wo || m->ep[i].v_w != v ||
            wo + (size_t)m->cfg.hidden * m->cfg.ffn != base + used)
            return dyn_error_set(err, DYN_ERR_INTERNAL, "T5 encoder block %d: table disagrees with blocks.h layout", i);
    }
    for (int i = 0; i < nd; i++) {
        float *base = model_block_tensor_ptr(m, "decoder.block.", i, "layer.0.layer_norm.weight");
        if (base == NULL) continue; /* a stage model without this block */
        size_t used = dyn_t5_dec_params_layout(&m->dp[i], base, m->dims);
        dyn_t5_dec_params_layout(&m->dg[i], model_grad_of(m, base), m->dims);
        float *wo = model_block_tensor_ptr(m, "decoder.block.", i, "layer.2.DenseReluDense.wo.weight");
        float *ck = model_block_tensor_ptr(m, "decoder.block.", i, "layer.1.EncDecAttention.k.weight");
        if (used != dyn_t5_dec_params_count(m->dims) || m->dp[i].wo_w != wo || m->dp[i].ck_w != ck ||
            wo + (size_t)m->cfg.hidden * m->cfg.ffn != base + used)
            return dyn_error_set(err, DYN_ERR_INTERNAL, "T5 decoder block %d: table disagrees with blocks.h layout", i);
    }
    return DYN_OK;
}

static int t5_borrows(const dyn_model_config *c, int l, const char **names)
{
    int ne = c->n_layers, D = ne + 2, H = ne + c->n_dec_layers + 3;
    if (l == D) { /* the decoder embeds with the encoder's shared table */
        names[0] = "shared.weight";
        return 1;
    }
    if (l >= 2 && l <= ne) { /* encoder blocks after the first use its bias table */
        names[0] = T5_ENC_REL;
        return 1;
    }
    if (l >= D + 2 && l < H) {
        names[0] = T5_DEC_REL;
        return 1;
    }
    return 0;
}

static size_t t5_boundary_floats(const dyn_model *m, int l, const dyn_model_microbatch *mb)
{
    int D = m->cfg.n_layers + 2;
    size_t C = (size_t)m->cfg.hidden;
    size_t N = (size_t)mb->lay->B * mb->lay->T, Nd = (size_t)mb->dec_lay->B * mb->dec_lay->T;
    return l <= D ? N * C : (N + Nd) * C;
}

static size_t t5_carve(const dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                       int recompute, float *base, size_t *stored)
{
    int ne = m->cfg.n_layers, nd = m->cfg.n_dec_layers;
    int E = ne + 1, D = ne + 2, H = ne + nd + 3;
    int B = mb->lay->B, T = mb->lay->T, Td = mb->dec_lay->T;
    size_t N = (size_t)B * T, Nd = (size_t)B * Td, C = (size_t)m->cfg.hidden;
    model_bump b = {base, 0};
    for (int l = first > 1 ? first : 1; l <= (last < E ? last : E); l++) a->hid[l] = model_take(&b, N * C);
    for (int l = first > D + 1 ? first : D + 1; l <= (last < H ? last : H); l++) a->hid[l] = model_take(&b, Nd * C);
    a->encout = last >= D ? model_take(&b, N * C) : NULL;
    a->enc_rstd = first <= E && E < last ? model_take(&b, N) : NULL;
    size_t eblk = dyn_t5_enc_act_floats(m->dims, B, T), dblk = dyn_t5_dec_act_floats(m->dims, B, Td, T);
    float *eshared = NULL, *dshared = NULL;
    int have_e = 0, have_d = 0; /* recompute: one region per stack, shared */
    for (int l = first; l < last; l++) {
        if (l >= 1 && l <= ne) {
            float *r = recompute && have_e ? eshared : model_take(&b, eblk);
            if (recompute) eshared = r, have_e = 1;
            if (base) dyn_t5_enc_acts_layout(&a->blk[l].enc, r, m->dims, B, T);
        } else if (l > D && l < H) {
            float *r = recompute && have_d ? dshared : model_take(&b, dblk);
            if (recompute) dshared = r, have_d = 1;
            if (base) dyn_t5_dec_acts_layout(&a->blk[l].dec, r, m->dims, B, Td, T);
        }
    }
    if (last == H + 1) {
        a->head_ln = model_take(&b, Nd * C);
        a->head_mean = NULL;
        a->head_rstd = model_take(&b, Nd);
        a->head_lse = model_take(&b, Nd);
        a->head_losses = model_take(&b, Nd);
    }
    *stored = b.used;
    size_t w = dyn_t5_enc_work_floats(m->dims, B, T), wd = dyn_t5_dec_work_floats(m->dims, B, Td, T);
    size_t wl = dyn_lmhead_work_floats((int)Nd, (int)C, m->cfg.vocab);
    if (wd > w) w = wd;
    if (wl > w) w = wl;
    a->work = model_take(&b, w);
    size_t Nm = N > Nd ? N : Nd;
    a->d0 = model_take(&b, Nm * C);
    a->d1 = model_take(&b, Nm * C);
    a->denc = last >= D ? model_take(&b, N * C) : NULL;
    a->pos = NULL;
    return b.used;
}

static dyn_status t5_forward(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                             const float *in, float *out, int recompute, double *loss_sum, dyn_error *err)
{
    (void)recompute;
    (void)err;
    int ne = m->cfg.n_layers, nd = m->cfg.n_dec_layers;
    int E = ne + 1, D = ne + 2, H = ne + nd + 3;
    const dyn_layout *el = mb->lay, *dl = mb->dec_lay;
    int C = m->cfg.hidden, V = m->cfg.vocab;
    int N = el->B * el->T, Nd = dl->B * dl->T;
    size_t eb = (size_t)N * C * sizeof(float), db = (size_t)Nd * C * sizeof(float);
    if (first > 0 && first <= E) memcpy(a->hid[first], in, eb);
    if (first >= D) memcpy(a->encout, in, eb);
    if (first > D) memcpy(a->hid[first], in + (size_t)N * C, db);
    for (int l = first; l < last; l++) {
        model_progress(m);
        if (l == 0) {
            dyn_embed_forward(a->hid[1], mb->tokens, m->shared, N, C);
        } else if (l <= ne) {
            dyn_t5_enc_forward(a->hid[l + 1], a->hid[l], &m->ep[l - 1], m->enc_rel, &a->blk[l].enc, el, m->dims,
                               a->work);
        } else if (l == E) {
            dyn_rmsnorm_forward(a->encout, a->enc_rstd, a->hid[E], m->enc_lnf, N, C);
        } else if (l == D) {
            dyn_embed_forward(a->hid[D + 1], mb->dec_tokens, m->shared, Nd, C);
        } else if (l < H) {
            dyn_t5_dec_forward(a->hid[l + 1], a->hid[l], a->encout, &m->dp[l - D - 1], m->dec_rel, &a->blk[l].dec, dl,
                               el, m->dims, a->work);
        } else {
            dyn_rmsnorm_forward(a->head_ln, a->head_rstd, a->hid[H], m->dec_lnf, Nd, C);
            *loss_sum = dyn_lmhead_ce_forward(a->head_losses, a->head_lse, a->head_ln, m->lm_head, mb->targets,
                                              mb->weights, Nd, C, V, a->work);
        }
    }
    if (last <= E) memcpy(out, a->hid[last], eb);
    else if (last <= H) {
        memcpy(out, a->encout, eb);
        if (last > D) memcpy(out + (size_t)N * C, a->hid[last], db);
    }
    return DYN_OK;
}

/* ---- backward: fused, and split (zero-bubble B and W) ----------------------
 * As in gpt.c: B is the fused backward's own layer walk (t5_backward_walk,
 * split != 0) running the input-gradient halves and keeping what W needs;
 * W runs the weight halves in the same layer order, so the shared embedding
 * (decoder embedding first, then encoder) and each stack's bias table
 * (blocks last to first) accumulate in the fused order and B + W is
 * bit-identical to the fused backward. */

static size_t t5_keep_carve(const dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                            int recompute, float *base)
{
    int ne = m->cfg.n_layers, E = ne + 1, D = ne + 2, H = ne + m->cfg.n_dec_layers + 3;
    const dyn_layout *el = mb->lay, *dl = mb->dec_lay;
    size_t N = (size_t)el->B * el->T, Nd = (size_t)dl->B * dl->T, C = (size_t)m->cfg.hidden;
    model_bump b = {base, 0};
    a->keep_emb = first == 0 ? model_take(&b, N * C) : NULL;
    a->keep_enc_norm = first <= E && E < last ? model_take(&b, N * C) : NULL;
    a->keep_dec_emb = first <= D && D < last ? model_take(&b, Nd * C) : NULL;
    a->keep_head = last == H + 1 ? model_take(&b, Nd * C) : NULL;
    for (int l = first; l < last; l++) {
        if (l >= 1 && l <= ne) {
            float *k = model_take(&b, dyn_t5_enc_dy_floats(m->dims, el));
            if (base) dyn_t5_enc_dy_layout(&a->dy[l].enc, k, m->dims, el);
            if (recompute) {
                float *r = model_take(&b, dyn_t5_enc_act_floats(m->dims, el->B, el->T));
                if (base) dyn_t5_enc_acts_layout(&a->wblk[l].enc, r, m->dims, el->B, el->T);
            }
        } else if (l > D && l < H) {
            float *k = model_take(&b, dyn_t5_dec_dy_floats(m->dims, dl, el));
            if (base) dyn_t5_dec_dy_layout(&a->dy[l].dec, k, m->dims, dl, el);
            if (recompute) {
                float *r = model_take(&b, dyn_t5_dec_act_floats(m->dims, dl->B, dl->T, el->T));
                if (base) dyn_t5_dec_acts_layout(&a->wblk[l].dec, r, m->dims, dl->B, dl->T, el->T);
            }
        }
    }
    return b.used;
}

/* One backward walk: the model, its activations, the micro-batch, the
 * mode, and the sizes every layer step uses (eb, db: bytes of an encoder
 * and a decoder hidden state). */
typedef struct t5_walk {
    dyn_model *m;
    dyn_model_acts *a;
    const dyn_model_microbatch *mb;
    int split, rc;
    int N, Nd, C, V;
    size_t eb, db;
} t5_walk;

/* The LM head into dhead and the final norm into d0 (both zeroed first).
 * Split, dhead is keep_head, the norm's dY for W. Returns d0. */
static float *t5_back_head(const t5_walk *w, int H, float dloss)
{
    dyn_model *m = w->m;
    dyn_model_acts *a = w->a;
    const dyn_model_microbatch *mb = w->mb;
    int Nd = w->Nd, C = w->C, V = w->V;
    float *dhead = w->split ? a->keep_head : a->d1;
    memset(dhead, 0, w->db);
    if (w->split)
        dyn_lmhead_ce_backward_input(dhead, a->head_ln, m->lm_head, mb->targets, mb->weights, a->head_lse,
                                     dloss, Nd, C, V, a->work);
    else
        dyn_lmhead_ce_backward(dhead, model_grad_of(m, m->lm_head), a->head_ln, m->lm_head, mb->targets,
                               mb->weights, a->head_lse, dloss, Nd, C, V, a->work);
    memset(a->d0, 0, w->db);
    if (w->split)
        dyn_rmsnorm_backward_input(a->d0, dhead, a->hid[H], m->dec_lnf, a->head_rstd, Nd, C);
    else
        dyn_rmsnorm_backward(a->d0, model_grad_of(m, m->dec_lnf), dhead, a->hid[H], m->dec_lnf, a->head_rstd,
                             Nd, C);
    return a->d0;
}

/* Decoder block l (D: the decoder embedding's layer index) from gradient
 * cur into the other of d0/d1, which it returns; denc accumulates. */
static float *t5_back_dec(const t5_walk *w, int l, int D, float *cur)
{
    dyn_model *m = w->m;
    dyn_model_acts *a = w->a;
    const dyn_layout *el = w->mb->lay, *dl = w->mb->dec_lay;
    float *next = cur == a->d0 ? a->d1 : a->d0;
    if (w->split)
        dyn_t5_dec_backward_input(next, a->denc, &a->dy[l].dec, cur, a->hid[l], a->encout, &m->dp[l - D - 1],
                                  m->dec_rel, w->rc ? &a->wblk[l].dec : &a->blk[l].dec, dl, el, m->dims, w->rc,
                                  a->work);
    else
        dyn_t5_dec_backward(next, a->denc, &m->dg[l - D - 1], model_grad_of(m, m->dec_rel), cur, a->hid[l],
                            a->encout, &m->dp[l - D - 1], m->dec_rel, &a->blk[l].dec, dl, el, m->dims, w->rc,
                            a->work);
    return next;
}

/* The encoder's final norm (layer E) from denc into d0 (zeroed first);
 * split, the norm's dY (denc) is kept for W. Returns d0. */
static float *t5_back_enc_norm(const t5_walk *w, int E)
{
    dyn_model *m = w->m;
    dyn_model_acts *a = w->a;
    const float *dnorm = a->denc;
    if (w->split) {
        memcpy(a->keep_enc_norm, a->denc, w->eb);
        dnorm = a->keep_enc_norm;
    }
    memset(a->d0, 0, w->eb);
    if (w->split)
        dyn_rmsnorm_backward_input(a->d0, dnorm, a->hid[E], m->enc_lnf, a->enc_rstd, w->N, w->C);
    else
        dyn_rmsnorm_backward(a->d0, model_grad_of(m, m->enc_lnf), dnorm, a->hid[E], m->enc_lnf, a->enc_rstd,
                             w->N, w->C);
    return a->d0;
}

/* Encoder block l from gradient cur into the other of d0/d1, which it
 * returns. */
static float *t5_back_enc(const t5_walk *w, int l, float *cur)
{
    dyn_model *m = w->m;
    dyn_model_acts *a = w->a;
    const dyn_layout *el = w->mb->lay;
    float *next = cur == a->d0 ? a->d1 : a->d0;
    if (w->split)
        dyn_t5_enc_backward_input(next, &a->dy[l].enc, cur, a->hid[l], &m->ep[l - 1], m->enc_rel,
                                  w->rc ? &a->wblk[l].enc : &a->blk[l].enc, el, m->dims, w->rc, a->work);
    else
        dyn_t5_enc_backward(next, &m->eg[l - 1], model_grad_of(m, m->enc_rel), cur, a->hid[l], &m->ep[l - 1],
                            m->enc_rel, &a->blk[l].enc, el, m->dims, w->rc, a->work);
    return next;
}

/* The layer walk both backwards share. The incoming boundary gradient is
 * split: the encoder part into cur (an encoder range) or denc, the decoder
 * part into cur; denc accumulates the encoder output's gradient over every
 * decoder block of the range. Layers run last-1 down to first, blocks
 * writing their input gradient into the other of d0/d1, and din gets the
 * gradient entering `first`. split == 0 runs each layer's fused backward
 * (dyn_model_stage_backward); split != 0 only its input-gradient half,
 * keeping in acts what t5_backward_weight needs
 * (dyn_model_stage_backward_input). One walk, so the two cannot drift
 * apart in order or in which buffer holds what. */
static void t5_backward_walk(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                             const float *dout, float *din, float dloss, int split)
{
    int ne = m->cfg.n_layers, nd = m->cfg.n_dec_layers;
    int E = ne + 1, D = ne + 2, H = ne + nd + 3;
    int N = mb->lay->B * mb->lay->T, Nd = mb->dec_lay->B * mb->dec_lay->T, C = m->cfg.hidden;
    t5_walk w = {m, a, mb, split, a->fwd_recompute, N, Nd, C, m->cfg.vocab,
                 (size_t)N * C * sizeof(float), (size_t)Nd * C * sizeof(float)};
    size_t eb = w.eb, db = w.db;
    float *cur = a->d0;
    if (last <= E) {
        memcpy(cur, dout, eb);
    } else if (last <= H) {
        memcpy(a->denc, dout, eb);
        if (last > D) memcpy(cur, dout + (size_t)N * C, db);
    } else if (a->denc) {
        memset(a->denc, 0, eb);
    }
    for (int l = last - 1; l >= first; l--) {
        model_progress(m);
        if (l == H) cur = t5_back_head(&w, H, dloss);
        else if (l > D) cur = t5_back_dec(&w, l, D, cur);
        else if (l == D && split) memcpy(a->keep_dec_emb, cur, db);
        else if (l == D) dyn_embed_backward(model_grad_of(m, m->shared), cur, mb->dec_tokens, Nd, C);
        else if (l == E) cur = t5_back_enc_norm(&w, E);
        else if (l >= 1) cur = t5_back_enc(&w, l, cur);
        else if (split) memcpy(a->keep_emb, cur, eb); /* the embedding is all weight gradient */
        else dyn_embed_backward(model_grad_of(m, m->shared), cur, mb->tokens, N, C);
    }
    if (first > 0 && first <= E) memcpy(din, cur, eb);
    else if (first >= D) {
        memcpy(din, a->denc, eb);
        if (first > D) memcpy(din + (size_t)N * C, cur, db);
    }
}

static void t5_backward_weight(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last)
{
    int ne = m->cfg.n_layers, nd = m->cfg.n_dec_layers;
    int E = ne + 1, D = ne + 2, H = ne + nd + 3;
    const dyn_layout *el = mb->lay, *dl = mb->dec_lay;
    int C = m->cfg.hidden, V = m->cfg.vocab;
    int N = el->B * el->T, Nd = dl->B * dl->T;
    int rc = a->fwd_recompute;
    for (int l = last - 1; l >= first; l--) {
        model_progress(m);
        if (l == H) {
            dyn_lmhead_ce_backward_weight(model_grad_of(m, m->lm_head), a->head_ln, m->lm_head, mb->targets,
                                          mb->weights, a->head_lse, a->w_dloss, Nd, C, V, a->work);
            dyn_rmsnorm_backward_weight(model_grad_of(m, m->dec_lnf), a->keep_head, a->hid[H], a->head_rstd, Nd, C);
        } else if (l > D) {
            dyn_t5_dec_backward_weight(&m->dg[l - D - 1], model_grad_of(m, m->dec_rel), &a->dy[l].dec, a->hid[l],
                                       a->encout, rc ? &a->wblk[l].dec : &a->blk[l].dec, dl, el, m->dims);
        } else if (l == D) {
            dyn_embed_backward(model_grad_of(m, m->shared), a->keep_dec_emb, mb->dec_tokens, Nd, C);
        } else if (l == E) {
            dyn_rmsnorm_backward_weight(model_grad_of(m, m->enc_lnf), a->keep_enc_norm, a->hid[E], a->enc_rstd, N, C);
        } else if (l >= 1) {
            dyn_t5_enc_backward_weight(&m->eg[l - 1], model_grad_of(m, m->enc_rel), &a->dy[l].enc, a->hid[l],
                                       rc ? &a->wblk[l].enc : &a->blk[l].enc, el, m->dims);
        } else {
            dyn_embed_backward(model_grad_of(m, m->shared), a->keep_emb, mb->tokens, N, C);
        }
    }
}

/* What model.c and stage.c call for a T5 model (model_impl.h). */
const model_arch model_arch_t5 = {
    .build = t5_build,
    .bind = t5_bind,
    .borrows = t5_borrows,
    .carve = t5_carve,
    .boundary_floats = t5_boundary_floats,
    .forward = t5_forward,
    .backward = t5_backward_walk,
    .keep_carve = t5_keep_carve,
    .backward_weight = t5_backward_weight,
};
