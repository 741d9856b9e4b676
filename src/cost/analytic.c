/* analytic.c — the analytic cost model: FLOPs and bytes of each layer kind
 * from the model shape, divided by a machine's rates.
 *
 * Time of a layer pass = matrix FLOPs / matmul rate + attention FLOPs /
 * attention rate + elementwise bytes / memory bandwidth, plus two small-size
 * terms: every matrix product costs gemm_n_half extra token rows (Hockney's
 * half-performance size), and every pass pays a fixed per-layer overhead.
 * Without them a micro-batch's time would be linear in its tokens and one
 * sample per micro-batch would always look optimal. Memory = activation bytes,
 * tensor by tensor. Every count is written out below with the tensor it
 * belongs to; docs/cost-model.md has the same list with the reasoning.
 *
 * Notation (llm.c style, stated once):
 *   b rows, s input/encoder length, t target/decoder length (T5),
 *   h hidden, H heads, d head_dim, a = H*d attention inner size, f ffn,
 *   V vocab, B bytes per element; Llama: g = kv_heads*d, the key/value
 *   width of grouped-query attention. A matrix product of (m,k) x (k,n)
 *   costs 2mkn FLOPs.
 *
 * Llama is decoder-only like GPT (embedding, blocks of kind "encoder", LM
 * head) with its own block (count_llama_block): q and o projections h x a,
 * k and v h x g, three SwiGLU matrices, RMS norms, rotary embedding on q
 * and k; no learned positions; the LM head's table is counted once in the
 * whole model when tied, but a last stage keeps its own copy as GPT's does.
 *
 * Conventions, chosen to be simple and stated:
 *   - causal self-attention (GPT, T5 decoder) computes half of the (q, k)
 *     pairs: FLOPs and softmax traffic x 0.5; the probability matrix it keeps
 *     is dense (a plain kernel allocates the whole square).
 *   - no dropout (rate 0), so no masks are stored.
 *   - backward: input gradients and weight gradients each cost one forward
 *     of the matrix products; attention backward costs 2x its forward
 *     (dQ, dK, dV, dP); elementwise backward moves 2x the forward bytes.
 *     Attention and elementwise backward belong to the input-gradient pass.
 *   - normalisation statistics are fp32 (4 bytes per token per statistic),
 *     token ids int32.
 * O(1), no allocation: the planner calls this in its inner loops. */
#include <stddef.h>

#include "cost/cost_internal.h"

/* FLOP and byte counts of one layer on one micro-batch. */
typedef struct layer_counts {
    double mm_flops;        /* forward matrix products */
    double mm_wgrad_flops;  /* backward weight-gradient products */
    double mm_kn_flops;     /* sum over the products of 2 K N: FLOPs per token row,
                             * what gemm_n_half extra rows cost in each pass */
    double attn_flops;      /* forward attention (QK^T and PV), causal factor applied */
    double ew_bytes;        /* forward elementwise traffic, attention softmax excluded */
    double softmax_bytes;   /* forward softmax traffic */
    double stored_none;     /* bytes kept for backward with no recompute */
    double probs;           /* bytes of attention probabilities inside stored_none */
    double input_bytes;     /* the layer's input: all that full recompute keeps */
    double scores;          /* transient pre-softmax scores during forward */
    double grad_work;       /* transient gradient buffers during backward */
    double output_bytes;    /* output activation */
    double wgrad_bytes;     /* elementwise weight-gradient traffic (embedding scatter-add) */
} layer_counts;

#define CAUSAL 0.5

/* Dense (q,k) pair counts unless the shape gives document-masked ones. */
static double pairs_or(int64_t given, double dense)
{
    return given > 0 ? (double)given : dense;
}

