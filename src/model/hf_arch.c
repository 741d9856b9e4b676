/* hf_arch.c — a Hugging Face config.json mapped to dyn_model_config, one
 * row per architecture (hf_load.h's dyn_hf_arch).
 *
 * The mapping is strict: a field whose value the model cannot honour is
 * refused with one line naming the file, the field and what dynapipe
 * computes, rather than silently trained as something else (a model loaded
 * under another epsilon or activation starts from a worse loss than the one
 * it was pretrained to, and nothing would say why). Fields that only matter
 * to other code paths (dropout rates: dynapipe trains without dropout;
 * token ids; torch_dtype: weights are converted to fp32) are ignored. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "dynapipe/model_config.h" /* defines: dyn_model_config_validate */
#include "model/hf_load.h"
#include "model/layers.h" /* defines: DYN_LN_EPS, DYN_RMS_EPS, DYN_T5_NUM_BUCKETS, DYN_T5_MAX_DISTANCE */
#include "util/util.h"    /* defines: dyn_file_read_all */

/* ---- field readers: absent → default (or an error when required) */

/* An integer field; def < 0: required. */
static dyn_status get_int(const cJSON *r, const char *path, const char *key, long def, int32_t *out, dyn_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, key);
    if (v == NULL || cJSON_IsNull(v)) {
        if (def < 0) return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"%s\" is missing", path, key);
        *out = (int32_t)def;
        return DYN_OK;
    }
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (!(d >= 1 && d <= 1e9) || floor(d) != d)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"%s\" is not a positive integer", path, key);
    *out = (int32_t)d;
    return DYN_OK;
}

/* A float field that must equal want (relative 1e-6; absent = def). */
static dyn_status want_num(const cJSON *r, const char *path, const char *key, double def, double want,
                           const char *what, dyn_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, key);
    double d = v == NULL || cJSON_IsNull(v) ? def : cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(fabs(d - want) <= 1e-6 * fabs(want)))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: \"%s\" is %g; dynapipe's %s uses %g", path, key, d, what,
                             want);
    return DYN_OK;
}

/* A boolean field that must be want (absent = def). */
static dyn_status want_bool(const cJSON *r, const char *path, const char *key, int def, int want, const char *why,
                            dyn_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, key);
    int b = v == NULL || cJSON_IsNull(v) ? def : cJSON_IsTrue(v) ? 1 : cJSON_IsFalse(v) ? 0 : -1;
    if (b < 0) return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"%s\" is not true or false", path, key);
    if (b != want)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: \"%s\" is %s; %s", path, key, b ? "true" : "false", why);
    return DYN_OK;
}

/* A string field (absent = def). */
static const char *get_str(const cJSON *r, const char *key, const char *def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, key);
    if (v == NULL || cJSON_IsNull(v)) return def;
    return cJSON_IsString(v) ? v->valuestring : "(not a string)";
}

/* The shape must also be one dyn_model_config_validate accepts (sizes
 * within the limits); run lengths are the run's, so a stand-in one. */
static dyn_status validate(const char *path, const dyn_model_config *c, dyn_error *err)
{
    dyn_model_config v = *c;
    if (v.max_seqlen < 2) v.max_seqlen = 2;
    dyn_error e;
    if (dyn_model_config_validate(&v, &e) != DYN_OK)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: %s", path, e.msg);
    if (v.vocab < DYN_VOCAB_BYTES)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: \"vocab_size\" %d; dynapipe needs at least %d (its byte data and special tokens)",
                             path, v.vocab, DYN_VOCAB_BYTES);
    return DYN_OK;
}

/* ---- GPT2LMHeadModel */

