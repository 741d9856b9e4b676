/* llama.c — the Llama-family model (Llama 2/3, and Qwen2 / Mistral where
 * they are the same computation: Qwen2's q/k/v biases are cfg.qkv_bias):
 * parameter table with Hugging Face names, the rotary tables, and the
 * layers [embed_tokens | decoder layers | model.norm + lm_head] run forward
 * and backward over any contiguous range (a pipeline stage), fused or as the
 * split backward's B and W halves. The block is block_llama.c.
 *
 * Layer l: 0 embedding (model.embed_tokens.weight), 1..n decoder layer l-1
 * (model.layers.{l-1}.*), n+1 head (model.norm.weight, then lm_head.weight,
 * or embed_tokens itself when cfg.tie_embeddings: the head then borrows it,
 * as GPT's head borrows wte). hid[l] is the hidden state (N,C) entering
 * layer l. Position ids are the layout's (dyn_layout_positions): they
 * restart at 0 in every document of a packed document-masked row, as
 * Hugging Face's flattening collator makes them, and continue along a row
 * packed without masks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_impl.h"
#include "util/util.h" /* defines: dyn_calloc */

/* The block's shape: the model's dims (thread count included) and the
 * Llama fields of the config. */
static dyn_llama_dims llama_dims(const dyn_model *m)
{
    dyn_llama_dims d;
    memset(&d, 0, sizeof d);
    d.b = m->dims;
    d.KVH = m->cfg.kv_heads;
    d.qkv_bias = m->cfg.qkv_bias != 0;
    d.eps = (float)m->cfg.rms_eps;
    return d;
}

static dyn_status llama_build(dyn_model *m, dyn_error *err)
{
    const dyn_model_config *c = &m->cfg;
    int64_t C = c->hidden, F = c->ffn, V = c->vocab;
    int64_t I = (int64_t)c->heads * c->head_dim, KV = (int64_t)c->kv_heads * c->head_dim;
    int n = c->n_layers;
    /* Hugging Face's LlamaPreTrainedModel init: N(0, initializer_range =
     * 0.02) for every linear and the embedding, RMSNorm gains 1, biases 0. */
    const float std = 0.02f;
    dyn_status st = DYN_OK;
    m->L = n + 2;
    st = model_add_tensor(m, "model.embed_tokens.weight", 2, V, C, 0, 1, std, 0, err);
    for (int i = 0; i < n && st == DYN_OK; i++) {
        /* Struct order of dyn_llama_block_params. */
        const struct {
            const char *suffix;
            int64_t rows, cols; /* cols 0: a vector */
            float init;         /* std, 0 zeros, -1 ones */
        } spec[] = {
            {"input_layernorm.weight", C, 0, -1.0f},
            {"self_attn.q_proj.weight", I, C, std},
            {"self_attn.k_proj.weight", KV, C, std},
            {"self_attn.v_proj.weight", KV, C, std},
            {"self_attn.q_proj.bias", c->qkv_bias ? I : 0, 0, 0.0f},
            {"self_attn.k_proj.bias", c->qkv_bias ? KV : 0, 0, 0.0f},
            {"self_attn.v_proj.bias", c->qkv_bias ? KV : 0, 0, 0.0f},
            {"self_attn.o_proj.weight", C, I, std},
            {"post_attention_layernorm.weight", C, 0, -1.0f},
            {"mlp.gate_proj.weight", F, C, std},
            {"mlp.up_proj.weight", F, C, std},
            {"mlp.down_proj.weight", C, F, std},
        };
        for (size_t k = 0; k < sizeof spec / sizeof spec[0] && st == DYN_OK; k++) {
            if (spec[k].rows == 0) continue; /* no q/k/v biases */
            char name[96];
            snprintf(name, sizeof name, "model.layers.%d.%s", i, spec[k].suffix);
            int matrix = spec[k].cols > 0;
            st = model_add_tensor(m, name, matrix ? 2 : 1, spec[k].rows, spec[k].cols, 0, matrix, spec[k].init, 1 + i,
                                  err);
        }
    }
    if (st == DYN_OK) st = model_add_tensor(m, "model.norm.weight", 1, C, 0, 0, 0, -1.0f, n + 1, err);
    if (st == DYN_OK && !c->tie_embeddings) st = model_add_tensor(m, "lm_head.weight", 2, V, C, 0, 1, std, n + 1, err);
    return st;
}

