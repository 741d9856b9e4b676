/* model.c — what GPT-2, T5 and Llama share: creating the model (tensor table, the
 * four flat buffers, seeded initialisation), the activation arena and the
 * split backward's B-to-W buffer, argument checks and dispatch of stage
 * forward/backward (fused or split), per-sample losses and the AdamW step
 * over all tensors. The architectures are in gpt.c, t5.c and llama.c,
 * stage-only models in stage.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_impl.h"
#include "model/threads.h" /* defines: dyn_threads_set */
#include "util/util.h" /* defines: dyn_calloc, dyn_calloc_huge, DYN_RESERVE */

dyn_model_config dyn_model_config_tiny(dyn_model_kind kind, int32_t n_layers, int32_t hidden, int32_t heads,
                                       int32_t max_seqlen)
{
    dyn_model_config c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.n_layers = n_layers;
    c.n_dec_layers = kind == DYN_MODEL_T5 ? n_layers : 0;
    c.hidden = hidden;
    c.heads = heads;
    c.head_dim = hidden / heads;
    c.ffn = kind == DYN_MODEL_GPT ? 4 * hidden : 2 * hidden;
    c.vocab = DYN_VOCAB_BYTES;
    c.max_seqlen = max_seqlen;
    if (kind == DYN_MODEL_LLAMA) {
        c.kv_heads = heads % 2 == 0 ? heads / 2 : heads; /* grouped-query where it can be */
        c.rope_theta = 10000.0;
        c.rms_eps = 1e-5;
    }
    return c;
}

/* ------------------------------------------------------------ tensor table */

dyn_status model_add_tensor(dyn_model *m, const char *name, int ndim, int64_t d0, int64_t d1, int hf_t, int decay,
                            float init_std, int layer, dyn_error *err)
{
    if (m->n_tensors == m->cap_tensors) {
        size_t c = (size_t)m->cap_tensors, need = c ? c + 1 : 64; /* both grow alike */
        if (DYN_RESERVE(m->tensors, (size_t){c}, need) != 0 || DYN_RESERVE(m->init_std, c, need) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the tensor table");
        m->cap_tensors = (int)c;
    }
    dyn_param_tensor *t = &m->tensors[m->n_tensors];
    memset(t, 0, sizeof *t);
    if ((size_t)snprintf(t->name, sizeof t->name, "%s", name) >= sizeof t->name)
        return dyn_error_set(err, DYN_ERR_INTERNAL, "tensor name too long: %s", name);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim == 2 ? d1 : 0;
    t->hf_transposed = hf_t;
    t->offset = m->n_params;
    t->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    t->decay = decay;
    t->layer = layer;
    m->init_std[m->n_tensors] = init_std;
    m->n_params += t->numel;
    m->n_tensors++;
    return DYN_OK;
}

float *model_tensor_ptr(const dyn_model *m, const char *name)
{
    const dyn_param_tensor *t = dyn_model_find_tensor(m, name);
    return t ? m->params + t->offset : NULL;
}

float *model_block_tensor_ptr(const dyn_model *m, const char *prefix, int block, const char *suffix)
{
    char name[160];
    int n = snprintf(name, sizeof name, "%s%d.%s", prefix, block, suffix);
    return n > 0 && (size_t)n < sizeof name ? model_tensor_ptr(m, name) : NULL;
}

const dyn_param_tensor *dyn_model_find_tensor(const dyn_model *m, const char *name)
{
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    return NULL;
}

/* ------------------------------------------------------------ create/free */

/* The Llama fields: GQA that divides, an even head dim for the rotary
 * pairs, positive theta and epsilon, and a rope_scaling this code computes
 * (none or llama3, whose factors must make sense). */
static dyn_status check_llama(const dyn_model_config *c, dyn_error *err)
{
    if (c->n_dec_layers != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "Llama config: a decoder-only model needs n_dec_layers 0");
    if (c->kv_heads < 1 || c->heads % c->kv_heads != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "Llama config: num_key_value_heads = %d must divide num_attention_heads = %d", c->kv_heads,
                             c->heads);
    if (c->head_dim % 2 != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "Llama config: head_dim = %d must be even (rotary pairs)",
                             c->head_dim);
    if (!(c->rope_theta > 0) || !(c->rms_eps > 0))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "Llama config: rope_theta (%g) and rms_norm_eps (%g) must be > 0",
                             c->rope_theta, c->rms_eps);
    if (c->rope_scaling == DYN_ROPE_LLAMA3) {
        if (!(c->rope_factor > 0) || !(c->rope_low_freq > 0) || !(c->rope_high_freq > c->rope_low_freq) ||
            c->rope_orig_ctx < 1)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "Llama config: rope_scaling llama3 needs factor > 0, 0 < low_freq_factor < "
                                 "high_freq_factor and original_max_position_embeddings >= 1 (got %g, %g, %g, %d)",
                                 c->rope_factor, c->rope_low_freq, c->rope_high_freq, c->rope_orig_ctx);
    } else if (c->rope_scaling != DYN_ROPE_NONE) {
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "Llama config: rope_scaling type %d is not supported (none or llama3)", c->rope_scaling);
    }
    return DYN_OK;
}

