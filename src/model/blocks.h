/* blocks.h — transformer blocks built from the kernels of layers.h: the
 * GPT-2 block, the T5 v1.1 encoder block, the T5 v1.1 decoder block and the
 * Llama-family block, each
 * with forward and backward over a variable-length layout (layout.h).
 *
 * Memory (llm.c style): a block's parameters are a struct of pointers laid
 * over a caller-owned flat float buffer (dyn_*_params_count floats; lay the
 * same struct over the gradient buffer for the gradients); its activations
 * are a struct of pointers laid over a caller-owned arena of
 * dyn_*_act_floats(dims, B, T...) floats; scratch for forward/backward is a
 * caller-owned work buffer of dyn_*_work_floats floats that any number of
 * blocks may share (it holds nothing between calls). Nothing allocates.
 *
 * The block input inp (N,C) and output out (N,C) are caller-owned and NOT in
 * the arena: the backward needs inp (and for the decoder, enc) unchanged; out
 * is not needed by the backward.
 *
 * Recompute (full activation recomputation): every *_backward takes
 * `recompute`. With recompute = 0 it uses the activations its forward stored
 * in acts. With recompute != 0 it ignores what acts holds and first re-runs
 * the forward from inp (and enc) into acts, then does the backward. So a
 * model in recompute mode keeps only each block's input and can give ALL its
 * blocks one shared activation arena (one block's worth of
 * dyn_*_act_floats instead of one per block): the saving per block is
 * exactly dyn_*_act_floats * 4 bytes. The forward is the same in both modes.
 *
 * Gradients: parameter gradients ACCUMULATE (+=) into the grads struct (so
 * micro-batches accumulate). dinp (N,C) is OVERWRITTEN. The decoder's denc
 * (B*Te, C) ACCUMULATES (+=), since every decoder block adds to the encoder
 * output's gradient. dout is read only. rel-bias gradients ACCUMULATE.
 *
 * Masks: pad positions of the layout produce finite garbage in the per-token
 * parts (norms, MLP) that never reaches real tokens; attention ignores them;
 * give them loss weight 0 and their gradients come out 0.
 *
 * Threads: attention uses dims.nthreads OpenMP threads (its workspace is
 * sized for them), the other kernels the process-wide count; set both with
 * dyn_threads_set (threads.h) to the same value. Same inputs → bit-identical
 * outputs and gradients, whatever the thread count. */
#ifndef DYN_MODEL_BLOCKS_H
#define DYN_MODEL_BLOCKS_H

#include <stddef.h>

#include "model/layers.h" /* defines: kernels, dyn_attn_cfg */
#include "model/layout.h" /* defines: dyn_layout */

/* Shape of one block. GPT-2: HD = C / NH, F = 4C. T5: HD = d_kv (NH*HD may
 * differ from C), F = d_ff. nthreads >= 1. */
typedef struct dyn_block_dims {
    int32_t C;        /* hidden, d_model */
    int32_t NH;       /* heads */
    int32_t HD;       /* head dim, d_kv */
    int32_t F;        /* feed-forward width, d_ff */
    int32_t nthreads; /* OpenMP threads the kernels use; work is sized for it */
} dyn_block_dims;

/* ================= GPT-2 block ==========================================
 *   x1  = x  + proj(attn(ln1(x)))       causal self-attention, scale 1/sqrt(HD)
 *   out = x1 + fcproj(gelu(fc(ln2(x1))))
 * Weights in nn.Linear layout (out, in); HF GPT-2's Conv1D stores the
 * transpose. Order in the flat buffer is the struct order below. */
typedef struct dyn_gpt_block_params {
    float *ln1_w, *ln1_b;   /* (C), (C) */
    float *qkv_w, *qkv_b;   /* (3C, C), (3C): rows q then k then v */
    float *proj_w, *proj_b; /* (C, C), (C) */
    float *ln2_w, *ln2_b;   /* (C), (C) */
    float *fc_w, *fc_b;     /* (F, C), (F) */
    float *fcproj_w, *fcproj_b; /* (C, F), (C) */
} dyn_gpt_block_params;

