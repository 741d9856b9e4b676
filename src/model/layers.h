/* layers.h — fp32 transformer layer kernels for the CPU: forward/backward
 * pairs over plain float arrays with explicit sizes (llm.c style).
 *
 * Dimension names, used everywhere in src/model:
 *   B rows of a micro-batch, T positions per row (padded), N = B*T flat
 *   positions, C channels (hidden, d_model), NH heads, HD head dim (d_kv),
 *   I = NH*HD attention inner width (GPT: I = C), F feed-forward width,
 *   V vocabulary, OC output channels of a linear layer.
 * All arrays are row-major and contiguous unless an ld* (leading dimension,
 * in floats) is given; "(N,C)" means N rows of C floats.
 *
 * Gradient conventions: every *_backward ACCUMULATES (+=) into parameter
 * gradients (dw, db, ...). Input gradients are also ACCUMULATED (+=) by the
 * kernels of this file unless the function comment says "overwritten" (the
 * attention kernels overwrite). Any gradient pointer documented "may be NULL"
 * is skipped.
 *
 * Threads (threads.h): the count is set once with dyn_threads_set; matrix
 * products go through dyn_sgemm (OpenBLAS, cut into panels by shape);
 * elementwise and reduction loops use OpenMP over rows/channels, on one
 * thread below DYN_PAR_MIN_WORK, each output computed by one thread in a
 * fixed order, so the same inputs give bit-identical results whatever the
 * thread count.
 * Nothing here allocates; callers pass workspace sized by the *_work_floats
 * functions. */
#ifndef DYN_MODEL_LAYERS_H
#define DYN_MODEL_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "model/layout.h" /* defines: dyn_layout, dyn_segment */

#define DYN_LN_EPS 1e-5f  /* GPT-2 LayerNorm epsilon */
#define DYN_RMS_EPS 1e-6f /* T5 RMSNorm epsilon */
#define DYN_T5_NUM_BUCKETS 32
#define DYN_T5_MAX_DISTANCE 128

/* ---- linear --------------------------------------------------------------
 * out (N,OC) = inp (N,C) · w^T + bias, with w (OC,C) (the PyTorch nn.Linear
 * layout; HF GPT-2's Conv1D stores the transpose (C,OC)), bias (OC) or NULL.
 * out is overwritten. */
void dyn_linear_forward(float *out, const float *inp, const float *w, const float *bias,
                        int N, int C, int OC);
/* dinp (N,C) += dout · w; dw (OC,C) += dout^T · inp; dbias (OC) += column
 * sums of dout. dinp, dbias may be NULL. dout (N,OC). */
void dyn_linear_backward(float *dinp, float *dw, float *dbias, const float *dout,
                         const float *inp, const float *w, int N, int C, int OC);

/* ---- LayerNorm (GPT-2) ---------------------------------------------------
 * out (N,C) = (inp - mean) * rstd * w + b per row; saves mean (N) and
 * rstd (N) = 1/sqrt(var + DYN_LN_EPS) for the backward. w, b (C). */
void dyn_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int N, int C);
/* The residual add and the LayerNorm after it in one pass over the rows:
 * x (N,C) += res (N,C) in place, then out, mean, rstd as
 * dyn_layernorm_forward of the new x (the same bits as the two calls; the
 * row is still in cache for the norm). */
void dyn_residual_layernorm_forward(float *x, const float *res, float *out, float *mean, float *rstd,
                                    const float *w, const float *b, int N, int C);
/* dinp (N,C) +=, dw (C) +=, db (C) +=. dinp may be NULL. */
void dyn_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C);

/* ---- RMSNorm (T5) --------------------------------------------------------
 * out (N,C) = inp * rstd * w per row, rstd (N) = 1/sqrt(mean(inp^2) +
 * DYN_RMS_EPS) saved; w (C). No mean subtraction, no bias. */
void dyn_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C);
/* The same with epsilon eps (Llama: the config's rms_norm_eps); the
 * backwards below need only rstd, so they serve both. */
void dyn_rmsnorm_forward_eps(float *out, float *rstd, const float *inp, const float *w, float eps,
                             int N, int C);
/* dinp (N,C) +=, dw (C) +=. dinp may be NULL. */
void dyn_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                          const float *w, const float *rstd, int N, int C);

/* ---- GELU (tanh approximation, GPT-2 "gelu_new") --------------------------
 * out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). out may alias
 * inp. */