static dyn_status check_config(const dyn_model_config *c, dyn_error *err)
{
    if (c->kind != DYN_MODEL_GPT && c->kind != DYN_MODEL_T5 && c->kind != DYN_MODEL_LLAMA)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "model config: unknown kind %d", (int)c->kind);
    if (c->n_layers < 1 || c->hidden < 1 || c->heads < 1 || c->head_dim < 1 || c->ffn < 1 || c->max_seqlen < 1 ||
        c->vocab < DYN_VOCAB_BYTES)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "model config: layers, hidden, heads, head_dim, ffn, max_seqlen must be >= 1 and vocab >= %d",
                             DYN_VOCAB_BYTES);
    if (c->kind == DYN_MODEL_GPT &&
        (c->n_dec_layers != 0 || c->hidden % c->heads != 0 || c->head_dim != c->hidden / c->heads || c->ffn != 4 * c->hidden))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "GPT config: needs n_dec_layers 0, head_dim = hidden/heads and ffn = 4*hidden");
    if (c->kind == DYN_MODEL_T5 && c->n_dec_layers < 1)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "T5 config: needs n_dec_layers >= 1");
    if (c->kind == DYN_MODEL_LLAMA) return check_llama(c, err);
    return DYN_OK;
}

void dyn_model_free(dyn_model *m)
{
    if (m == NULL) return;
    free(m->params);
    free(m->grads);
    free(m->m1);
    free(m->m2);
    free(m->tensors);
    free(m->init_std);
    free(m->gp);
    free(m->gg);
    free(m->ep);
    free(m->eg);
    free(m->dp);
    free(m->dg);
    free(m->lp);
    free(m->lg);
    free(m->rope_cos);
    free(m->rope_sin);
    free(m);
}

/* One value of a tensor with init rule std (> 0 normal, 0 zeros, -1 ones). */
static float init_value(float std, dyn_rng *rng)
{
    return std > 0 ? (float)(std * dyn_rng_normal(rng)) : (std < 0 ? 1.0f : 0.0f);
}

/* Fill every tensor of m from the init rules of the whole model's table
 * tmpl, drawing normals in tmpl's order from one RNG so the result depends
 * on the seed alone; a tensor of tmpl that m does not hold is drawn and
 * dropped, so a stage model gets exactly the full model's values. tmpl may
 * be m itself. */
void model_init(dyn_model *m, const dyn_model *tmpl, uint64_t seed)
{
    dyn_rng rng;
    dyn_rng_seed(&rng, seed);
    for (int i = 0; i < tmpl->n_tensors; i++) {
        const dyn_param_tensor *t = tmpl == m ? &m->tensors[i] : dyn_model_find_tensor(m, tmpl->tensors[i].name);
        float std = tmpl->init_std[i];
        size_t n = tmpl->tensors[i].numel;
        if (t == NULL) { /* not held: advance the stream past its values */
            if (std > 0) dyn_rng_skip_normals(&rng, n);
            continue;
        }
        float *p = m->params + t->offset;
        for (size_t k = 0; k < n; k++) p[k] = init_value(std, &rng);
    }
}