/* Activations for B rows × T positions, N = B*T. */
typedef struct dyn_gpt_block_acts {
    float *ln1;                 /* (N, C) */
    float *ln1_mean, *ln1_rstd; /* (N), (N) */
    float *qkv;                 /* (N, 3C) */
    float *atty;                /* (N, C) attention output before proj */
    float *att_lse;             /* (B, NH, T) */
    float *x1;                  /* (N, C) residual after attention */
    float *ln2;                 /* (N, C) */
    float *ln2_mean, *ln2_rstd; /* (N), (N) */
    float *fch_dgelu;           /* (N, F) gelu' of the fc output (the
                                   backward needs nothing else of it) */
    float *fch_gelu;            /* (N, F) */
} dyn_gpt_block_acts;

size_t dyn_gpt_block_params_count(dyn_block_dims d);
/* Lay p over flat (dyn_gpt_block_params_count floats); returns floats used. */
size_t dyn_gpt_block_params_layout(dyn_gpt_block_params *p, float *flat, dyn_block_dims d);
size_t dyn_gpt_block_act_floats(dyn_block_dims d, int B, int T);
void dyn_gpt_block_acts_layout(dyn_gpt_block_acts *a, float *arena, dyn_block_dims d, int B, int T);
size_t dyn_gpt_block_work_floats(dyn_block_dims d, int B, int T);
/* out (B*T, C) overwritten; inp (B*T, C); lay has B rows × T. */
void dyn_gpt_block_forward(float *out, const float *inp, const dyn_gpt_block_params *p,
                           dyn_gpt_block_acts *a, const dyn_layout *lay, dyn_block_dims d,
                           float *work);
/* dinp (B*T, C) overwritten; g += parameter grads; dout (B*T, C). */
void dyn_gpt_block_backward(float *dinp, const dyn_gpt_block_params *g, const float *dout,
                            const float *inp, const dyn_gpt_block_params *p,
                            dyn_gpt_block_acts *a, const dyn_layout *lay, dyn_block_dims d,
                            int recompute, float *work);

/* ================= T5 v1.1 encoder block ================================
 *   x1  = x  + o(attn(rms1(x)))      bidirectional, scale 1, rel bias
 *   out = x1 + wo(gelu(wi0 h) * (wi1 h)),  h = rms2(x1)
 * No biases. I = NH*HD. The relative-position bias table rel_bias
 * (NH, DYN_T5_NUM_BUCKETS), bidirectional buckets, belongs to the first
 * encoder layer in T5 and is shared by all encoder blocks: every block
 * takes the same table and its gradient pointer (+=). */
typedef struct dyn_t5_enc_params {
    float *ln1_w;          /* (C) */
    float *q_w, *k_w, *v_w; /* (I, C) each, consecutive: one (3I, C) matrix */
    float *o_w;            /* (C, I) */
    float *ln2_w;          /* (C) */
    float *wi0_w, *wi1_w;  /* (F, C) each, consecutive: one (2F, C) matrix */
    float *wo_w;           /* (C, F) */
} dyn_t5_enc_params;

typedef struct dyn_t5_enc_acts {
    float *ln1, *ln1_rstd; /* (N, C), (N) */
    float *qkv;            /* (N, 3I) */
    float *atty;           /* (N, I) */
    float *att_lse;        /* (B, NH, T) */
    float *x1;             /* (N, C) */
    float *ln2, *ln2_rstd; /* (N, C), (N) */
    float *h;              /* (N, 2F) [wi0 | wi1] outputs */
    float *g;              /* (N, F) gated GELU */
} dyn_t5_enc_acts;

size_t dyn_t5_enc_params_count(dyn_block_dims d);
size_t dyn_t5_enc_params_layout(dyn_t5_enc_params *p, float *flat, dyn_block_dims d);
size_t dyn_t5_enc_act_floats(dyn_block_dims d, int B, int T);
void dyn_t5_enc_acts_layout(dyn_t5_enc_acts *a, float *arena, dyn_block_dims d, int B, int T);
size_t dyn_t5_enc_work_floats(dyn_block_dims d, int B, int T);
/* out, inp (B*T, C); rel_bias (NH, DYN_T5_NUM_BUCKETS) or NULL (no bias). */
void dyn_t5_enc_forward(float *out, const float *inp, const dyn_t5_enc_params *p,
                        const float *rel_bias, dyn_t5_enc_acts *a, const dyn_layout *lay,
                        dyn_block_dims d, float *work);