void dyn_gelu_forward(float *out, const float *inp, size_t n);
/* dinp (n) += gelu'(inp) * dout. dinp must not alias dout; to turn dout
 * into the input gradient in place use dyn_gelu_backward_inplace. */
void dyn_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
/* d (n) = gelu'(inp) * d, overwritten in place. */
void dyn_gelu_backward_inplace(float *d, const float *inp, size_t n);
/* The pair a block uses when it keeps the derivative instead of the input
 * (the GPT MLP: the pre-GELU values are read by nothing else): the forward
 * computes the tanh once for both, the backward is a product with no tanh.
 * Forward: out (n) = gelu(x), and x_dgelu (n) holds x on entry and gelu'(x)
 * on return. Backward: d (N,F) = dgelu * d in place, bit for bit
 * dyn_gelu_backward_inplace on the same x; dbias (F) += column sums of the
 * new d, summed as dyn_linear_backward_weight sums them, or NULL. */
void dyn_gelu_forward_keep_grad(float *out, float *x_dgelu, size_t n);
void dyn_gelu_backward_kept(float *d, float *dbias, const float *dgelu, int N, int F);

/* ---- gated GELU (T5 v1.1 feed-forward) -------------------------------------
 * h (N,2F) holds [x·W_i0^T | x·W_i1^T] per row (one linear with the two
 * weights stacked, W_i0 rows first); out (N,F) = gelu(h[:, :F]) * h[:, F:].
 * out is overwritten. */
void dyn_gated_gelu_forward(float *out, const float *h, int N, int F);
/* dh (N,2F) OVERWRITTEN: dh[:, :F] = dout * h[:, F:] * gelu'(h[:, :F]),
 * dh[:, F:] = dout * gelu(h[:, :F]). dout (N,F). */
void dyn_gated_gelu_backward(float *dh, const float *dout, const float *h, int N, int F);

/* ---- SwiGLU (Llama feed-forward) -------------------------------------------
 * h (N,2F) holds [x·W_gate^T | x·W_up^T] per row (one linear, gate rows
 * first); out (N,F) = silu(h[:, :F]) * h[:, F:], silu(a) = a / (1 + e^-a).
 * out is overwritten. */
void dyn_swiglu_forward(float *out, const float *h, int N, int F);
/* dh (N,2F) OVERWRITTEN: dh[:, :F] = dout * up * silu'(gate),
 * dh[:, F:] = dout * silu(gate). dout (N,F). */
void dyn_swiglu_backward(float *dh, const float *dout, const float *h, int N, int F);

/* ---- rotary position embedding (Llama) --------------------------------------
 * Hugging Face's rotate_half convention: head dim HD splits into halves, and
 * element i < HD/2 pairs with i + HD/2; position p turns each pair by the
 * angle p * inv_freq[i]:
 *   x'[i]        = x[i] cos - x[i+HD/2] sin
 *   x'[i+HD/2]   = x[i+HD/2] cos + x[i] sin.
 * inv_freq (HD/2) = theta^(-2i/HD), adjusted for rope_scaling llama3 (low
 * frequencies divided by factor, high ones kept, a smooth blend between):
 * dyn_rope_inv_freq. Tables cos_t, sin_t (P, HD/2) hold the cosines and
 * sines of (float)p * inv_freq[i] for positions p < P, as HF computes them
 * (float product, then the cosine). */
void dyn_rope_inv_freq(float *inv_freq, int HD, const dyn_model_config *cfg);
void dyn_rope_tables(float *cos_t, float *sin_t, const float *inv_freq, int P, int HD);
/* In place over x (N rows, stride ldx floats): nh heads of HD at columns
 * [h*HD, (h+1)*HD), row n rotated for position pos[n] (in [0, P)). */
void dyn_rope_forward(float *x, int ldx, int nh, int HD, const int32_t *pos, const float *cos_t,
                      const float *sin_t, int N);
/* The gradient through dyn_rope_forward, in place: the inverse rotation
 * (the transpose), d[i] = d[i] cos + d[i+HD/2] sin, ... */
void dyn_rope_backward(float *d, int ldd, int nh, int HD, const int32_t *pos, const float *cos_t,
                       const float *sin_t, int N);

/* ---- residual --------------------------------------------------------------
 * out (n) = a + b (out may alias a or b). Backward: da += dout, db += dout
 * (either may be NULL). */
void dyn_residual_forward(float *out, const float *a, const float *b, size_t n);
void dyn_residual_backward(float *da, float *db, const float *dout, size_t n);