/* A model shell with the whole tensor table of cfg (no buffers). */
dyn_model *model_table_create(const dyn_model_config *cfg, dyn_error *err)
{
    if (check_config(cfg, err) != DYN_OK) return NULL;
    dyn_model *m = dyn_calloc(1, sizeof *m, "model", err);
    if (m == NULL) return NULL;
    m->cfg = *cfg;
    m->sp = dyn_model_specials_bytes();
    m->dims.C = cfg->hidden;
    m->dims.NH = cfg->heads;
    m->dims.HD = cfg->head_dim;
    m->dims.F = cfg->ffn;
    m->dims.nthreads = 1;
    if (model_arch_of(cfg->kind)->build(m, err) != DYN_OK) {
        dyn_model_free(m);
        return NULL;
    }
    m->first = 0;
    m->last = m->L;
    m->n_owned = m->n_params;
    return m;
}

/* The four flat buffers for m's table, then the block structs over them. */
dyn_status model_alloc_bind(dyn_model *m, dyn_error *err)
{
    size_t n = m->n_params ? m->n_params : 1; /* a stage may hold no parameters */
    m->params = dyn_calloc_huge(n, sizeof(float), "parameters", err);
    m->grads = m->params ? dyn_calloc_huge(n, sizeof(float), "gradients", err) : NULL;
    m->m1 = m->grads ? dyn_calloc_huge(n, sizeof(float), "AdamW first moments", err) : NULL;
    m->m2 = m->m1 ? dyn_calloc_huge(n, sizeof(float), "AdamW second moments", err) : NULL;
    if (m->m2 == NULL) return DYN_ERR_NOMEM;
    return model_arch_of(m->cfg.kind)->bind(m, err);
}

dyn_model *dyn_model_create(const dyn_model_config *cfg, uint64_t seed, dyn_error *err)
{
    dyn_model *m = model_table_create(cfg, err);
    if (m == NULL) return NULL;
    if (model_alloc_bind(m, err) != DYN_OK) {
        dyn_model_free(m);
        return NULL;
    }
    model_init(m, m, seed);
    return m;
}

const dyn_model_config *dyn_model_cfg(const dyn_model *m) { return &m->cfg; }

const dyn_model_specials *dyn_model_specials_of(const dyn_model *m) { return &m->sp; }

void dyn_model_set_specials(dyn_model *m, const dyn_model_specials *sp) { m->sp = *sp; }

void dyn_model_set_progress(dyn_model *m, void (*fn)(void *ctx), void *ctx)
{
    m->progress = fn;
    m->progress_ctx = ctx;
}

void dyn_model_set_threads(dyn_model *m, int nthreads)
{
    if (nthreads < 1) nthreads = 1;
    m->dims.nthreads = nthreads;
    dyn_threads_set(nthreads);
}

size_t dyn_model_num_params(const dyn_model *m) { return m->n_params; }
float *dyn_model_params(dyn_model *m) { return m->params; }
float *dyn_model_grads(dyn_model *m) { return m->grads; }
float *dyn_model_moment1(dyn_model *m) { return m->m1; }
float *dyn_model_moment2(dyn_model *m) { return m->m2; }
int dyn_model_num_tensors(const dyn_model *m) { return m->n_tensors; }
const dyn_param_tensor *dyn_model_tensor(const dyn_model *m, int i)
{
    return i >= 0 && i < m->n_tensors ? &m->tensors[i] : NULL;
}
void dyn_model_zero_grad(dyn_model *m) { memset(m->grads, 0, m->n_params * sizeof(float)); }
int64_t dyn_model_step_count(const dyn_model *m) { return m->step; }
void dyn_model_set_step_count(dyn_model *m, int64_t step) { m->step = step; }
int dyn_model_num_layers(const dyn_model *m) { return m->L; }

int dyn_model_config_num_layers(const dyn_model_config *cfg)
{
    return cfg->kind == DYN_MODEL_T5 ? cfg->n_layers + cfg->n_dec_layers + 4 : cfg->n_layers + 2;
}

