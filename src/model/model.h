/* model.h — whole GPT-2, T5 v1.1 and Llama-family models assembled from the blocks of
 * blocks.h: parameters, micro-batches, forward/backward by pipeline-stage
 * layer ranges, the AdamW step and checkpoints.
 *
 * Vocabulary: any (cfg.vocab ids); its special ids are a dyn_model_specials
 * the model carries (below). Without a tokenizer: bytes 0..255 plus four
 * special tokens (DYN_TOK_*); cfg.vocab may be larger (unused ids).
 *
 * Dimensions as in layers.h: B rows, T positions per row (GPT: whole
 * sequences; T5: encoder side), Td decoder positions (T5), N = B*T,
 * Nd = B*Td, C hidden, V vocabulary.
 *
 * Parameters (llm.c style): parameters, gradients and the two AdamW moments
 * are each ONE flat float allocation made at creation, carved into named
 * tensors (dyn_model_tensor) in LAYER ORDER, so the parameters of a pipeline
 * stage are one contiguous slice. Names are the Hugging Face ones
 * (checkpoint.c writes them unchanged).
 *
 * Layers: the model is an ordered list of layers, and a pipeline stage is a
 * range [first, last) of it:
 *   GPT: 0 embedding (wte, wpe) | 1..n blocks | n+1 head (ln_f + LM head
 *        tied to wte)
 *   Llama: 0 embedding (model.embed_tokens) | 1..n decoder layers
 *        (model.layers.*) | n+1 head (model.norm + lm_head, or the tied
 *        embed_tokens when cfg.tie_embeddings)
 *   T5:  0 encoder embedding (shared) | 1..ne encoder blocks (block 0 owns
 *        the encoder's relative-bias table) | ne+1 encoder final RMSNorm |
 *        ne+2 decoder embedding (shared, no own parameters) | ne+3..ne+2+nd
 *        decoder blocks (block 0 owns the decoder's table) | ne+nd+3 head
 *        (final RMSNorm + untied lm_head)
 * The boundary activation entering layer l (dyn_model_boundary_floats):
 *   GPT, Llama: hidden (N,C) for 1 <= l <= n+1;
 *   T5:  encoder hidden (N,C) for 1 <= l <= ne+2 (for l = ne+2 it is the
 *        normalised encoder output); [encoder output (N,C) | decoder hidden
 *        (Nd,C)] concatenated for ne+3 <= l <= ne+nd+3;
 *   nothing for l = 0 (tokens come from the micro-batch) and for l = L (the
 *   head ends in the loss).
 * Shared tensors (GPT's tied wte, T5's shared embedding and per-stack bias
 * tables) live in the flat buffer of the layer that owns them; in a full
 * model a layer that uses them elsewhere reads and accumulates into that
 * same place. A stage-only model (dyn_model_create_stage) holds a copy
 * instead, and a distributed runtime sums those gradients across the stages
 * holding them (dyn_model_shared_tensors), as Megatron does for tied
 * embeddings.
 *
 * Loss normalisation: forward returns the SUM of target-token cross
 * entropies of the micro-batch; backward takes dloss, the scale of that sum,
 * normally 1 / (target tokens of the whole global batch) — so splitting a
 * global batch into micro-batches never changes the accumulated gradient.
 *
 * Activations of one micro-batch in flight live in a dyn_model_acts arena,
 * sized from the micro-batch shape and the layer range, grown only when a
 * larger shape arrives. A runtime keeps one per micro-batch in flight. With
 * full recomputation the arena keeps only each layer's input and one block's
 * activations (the backward re-runs each block's forward first). The split
 * backward (zero-bubble B and W halves) keeps what W needs in a second
 * buffer of the same acts from B until W (dyn_model_acts_kept_bytes).
 *
 * Determinism: same seed, inputs and thread count → bit-identical results. */
#ifndef DYN_MODEL_MODEL_H
#define DYN_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "dynapipe/common.h"
#include "model/layout.h" /* defines: dyn_layout, dyn_layout_kind */
#include "model/optim.h"  /* defines: dyn_adamw_config */
#include "util/rng.h"     /* defines: dyn_rng */

