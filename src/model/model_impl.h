/* model_impl.h — the inside of dyn_model and dyn_model_acts, shared by
 * model.c (common parts), stage.c, gpt.c, t5.c, llama.c and checkpoint.c.
 * Not a public header. */
#ifndef DYN_MODEL_MODEL_IMPL_H
#define DYN_MODEL_MODEL_IMPL_H

#include "model/blocks.h" /* defines: block params/acts, dyn_block_dims */
#include "model/model.h"

typedef union model_block_acts {
    dyn_gpt_block_acts gpt;
    dyn_t5_enc_acts enc;
    dyn_t5_dec_acts dec;
    dyn_llama_block_acts llama;
} model_block_acts;

typedef union model_block_dy {
    dyn_gpt_block_dy gpt;
    dyn_t5_enc_dy enc;
    dyn_t5_dec_dy dec;
    dyn_llama_block_dy llama;
} model_block_dy;

struct dyn_model {
    dyn_model_config cfg;
    dyn_block_dims dims;
    int L; /* layers in the ordered list */
    size_t n_params;
    float *params, *grads, *m1, *m2; /* one allocation each, n_params floats */
    dyn_param_tensor *tensors;
    float *init_std; /* per tensor: > 0 normal std, 0 zeros, -1 ones (creation only) */
    int n_tensors, cap_tensors;
    int64_t step;
    dyn_model_specials sp; /* the vocabulary's special ids (dyn_model_set_specials) */
    void (*progress)(void *ctx); /* dyn_model_set_progress: called between layers */
    void *progress_ctx;
    /* Layers held: [0, L) for a full model, the stage's range for a stage
     * model (dyn_model_create_stage); n_owned floats of owned tensors come
     * first in the buffers, shared copies after them. */
    int first, last;
    size_t n_owned;
    /* GPT */
    float *wte, *wpe, *lnf_w, *lnf_b;
    dyn_gpt_block_params *gp, *gg; /* (n_layers) over params / grads */
    /* T5 */
    float *shared, *enc_rel, *dec_rel, *enc_lnf, *dec_lnf, *lm_head;
    dyn_t5_enc_params *ep, *eg; /* (n_layers) */
    dyn_t5_dec_params *dp, *dg; /* (n_dec_layers) */
    /* Llama (lm_head: the T5 field above; with tied embeddings it is embed) */
    float *embed, *norm_w;
    float *rope_cos, *rope_sin;    /* (max_seqlen, head_dim/2) rotary tables */
    dyn_llama_block_params *lp, *lg; /* (n_layers) */
};

struct dyn_model_acts {
    float *arena;
    size_t cap;    /* floats allocated */
    size_t stored; /* floats holding activations kept for the backward */
    int L;         /* length of the arrays below */
    float **hid;   /* (L+1) layer inputs (GPT hidden; T5 encoder or decoder hidden) */
    model_block_acts *blk; /* (L) per block layer (or all sharing one in recompute) */
    float *encout, *enc_rstd; /* T5: normalised encoder output (N,C), rstd (N) */
    float *head_ln, *head_mean, *head_rstd, *head_lse, *head_losses; /* (No,C), (No) x4 */
    int32_t *pos;  /* (N) GPT and Llama position ids */
    float *work;   /* scratch shared by all layers */
    float *d0, *d1; /* (max(N,Nd), C) gradient ping-pong */
    float *denc;   /* (N, C) T5 encoder-output gradient accumulator */
    /* What the last forward ran, checked by the backward. */
    int fwd_first, fwd_last, fwd_recompute, fwd_done;
    const dyn_model_microbatch *fwd_mb;
    /* Split backward: what the input-gradient half (B) keeps for the
     * weight-gradient half (W), in a second allocation grown like the arena
     * (the arena itself cannot grow while it holds stored activations). */
    float *keep;
    size_t keep_cap;        /* floats allocated */
    size_t kept;            /* floats B keeps until W (0 when none pending) */
    model_block_dy *dy;     /* (L) per block layer: output gradients of its linears and norms */
    model_block_acts *wblk; /* (L) recompute: each block's recomputed activations */
    float *keep_emb;        /* gradient entering layer 0's output (N,C) */
    float *keep_enc_norm;   /* T5: gradient of the normalised encoder output (N,C) */
    float *keep_dec_emb;    /* T5: gradient of the decoder embedding (Nd,C) */
    float *keep_head;       /* gradient of the final norm's output (No,C) */
    int w_pending, w_first, w_last;
    float w_dloss;
    const dyn_model_microbatch *w_mb;
};

