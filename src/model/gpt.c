/* gpt.c — the GPT-2 model: parameter table with Hugging Face names, and the
 * layers [embedding | blocks | ln_f + tied LM head] run forward and backward
 * over any contiguous range (a pipeline stage), fused or as the split
 * backward's B and W halves. Blocks come from blocks.h.
 *
 * Layer l: 0 embedding (wte, wpe), 1..n block l-1, n+1 head. hid[l] is the
 * hidden state (N,C) entering layer l. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model_impl.h"
#include "util/util.h" /* defines: dyn_calloc */

static dyn_status gpt_build(dyn_model *m, dyn_error *err)
{
    const dyn_model_config *c = &m->cfg;
    int64_t C = c->hidden, F = c->ffn, V = c->vocab, P = c->max_seqlen;
    int n = c->n_layers;
    /* GPT-2 init: N(0, 0.02), residual output projections scaled by
     * 1/sqrt(2n) so the residual stream's variance does not grow with
     * depth. */
    float std = 0.02f, res_std = (float)(0.02 / sqrt(2.0 * n));
    dyn_status st = DYN_OK;
    m->L = n + 2;
    st = model_add_tensor(m, "wte.weight", 2, V, C, 0, 1, std, 0, err);
    if (st == DYN_OK) st = model_add_tensor(m, "wpe.weight", 2, P, C, 0, 1, std, 0, err);
    for (int i = 0; i < n && st == DYN_OK; i++) {
        /* struct order of dyn_gpt_block_params; HF Conv1D stores (in, out). */
        static const struct {
            const char *suffix;
            int rows, cols; /* in units: 0 = scalar 1, 1 = C, 3 = 3C, 4 = F */
            int hf_t, decay, kind; /* kind: 0 normal, 1 residual normal, 2 zeros, 3 ones */
        } spec[] = {
            {"ln_1.weight", 1, 0, 0, 0, 3},        {"ln_1.bias", 1, 0, 0, 0, 2},
            {"attn.c_attn.weight", 3, 1, 1, 1, 0}, {"attn.c_attn.bias", 3, 0, 0, 0, 2},
            {"attn.c_proj.weight", 1, 1, 1, 1, 1}, {"attn.c_proj.bias", 1, 0, 0, 0, 2},
            {"ln_2.weight", 1, 0, 0, 0, 3},        {"ln_2.bias", 1, 0, 0, 0, 2},
            {"mlp.c_fc.weight", 4, 1, 1, 1, 0},    {"mlp.c_fc.bias", 4, 0, 0, 0, 2},
            {"mlp.c_proj.weight", 1, 4, 1, 1, 1},  {"mlp.c_proj.bias", 1, 0, 0, 0, 2},
        };
        for (size_t k = 0; k < sizeof spec / sizeof spec[0] && st == DYN_OK; k++) {
            char name[96];
            snprintf(name, sizeof name, "h.%d.%s", i, spec[k].suffix);
            int64_t dim[5] = {1, C, 0, 3 * C, F};
            float s = spec[k].kind == 0 ? std : spec[k].kind == 1 ? res_std : spec[k].kind == 2 ? 0.0f : -1.0f;
            st = model_add_tensor(m, name, spec[k].cols ? 2 : 1, dim[spec[k].rows], dim[spec[k].cols], spec[k].hf_t,
                                  spec[k].decay, s, 1 + i, err);
        }
    }
    if (st == DYN_OK) st = model_add_tensor(m, "ln_f.weight", 1, C, 0, 0, 0, -1.0f, n + 1, err);
    if (st == DYN_OK) st = model_add_tensor(m, "ln_f.bias", 1, C, 0, 0, 0, 0.0f, n + 1, err);
    return st;
}