/* ---- embeddings ------------------------------------------------------------
 * GPT-2: out (N,C) = wte[tokens[i]] + wpe[pos[i]]; tokens (N) in [0,V),
 * pos (N) in [0,P) (from dyn_layout_positions), wte (V,C), wpe (P,C).
 * Ids must be in range (negative ids are asserted in debug builds). */
void dyn_embed_pos_forward(float *out, const int32_t *tokens, const int32_t *pos,
                           const float *wte, const float *wpe, int N, int C);
/* dwte (V,C) += and dwpe (P,C) += scattered rows of dout (N,C); dwpe may be
 * NULL. Deterministic: threads split the C channels, each adds rows in order. */
void dyn_embed_pos_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                            const int32_t *pos, int N, int C);
/* T5: out (N,C) = wte[tokens[i]]; backward dwte (V,C) +=. */
void dyn_embed_forward(float *out, const int32_t *tokens, const float *wte, int N, int C);
void dyn_embed_backward(float *dwte, const float *dout, const int32_t *tokens, int N, int C);

/* ---- LM head + cross-entropy over target tokens ---------------------------
 * logits = x (N,C) · w^T with w (V,C) (GPT-2: the tied token embedding),
 * loss_i = weight_i * (logsumexp(logits_i) - logits_i[targets_i]).
 * Only rows with weight_i != 0 are computed (pad and non-target tokens cost
 * nothing); their targets must be in [0,V). Logits are never stored whole:
 * the target rows are gathered and processed in chunks of
 * DYN_LMHEAD_VCHUNK vocabulary entries with an online logsumexp.
 * Returns the SUM of loss_i (accumulated in double) — the caller divides by
 * the target-token count of the whole global batch. losses (N) (may be NULL)
 * receives loss_i per row (0 where weight is 0), lse (N) the logsumexp per
 * row (needed by the backward; 0 where weight is 0).
 * work: dyn_lmhead_work_floats(N, C, V) floats. */
#define DYN_LMHEAD_VCHUNK 2048
size_t dyn_lmhead_work_floats(int N, int C, int V);
double dyn_lmhead_ce_forward(float *losses, float *lse, const float *x, const float *w,
                             const int32_t *targets, const float *weights, int N, int C, int V,
                             float *work);
/* Gradient of dloss * (sum of loss_i): dx (N,C) += (rows with weight 0
 * untouched), dw (V,C) +=. dloss is the scale of the loss sum, typically
 * 1 / (target tokens in the global batch). Logits are recomputed by chunks.
 * dx may be NULL. work as for the forward. */
void dyn_lmhead_ce_backward(float *dx, float *dw, const float *x, const float *w,
                            const int32_t *targets, const float *weights, const float *lse,
                            float dloss, int N, int C, int V, float *work);

/* ---- split backward: input-gradient (B) and weight-gradient (W) halves ----
 * For zero-bubble schedules, which run the two halves of a backward at
 * different times. Each *_backward_input computes only what the fused
 * *_backward adds to the input gradient, each *_backward_weight only what it
 * adds to the parameter gradients, with the same operations in the same
 * order: B then W (or W then B) gives bit-identical results to the fused
 * call. Accumulation (+=) as for the fused kernels. Attention has no weights
 * except T5's bias table; its split is dyn_attention_backward_input below.
 * Embeddings have no input gradient: their fused backward is all W. */
/* dinp (N,C) += dout (N,OC) · w (OC,C). */
void dyn_linear_backward_input(float *dinp, const float *dout, const float *w, int N, int C, int OC);
/* dinp (N,C) = dout (N,OC) · w (OC,C), OVERWRITTEN: for a fresh gradient
 * buffer (the blocks' intermediate gradients), in place of zeroing it and
 * accumulating. */
void dyn_linear_backward_input_set(float *dinp, const float *dout, const float *w, int N, int C,
                                   int OC);
/* dw (OC,C) += dout^T · inp (N,C); dbias (OC) += column sums of dout (may
 * be NULL). */
void dyn_linear_backward_weight(float *dw, float *dbias, const float *dout, const float *inp,
                                int N, int C, int OC);
/* dinp (N,C) +=. */
void dyn_layernorm_backward_input(float *dinp, const float *dout, const float *inp, const float *w,
                                  const float *mean, const float *rstd, int N, int C);