/* Between two layers of a forward or backward: let the caller make
 * progress elsewhere (the runtime tests its MPI requests here). */
static inline void model_progress(const dyn_model *m)
{
    if (m->progress) m->progress(m->progress_ctx);
}

/* gradient twin of a parameter pointer */
static inline float *model_grad_of(const dyn_model *m, const float *p)
{
    return m->grads + (p - m->params);
}

/* Creation steps shared by dyn_model_create (model.c) and
 * dyn_model_create_stage (stage.c): a shell with the whole tensor table of
 * cfg and no buffers (first, last = 0, L); the four flat buffers for m's
 * table and the block structs over them; filling m's tensors with the
 * values the whole model's table tmpl gives them from seed (tmpl may be m). */
dyn_model *model_table_create(const dyn_model_config *cfg, dyn_error *err);
dyn_status model_alloc_bind(dyn_model *m, dyn_error *err);
void model_init(dyn_model *m, const dyn_model *tmpl, uint64_t seed);

/* Register a tensor at the next offset (table built before allocation). */
dyn_status model_add_tensor(dyn_model *m, const char *name, int ndim, int64_t d0, int64_t d1, int hf_t,
                            int decay, float init_std, int layer, dyn_error *err);
/* Offset of tensor `name` (must exist). */
float *model_tensor_ptr(const dyn_model *m, const char *name);
/* The tensor named prefix + block + "." + suffix (e.g. "h.", 3,
 * "ln_1.weight"), or NULL where this model does not hold it (a stage model
 * without that block): the one name rule the binds of gpt.c and t5.c use. */
float *model_block_tensor_ptr(const dyn_model *m, const char *prefix, int block, const char *suffix);

/* Bump allocation over the arena: with base == NULL only counts. Sizes are
 * rounded up to 16 floats (64 bytes) so every tensor starts cache aligned. */
typedef struct model_bump {
    float *base;
    size_t used;
} model_bump;
static inline float *model_take(model_bump *b, size_t n)
{
    float *p = b->base ? b->base + b->used : NULL;
    b->used += (n + 15u) & ~(size_t)15u;
    return p;
}

/* One architecture's parts (gpt.c, t5.c), behind one table each so that
 * model.c and stage.c dispatch once (model_arch_of) instead of testing the
 * kind at every call. build registers the tensor table; bind (after
 * allocation) lays the block structs over the held tensors (a stage model
 * binds only its blocks); borrows lists the shared tensors layer l uses but
 * does not own (names, at most 2), returning their count. carve and
 * keep_carve lay out (base NULL: only count) the arenas of the forward and
 * of the split backward's B for layers [first, last); forward, backward
 * (fused, or B) and backward_weight (W) run that range (model.h has the
 * contract). */
typedef struct model_arch {
    dyn_status (*build)(dyn_model *m, dyn_error *err);
    dyn_status (*bind)(dyn_model *m, dyn_error *err);
    int (*borrows)(const dyn_model_config *c, int l, const char **names);
    size_t (*carve)(const dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                    int recompute, float *base, size_t *stored);
    size_t (*boundary_floats)(const dyn_model *m, int l, const dyn_model_microbatch *mb);
    dyn_status (*forward)(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                          const float *in, float *out, int recompute, double *loss_sum, dyn_error *err);
    /* split == 0: the fused backward; split != 0: the split's B. */
    void (*backward)(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                     const float *dout, float *din, float dloss, int split);
    size_t (*keep_carve)(const dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                         int recompute, float *base);
    void (*backward_weight)(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last);
} model_arch;

extern const model_arch model_arch_gpt;   /* gpt.c */
extern const model_arch model_arch_t5;    /* t5.c */
extern const model_arch model_arch_llama; /* llama.c */

/* kind is checked by model_table_create before any dispatch. */
static inline const model_arch *model_arch_of(dyn_model_kind kind)
{
    return kind == DYN_MODEL_GPT ? &model_arch_gpt : kind == DYN_MODEL_T5 ? &model_arch_t5 : &model_arch_llama;
}

#endif