void dyn_model_layer_params(const dyn_model *m, int first, int last, size_t *offset, size_t *count)
{
    size_t lo = m->n_params, hi = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const dyn_param_tensor *t = &m->tensors[i];
        if (t->layer < first || t->layer >= last || t->shared_copy) continue;
        if (t->offset < lo) lo = t->offset;
        if (t->offset + t->numel > hi) hi = t->offset + t->numel;
    }
    if (hi == 0) { /* no parameters in the range: an empty slice where it would start */
        lo = m->n_owned;
        for (int i = 0; i < m->n_tensors; i++)
            if (m->tensors[i].layer >= first && !m->tensors[i].shared_copy) {
                lo = m->tensors[i].offset;
                break;
            }
        hi = lo;
    }
    *offset = lo;
    *count = hi - lo;
}

size_t dyn_model_boundary_floats(const dyn_model *m, int l, const dyn_model_microbatch *mb)
{
    if (l <= 0 || l >= m->L) return 0;
    return model_arch_of(m->cfg.kind)->boundary_floats(m, l, mb);
}

/* ------------------------------------------------------------ activations */

dyn_model_acts *dyn_model_acts_create(dyn_error *err)
{
    return dyn_calloc(1, sizeof(dyn_model_acts), "activation arena", err);
}

void dyn_model_acts_free(dyn_model_acts *a)
{
    if (a == NULL) return;
    free(a->arena);
    free(a->hid);
    free(a->blk);
    free(a->keep);
    free(a->dy);
    free(a->wblk);
    free(a);
}

size_t dyn_model_acts_capacity_bytes(const dyn_model_acts *a) { return a->cap * sizeof(float); }
size_t dyn_model_acts_stored_bytes(const dyn_model_acts *a) { return a->stored * sizeof(float); }
size_t dyn_model_acts_kept_bytes(const dyn_model_acts *a) { return a->kept * sizeof(float); }
size_t dyn_model_acts_keep_capacity_bytes(const dyn_model_acts *a) { return a->keep_cap * sizeof(float); }

/* Size the arena for (mb, range, recompute), growing it only when this shape
 * needs more than it has, and lay the pointers over it. */
static dyn_status acts_prepare(const dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                               int recompute, dyn_error *err)
{
    if (a->L != m->L) {
        free(a->hid);
        free(a->blk);
        free(a->dy);
        free(a->wblk);
        a->dy = NULL;
        a->wblk = NULL;
        a->hid = dyn_calloc((size_t)m->L + 1, sizeof(float *), "activation pointers", err);
        a->blk = a->hid ? dyn_calloc((size_t)m->L, sizeof(model_block_acts), "block activations", err) : NULL;
        a->dy = a->blk ? dyn_calloc((size_t)m->L, sizeof(model_block_dy), "split-backward gradients", err) : NULL;
        a->wblk = a->dy ? dyn_calloc((size_t)m->L, sizeof(model_block_acts), "split-backward activations", err) : NULL;
        a->L = a->wblk ? m->L : 0;
        if (a->wblk == NULL) return DYN_ERR_NOMEM;
    }
    size_t stored = 0;
    size_t need = model_arch_of(m->cfg.kind)->carve(m, a, mb, first, last, recompute, NULL, &stored);
    if (need > a->cap) {
        free(a->arena);
        a->cap = 0;
        a->arena = dyn_calloc_huge(need, sizeof(float), "activation arena", err);
        if (a->arena == NULL) return DYN_ERR_NOMEM;
        a->cap = need;
    }
    memset(a->hid, 0, ((size_t)m->L + 1) * sizeof(float *));
    model_arch_of(m->cfg.kind)->carve(m, a, mb, first, last, recompute, a->arena, &stored);
    a->stored = stored;
    return DYN_OK;
}

/* ------------------------------------------------------------ forward/backward */