static dyn_status map_gpt2(const cJSON *r, const char *path, dyn_hf_config *out, dyn_error *err)
{
    dyn_model_config *c = &out->model;
    c->kind = DYN_MODEL_GPT;
    int32_t npos = 0, ffn = 0;
    dyn_status s = get_int(r, path, "vocab_size", -1, &c->vocab, err);
    if (s == DYN_OK) s = get_int(r, path, "n_embd", -1, &c->hidden, err);
    if (s == DYN_OK) s = get_int(r, path, "n_layer", -1, &c->n_layers, err);
    if (s == DYN_OK) s = get_int(r, path, "n_head", -1, &c->heads, err);
    if (s == DYN_OK) s = get_int(r, path, "n_positions", -1, &npos, err);
    if (s == DYN_OK) s = get_int(r, path, "n_inner", 4L * c->hidden, &ffn, err);
    if (s != DYN_OK) return s;
    if (c->hidden % c->heads != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: \"n_embd\" %d is not a multiple of \"n_head\" %d", path,
                             c->hidden, c->heads);
    if (ffn != 4 * c->hidden)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: \"n_inner\" is %d; dynapipe's GPT-2 uses 4 * n_embd = %d",
                             path, ffn, 4 * c->hidden);
    const char *act = get_str(r, "activation_function", "gelu_new");
    if (strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: \"activation_function\" is \"%s\"; dynapipe's GPT-2 uses gelu_new (tanh approximation)",
                             path, act);
    c->head_dim = c->hidden / c->heads;
    c->ffn = ffn;
    c->n_dec_layers = 0;
    c->max_seqlen = npos;
    out->fixed_seqlen = 1;
    s = want_num(r, path, "layer_norm_epsilon", 1e-5, DYN_LN_EPS, "LayerNorm", err);
    if (s == DYN_OK)
        s = want_bool(r, path, "tie_word_embeddings", 1, 1, "dynapipe's GPT-2 ties the LM head to wte", err);
    if (s == DYN_OK)
        s = want_bool(r, path, "scale_attn_weights", 1, 1, "dynapipe's GPT-2 scales attention by 1/sqrt(head dim)",
                      err);
    if (s == DYN_OK)
        s = want_bool(r, path, "scale_attn_by_inverse_layer_idx", 0, 0,
                      "dynapipe's GPT-2 does not scale attention by layer", err);
    if (s == DYN_OK)
        s = want_bool(r, path, "add_cross_attention", 0, 0, "dynapipe's GPT-2 has no cross-attention", err);
    return s == DYN_OK ? validate(path, c, err) : s;
}

/* h.N.attn.bias / h.N.attn.masked_bias: the causal-mask buffers older
 * GPT-2 files carry; lm_head.weight: the tied head. */
static const char *gpt2_alias(const char *name)
{
    if (strcmp(name, "lm_head.weight") == 0) return "wte.weight";
    size_t n = strlen(name);
    static const char *const bufs[] = {".attn.bias", ".attn.masked_bias"};
    for (int i = 0; i < 2; i++) {
        size_t k = strlen(bufs[i]);
        if (strncmp(name, "h.", 2) == 0 && n > k && strcmp(name + n - k, bufs[i]) == 0) return "";
    }
    return NULL;
}

/* ---- T5ForConditionalGeneration (v1.1: gated-gelu, untied) */