/* dinp (N,C) = dres + the gradient above, OVERWRITTEN; dres (N,C) may be
 * dinp (that is dyn_layernorm_backward_input). For the block whose
 * residual gradient arrives in a read-only buffer: no copy of it first. */
void dyn_layernorm_backward_input_res(float *dinp, const float *dres, const float *dout,
                                      const float *inp, const float *w, const float *mean,
                                      const float *rstd, int N, int C);
/* dw (C) +=, db (C) +=; needs dout, inp, mean, rstd only. */
void dyn_layernorm_backward_weight(float *dw, float *db, const float *dout, const float *inp,
                                   const float *mean, const float *rstd, int N, int C);
void dyn_rmsnorm_backward_input(float *dinp, const float *dout, const float *inp, const float *w,
                                const float *rstd, int N, int C);
/* dinp (N,C) = dres + the RMSNorm input gradient, as the LayerNorm one. */
void dyn_rmsnorm_backward_input_res(float *dinp, const float *dres, const float *dout,
                                    const float *inp, const float *w, const float *rstd, int N,
                                    int C);
void dyn_rmsnorm_backward_weight(float *dw, const float *dout, const float *inp, const float *rstd,
                                 int N, int C);
/* LM head halves: dx (N,C) += (B) and dw (V,C) += (W). Neither keeps the
 * (target rows, V) logit gradients: both recompute the logits by chunks
 * (so B + W cost one logits product more than the fused backward). Same
 * arguments and work as dyn_lmhead_ce_backward. */
void dyn_lmhead_ce_backward_input(float *dx, const float *x, const float *w, const int32_t *targets,
                                  const float *weights, const float *lse, float dloss, int N, int C,
                                  int V, float *work);
void dyn_lmhead_ce_backward_weight(float *dw, const float *x, const float *w, const int32_t *targets,
                                   const float *weights, const float *lse, float dloss, int N, int C,
                                   int V, float *work);

/* ---- attention ------------------------------------------------------------
 * Multi-head scaled dot-product attention over a layout. q rows come from
 * layout ql (B rows × Tq), k/v rows from kl (B rows × Tk, same B); query
 * segment i attends key segment i only (self-attention: pass the same layout
 * twice). Within a pair, query at offset a attends key at offset c when
 * !causal or c <= a. Pad query rows get output 0.
 * score(a,c) = scale * q_a·k_c + rel_bias[h, bucket(c - a)] (bias optional),
 * where c - a is the key position minus the query position inside the
 * segment pair, and bucket() is T5's (dyn_t5_bucket with cfg->bidirectional,
 * cfg->num_buckets, cfg->max_distance).
 *
 * Tensors: q (B*Tq rows, row stride ldq floats), head h at columns
 * [h*HD, (h+1)*HD); likewise k (B*Tk, ldk), v (B*Tk, ldv), which hold
 * cfg->kv_heads heads when it is set (GQA: each k/v head serves NH /
 * kv_heads consecutive query heads; the backward sums their gradients). So a fused GPT
 * qkv buffer (N,3C) passes q=qkv, k=qkv+C, v=qkv+2C, ld=3C.
 * out (B*Tq, NH*HD) contiguous, overwritten (pad rows 0).
 * lse (B, NH, Tq): per query row the logsumexp of its scores, saved for the
 * backward (0 at pad rows).
 *
 * The fast kernel is tiled (flash-attention): scores exist only per
 * (DYN_ATTN_BQ × DYN_ATTN_BK) tile, the forward uses an online softmax, the
 * backward recomputes scores tile by tile; tiles that are fully masked
 * (causal upper triangle, pad, other segments) are never visited. Parallel
 * over (segment, head) pairs (and query tiles in the forward) with static
 * schedules; the bias gradient is reduced in fixed order, so results are
 * bit-identical for the same inputs whatever the thread count. Inside its
 * parallel regions it sets OpenBLAS to one thread (restored on return), so
 * tile sgemms do not oversubscribe the cores.
 * work: dyn_attention_work_floats(B, Tq, Tk, cfg) floats. */
#define DYN_ATTN_BQ 128
#define DYN_ATTN_BK 256