static dyn_status gpt_bind(dyn_model *m, dyn_error *err)
{
    int n = m->cfg.n_layers;
    m->wte = model_tensor_ptr(m, "wte.weight");
    m->wpe = model_tensor_ptr(m, "wpe.weight");
    m->lnf_w = model_tensor_ptr(m, "ln_f.weight");
    m->lnf_b = model_tensor_ptr(m, "ln_f.bias");
    m->gp = dyn_calloc((size_t)n, sizeof *m->gp, "block parameters", err);
    m->gg = dyn_calloc((size_t)n, sizeof *m->gg, "block gradients", err);
    if (m->gp == NULL || m->gg == NULL) return DYN_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        float *base = model_block_tensor_ptr(m, "h.", i, "ln_1.weight");
        if (base == NULL) continue; /* a stage model without this block */
        size_t used = dyn_gpt_block_params_layout(&m->gp[i], base, m->dims);
        dyn_gpt_block_params_layout(&m->gg[i], model_grad_of(m, base), m->dims);
        /* Our names must sit exactly where the block expects its fields. */
        float *last = model_block_tensor_ptr(m, "h.", i, "mlp.c_proj.bias");
        float *qkv = model_block_tensor_ptr(m, "h.", i, "attn.c_attn.weight");
        float *fc = model_block_tensor_ptr(m, "h.", i, "mlp.c_fc.weight");
        if (used != dyn_gpt_block_params_count(m->dims) || last + m->cfg.hidden != base + used ||
            m->gp[i].qkv_w != qkv || m->gp[i].fc_w != fc || m->gp[i].fcproj_b != last)
            return dyn_error_set(err, DYN_ERR_INTERNAL, "GPT block %d: parameter table disagrees with blocks.h layout", i);
    }
    return DYN_OK;
}

static int gpt_borrows(const dyn_model_config *c, int l, const char **names)
{
    /* The head's LM projection is the embedding's wte (tied). */
    if (l == c->n_layers + 1) {
        names[0] = "wte.weight";
        return 1;
    }
    return 0;
}

static size_t gpt_boundary_floats(const dyn_model *m, int l, const dyn_model_microbatch *mb)
{
    (void)l;
    return (size_t)mb->lay->B * (size_t)mb->lay->T * (size_t)m->cfg.hidden;
}

static size_t gpt_carve(const dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                        int recompute, float *base, size_t *stored)
{
    int B = mb->lay->B, T = mb->lay->T, n = m->cfg.n_layers, L = m->L;
    size_t N = (size_t)B * T, C = (size_t)m->cfg.hidden;
    model_bump b = {base, 0};
    for (int l = first > 1 ? first : 1; l <= (last < L - 1 ? last : L - 1); l++) a->hid[l] = model_take(&b, N * C);
    size_t blk = dyn_gpt_block_act_floats(m->dims, B, T);
    float *shared = NULL;
    int have_shared = 0; /* recompute: all blocks share one region */
    for (int l = first; l < last; l++) {
        if (l < 1 || l > n) continue;
        float *r = recompute && have_shared ? shared : model_take(&b, blk);
        if (recompute) shared = r, have_shared = 1;
        if (base) dyn_gpt_block_acts_layout(&a->blk[l].gpt, r, m->dims, B, T);
    }
    if (last == L) {
        a->head_ln = model_take(&b, N * C);
        a->head_mean = model_take(&b, N);
        a->head_rstd = model_take(&b, N);
        a->head_lse = model_take(&b, N);
        a->head_losses = model_take(&b, N);
    }
    a->pos = (int32_t *)model_take(&b, N); /* int32 has float's size */
    *stored = b.used; /* everything so far is kept from forward to backward */
    size_t work = dyn_gpt_block_work_floats(m->dims, B, T);
    size_t lw = dyn_lmhead_work_floats((int)N, (int)C, m->cfg.vocab);
    a->work = model_take(&b, work > lw ? work : lw);
    a->d0 = model_take(&b, N * C);
    a->d1 = model_take(&b, N * C);
    a->denc = NULL;
    return b.used;
}