/* dinp overwritten; g +=; drel_bias (NH, buckets) += (may be NULL). */
void dyn_t5_enc_backward(float *dinp, const dyn_t5_enc_params *g, float *drel_bias,
                         const float *dout, const float *inp, const dyn_t5_enc_params *p,
                         const float *rel_bias, dyn_t5_enc_acts *a, const dyn_layout *lay,
                         dyn_block_dims d, int recompute, float *work);

/* ================= T5 v1.1 decoder block ================================
 *   x1  = x  + o(attn_causal(rms1(x)))              scale 1, rel bias (causal buckets)
 *   x2  = x1 + co(cross_attn(q = cq(rms2(x1)), k,v = ck,cv(enc)))  scale 1, no bias
 *   out = x2 + wo(gelu(wi0 h) * (wi1 h)),  h = rms3(x2)
 * Decoder rows Bd = B of layout dlay (Td positions), encoder layout elay
 * (B rows × Te); decoder segment i attends encoder segment i. enc is the
 * encoder stack's final (normalised) output (B*Te, C). rel_bias is the
 * decoder stack's shared table (NH, DYN_T5_NUM_BUCKETS), causal buckets. */
typedef struct dyn_t5_dec_params {
    float *ln1_w;                 /* (C) */
    float *q_w, *k_w, *v_w;       /* (I, C) each, consecutive (3I, C) */
    float *o_w;                   /* (C, I) */
    float *ln2_w;                 /* (C) */
    float *cq_w;                  /* (I, C) cross-attention query */
    float *ck_w, *cv_w;           /* (I, C) each, consecutive (2I, C), applied to enc */
    float *co_w;                  /* (C, I) */
    float *ln3_w;                 /* (C) */
    float *wi0_w, *wi1_w;         /* (F, C) each, consecutive (2F, C) */
    float *wo_w;                  /* (C, F) */
} dyn_t5_dec_params;

typedef struct dyn_t5_dec_acts {
    float *ln1, *ln1_rstd; /* (Nd, C), (Nd) */
    float *qkv;            /* (Nd, 3I) */
    float *sa_y;           /* (Nd, I) */
    float *sa_lse;         /* (B, NH, Td) */
    float *x1;             /* (Nd, C) */
    float *ln2, *ln2_rstd; /* (Nd, C), (Nd) */
    float *cq;             /* (Nd, I) */
    float *ckv;            /* (Ne, 2I) */
    float *ca_y;           /* (Nd, I) */
    float *ca_lse;         /* (B, NH, Td) */
    float *x2;             /* (Nd, C) */
    float *ln3, *ln3_rstd; /* (Nd, C), (Nd) */
    float *h;              /* (Nd, 2F) */
    float *g;              /* (Nd, F) */
} dyn_t5_dec_acts;

size_t dyn_t5_dec_params_count(dyn_block_dims d);
size_t dyn_t5_dec_params_layout(dyn_t5_dec_params *p, float *flat, dyn_block_dims d);
size_t dyn_t5_dec_act_floats(dyn_block_dims d, int B, int Td, int Te);
void dyn_t5_dec_acts_layout(dyn_t5_dec_acts *a, float *arena, dyn_block_dims d, int B, int Td,
                            int Te);
size_t dyn_t5_dec_work_floats(dyn_block_dims d, int B, int Td, int Te);
/* out, inp (B*Td, C); enc (B*Te, C); rel_bias or NULL. */
void dyn_t5_dec_forward(float *out, const float *inp, const float *enc,
                        const dyn_t5_dec_params *p, const float *rel_bias, dyn_t5_dec_acts *a,
                        const dyn_layout *dlay, const dyn_layout *elay, dyn_block_dims d,
                        float *work);
/* dinp (B*Td, C) overwritten; denc (B*Te, C) += (may be NULL); g +=;
 * drel_bias += (may be NULL). */