typedef struct dyn_attn_cfg {
    int32_t NH, HD;
    int32_t causal;        /* 1: key offset <= query offset (self-attention only) */
    float scale;           /* multiplies q·k: 1/sqrt(HD) for GPT-2, 1 for T5 */
    int32_t bidirectional; /* bucket scheme for rel_bias: 1 encoder, 0 decoder */
    int32_t num_buckets;   /* rel_bias table columns (T5: 32) */
    int32_t max_distance;  /* T5: 128 */
    int32_t nthreads;      /* OpenMP threads to use; the workspace is sized for them */
    int32_t kv_heads;      /* grouped-query attention: k and v hold kv_heads heads (dividing NH)
                            * and query head h reads k/v head h / (NH / kv_heads); 0 = NH */
} dyn_attn_cfg;

/* T5 relative position bucket of rel = key_pos - query_pos. bidirectional:
 * half of the buckets for rel > 0; causal: rel > 0 maps to bucket 0 (such
 * pairs are masked anyway). Exact buckets below num_buckets/2 (of the half),
 * logarithmic up to max_distance, clamped to the last bucket. */
int dyn_t5_bucket(int rel, int bidirectional, int num_buckets, int max_distance);

/* Workspace floats for forward and backward with a q layout of B rows × Tq
 * positions and a k layout of B rows × Tk positions (covers any segments). */
size_t dyn_attention_work_floats(int B, int Tq, int Tk, const dyn_attn_cfg *cfg);

/* rel_bias (NH, num_buckets) or NULL. */
void dyn_attention_forward(float *out, float *lse, const float *q, int ldq, const float *k,
                           int ldk, const float *v, int ldv, const float *rel_bias,
                           const dyn_layout *ql, const dyn_layout *kl, const dyn_attn_cfg *cfg,
                           float *work);
/* dq, dk, dv: same shapes and strides as q, k, v; OVERWRITTEN in the NH*HD
 * (dk, dv: kv_heads*HD) columns this call owns (pad rows 0), so they may point into one fused
 * dqkv buffer. drel_bias (NH, num_buckets) += (may be NULL; ignored when
 * rel_bias is NULL). dout (B*Tq, NH*HD); out and lse from the forward. */
void dyn_attention_backward(float *dq, float *dk, float *dv, float *drel_bias,
                            const float *dout, const float *q, int ldq, const float *k, int ldk,
                            const float *v, int ldv, const float *out, const float *lse,
                            const float *rel_bias, const dyn_layout *ql, const dyn_layout *kl,
                            const dyn_attn_cfg *cfg, float *work);

/* Split attention backward (zero-bubble B): dq, dk, dv exactly as
 * dyn_attention_backward, and instead of adding the bias gradient to the
 * table's gradient, the per-(segment, head) partial sums are copied to
 * drel_items (dyn_attention_rel_items_floats floats; ignored when rel_bias
 * or drel_items is NULL). dyn_attention_rel_bias_backward_weight (W) later
 * adds them to drel_bias (NH, num_buckets) in the order the fused backward
 * does, so B + W is bit-identical to it. */
size_t dyn_attention_rel_items_floats(const dyn_layout *ql, const dyn_layout *kl,
                                      const dyn_attn_cfg *cfg);
void dyn_attention_backward_input(float *dq, float *dk, float *dv, float *drel_items,
                                  const float *dout, const float *q, int ldq, const float *k,
                                  int ldk, const float *v, int ldv, const float *out,
                                  const float *lse, const float *rel_bias, const dyn_layout *ql,
                                  const dyn_layout *kl, const dyn_attn_cfg *cfg, float *work);
void dyn_attention_rel_bias_backward_weight(float *drel_bias, const float *drel_items,
                                            const dyn_layout *ql, const dyn_layout *kl,
                                            const dyn_attn_cfg *cfg);

/* Naive reference (attention_ref.c): same contract and arguments, single
 * threaded, materialises the full score matrix of each segment pair and
 * accumulates in double. For tests; work is ignored (may be NULL); it
 * allocates and returns nonzero on allocation failure. */
int dyn_attention_forward_ref(float *out, float *lse, const float *q, int ldq, const float *k,
                              int ldk, const float *v, int ldv, const float *rel_bias,
                              const dyn_layout *ql, const dyn_layout *kl,
                              const dyn_attn_cfg *cfg);
int dyn_attention_backward_ref(float *dq, float *dk, float *dv, float *drel_bias,
                               const float *dout, const float *q, int ldq, const float *k,
                               int ldk, const float *v, int ldv, const float *rel_bias,
                               const dyn_layout *ql, const dyn_layout *kl,
                               const dyn_attn_cfg *cfg);

/* FLOPs the benchmark credits: see docs/architecture.md "Model layers". */
#endif