static dyn_status map_t5(const cJSON *r, const char *path, dyn_hf_config *out, dyn_error *err)
{
    dyn_model_config *c = &out->model;
    c->kind = DYN_MODEL_T5;
    int32_t buckets = 0, dist = 0;
    dyn_status s = get_int(r, path, "vocab_size", -1, &c->vocab, err);
    if (s == DYN_OK) s = get_int(r, path, "d_model", -1, &c->hidden, err);
    if (s == DYN_OK) s = get_int(r, path, "d_kv", -1, &c->head_dim, err);
    if (s == DYN_OK) s = get_int(r, path, "d_ff", -1, &c->ffn, err);
    if (s == DYN_OK) s = get_int(r, path, "num_layers", -1, &c->n_layers, err);
    if (s == DYN_OK) s = get_int(r, path, "num_decoder_layers", c->n_layers, &c->n_dec_layers, err);
    if (s == DYN_OK) s = get_int(r, path, "num_heads", -1, &c->heads, err);
    if (s == DYN_OK) s = get_int(r, path, "relative_attention_num_buckets", 32, &buckets, err);
    if (s == DYN_OK) s = get_int(r, path, "relative_attention_max_distance", 128, &dist, err);
    if (s != DYN_OK) return s;
    if (buckets != DYN_T5_NUM_BUCKETS || dist != DYN_T5_MAX_DISTANCE)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: relative attention of %d buckets, max distance %d; dynapipe's T5 uses %d and %d", path,
                             buckets, dist, DYN_T5_NUM_BUCKETS, DYN_T5_MAX_DISTANCE);
    const char *ff = get_str(r, "feed_forward_proj", "relu"); /* Hugging Face's default: T5 v1.0 */
    if (strcmp(ff, "gated-gelu") != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: \"feed_forward_proj\" is \"%s\" (%s); dynapipe's T5 is v1.1: gated-gelu", path, ff,
                             strcmp(ff, "relu") == 0 ? "T5 v1.0, not gated" : "not supported");
    out->fixed_seqlen = 0;
    c->max_seqlen = 0;
    s = want_num(r, path, "layer_norm_epsilon", 1e-6, DYN_RMS_EPS, "RMSNorm", err);
    if (s == DYN_OK)
        s = want_bool(r, path, "tie_word_embeddings", 1, 0,
                      "dynapipe's T5 is v1.1, whose LM head is its own (tied T5 v1.0 heads are not supported)", err);
    return s == DYN_OK ? validate(path, c, err) : s;
}

/* The encoder's and decoder's embed_tokens: copies of shared.weight. */
static const char *t5_alias(const char *name)
{
    if (strcmp(name, "encoder.embed_tokens.weight") == 0 || strcmp(name, "decoder.embed_tokens.weight") == 0)
        return "shared.weight";
    return NULL;
}

/* ---- the table */

static const dyn_hf_arch archs[] = {
    {"GPT2LMHeadModel", DYN_MODEL_GPT, map_gpt2, "transformer.", gpt2_alias,
     {"n_layer", NULL, "n_embd", "n_head", "n_embd / n_head", "n_inner", "vocab_size"}},
    {"T5ForConditionalGeneration", DYN_MODEL_T5, map_t5, NULL, t5_alias,
     {"num_layers", "num_decoder_layers", "d_model", "num_heads", "d_kv", "d_ff", "vocab_size"}},
};
#define N_ARCHS ((int)(sizeof archs / sizeof archs[0]))

const char *dyn_hf_supported(void) { return "GPT2LMHeadModel, T5ForConditionalGeneration (v1.1, gated-gelu)"; }

const dyn_hf_arch *dyn_hf_arch_find(const char *name)
{
    for (int i = 0; i < N_ARCHS; i++)
        if (strcmp(archs[i].name, name) == 0) return &archs[i];
    return NULL;
}

dyn_status dyn_hf_config_read(const char *dir, dyn_hf_config *out, dyn_error *err)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/config.json", dir) >= sizeof path)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: folder name too long", dir);
    memset(out, 0, sizeof *out);
    char *text = NULL;
    if (dyn_file_read_all(path, &text, NULL, NULL) != DYN_OK)
        return dyn_error_set(err, DYN_ERR_IO, "%s: cannot read it (not a Hugging Face model folder?)", path);
    cJSON *r = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(r)) {
        cJSON_Delete(r);
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: not a JSON object", path);
    }
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(r, "architectures");
    const cJSON *a0 = cJSON_IsArray(a) ? cJSON_GetArrayItem(a, 0) : NULL;
    dyn_status s = DYN_OK;
    if (!cJSON_IsString(a0) || cJSON_GetArraySize(a) != 1) {
        s = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"architectures\" is not a list of one name (supported: %s)", path,
                          dyn_hf_supported());
    } else {
        const dyn_hf_arch *row = dyn_hf_arch_find(a0->valuestring);
        if (row == NULL)
            s = dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: architecture %s is not supported (supported: %s)", path,
                              a0->valuestring, dyn_hf_supported());
        else if ((size_t)snprintf(out->arch, sizeof out->arch, "%s", row->name) >= sizeof out->arch)
            s = dyn_error_set(err, DYN_ERR_INTERNAL, "architecture name too long");
        else
            s = row->map(r, path, out, err);
    }
    cJSON_Delete(r);
    return s;
}