/* ---- vocabulary --------------------------------------------------------- */
/* The byte vocabulary's special ids (a model without a tokenizer). */
#define DYN_TOK_PAD 256 /* fills pad positions (never predicted) */
#define DYN_TOK_BOS 257 /* T5 decoder start token */
#define DYN_TOK_EOS 258 /* ends a target */
#define DYN_TOK_SEP 259 /* separates fields inside an input */
#define DYN_VOCAB_BYTES 260

/* The special ids a model's micro-batches and generation use: the one place
 * the vocabulary's conventions enter src/model. A model starts with the byte
 * vocabulary's (dyn_model_specials_bytes); a run with a tokenizer sets the
 * tokenizer's (the runtime converts the data layer's dyn_corpus_specials).
 * Every id is in [0, vocab) except eos, which may be -1 (none: generation
 * runs to its length cap). bos is informational (the data carries it). */
typedef struct dyn_model_specials {
    int32_t pad;           /* fills pad positions (weight 0, any id the embedding has) */
    int32_t bos;           /* -1 when none */
    int32_t eos;           /* generation stops after it; -1 when none */
    int32_t decoder_start; /* T5: the first decoder input */
} dyn_model_specials;

/* {pad 256, bos -1, eos 258, decoder_start 257}: today's byte vocabulary. */
dyn_model_specials dyn_model_specials_bytes(void);

/* A small model for tests and the toy task: kind GPT, T5 or Llama, n_layers
 * blocks (T5: n_layers encoder and n_layers decoder blocks), hidden C, heads
 * NH (head_dim C/NH), ffn 4C (GPT, as GPT-2) or 2C (T5 and Llama: the gated
 * FFN has two input matrices, so 2C keeps its size near GPT's), vocabulary
 * DYN_VOCAB_BYTES, max_seqlen positions. Llama: NH/2 key/value heads when NH
 * is even (else NH), rope_theta 10000, rms_eps 1e-5, no rope scaling,
 * untied head, no q/k/v biases. Larger shapes: the presets of
 * dynapipe/model_config.h. */
dyn_model_config dyn_model_config_tiny(dyn_model_kind kind, int32_t n_layers, int32_t hidden,
                                       int32_t heads, int32_t max_seqlen);

/* ---- micro-batches ------------------------------------------------------ */

/* The tokens of one sample: GPT and Llama see input followed by target and
 * learn to predict the target; T5 encodes input and decodes target. */
typedef struct dyn_token_sample {
    const int32_t *input;
    int32_t input_len; /* >= 1 */
    const int32_t *target;
    int32_t target_len; /* >= 1 */
} dyn_token_sample;

/* A micro-batch placed in a layout and turned into model inputs.
 *   GPT, Llama (kind != T5): the sequence of a sample is input ++ target (len = in + tgt) at
 *        positions [start, start+len) of its row; the position holding
 *        sequence token p predicts token p+1, and only predictions of target
 *        tokens count (in-1 .. len-2): weight 1, target id = the next token.
 *   T5:  the encoder layout holds inputs, the decoder layout (same sample
 *        order) targets; decoder tokens are [decoder start] + target[:-1];
 *        every decoder position predicts its target token.
 * Pad positions hold the pad id (dyn_model_specials), weight 0, sample_of -1. */
typedef struct dyn_model_microbatch {
    dyn_model_kind kind;
    dyn_layout *lay;       /* GPT sequences, or T5 encoder inputs: B rows × T */
    dyn_layout *dec_lay;   /* T5 decoder: B rows × Td; NULL for GPT */
    int32_t *tokens;       /* (B*T) */
    int32_t *dec_tokens;   /* (B*Td) T5 only */
    int32_t *targets;      /* (B*T) GPT, (B*Td) T5: id to predict, 0 where weight 0 */
    float *weights;        /* same size: 1 at counted predictions, else 0 */
    int32_t *sample_of;    /* same size: sample index of a counted prediction, else -1 */
    int32_t n_samples;
    int64_t n_target_tokens; /* sum of target_len = sum of weights */
} dyn_model_microbatch;