void dyn_t5_dec_backward(float *dinp, float *denc, const dyn_t5_dec_params *g, float *drel_bias,
                         const float *dout, const float *inp, const float *enc,
                         const dyn_t5_dec_params *p, const float *rel_bias, dyn_t5_dec_acts *a,
                         const dyn_layout *dlay, const dyn_layout *elay, dyn_block_dims d,
                         int recompute, float *work);

/* ================= Llama-family block ===================================
 *   x1  = x  + o(attn(rope(q), rope(k), v))   q,k,v = (q|k|v)(rms1(x)) [+ bias]
 *   out = x1 + down(silu(gate h) * (up h)),    h = rms2(x1)
 * RMSNorm with the config's epsilon; causal attention with scale
 * 1/sqrt(HD); grouped-query attention: k and v have KVH heads (dividing
 * NH), query head j uses k/v head j / (NH/KVH) (Hugging Face's repeat_kv);
 * rotary embedding (layers.h "rotary position embedding") on q and k by
 * each token's position id, which restarts at 0 in every document of a
 * packed document-masked row (dyn_layout_positions). No biases except the
 * optional q/k/v ones (Qwen2). I = NH*HD, KV = KVH*HD, QKV = I + 2 KV.
 * Hugging Face names in the model: input_layernorm, self_attn.{q,k,v,o}_proj,
 * post_attention_layernorm, mlp.{gate,up,down}_proj. */
typedef struct dyn_llama_dims {
    dyn_block_dims b; /* C, NH, HD (even), F = intermediate_size, nthreads */
    int32_t KVH;      /* key/value heads, 1 <= KVH, NH % KVH == 0 */
    int32_t qkv_bias; /* 1: q/k/v projections have biases (Qwen2) */
    float eps;        /* RMSNorm epsilon (rms_norm_eps) */
} dyn_llama_dims;

/* The rotary tables and the position ids of one micro-batch. */
typedef struct dyn_rope {
    int32_t P;          /* positions the tables cover */
    const float *cos_t; /* (P, HD/2) dyn_rope_tables */
    const float *sin_t; /* (P, HD/2) */
    const int32_t *pos; /* (B*T) position id per flat position, each in [0, P) */
} dyn_rope;

typedef struct dyn_llama_block_params {
    float *ln1_w;           /* (C) input_layernorm */
    float *q_w, *k_w, *v_w; /* (I, C), (KV, C), (KV, C) consecutive: one (QKV, C) matrix */
    float *q_b, *k_b, *v_b; /* (I), (KV), (KV) consecutive; NULL without qkv_bias */
    float *o_w;             /* (C, I) */
    float *ln2_w;           /* (C) post_attention_layernorm */
    float *gate_w, *up_w;   /* (F, C) each, consecutive: one (2F, C) matrix */
    float *down_w;          /* (C, F) */
} dyn_llama_block_params;

typedef struct dyn_llama_block_acts {
    float *ln1, *ln1_rstd; /* (N, C), (N) */
    float *qkv;            /* (N, QKV) q and k after the rotation */
    float *atty;           /* (N, I) */
    float *att_lse;        /* (B, NH, T) */
    float *x1;             /* (N, C) */
    float *ln2, *ln2_rstd; /* (N, C), (N) */
    float *h;              /* (N, 2F) [gate | up] outputs */
    float *g;              /* (N, F) silu(gate) * up */
} dyn_llama_block_acts;

/* Split backward (below): dY of every linear and norm. */
typedef struct dyn_llama_block_dy {
    float *dout; /* (N, C) dY of down */
    float *dh;   /* (N, 2F) dY of [gate | up] */
    float *dln2; /* (N, C) */
    float *dx1;  /* (N, C) dY of o */
    float *dqkv; /* (N, QKV) dY of q|k|v (before the rotation) */
    float *dln1; /* (N, C) */
} dyn_llama_block_dy;

size_t dyn_llama_block_params_count(dyn_llama_dims d);
size_t dyn_llama_block_params_layout(dyn_llama_block_params *p, float *flat, dyn_llama_dims d);
size_t dyn_llama_block_act_floats(dyn_llama_dims d, int B, int T);
void dyn_llama_block_acts_layout(dyn_llama_block_acts *a, float *arena, dyn_llama_dims d, int B, int T);
size_t dyn_llama_block_work_floats(dyn_llama_dims d, int B, int T);
/* out (B*T, C) overwritten; inp (B*T, C); rope->pos (B*T). */
void dyn_llama_block_forward(float *out, const float *inp, const dyn_llama_block_params *p,
                             const dyn_rope *rope, dyn_llama_block_acts *a, const dyn_layout *lay,
                             dyn_llama_dims d, float *work);