static dyn_status llama_bind(dyn_model *m, dyn_error *err)
{
    const dyn_model_config *c = &m->cfg;
    int n = c->n_layers, half = c->head_dim / 2;
    dyn_llama_dims d = llama_dims(m);
    m->embed = model_tensor_ptr(m, "model.embed_tokens.weight");
    m->norm_w = model_tensor_ptr(m, "model.norm.weight");
    m->lm_head = c->tie_embeddings ? m->embed : model_tensor_ptr(m, "lm_head.weight");
    m->lp = dyn_calloc((size_t)n, sizeof *m->lp, "block parameters", err);
    m->lg = dyn_calloc((size_t)n, sizeof *m->lg, "block gradients", err);
    /* Rotary tables for every position the model takes (max_seqlen). */
    float *inv = dyn_calloc((size_t)half, sizeof(float), "rotary frequencies", err);
    m->rope_cos = dyn_calloc((size_t)c->max_seqlen * half, sizeof(float), "rotary tables", err);
    m->rope_sin = dyn_calloc((size_t)c->max_seqlen * half, sizeof(float), "rotary tables", err);
    if (m->lp == NULL || m->lg == NULL || inv == NULL || m->rope_cos == NULL || m->rope_sin == NULL) {
        free(inv);
        return DYN_ERR_NOMEM;
    }
    dyn_rope_inv_freq(inv, c->head_dim, c);
    dyn_rope_tables(m->rope_cos, m->rope_sin, inv, c->max_seqlen, c->head_dim);
    free(inv);
    for (int i = 0; i < n; i++) {
        float *base = model_block_tensor_ptr(m, "model.layers.", i, "input_layernorm.weight");
        if (base == NULL) continue; /* a stage model without this block */
        size_t used = dyn_llama_block_params_layout(&m->lp[i], base, d);
        dyn_llama_block_params_layout(&m->lg[i], model_grad_of(m, base), d);
        /* Our names must sit exactly where the block expects its fields. */
        float *q = model_block_tensor_ptr(m, "model.layers.", i, "self_attn.q_proj.weight");
        float *o = model_block_tensor_ptr(m, "model.layers.", i, "self_attn.o_proj.weight");
        float *gate = model_block_tensor_ptr(m, "model.layers.", i, "mlp.gate_proj.weight");
        float *down = model_block_tensor_ptr(m, "model.layers.", i, "mlp.down_proj.weight");
        float *qb = model_block_tensor_ptr(m, "model.layers.", i, "self_attn.q_proj.bias");
        if (used != dyn_llama_block_params_count(d) || m->lp[i].q_w != q || m->lp[i].o_w != o ||
            m->lp[i].gate_w != gate || m->lp[i].down_w != down || m->lp[i].q_b != qb ||
            down + (size_t)c->hidden * c->ffn != base + used)
            return dyn_error_set(err, DYN_ERR_INTERNAL, "Llama block %d: parameter table disagrees with blocks.h layout",
                                 i);
    }
    return DYN_OK;
}

static int llama_borrows(const dyn_model_config *c, int l, const char **names)
{
    /* A tied head projects with the embedding's table. */
    if (c->tie_embeddings && l == c->n_layers + 1) {
        names[0] = "model.embed_tokens.weight";
        return 1;
    }
    return 0;
}

static size_t llama_boundary_floats(const dyn_model *m, int l, const dyn_model_microbatch *mb)
{
    (void)l;
    return (size_t)mb->lay->B * (size_t)mb->lay->T * (size_t)m->cfg.hidden;
}