/* Padded rows: sample i alone in row i, rows as long as the longest sample
 * (GPT: in+tgt; T5: inputs and targets padded separately). */
dyn_model_microbatch *dyn_model_microbatch_create_padded(dyn_model_kind kind, const dyn_token_sample *s,
                                             int32_t n, dyn_error *err);
/* The same with rows of T positions (T5 decoder: Td), at least the longest
 * sample; 0 = the longest (what dyn_model_microbatch_create_padded does).
 * A planner pads lengths up (multiples of 8), and the runtime builds the
 * micro-batch at exactly the planned shape so boundary sizes match the
 * plan's. */
dyn_model_microbatch *dyn_model_microbatch_create_padded_to(dyn_model_kind kind, const dyn_token_sample *s,
                                                            int32_t n, int32_t T, int32_t Td, dyn_error *err);
/* Packed rows: row b holds the next row_counts[b] samples back to back.
 * docmask != 0: attention within each sample only, positions restart per
 * sample; docmask == 0: classic packing (attention across the row, GPT
 * positions continue). T, Td: row lengths (0 = the longest row). */
dyn_model_microbatch *dyn_model_microbatch_create_packed(dyn_model_kind kind, const dyn_token_sample *s,
                                             int32_t n, const int32_t *row_counts, int32_t B,
                                             int32_t T, int32_t Td, int docmask, dyn_error *err);
/* Any of the forms above with the vocabulary's special ids sp (NULL: the
 * byte vocabulary's, which the forms above use): row_counts NULL gives
 * padded rows (T, Td as dyn_model_microbatch_create_padded_to), else packed
 * rows (as dyn_model_microbatch_create_packed). Pad positions hold sp->pad;
 * T5's decoder input starts with sp->decoder_start. */
dyn_model_microbatch *dyn_model_microbatch_create_ex(const dyn_model_specials *sp, dyn_model_kind kind,
                                                     const dyn_token_sample *s, int32_t n, const int32_t *row_counts,
                                                     int32_t B, int32_t T, int32_t Td, int docmask, dyn_error *err);
void dyn_model_microbatch_free(dyn_model_microbatch *mb);

/* ---- the model ---------------------------------------------------------- */

typedef struct dyn_model dyn_model;

/* One named parameter tensor inside the flat buffers. */
typedef struct dyn_param_tensor {
    char name[96];     /* Hugging Face name, e.g. "h.0.attn.c_attn.weight" */
    int32_t ndim;      /* 1 or 2 */
    int64_t shape[2];  /* our layout (nn.Linear (out, in) for matrices) */
    int32_t hf_transposed; /* 1: Hugging Face stores the 2-D transpose */
    size_t offset;     /* floats from the start of the flat buffer */
    size_t numel;
    int32_t decay;     /* 1: AdamW weight decay applies (matrices) */
    int32_t layer;     /* owning layer index */
    int32_t shared_copy; /* 1: a stage model's copy of a tensor its owning layer (outside the
                          * stage) also holds (dyn_model_create_stage); 0: owned */
} dyn_param_tensor;

/* Build a model of cfg (GPT: n_dec_layers 0, head_dim hidden/heads; T5:
 * any head_dim; Llama: n_dec_layers 0, even head_dim, kv_heads dividing
 * heads, rope_theta and rms_eps > 0, rope_scaling none or llama3 with
 * sensible factors — anything else is refused with a message naming the
 * config.json field) and initialise it from seed:
 *   GPT-2: every weight matrix and embedding N(0, 0.02), the two residual
 *          output projections (attn.c_proj, mlp.c_proj) N(0, 0.02/sqrt(2n)),
 *          biases 0, LayerNorm gains 1;
 *   Llama: as Hugging Face Llama (initializer_range 0.02): every linear
 *          and embed_tokens N(0, 0.02), q/k/v biases 0, RMSNorm gains 1;
 *   T5:    as Hugging Face T5 (initializer_factor 1): shared and lm_head
 *          N(0, 1); q N(0, (C*HD)^-1/2); k, v N(0, C^-1/2); o N(0, (NH*HD)^-1/2);
 *          wi_0, wi_1 N(0, C^-1/2); wo N(0, F^-1/2); relative bias tables
 *          N(0, C^-1/2); RMSNorm gains 1.
 * Gradients and moments start at 0, the step counter at 0. The kernels use
 * 1 OpenMP thread until dyn_model_set_threads; creation does not touch the
 * process-wide OpenMP / OpenBLAS settings. */