int64_t cost_layer_params(const dyn_model_config *c, dyn_layer_kind kind)
{
    int64_t h = c->hidden, a = (int64_t)c->heads * c->head_dim, f = c->ffn, V = c->vocab;
    int64_t g = (int64_t)c->kv_heads * c->head_dim; /* Llama's key/value width */
    int gpt = c->kind == DYN_MODEL_GPT, llama = c->kind == DYN_MODEL_LLAMA;
    switch (kind) {
    case DYN_LAYER_EMBED:
        /* token table (+ learned positions for GPT; T5 uses relative bias,
         * Llama rotary embedding) */
        return V * h + (gpt ? (int64_t)c->max_seqlen * h : 0);
    case DYN_LAYER_ENCODER:
        if (gpt) /* LN1, QKV + bias, out + bias, LN2, fc1 + bias, fc2 + bias */
            return 2 * h + (3 * h * a + 3 * a) + (a * h + h) + 2 * h + (h * f + f) + (f * h + h);
        if (llama) /* RMS norm, Q, K, V (+ Qwen2's biases), O, RMS norm, gate, up, down */
            return h + h * a + 2 * h * g + (c->qkv_bias ? a + 2 * g : 0) + a * h + h + 3 * h * f;
        /* RMS norm, QKV, out (no biases), RMS norm, wi_0, wi_1, wo */
        return h + 4 * h * a + h + 3 * h * f;
    case DYN_LAYER_DECODER:
        if (c->kind != DYN_MODEL_T5) return 0;
        /* three RMS norms, self QKV + out, cross Q K V + out, gated FFN */
        return 3 * h + 4 * h * a + 4 * h * a + 3 * h * f;
    case DYN_LAYER_LM_HEAD:
        /* final norm + vocabulary projection (a pipeline's last stage keeps
         * its own copy even when the embedding is tied) */
        return (gpt ? 2 * h : h) + V * h;
    case DYN_LAYER_BRIDGE:
        /* T5: the encoder's final RMS norm (the decoder embedding reads
         * the shared table, counted with the embedding) */
        return c->kind == DYN_MODEL_T5 ? h : 0;
    }
    return 0;
}

double cost_state_bytes_per_param(int32_t bytes_per_elem)
{
    return bytes_per_elem == 2 ? 2.0 + 2.0 + 4.0 + 4.0 + 4.0 : 4.0 * 4.0;
}

/* GPT block or T5 encoder block over n = b*s tokens. */
static void count_self_block(const dyn_model_config *c, double B, const dyn_mb_shape *mb,
                             layer_counts *k)
{
    int gpt = c->kind == DYN_MODEL_GPT;
    double b = mb->rows, s = mb->enc_len, n = b * s;
    double h = c->hidden, H = c->heads, a = (double)c->heads * c->head_dim, f = c->ffn;
    double pairs = pairs_or(mb->enc_attn, b * s * s);
    double causal = gpt ? CAUSAL : 1.0;
    double ffn_mats = gpt ? 2.0 : 3.0; /* GELU MLP vs gated-GELU */

    k->mm_flops = 2.0 * n * (3.0 * h * a + a * h + ffn_mats * h * f);
    k->mm_wgrad_flops = k->mm_flops;
    k->mm_kn_flops = 2.0 * (3.0 * h * a + a * h + ffn_mats * h * f);
    k->attn_flops = 4.0 * a * pairs * causal;
    /* two norms (read h, write h), two residual adds (read 2h, write h), the
     * activation: GELU (read f, write f) or gated GELU (GELU on one branch,
     * then the product: 2f + 3f). */
    k->ew_bytes = B * n * (2 * 2 * h + 2 * 3 * h + (gpt ? 2 * f : 5 * f));
    k->softmax_bytes = B * 2.0 * H * pairs * causal;
    /* Stored per token: norm1 in, norm1 out, Q, K, V, attention context,
     * norm2 in, norm2 out, then GPT: fc1 out, GELU out; T5: wi_0 out,
     * wi_1 out, GELU out, product. Plus norm statistics (LayerNorm: mean and
     * rstd; RMS norm: rstd) and the probabilities H x pairs. */
    double per_tok = 4 * h + 4 * a + (gpt ? 2 * f : 4 * f);
    double stats = 4.0 * n * (gpt ? 2 * 2 : 2 * 1);
    k->probs = B * H * pairs;
    k->stored_none = B * n * per_tok + stats + k->probs;
    k->input_bytes = B * n * h;
    k->scores = B * H * pairs;
    /* dP and dS, the widest activation gradient (fc1 out, or both FFN
     * branches for T5), and the gradients entering and leaving the layer. */
    k->grad_work = 2.0 * B * H * pairs + B * n * (gpt ? f : 2 * f) + 2.0 * B * n * h;
    k->output_bytes = B * n * h;
}