static size_t llama_carve(const dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                          int recompute, float *base, size_t *stored)
{
    int B = mb->lay->B, T = mb->lay->T, n = m->cfg.n_layers, L = m->L;
    size_t N = (size_t)B * T, C = (size_t)m->cfg.hidden;
    dyn_llama_dims d = llama_dims(m);
    model_bump b = {base, 0};
    for (int l = first > 1 ? first : 1; l <= (last < L - 1 ? last : L - 1); l++) a->hid[l] = model_take(&b, N * C);
    size_t blk = dyn_llama_block_act_floats(d, B, T);
    float *shared = NULL;
    int have_shared = 0; /* recompute: all blocks share one region */
    for (int l = first; l < last; l++) {
        if (l < 1 || l > n) continue;
        float *r = recompute && have_shared ? shared : model_take(&b, blk);
        if (recompute) shared = r, have_shared = 1;
        if (base) dyn_llama_block_acts_layout(&a->blk[l].llama, r, d, B, T);
    }
    a->head_mean = NULL; /* RMSNorm: no mean */
    if (last == L) {
        a->head_ln = model_take(&b, N * C);
        a->head_rstd = model_take(&b, N);
        a->head_lse = model_take(&b, N);
        a->head_losses = model_take(&b, N);
    }
    a->pos = (int32_t *)model_take(&b, N); /* int32 has float's size */
    *stored = b.used; /* everything so far is kept from forward to backward */
    size_t work = dyn_llama_block_work_floats(d, B, T);
    size_t lw = dyn_lmhead_work_floats((int)N, (int)C, m->cfg.vocab);
    a->work = model_take(&b, work > lw ? work : lw);
    a->d0 = model_take(&b, N * C);
    a->d1 = model_take(&b, N * C);
    a->denc = NULL;
    return b.used;
}

static dyn_rope llama_rope(const dyn_model *m, const dyn_model_acts *a)
{
    dyn_rope r = {m->cfg.max_seqlen, m->rope_cos, m->rope_sin, a->pos};
    return r;
}

static dyn_status llama_forward(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                                const float *in, float *out, int recompute, double *loss_sum, dyn_error *err)
{
    (void)recompute; /* the forward is the same; the arena was carved for it */
    const dyn_layout *lay = mb->lay;
    int n = m->cfg.n_layers, L = m->L, C = m->cfg.hidden, V = m->cfg.vocab;
    int N = lay->B * lay->T;
    dyn_llama_dims d = llama_dims(m);
    dyn_layout_positions(lay, a->pos);
    for (int i = 0; i < N; i++)
        if (a->pos[i] >= m->cfg.max_seqlen)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "position %d at flat index %d exceeds max_seqlen %d",
                                 a->pos[i], i, m->cfg.max_seqlen);
    dyn_rope rope = llama_rope(m, a);
    if (first > 0) memcpy(a->hid[first], in, (size_t)N * C * sizeof(float));
    for (int l = first; l < last; l++) {
        model_progress(m);
        if (l == 0) {
            dyn_embed_forward(a->hid[1], mb->tokens, m->embed, N, C);
        } else if (l <= n) {
            dyn_llama_block_forward(a->hid[l + 1], a->hid[l], &m->lp[l - 1], &rope, &a->blk[l].llama, lay, d, a->work);
        } else {
            dyn_rmsnorm_forward_eps(a->head_ln, a->head_rstd, a->hid[l], m->norm_w, d.eps, N, C);
            *loss_sum = dyn_lmhead_ce_forward(a->head_losses, a->head_lse, a->head_ln, m->lm_head, mb->targets,
                                              mb->weights, N, C, V, a->work);
        }
    }
    if (last < L) memcpy(out, a->hid[last], (size_t)N * C * sizeof(float));
    return DYN_OK;
}

/* ---- backward: fused, and split (zero-bubble B and W) ----------------------
 * As in gpt.c: B is the fused backward's own layer walk calling only the
 * input-gradient halves and keeping what W needs; W walks the same layers
 * in the same order, so a tied embedding receives its contributions (head
 * first, then embedding) in the fused order and B + W is bit-identical. */

static size_t llama_keep_carve(const dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first,
                               int last, int recompute, float *base)
{
    const dyn_layout *lay = mb->lay;
    int n = m->cfg.n_layers, L = m->L;
    size_t N = (size_t)lay->B * lay->T, C = (size_t)m->cfg.hidden;
    dyn_llama_dims d = llama_dims(m);
    model_bump b = {base, 0};
    a->keep_emb = first == 0 ? model_take(&b, N * C) : NULL;
    a->keep_head = last == L ? model_take(&b, N * C) : NULL;
    a->keep_enc_norm = a->keep_dec_emb = NULL;
    for (int l = first; l < last; l++) {
        if (l < 1 || l > n) continue;
        float *k = model_take(&b, dyn_llama_block_dy_floats(d, lay));
        if (base) dyn_llama_block_dy_layout(&a->dy[l].llama, k, d, lay);
        if (recompute) {
            float *r = model_take(&b, dyn_llama_block_act_floats(d, lay->B, lay->T));
            if (base) dyn_llama_block_acts_layout(&a->wblk[l].llama, r, d, lay->B, lay->T);
        }
    }
    return b.used;
}