dyn_model *dyn_model_create(const dyn_model_config *cfg, uint64_t seed, dyn_error *err);
void dyn_model_free(dyn_model *m);

/* ---- stage-only models (one pipeline stage per rank) ---------------------
 * A model holding only what layers [first, last) need: the tensors those
 * layers own, plus a copy (shared_copy = 1) of each shared tensor they use
 * but do not own:
 *   GPT: wte, when the range holds the head (layer n+1) but not layer 0;
 *   Llama with tied embeddings: model.embed_tokens.weight, likewise;
 *   T5:  shared.weight, when it holds the decoder embedding (ne+2) but not
 *        layer 0; a stack's relative-bias table, when it holds a block of
 *        that stack but not the stack's block 0 (layer 1, resp. ne+3).
 * Every tensor has exactly the values dyn_model_create(cfg, seed) gives it
 * (creation draws the whole model's random stream and keeps the held
 * tensors' part; memory is the stage's only), so a pipeline of stage models
 * starts identical to one full model. Flat buffers: the owned tensors in
 * layer order (one contiguous slice, dyn_model_layer_params), then the
 * shared copies. Layer indices stay global: stage forward/backward, split
 * backward, zero_grad, AdamW and the tensor queries work as on the full
 * model for ranges inside [first, last); other ranges are refused.
 * Training with stage models: after the backward, sum each shared tensor's
 * gradient over the stages holding it (dyn_model_shared_tensors; as
 * Megatron does for tied embeddings) into every holder, then every holder
 * takes the same AdamW step and the copies stay identical. Gradient-norm
 * clipping across stages: dyn_model_grad_sqnorm_owned and
 * dyn_model_adamw_step_norm. */
dyn_model *dyn_model_create_stage(const dyn_model_config *cfg, uint64_t seed, int first, int last,
                                  dyn_error *err);
/* Layers held: [*first, *last) ([0, L) for a full model). */
void dyn_model_stage_range(const dyn_model *m, int *first, int *last);
/* Bytes of parameters + gradients + both AdamW moments held (16 per
 * float held, shared copies included): the figure to set beside a plan's
 * states_mb prediction for the stage. *shared_bytes (may be NULL): the part
 * spent on shared copies. */
size_t dyn_model_state_bytes(const dyn_model *m, size_t *shared_bytes);

/* A tensor held by more than one stage of a split of the layer list. */
typedef struct dyn_shared_tensor {
    char name[96];      /* Hugging Face name */
    int32_t owner;      /* stage whose layers own it */
    int32_t n_holders;  /* stages holding it, owner included (>= 2) */
    int32_t *holders;   /* (n_holders) stage indices, ascending */
} dyn_shared_tensor;
/* For cfg split into n_stages stages at cuts (n_stages + 1 layer indices,
 * cuts[0] = 0 < cuts[1] < ... < cuts[n_stages] = L): every tensor that more
 * than one stage model holds, in table order; *n_out of them (0 and a
 * non-NULL empty array when none). Stage s is layers [cuts[s], cuts[s+1]).
 * NULL and err on a bad config or bad cuts. Free with
 * dyn_model_shared_tensors_free. */
dyn_shared_tensor *dyn_model_shared_tensors(const dyn_model_config *cfg, const int32_t *cuts,
                                            int n_stages, int *n_out, dyn_error *err);
void dyn_model_shared_tensors_free(dyn_shared_tensor *s, int n);

const dyn_model_config *dyn_model_cfg(const dyn_model *m);
/* The special ids m's generation uses (byte vocabulary's until set). set
 * refuses nothing: the caller checks ids against the vocabulary (the data
 * layer does, for a tokenizer). */