/* Llama block over n = b*s tokens: RMS norm, Q K V (K and V of width g),
 * rotary embedding on Q and K, causal attention with H query heads (grouped
 * key/value heads save projection work and memory, not score work: every
 * query head still scores every key), O, residual, RMS norm, SwiGLU
 * (gate, up, down), residual. Qwen2's q/k/v biases are added in the
 * product's epilogue, as GPT's are: no separate traffic. */
static void count_llama_block(const dyn_model_config *c, double B, const dyn_mb_shape *mb, layer_counts *k)
{
    double b = mb->rows, s = mb->enc_len, n = b * s;
    double h = c->hidden, H = c->heads, a = (double)c->heads * c->head_dim, f = c->ffn;
    double g = (double)c->kv_heads * c->head_dim;
    double pairs = pairs_or(mb->enc_attn, b * s * s);
    /* Q, K, V, O and the three FFN matrices: sum of K x N per token */
    double kn = h * a + 2.0 * h * g + a * h + 3.0 * h * f;

    k->mm_flops = 2.0 * n * kn;
    k->mm_wgrad_flops = k->mm_flops;
    k->mm_kn_flops = 2.0 * kn;
    k->attn_flops = 4.0 * a * pairs * CAUSAL;
    /* two RMS norms (read h, write h), two residual adds (read 2h, write
     * h), the rotation of Q and K in place (read and write a + g), SwiGLU
     * fused (read gate and up, write the product: 3f) */
    k->ew_bytes = B * n * (2 * 2 * h + 2 * 3 * h + 2 * (a + g) + 3 * f);
    k->softmax_bytes = B * 2.0 * H * pairs * CAUSAL;
    /* Stored per token: norm1 in, norm1 out, Q, K, V, attention context,
     * norm2 in, norm2 out, gate out, up out, product; RMS statistics (one
     * per norm) and the probabilities H x pairs, as for GPT. */
    double per_tok = 4 * h + 2 * a + 2 * g + 3 * f;
    k->probs = B * H * pairs;
    k->stored_none = B * n * per_tok + 4.0 * n * 2 + k->probs;
    k->input_bytes = B * n * h;
    k->scores = B * H * pairs;
    /* dP and dS, both FFN branches' gradient, and the gradients entering
     * and leaving the layer. */
    k->grad_work = 2.0 * B * H * pairs + B * n * 2 * f + 2.0 * B * n * h;
    k->output_bytes = B * n * h;
}

/* T5 decoder block: self attention over t, cross attention to s, gated FFN. */
static void count_dec_block(const dyn_model_config *c, double B, const dyn_mb_shape *mb,
                            layer_counts *k)
{
    double b = mb->rows, s = mb->enc_len, t = mb->dec_len, nt = b * t, ns = b * s;
    double h = c->hidden, H = c->heads, a = (double)c->heads * c->head_dim, f = c->ffn;
    double self_pairs = pairs_or(mb->dec_attn, b * t * t);
    double cross_pairs = pairs_or(mb->cross_attn, b * t * s);

    /* self QKV + out on t tokens, cross Q + out on t tokens, cross K V on the
     * s encoder tokens, gated FFN (3 matrices) on t tokens */
    k->mm_flops = 2.0 * nt * (4.0 * h * a) + 2.0 * nt * (2.0 * h * a) + 2.0 * ns * (2.0 * h * a) +
                  2.0 * nt * (3.0 * h * f);
    k->mm_wgrad_flops = k->mm_flops;
    /* self QKV + out, cross Q + out, cross K V, gated FFN: one n_half each */
    k->mm_kn_flops = 2.0 * (4.0 * h * a + 2.0 * h * a + 2.0 * h * a + 3.0 * h * f);
    k->attn_flops = 4.0 * a * (self_pairs * CAUSAL + cross_pairs);
    /* three norms, three residual adds, gated GELU */
    k->ew_bytes = B * nt * (3 * 2 * h + 3 * 3 * h + 5 * f);
    k->softmax_bytes = B * 2.0 * H * (self_pairs * CAUSAL + cross_pairs);
    /* Stored per decoder token: self block (norm in, norm out, Q, K, V,
     * context), cross block (norm in, norm out, Q, context), FFN (norm in,
     * norm out, 4 x f); per encoder token the cross K and V. The encoder
     * output itself is shared by all decoder layers of a stage and travels
     * with the stage input (see output_bytes), so it is not charged here. */
    k->probs = B * H * (self_pairs + cross_pairs);
    k->stored_none = B * nt * (6 * h + 6 * a + 4 * f) + B * ns * 2 * a + 4.0 * nt * 3 + k->probs;
    k->input_bytes = B * nt * h;
    k->scores = B * H * (self_pairs + cross_pairs);
    k->grad_work = 2.0 * B * H * (self_pairs + cross_pairs) + B * nt * 2 * f + 2.0 * B * nt * h +
                   B * ns * h; /* + gradient towards the encoder output */
    /* The decoder stream and the encoder output both cross a stage boundary. */
    k->output_bytes = B * (nt + ns) * h;
}