/* The activations block layer l's backward halves use. */
static dyn_llama_block_acts *llama_split_acts(dyn_model_acts *a, int l)
{
    return a->fwd_recompute ? &a->wblk[l].llama : &a->blk[l].llama;
}

/* The layer walk both backwards share (gpt.c's gpt_backward_walk). */
static void llama_backward_walk(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                                const float *dout, float *din, float dloss, int split)
{
    const dyn_layout *lay = mb->lay;
    int L = m->L, C = m->cfg.hidden, V = m->cfg.vocab;
    int N = lay->B * lay->T;
    size_t bytes = (size_t)N * C * sizeof(float);
    dyn_llama_dims d = llama_dims(m);
    dyn_rope rope = llama_rope(m, a);
    float *cur = a->d0;
    if (last < L) memcpy(cur, dout, bytes);
    for (int l = last - 1; l >= first; l--) {
        model_progress(m);
        if (l == L - 1) {
            /* The LM head accumulates into dhead, RMSNorm into d0: both
             * zeroed. Split, dhead is keep_head for W's norm reduction. */
            float *dhead = split ? a->keep_head : a->d1;
            memset(dhead, 0, bytes);
            if (split)
                dyn_lmhead_ce_backward_input(dhead, a->head_ln, m->lm_head, mb->targets, mb->weights, a->head_lse,
                                             dloss, N, C, V, a->work);
            else
                dyn_lmhead_ce_backward(dhead, model_grad_of(m, m->lm_head), a->head_ln, m->lm_head, mb->targets,
                                       mb->weights, a->head_lse, dloss, N, C, V, a->work);
            memset(a->d0, 0, bytes);
            if (split)
                dyn_rmsnorm_backward_input(a->d0, dhead, a->hid[l], m->norm_w, a->head_rstd, N, C);
            else
                dyn_rmsnorm_backward(a->d0, model_grad_of(m, m->norm_w), dhead, a->hid[l], m->norm_w, a->head_rstd,
                                     N, C);
            cur = a->d0;
        } else if (l >= 1) {
            float *next = cur == a->d0 ? a->d1 : a->d0;
            if (split)
                dyn_llama_block_backward_input(next, &a->dy[l].llama, cur, a->hid[l], &m->lp[l - 1], &rope,
                                               llama_split_acts(a, l), lay, d, a->fwd_recompute, a->work);
            else
                dyn_llama_block_backward(next, &m->lg[l - 1], cur, a->hid[l], &m->lp[l - 1], &rope, &a->blk[l].llama,
                                         lay, d, a->fwd_recompute, a->work);
            cur = next;
        } else if (split) {
            memcpy(a->keep_emb, cur, bytes); /* the embedding is all weight gradient */
        } else {
            dyn_embed_backward(model_grad_of(m, m->embed), cur, mb->tokens, N, C);
        }
    }
    if (first > 0) memcpy(din, cur, bytes);
}

static void llama_backward_weight(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last)
{
    const dyn_layout *lay = mb->lay;
    int L = m->L, C = m->cfg.hidden, V = m->cfg.vocab;
    int N = lay->B * lay->T;
    dyn_llama_dims d = llama_dims(m);
    for (int l = last - 1; l >= first; l--) {
        model_progress(m);
        if (l == L - 1) {
            dyn_lmhead_ce_backward_weight(model_grad_of(m, m->lm_head), a->head_ln, m->lm_head, mb->targets,
                                          mb->weights, a->head_lse, a->w_dloss, N, C, V, a->work);
            dyn_rmsnorm_backward_weight(model_grad_of(m, m->norm_w), a->keep_head, a->hid[l], a->head_rstd, N, C);
        } else if (l >= 1) {
            dyn_llama_block_backward_weight(&m->lg[l - 1], &a->dy[l].llama, a->hid[l], llama_split_acts(a, l), lay, d);
        } else {
            dyn_embed_backward(model_grad_of(m, m->embed), a->keep_emb, mb->tokens, N, C);
        }
    }
}

/* What model.c and stage.c call for a Llama model (model_impl.h). */
const model_arch model_arch_llama = {
    .build = llama_build,
    .bind = llama_bind,
    .borrows = llama_borrows,
    .carve = llama_carve,
    .boundary_floats = llama_boundary_floats,
    .forward = llama_forward,
    .backward = llama_backward_walk,
    .keep_carve = llama_keep_carve,
    .backward_weight = llama_backward_weight,
};