/* dinp (B*T, C) overwritten; g += parameter grads; dout (B*T, C). */
void dyn_llama_block_backward(float *dinp, const dyn_llama_block_params *g, const float *dout,
                              const float *inp, const dyn_llama_block_params *p,
                              const dyn_rope *rope, dyn_llama_block_acts *a,
                              const dyn_layout *lay, dyn_llama_dims d, int recompute, float *work);
/* dy floats: N (4C + 2F + QKV). */
size_t dyn_llama_block_dy_floats(dyn_llama_dims d, const dyn_layout *lay);
void dyn_llama_block_dy_layout(dyn_llama_block_dy *k, float *arena, dyn_llama_dims d,
                               const dyn_layout *lay);
void dyn_llama_block_backward_input(float *dinp, dyn_llama_block_dy *k, const float *dout,
                                    const float *inp, const dyn_llama_block_params *p,
                                    const dyn_rope *rope, dyn_llama_block_acts *a,
                                    const dyn_layout *lay, dyn_llama_dims d, int recompute,
                                    float *work);
void dyn_llama_block_backward_weight(const dyn_llama_block_params *g, const dyn_llama_block_dy *k,
                                     const float *inp, const dyn_llama_block_acts *a,
                                     const dyn_layout *lay, dyn_llama_dims d);
/* 3 × forward matmul FLOPs, full s×s attention:
 *   3 × (2N·C·QKV + 2N·I·C + 6N·C·F + 4·B·T²·I). */
double dyn_llama_block_flops(dyn_llama_dims d, int B, int T);

/* ================= split backward (zero-bubble B and W) ================
 * A zero-bubble schedule runs a block's backward in two halves at different
 * times. *_backward_input (B) computes dinp (and the decoder's denc) only,
 * and keeps in a caller-owned "dy" arena what the weight gradients need
 * beyond the stored activations: the output gradient dY of every linear and
 * norm of the block, and T5's relative-bias partial sums. *_backward_weight
 * (W) later accumulates (+=) every parameter gradient of the block from dY
 * and the activations: dW += dY^T X, bias and norm-gain reductions. B then W
 * gives bit-identical dinp, denc and parameter gradients to the fused
 * *_backward (same operations in the same order; tests/test_blocks.c).
 *
 * Between B and W nothing may overwrite acts, inp, enc or the dy arena. With
 * recompute != 0, B re-runs the forward into acts first, as the fused
 * backward does; W reads those recomputed activations, so a model running
 * recompute must give each block its own acts until its W (it can no longer
 * share one region between blocks). work: the same as the fused backward's.
 * dy floats per block (N = B*T rows, GPT I = C):
 *   GPT:     N (7C + F)
 *   encoder: N (4C + 3I + 2F) + bias items
 *   decoder: Nd (6C + 4I + 2F) + Ne 2I + bias items
 * where bias items = segments × NH × 32 (dyn_attention_rel_items_floats). */
typedef struct dyn_gpt_block_dy {
    float *dout; /* (N, C) block output gradient = dY of fcproj */
    float *dfch; /* (N, F) dY of fc (after the GELU backward) */
    float *dln2; /* (N, C) gradient of ln2's output */
    float *dx1;  /* (N, C) gradient of x1 = dY of proj */
    float *dqkv; /* (N, 3C) dY of qkv */
    float *dln1; /* (N, C) gradient of ln1's output */
} dyn_gpt_block_dy;

size_t dyn_gpt_block_dy_floats(dyn_block_dims d, const dyn_layout *lay);
void dyn_gpt_block_dy_layout(dyn_gpt_block_dy *k, float *arena, dyn_block_dims d,
                             const dyn_layout *lay);