/* Token (+ position) embedding; T5: the encoder's input tokens (the
 * decoder's are embedded by the bridge). Only GPT has learned positions. */
static void count_embed(const dyn_model_config *c, double B, const dyn_mb_shape *mb, layer_counts *k)
{
    int gpt = c->kind == DYN_MODEL_GPT;
    double n = (double)mb->rows * mb->enc_len;
    double h = c->hidden;
    /* gather: read a row, write it; GPT adds positions: read 2, write 1 */
    k->ew_bytes = B * n * h * (gpt ? 2 + 3 : 2);
    k->stored_none = 4.0 * n; /* token ids */
    k->input_bytes = k->stored_none;
    k->output_bytes = B * n * h;
    /* backward is the scatter-add into the table(s): read the gradient,
     * read and write the table row; GPT does it for positions too */
    k->wgrad_bytes = B * n * h * (gpt ? 6 : 3);
    k->grad_work = 0;
}

/* T5's bridge: the encoder's final RMS norm over the b*s encoder tokens,
 * then the decoder embedding of the b*t target tokens (shared table). */
static void count_bridge(const dyn_model_config *c, double B, const dyn_mb_shape *mb, layer_counts *k)
{
    double ns = (double)mb->rows * mb->enc_len, nt = (double)mb->rows * mb->dec_len, h = c->hidden;
    /* norm: read h, write h; gather: read a row, write it */
    k->ew_bytes = B * ns * h * 2 + B * nt * h * 2;
    /* norm in, its statistic, and the target token ids */
    k->stored_none = B * ns * h + 4.0 * ns + 4.0 * nt;
    k->input_bytes = B * ns * h;
    /* both streams cross the boundary after it (the decoder's input) */
    k->output_bytes = B * (ns + nt) * h;
    /* the scatter-add of the decoder embedding's gradient into the table */
    k->wgrad_bytes = B * nt * h * 3;
    k->grad_work = B * ns * h; /* the norm's input gradient */
}

/* Final norm, vocabulary projection and cross-entropy over the tokens that
 * produce logits: decoder-only (GPT, Llama) all b*s positions, T5 the b*t
 * decoder positions. GPT's norm is a LayerNorm (two statistics), the
 * others' an RMS norm (one). */
static void count_lm_head(const dyn_model_config *c, double B, const dyn_mb_shape *mb, layer_counts *k)
{
    int gpt = c->kind == DYN_MODEL_GPT;
    double n = (double)mb->rows * (dyn_model_kind_decoder_only(c->kind) ? mb->enc_len : mb->dec_len);
    double h = c->hidden, V = c->vocab;
    k->mm_flops = 2.0 * n * h * V;
    k->mm_wgrad_flops = k->mm_flops;
    k->mm_kn_flops = 2.0 * h * V;
    /* norm (read h, write h); cross-entropy: max and sum-exp passes over the
     * logits, then the probabilities written (3 x V) */
    k->ew_bytes = B * n * (2 * h + 3 * V);
    /* norm in, norm out, the probabilities (b x s x V; they overwrite the
     * logits), norm statistics */
    k->stored_none = B * n * (2 * h + V) + 4.0 * n * (gpt ? 2 : 1);
    k->probs = 0;
    k->input_bytes = B * n * h;
    k->scores = B * n * V; /* logits before softmax */
    k->grad_work = B * n * V + 2.0 * B * n * h; /* dlogits, dnorm in/out */
    k->output_bytes = 0;                         /* a scalar loss */
}

static double ms_of(double work, double rate_per_ms)
{
    return work / rate_per_ms;
}