static dyn_status check_range(const dyn_model *m, const dyn_model_microbatch *mb, int first, int last, dyn_error *err)
{
    if (mb == NULL || mb->kind != m->cfg.kind)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "micro-batch is for a different model kind");
    if (first < 0 || last > m->L || first >= last)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "bad layer range [%d, %d) of %d layers", first, last, m->L);
    if (first < m->first || last > m->last)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "layers [%d, %d) are outside this stage model's layers [%d, %d)", first, last, m->first,
                             m->last);
    return DYN_OK;
}

static dyn_status check_call(const dyn_model *m, const dyn_model_microbatch *mb, int first, int last, const void *in,
                             const void *out, dyn_error *err)
{
    dyn_status st = check_range(m, mb, first, last, err);
    if (st != DYN_OK) return st;
    if ((first > 0) != (in != NULL) || (last < m->L) != (out != NULL))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "layer range [%d, %d): the boundary input must be given iff first > 0 and the output iff "
                             "last < %d",
                             first, last, m->L);
    return DYN_OK;
}

static dyn_status check_tokens(const dyn_model *m, const int32_t *tok, size_t n, const char *what, dyn_error *err)
{
    for (size_t i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= m->cfg.vocab)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s token %zu is %d, outside the vocabulary [0, %d)", what, i,
                                 tok[i], m->cfg.vocab);
    return DYN_OK;
}

dyn_status dyn_model_stage_forward(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                                   const float *in, float *out, int recompute, double *loss_sum, float *sample_loss,
                                   dyn_error *err)
{
    dyn_status st = check_call(m, mb, first, last, in, out, err);
    if (st != DYN_OK) return st;
    size_t N = (size_t)mb->lay->B * (size_t)mb->lay->T;
    const dyn_layout *ol = mb->kind == DYN_MODEL_T5 ? mb->dec_lay : mb->lay;
    size_t No = (size_t)ol->B * (size_t)ol->T;
    if ((st = check_tokens(m, mb->tokens, N, "input", err)) != DYN_OK) return st;
    if (mb->dec_tokens && (st = check_tokens(m, mb->dec_tokens, No, "decoder", err)) != DYN_OK) return st;
    if ((st = check_tokens(m, mb->targets, No, "target", err)) != DYN_OK) return st;
    if (a->w_pending)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "forward of layers [%d, %d) into activations whose weight-gradient half of layers "
                             "[%d, %d) has not run yet",
                             first, last, a->w_first, a->w_last);
    a->fwd_done = 0;
    if ((st = acts_prepare(m, a, mb, first, last, recompute, err)) != DYN_OK) return st;
    double loss = 0.0;
    st = model_arch_of(m->cfg.kind)->forward(m, a, mb, first, last, in, out, recompute, &loss, err);
    if (st != DYN_OK) return st;
    a->fwd_first = first;
    a->fwd_last = last;
    a->fwd_recompute = recompute;
    a->fwd_mb = mb;
    a->fwd_done = 1;
    if (last == m->L) {
        if (loss_sum) *loss_sum = loss;
        if (sample_loss) {
            for (int32_t j = 0; j < mb->n_samples; j++) sample_loss[j] = 0.0f;
            double *acc = dyn_calloc((size_t)mb->n_samples, sizeof(double), "per-sample losses", err);
            if (acc == NULL) return DYN_ERR_NOMEM;
            for (size_t i = 0; i < No; i++)
                if (mb->sample_of[i] >= 0) acc[mb->sample_of[i]] += a->head_losses[i];
            for (int32_t j = 0; j < mb->n_samples; j++) sample_loss[j] = (float)acc[j];
            free(acc);
        }
    }
    return DYN_OK;
}

dyn_status dyn_model_stage_backward(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first, int last,
                                    const float *dout, float *din, float dloss, dyn_error *err)
{
    dyn_status st = check_call(m, mb, first, last, din, dout, err);
    if (st != DYN_OK) return st;
    if (!a->fwd_done || a->fwd_first != first || a->fwd_last != last || a->fwd_mb != mb)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "backward of layers [%d, %d) without the matching forward in these activations", first,
                             last);
    model_arch_of(m->cfg.kind)->backward(m, a, mb, first, last, dout, din, dloss, 0);
    a->fwd_done = 0; /* recompute mode overwrote the shared block arena */
    return DYN_OK;
}