const dyn_model_specials *dyn_model_specials_of(const dyn_model *m);
void dyn_model_set_specials(dyn_model *m, const dyn_model_specials *sp);
/* Threads for the kernels: sets the blocks' thread count and, through
 * dyn_threads_set (threads.h), the process-wide OpenMP and OpenBLAS counts.
 * Results are bit-identical for a fixed count (and, as built, across counts:
 * tests/test_threads.c). */
void dyn_model_set_threads(dyn_model *m, int nthreads);

/* fn(ctx) is called before each layer of every forward and backward
 * (fused or split) of m, on the calling thread; NULL: none. The runtime
 * tests its outstanding MPI requests there, so transfers progress during
 * long compute (Open MPI has no progress thread). fn must not call back
 * into m. */
void dyn_model_set_progress(dyn_model *m, void (*fn)(void *ctx), void *ctx);

/* Flat buffers: n floats each (parameters, gradients, AdamW m and v). */
size_t dyn_model_num_params(const dyn_model *m);
float *dyn_model_params(dyn_model *m);
float *dyn_model_grads(dyn_model *m);
float *dyn_model_moment1(dyn_model *m);
float *dyn_model_moment2(dyn_model *m);
/* Named tensors, in flat-buffer order. */
int dyn_model_num_tensors(const dyn_model *m);
const dyn_param_tensor *dyn_model_tensor(const dyn_model *m, int i);
/* Tensor by Hugging Face name, or NULL. */
const dyn_param_tensor *dyn_model_find_tensor(const dyn_model *m, const char *name);
void dyn_model_zero_grad(dyn_model *m);

/* AdamW step counter (number of steps taken; restored by checkpoints). */
int64_t dyn_model_step_count(const dyn_model *m);
void dyn_model_set_step_count(dyn_model *m, int64_t step);

/* Layer list (see the top of this file): L of the whole model (a stage
 * model's too). dyn_model_config_num_layers: the same from the config,
 * before any model exists (GPT and Llama n + 2, T5 ne + nd + 4). */
int dyn_model_num_layers(const dyn_model *m);
int dyn_model_config_num_layers(const dyn_model_config *cfg);
/* The parameters owned by layers [first, last): one contiguous slice
 * [*offset, *offset + *count) of the flat buffers (tensors are stored in
 * layer order), e.g. what a pipeline stage updates and all-reduces. Shared
 * tensors count for their owner only (see the top of this file). */
void dyn_model_layer_params(const dyn_model *m, int first, int last, size_t *offset, size_t *count);

/* Floats of the boundary activation entering layer l (0 <= l <= L) for the
 * shape of mb. 0 for l = 0 and l = L. */
size_t dyn_model_boundary_floats(const dyn_model *m, int l, const dyn_model_microbatch *mb);

/* ---- activations ------------------------------------------------------- */

typedef struct dyn_model_acts dyn_model_acts;
dyn_model_acts *dyn_model_acts_create(dyn_error *err);
void dyn_model_acts_free(dyn_model_acts *a);
/* Bytes of the arena's current allocation, and of the part holding
 * activations stored for the backward (layer inputs and block activations,
 * excluding per-call scratch and gradient buffers) by the last forward. */
size_t dyn_model_acts_capacity_bytes(const dyn_model_acts *a);
size_t dyn_model_acts_stored_bytes(const dyn_model_acts *a);
/* Split backward (below): bytes the input-gradient half keeps for the
 * weight-gradient half, from dyn_model_stage_backward_input until
 * dyn_model_stage_backward_weight (0 otherwise) — on top of the stored
 * bytes, which also stay until W. The buffer holding them is a second
 * allocation of the acts, grown only when a larger shape arrives and kept
 * for reuse (keep_capacity_bytes). */
size_t dyn_model_acts_kept_bytes(const dyn_model_acts *a);
size_t dyn_model_acts_keep_capacity_bytes(const dyn_model_acts *a);

/* ---- forward / backward -------------------------------------------------- */