void cost_analytic_layer(const struct dyn_cost_model *cm, dyn_layer_kind kind, const dyn_mb_shape *mb,
                        dyn_recompute rc, dyn_layer_cost *out)
{
    const dyn_model_config *c = &cm->cfg;
    const dyn_machine *m = &cm->machine;
    double B = m->bytes_per_elem;
    layer_counts k = {0};
    switch (kind) {
    case DYN_LAYER_EMBED: count_embed(c, B, mb, &k); break;
    case DYN_LAYER_ENCODER:
        if (c->kind == DYN_MODEL_LLAMA) count_llama_block(c, B, mb, &k);
        else count_self_block(c, B, mb, &k);
        break;
    case DYN_LAYER_DECODER: count_dec_block(c, B, mb, &k); break;
    case DYN_LAYER_LM_HEAD: count_lm_head(c, B, mb, &k); break;
    case DYN_LAYER_BRIDGE: count_bridge(c, B, mb, &k); break;
    }
    double mm_per_ms = m->matmul_gflops * 1e6; /* FLOP per ms */
    double attn_per_ms = m->attn_gflops * 1e6;
    double bw_per_ms = m->mem_gbps * 1e6;      /* bytes per ms */

    /* Every product of a pass pays for gemm_n_half extra rows (Hockney):
     * time = 2KN (n + n_half) / rate. Each pass -- forward, input gradient,
     * weight gradient -- pays the fixed per-layer overhead once. */
    double n_half_ms = ms_of(k.mm_kn_flops * m->gemm_n_half, mm_per_ms);
    double ovh = m->layer_overhead_ms;
    double attn_fwd = ms_of(k.attn_flops, attn_per_ms) + ms_of(k.softmax_bytes, bw_per_ms);
    double fwd = ms_of(k.mm_flops, mm_per_ms) + n_half_ms + attn_fwd + ms_of(k.ew_bytes, bw_per_ms) + ovh;
    double bwd_in = ms_of(k.mm_flops, mm_per_ms) + n_half_ms + 2.0 * attn_fwd +
                    2.0 * ms_of(k.ew_bytes, bw_per_ms) + ovh;
    double bwd_w = ms_of(k.mm_wgrad_flops, mm_per_ms) + n_half_ms + ovh;
    if (kind == DYN_LAYER_EMBED) {
        /* no input gradient (token ids); the weight gradient is a scatter-add */
        bwd_in = 0.0;
        bwd_w = ms_of(k.wgrad_bytes, bw_per_ms) + ovh;
        rc = DYN_RECOMPUTE_NONE; /* it keeps only token ids: nothing to recompute */
    } else if (kind == DYN_LAYER_BRIDGE) {
        /* the weight gradient is the decoder embedding's scatter-add; the
         * input gradient (the norm's) is left at twice the forward
         * traffic, the gather's part included: an over-count of a layer
         * that is a few percent of a block. Only blocks recompute. */
        bwd_w = ms_of(k.wgrad_bytes, bw_per_ms) + ovh;
        rc = DYN_RECOMPUTE_NONE;
    }

    /* Stored memory per recompute mode. Layers without attention (embedding,
     * bridge, LM head) have nothing selective recompute can drop. */
    double stored = k.stored_none;
    if (rc == DYN_RECOMPUTE_SELECTIVE) {
        stored = k.stored_none - k.probs;
        bwd_in += attn_fwd; /* recompute scores and probabilities */
    } else if (rc == DYN_RECOMPUTE_FULL) {
        stored = k.input_bytes;
        bwd_in += fwd; /* the whole forward again */
    }
    double dropped = k.stored_none - stored; /* recreated transiently */
    double fwd_tr = k.scores + dropped;
    double bwd_tr = k.grad_work + dropped;

    out->fwd_ms = fwd;
    out->bwd_input_ms = bwd_in;
    out->bwd_weight_ms = bwd_w;
    out->bwd_ms = bwd_in + bwd_w;
    out->stored_mb = stored / DYN_MB;
    out->peak_mb = (fwd_tr > bwd_tr ? fwd_tr : bwd_tr) / DYN_MB;
    out->output_mb = k.output_bytes / DYN_MB;
    out->kept_mb = 0.0; /* the split backward's kept buffer is not modelled analytically */
}