/* ------------------------------------------------------------ split backward */

/* Size the B-to-W buffer for (mb, range, recompute), growing it only when
 * this shape needs more, and lay the kept pointers over it. */
static dyn_status keep_prepare(const dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first,
                               int last, int recompute, dyn_error *err)
{
    size_t need = model_arch_of(m->cfg.kind)->keep_carve(m, a, mb, first, last, recompute, NULL);
    if (need > a->keep_cap) {
        free(a->keep);
        a->keep_cap = 0;
        a->keep = dyn_calloc(need, sizeof(float), "split-backward buffer", err);
        if (a->keep == NULL) return DYN_ERR_NOMEM;
        a->keep_cap = need;
    }
    model_arch_of(m->cfg.kind)->keep_carve(m, a, mb, first, last, recompute, a->keep);
    a->kept = need;
    return DYN_OK;
}

size_t dyn_model_split_kept_bytes(const dyn_model *m, const dyn_model_microbatch *mb, int first, int last,
                                  int recompute)
{
    if (mb == NULL || mb->kind != m->cfg.kind || first < m->first || last > m->last || first >= last) return 0;
    dyn_model_acts scratch;
    memset(&scratch, 0, sizeof scratch); /* carving with base NULL only counts */
    size_t n = model_arch_of(m->cfg.kind)->keep_carve(m, &scratch, mb, first, last, recompute, NULL);
    return n * sizeof(float);
}

dyn_status dyn_model_stage_backward_input(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first,
                                          int last, const float *dout, float *din, float dloss, dyn_error *err)
{
    dyn_status st = check_call(m, mb, first, last, din, dout, err);
    if (st != DYN_OK) return st;
    if (!a->fwd_done || a->fwd_first != first || a->fwd_last != last || a->fwd_mb != mb)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "input-gradient backward of layers [%d, %d) without the matching forward in these "
                             "activations",
                             first, last);
    if ((st = keep_prepare(m, a, mb, first, last, a->fwd_recompute, err)) != DYN_OK) return st;
    model_arch_of(m->cfg.kind)->backward(m, a, mb, first, last, dout, din, dloss, 1);
    a->fwd_done = 0;
    a->w_pending = 1;
    a->w_first = first;
    a->w_last = last;
    a->w_dloss = dloss;
    a->w_mb = mb;
    return DYN_OK;
}

dyn_status dyn_model_stage_backward_weight(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int first,
                                           int last, dyn_error *err)
{
    dyn_status st = check_range(m, mb, first, last, err);
    if (st != DYN_OK) return st;
    if (!a->w_pending || a->w_first != first || a->w_last != last || a->w_mb != mb)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "weight-gradient backward of layers [%d, %d) without the matching input-gradient "
                             "backward in these activations",
                             first, last);
    model_arch_of(m->cfg.kind)->backward_weight(m, a, mb, first, last);
    a->w_pending = 0;
    a->kept = 0;
    return DYN_OK;
}

dyn_status dyn_model_forward(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, int recompute,
                             double *loss_sum, float *sample_loss, dyn_error *err)
{
    return dyn_model_stage_forward(m, a, mb, 0, m->L, NULL, NULL, recompute, loss_sum, sample_loss, err);
}

dyn_status dyn_model_backward(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, float dloss, dyn_error *err)
{
    return dyn_model_stage_backward(m, a, mb, 0, m->L, NULL, NULL, dloss, err);
}

/* ------------------------------------------------------------ optimizer */

double dyn_model_adamw_step(dyn_model *m, float lr, const dyn_adamw_config *cfg, double max_norm)
{
    double norm = dyn_grad_clip(m->grads, m->n_params, max_norm);
    m->step++;
    for (int i = 0; i < m->n_tensors; i++) {
        const dyn_param_tensor *t = &m->tensors[i];
        dyn_adamw_update(m->params + t->offset, m->grads + t->offset, m->m1 + t->offset, m->m2 + t->offset, t->numel,
                         m->step, lr, cfg, t->decay);
    }
    return norm;
}