/* Forward of layers [first, last) for micro-batch mb.
 *   in:  boundary activation entering `first` (NULL when first = 0);
 *   out: boundary entering `last`, overwritten (NULL when last = L);
 *   loss_sum (if last = L and not NULL): sum of target-token losses (nats);
 *   sample_loss (if last = L and not NULL): (mb->n_samples) per-sample sums.
 * recompute != 0: store only layer inputs (full recomputation).
 * Fails (nothing run) on token ids >= vocab, sequences longer than
 * max_seqlen, a micro-batch of the other model kind, or a bad range. */
dyn_status dyn_model_stage_forward(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb,
                                   int first, int last, const float *in, float *out,
                                   int recompute, double *loss_sum, float *sample_loss,
                                   dyn_error *err);
/* Backward of the same range after its forward with the same acts:
 *   dout: gradient of the boundary entering `last` (NULL when last = L;
 *         then dloss scales the loss sum, e.g. 1 / global target tokens);
 *   din:  gradient of the boundary entering `first`, overwritten (NULL when
 *         first = 0).
 * Parameter gradients ACCUMULATE (+=) into dyn_model_grads. */
dyn_status dyn_model_stage_backward(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb,
                                    int first, int last, const float *dout, float *din,
                                    float dloss, dyn_error *err);

/* Split backward for zero-bubble schedules: the same backward as
 * dyn_model_stage_backward in two halves, run at different times.
 *   backward_input ("B"): after the range's forward on acts, computes din
 *     (same arguments and meaning as dyn_model_stage_backward) doing only
 *     the work input gradients need (with recompute, the re-run forward
 *     too), and keeps in acts what the weight gradients need: the output
 *     gradient dY of every linear and norm, the gradient entering each
 *     embedding, T5's bias-table partial sums, and with recompute each
 *     block's recomputed activations (dyn_model_acts_kept_bytes).
 *   backward_weight ("W"): later, on the same acts, mb and range,
 *     ACCUMULATES (+=) every parameter gradient of the range (dW += dY^T X,
 *     bias and norm-gain reductions, embedding scatters; the LM head
 *     recomputes its logits instead of keeping (targets, V) of them) and
 *     releases what B kept.
 * B then W leaves bit-identical din and gradients to the fused backward
 * (tests/test_model_split.c). Between them the acts may not take another
 * forward (refused), and the caller may run other micro-batches' halves on
 * other acts; gradients then accumulate in the order the W halves run. */
dyn_status dyn_model_stage_backward_input(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb,
                                          int first, int last, const float *dout, float *din,
                                          float dloss, dyn_error *err);
dyn_status dyn_model_stage_backward_weight(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb,
                                           int first, int last, dyn_error *err);
/* Bytes backward_input would keep for mb, layers [first, last) and the
 * recompute mode, without running anything (0 for a bad range). */
size_t dyn_model_split_kept_bytes(const dyn_model *m, const dyn_model_microbatch *mb, int first, int last,
                                  int recompute);

/* Whole model = one stage [0, L). */
dyn_status dyn_model_forward(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb,
                             int recompute, double *loss_sum, float *sample_loss, dyn_error *err);
dyn_status dyn_model_backward(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb,
                              float dloss, dyn_error *err);

/* Greedy decoding (generate.c): the whole model m (not a stage) continues
 * prompt input[in_len] (GPT: the sequence so far; T5: the encoder input)
 * one arg-max token at a time into out[max_new], stopping after m's eos
 * (dyn_model_specials_of; kept in out), after max_new tokens, or at
 * max_seqlen.
 * *n_out: tokens written (at least 1). a: any acts (grown as needed).
 * DYN_ERR_INVALID_ARG for max_new < 1 and for a GPT prompt that leaves no
 * room (in_len == max_seqlen), rather than an empty answer. */
dyn_status dyn_model_generate_greedy(dyn_model *m, dyn_model_acts *a, const int32_t *input, int32_t in_len,
                                     int32_t max_new, int32_t *out, int32_t *n_out, dyn_error *err);