static dyn_status gpt_forward(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                              const float *in, float *out, int recompute, double *loss_sum, dyn_error *err)
{
    (void)recompute; /* the forward is the same; the arena was carved for it */
    const dyn_layout *lay = mb->lay;
    int n = m->cfg.n_layers, L = m->L, C = m->cfg.hidden, V = m->cfg.vocab;
    int N = lay->B * lay->T;
    dyn_layout_positions(lay, a->pos);
    for (int i = 0; i < N; i++)
        if (a->pos[i] >= m->cfg.max_seqlen)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "position %d at flat index %d exceeds max_seqlen %d",
                                 a->pos[i], i, m->cfg.max_seqlen);
    if (first > 0) memcpy(a->hid[first], in, (size_t)N * C * sizeof(float));
    for (int l = first; l < last; l++) {
        model_progress(m);
        if (l == 0) {
            dyn_embed_pos_forward(a->hid[1], mb->tokens, a->pos, m->wte, m->wpe, N, C);
        } else if (l <= n) {
            dyn_gpt_block_forward(a->hid[l + 1], a->hid[l], &m->gp[l - 1], &a->blk[l].gpt, lay, m->dims, a->work);
        } else {
            dyn_layernorm_forward(a->head_ln, a->head_mean, a->head_rstd, a->hid[l], m->lnf_w, m->lnf_b, N, C);
            *loss_sum = dyn_lmhead_ce_forward(a->head_losses, a->head_lse, a->head_ln, m->wte, mb->targets,
                                              mb->weights, N, C, V, a->work);
        }
    }
    if (last < L) memcpy(out, a->hid[last], (size_t)N * C * sizeof(float));
    return DYN_OK;
}

/* ---- backward: fused, and split (zero-bubble B and W) ----------------------
 * B is the fused backward's own layer walk (gpt_backward_walk, split != 0)
 * calling only the input-gradient halves, keeping per layer what its W
 * needs (model_impl.h keep_*, dy); W walks the same layers in the same
 * order, so a shared tensor (the tied wte: head first, then embedding)
 * receives its contributions in the fused order and B + W is bit-identical
 * to the fused backward. */

static size_t gpt_keep_carve(const dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                             int recompute, float *base)
{
    const dyn_layout *lay = mb->lay;
    int n = m->cfg.n_layers, L = m->L;
    size_t N = (size_t)lay->B * lay->T, C = (size_t)m->cfg.hidden;
    model_bump b = {base, 0};
    a->keep_emb = first == 0 ? model_take(&b, N * C) : NULL;
    a->keep_head = last == L ? model_take(&b, N * C) : NULL;
    a->keep_enc_norm = a->keep_dec_emb = NULL;
    for (int l = first; l < last; l++) {
        if (l < 1 || l > n) continue;
        float *k = model_take(&b, dyn_gpt_block_dy_floats(m->dims, lay));
        if (base) dyn_gpt_block_dy_layout(&a->dy[l].gpt, k, m->dims, lay);
        if (recompute) {
            float *r = model_take(&b, dyn_gpt_block_act_floats(m->dims, lay->B, lay->T));
            if (base) dyn_gpt_block_acts_layout(&a->wblk[l].gpt, r, m->dims, lay->B, lay->T);
        }
    }
    return b.used;
}

/* The activations block layer l's backward halves use. */
static dyn_gpt_block_acts *gpt_split_acts(dyn_model_acts *a, int l)
{
    return a->fwd_recompute ? &a->wblk[l].gpt : &a->blk[l].gpt;
}

/* The layer walk both backwards share: dout (N,C) enters in d0, layers run
 * last-1 down to first, each writing its input gradient into the other of
 * d0/d1, and the gradient entering `first` leaves in din. split == 0 runs
 * each layer's fused backward (dyn_model_stage_backward); split != 0 runs
 * only its input-gradient half and keeps in acts what gpt_backward_weight
 * needs (dyn_model_stage_backward_input). One walk, so the two cannot drift apart in order
 * or in which buffer holds what. */