/* B: dinp (B*T, C) overwritten; k filled; no parameter gradient touched. */
void dyn_gpt_block_backward_input(float *dinp, dyn_gpt_block_dy *k, const float *dout,
                                  const float *inp, const dyn_gpt_block_params *p,
                                  dyn_gpt_block_acts *a, const dyn_layout *lay, dyn_block_dims d,
                                  int recompute, float *work);
/* W: g += every parameter gradient of the block. */
void dyn_gpt_block_backward_weight(const dyn_gpt_block_params *g, const dyn_gpt_block_dy *k,
                                   const float *inp, const dyn_gpt_block_acts *a,
                                   const dyn_layout *lay, dyn_block_dims d);

typedef struct dyn_t5_enc_dy {
    float *dout;  /* (N, C) dY of wo */
    float *dh;    /* (N, 2F) dY of [wi0 | wi1] */
    float *dln2;  /* (N, C) */
    float *dx1;   /* (N, C) dY of o */
    float *dqkv;  /* (N, 3I) */
    float *dln1;  /* (N, C) */
    float *drel;  /* bias items: per (segment, head) bucket sums */
} dyn_t5_enc_dy;

size_t dyn_t5_enc_dy_floats(dyn_block_dims d, const dyn_layout *lay);
void dyn_t5_enc_dy_layout(dyn_t5_enc_dy *k, float *arena, dyn_block_dims d, const dyn_layout *lay);
void dyn_t5_enc_backward_input(float *dinp, dyn_t5_enc_dy *k, const float *dout,
                               const float *inp, const dyn_t5_enc_params *p,
                               const float *rel_bias, dyn_t5_enc_acts *a, const dyn_layout *lay,
                               dyn_block_dims d, int recompute, float *work);
/* drel_bias += (may be NULL: the bias gradient is dropped, as in the fused
 * backward). */
void dyn_t5_enc_backward_weight(const dyn_t5_enc_params *g, float *drel_bias,
                                const dyn_t5_enc_dy *k, const float *inp,
                                const dyn_t5_enc_acts *a, const dyn_layout *lay,
                                dyn_block_dims d);

typedef struct dyn_t5_dec_dy {
    float *dout;  /* (Nd, C) dY of wo */
    float *dh;    /* (Nd, 2F) */
    float *dln3;  /* (Nd, C) */
    float *dx2;   /* (Nd, C) dY of co */
    float *dcq;   /* (Nd, I) dY of cq */
    float *dckv;  /* (Ne, 2I) dY of [ck | cv] */
    float *dln2;  /* (Nd, C) */
    float *dx1;   /* (Nd, C) dY of o */
    float *dqkv;  /* (Nd, 3I) */
    float *dln1;  /* (Nd, C) */
    float *drel;  /* self-attention bias items */
} dyn_t5_dec_dy;

size_t dyn_t5_dec_dy_floats(dyn_block_dims d, const dyn_layout *dlay, const dyn_layout *elay);
void dyn_t5_dec_dy_layout(dyn_t5_dec_dy *k, float *arena, dyn_block_dims d,
                          const dyn_layout *dlay, const dyn_layout *elay);
/* B: dinp overwritten, denc += (may be NULL). */
void dyn_t5_dec_backward_input(float *dinp, float *denc, dyn_t5_dec_dy *k, const float *dout,
                               const float *inp, const float *enc, const dyn_t5_dec_params *p,
                               const float *rel_bias, dyn_t5_dec_acts *a,
                               const dyn_layout *dlay, const dyn_layout *elay, dyn_block_dims d,
                               int recompute, float *work);
void dyn_t5_dec_backward_weight(const dyn_t5_dec_params *g, float *drel_bias,
                                const dyn_t5_dec_dy *k, const float *inp, const float *enc,
                                const dyn_t5_dec_acts *a, const dyn_layout *dlay,
                                const dyn_layout *elay, dyn_block_dims d);

/* FLOPs of one forward+backward (3 × forward matmul FLOPs, full s×s
 * attention counted as in the issue) — for benchmarks:
 *   GPT:  3 × (24·B·T·C² + 4·B·T²·C)            (F = 4C, I = C)
 *   T5 decoder: see docs/architecture.md "Model layers". */
double dyn_gpt_block_flops(int B, int T, int C);
double dyn_t5_dec_flops(dyn_block_dims d, int B, int Td, int Te);

#endif