/* ---- optimizer ----------------------------------------------------------- */

/* Clip the global gradient norm to max_norm (<= 0: no clipping), then one
 * AdamW step with learning rate lr on every tensor (decay per tensor flag),
 * and increment the step counter. Returns the gradient norm before
 * clipping. Does not zero the gradients. */
double dyn_model_adamw_step(dyn_model *m, float lr, const dyn_adamw_config *cfg, double max_norm);

/* Sum of squared gradients of the OWNED tensors (shared copies excluded),
 * in double: summed over the stages of a pipeline it counts every tensor
 * once, giving the square of the whole model's gradient norm (after the
 * shared gradients were summed). */
double dyn_model_grad_sqnorm_owned(const dyn_model *m);
/* dyn_model_adamw_step for a stage model with the whole model's gradient
 * norm `norm` computed outside (sqrt of the stages' sqnorms): scales the
 * gradients by max_norm / norm when norm > max_norm > 0, then steps every
 * held tensor. On a full model with norm = its own gradient norm it equals
 * dyn_model_adamw_step. */
void dyn_model_adamw_step_norm(dyn_model *m, float lr, const dyn_adamw_config *cfg, double norm,
                               double max_norm);

/* ---- checkpoints (checkpoint.c) ------------------------------------------- */

/* Weights as safetensors with Hugging Face names and shapes (GPT-2 Conv1D
 * matrices and T5 bias tables transposed to HF layout), atomically. A stage
 * model writes the tensors it owns (not its shared copies): one shard of a
 * sharded checkpoint; dyn_model_load (one file, a whole model) refuses stage
 * models, dyn_model_load_index loads any model from shards. */
dyn_status dyn_model_save(const dyn_model *m, const char *path, dyn_error *err);
/* Load weights saved by dyn_model_save (or by Hugging Face for the same
 * config). Every tensor is read and checked into a staging copy first; the
 * model is changed only if all are present with the right dtype and shape. */
dyn_status dyn_model_load(dyn_model *m, const char *path, dyn_error *err);

/* Load every tensor m holds (a stage model: owned tensors and shared
 * copies) from the sharded weights in folder dir: dir/model.safetensors.index.json
 * maps each Hugging Face name to a shard file in dir. All-or-nothing like
 * dyn_model_load; a tensor the map lacks, a shard that is malformed, or a
 * shape that differs is an error naming the file and tensor. */
dyn_status dyn_model_load_index(dyn_model *m, const char *dir, dyn_error *err);

/* One tensor of a sharded-weights index: its Hugging Face name, the shard
 * file (a name inside the folder) and its bytes. */
typedef struct dyn_index_entry {
    const char *name;
    const char *file;
    uint64_t bytes;
} dyn_index_entry;

/* Write dir/model.safetensors.index.json (atomically), the index that
 * dyn_model_load_index reads: {"metadata": {"total_size": the entries'
 * bytes, "format": "pt"}, "weight_map": {name: file, ...}} in entry
 * order. The format is owned here: its writer and its reader. */
dyn_status dyn_model_index_write(const char *dir, const dyn_index_entry *e, int n, dyn_error *err);

/* Training position saved beside the weights. */
typedef struct dyn_train_state {
    int64_t data_cursor; /* next sample / batch index of the data stream */
    dyn_rng rng;         /* the trainer's RNG */
} dyn_train_state;

/* Optimizer companion file (safetensors): "<name>.exp_avg" and
 * "<name>.exp_avg_sq" per parameter tensor (our layout, F32), and metadata
 * dynapipe.step, dynapipe.data_cursor, dynapipe.rng (four hex u64) and
 * dynapipe.n_params. Atomic. */
dyn_status dyn_model_save_train_state(const dyn_model *m, const dyn_train_state *ts,
                                      const char *path, dyn_error *err);
/* Restore moments, step and *ts; all-or-nothing like dyn_model_load. Both
 * work on stage models too (the moments of every tensor held). */
dyn_status dyn_model_load_train_state(dyn_model *m, dyn_train_state *ts, const char *path,
                                      dyn_error *err);

#endif