static void gpt_backward_walk(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                              const float *dout, float *din, float dloss, int split)
{
    const dyn_layout *lay = mb->lay;
    int L = m->L, C = m->cfg.hidden, V = m->cfg.vocab;
    int N = lay->B * lay->T;
    size_t bytes = (size_t)N * C * sizeof(float);
    float *cur = a->d0;
    if (last < L) memcpy(cur, dout, bytes);
    for (int l = last - 1; l >= first; l--) {
        model_progress(m);
        if (l == L - 1) {
            /* The LM head accumulates into dhead, LayerNorm into d0: both
             * zeroed. Split, dhead is keep_head: W's ln_f reduction needs
             * the head's input gradient too. */
            float *dhead = split ? a->keep_head : a->d1;
            memset(dhead, 0, bytes);
            if (split)
                dyn_lmhead_ce_backward_input(dhead, a->head_ln, m->wte, mb->targets, mb->weights, a->head_lse, dloss,
                                             N, C, V, a->work);
            else
                dyn_lmhead_ce_backward(dhead, model_grad_of(m, m->wte), a->head_ln, m->wte, mb->targets, mb->weights,
                                       a->head_lse, dloss, N, C, V, a->work);
            memset(a->d0, 0, bytes);
            if (split)
                dyn_layernorm_backward_input(a->d0, dhead, a->hid[l], m->lnf_w, a->head_mean, a->head_rstd, N, C);
            else
                dyn_layernorm_backward(a->d0, model_grad_of(m, m->lnf_w), model_grad_of(m, m->lnf_b), dhead,
                                       a->hid[l], m->lnf_w, a->head_mean, a->head_rstd, N, C);
            cur = a->d0;
        } else if (l >= 1) {
            float *next = cur == a->d0 ? a->d1 : a->d0;
            if (split)
                dyn_gpt_block_backward_input(next, &a->dy[l].gpt, cur, a->hid[l], &m->gp[l - 1], gpt_split_acts(a, l),
                                             lay, m->dims, a->fwd_recompute, a->work);
            else
                dyn_gpt_block_backward(next, &m->gg[l - 1], cur, a->hid[l], &m->gp[l - 1], &a->blk[l].gpt, lay,
                                       m->dims, a->fwd_recompute, a->work);
            cur = next;
        } else if (split) {
            memcpy(a->keep_emb, cur, bytes); /* the embedding is all weight gradient */
        } else {
            dyn_embed_pos_backward(model_grad_of(m, m->wte), model_grad_of(m, m->wpe), cur, mb->tokens, a->pos, N, C);
        }
    }
    if (first > 0) memcpy(din, cur, bytes);
}

static void gpt_backward_weight(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last)
{
    const dyn_layout *lay = mb->lay;
    int L = m->L, C = m->cfg.hidden, V = m->cfg.vocab;
    int N = lay->B * lay->T;
    for (int l = last - 1; l >= first; l--) {
        model_progress(m);
        if (l == L - 1) {
            dyn_lmhead_ce_backward_weight(model_grad_of(m, m->wte), a->head_ln, m->wte, mb->targets, mb->weights,
                                          a->head_lse, a->w_dloss, N, C, V, a->work);
            dyn_layernorm_backward_weight(model_grad_of(m, m->lnf_w), model_grad_of(m, m->lnf_b), a->keep_head,
                                          a->hid[l], a->head_mean, a->head_rstd, N, C);
        } else if (l >= 1) {
            dyn_gpt_block_backward_weight(&m->gg[l - 1], &a->dy[l].gpt, a->hid[l], gpt_split_acts(a, l), lay, m->dims);
        } else {
            dyn_embed_pos_backward(model_grad_of(m, m->wte), model_grad_of(m, m->wpe), a->keep_emb, mb->tokens, a->pos,
                                   N, C);
        }
    }
}

/* What model.c and stage.c call for a GPT model (model_impl.h). */
const model_arch model_arch_gpt = {
    .build = gpt_build,
    .bind = gpt_bind,
    .borrows = gpt_borrows,
    .carve = gpt_carve,
    .boundary_floats = gpt_boundary_floats,
    .forward = gpt_forward,
    .backward = gpt_backward_walk,
    .keep_carve = gpt_keep_carve,
    .backward_weight = gpt_backward_weight,
};
