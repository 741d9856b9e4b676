/* hf_config.c — Hugging Face config.json to dyn_model_config for GPT-2,
 * T5 v1.1 and the Llama family (Llama, Qwen2, Mistral): the one table of
 * architectures (names, kind, tensor-name mapping) and one parser per
 * model kind; and the Llama family's config.json back. Contract and field
 * list in hf_config.h.
 *
 * The mapping is strict: a field whose value the model cannot honour is
 * refused with one line naming the file, the field and what dynapipe
 * computes, rather than silently trained as something else (a model loaded
 * under another epsilon or activation starts from a worse loss than the one
 * it was pretrained to, and nothing would say why). Fields that only matter
 * to other code paths (dropout rates: dynapipe trains without dropout;
 * torch_dtype: weights are converted to fp32) are ignored. */
#include "model/hf_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "dynapipe/model_config.h" /* defines: dyn_model_config_validate */
#include "model/layers.h"          /* defines: DYN_LN_EPS, DYN_RMS_EPS, DYN_T5_NUM_BUCKETS, DYN_T5_MAX_DISTANCE */
#include "model/model.h"           /* defines: DYN_TOK_*, DYN_VOCAB_BYTES */
#include "model/model_impl.h"      /* defines: model_table_create */
#include "util/json.h"             /* defines: dyn_json_parse */
#include "util/util.h"             /* defines: dyn_file_read_all */

/* ---- field readers */

/* The field `key`: absent (or null) → *present 0; a number → *v. */
static dyn_status get_num(const cJSON *o, const char *key, const char *where, double *v, int *present, dyn_error *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    *present = 0;
    if (it == NULL || cJSON_IsNull(it)) return DYN_OK;
    if (!cJSON_IsNumber(it)) return dyn_error_set(err, DYN_ERR_PARSE, "%s: field %s must be a number", where, key);
    *v = it->valuedouble;
    *present = 1;
    return DYN_OK;
}

/* A positive integer field that fits int32; required unless def >= 0,
 * which is used when the field is absent or null. */
static dyn_status get_int(const cJSON *o, const char *key, const char *where, int32_t def, int32_t *out, dyn_error *err)
{
    double v = 0;
    int present;
    dyn_status st = get_num(o, key, where, &v, &present, err);
    if (st != DYN_OK) return st;
    if (!present) {
        if (def < 0) return dyn_error_set(err, DYN_ERR_PARSE, "%s: field %s is missing", where, key);
        *out = def;
        return DYN_OK;
    }
    if (v != floor(v) || v < 1 || v > 2147483647.0)
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: field %s = %g must be a positive integer", where, key, v);
    *out = (int32_t)v;
    return DYN_OK;
}

static dyn_status get_real(const cJSON *o, const char *key, const char *where, double def, double *out, dyn_error *err)
{
    int present;
    dyn_status st = get_num(o, key, where, out, &present, err);
    if (st == DYN_OK && !present) *out = def;
    return st;
}

/* A boolean field; absent or null → def. */
static dyn_status get_bool(const cJSON *o, const char *key, const char *where, int def, int32_t *out, dyn_error *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (it == NULL || cJSON_IsNull(it)) {
        *out = def;
        return DYN_OK;
    }
    if (!cJSON_IsBool(it)) return dyn_error_set(err, DYN_ERR_PARSE, "%s: field %s must be true or false", where, key);
    *out = cJSON_IsTrue(it) ? 1 : 0;
    return DYN_OK;
}

/* A string field; absent or null → NULL. */
static const char *get_str(const cJSON *o, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

/* A boolean field that must be want (absent = def); why says what dynapipe
 * computes. */
static dyn_status want_bool(const cJSON *r, const char *where, const char *key, int def, int want, const char *why,
                            dyn_error *err)
{
    int32_t b = 0;
    dyn_status st = get_bool(r, key, where, def, &b, err);
    if (st == DYN_OK && b != want)
        st = dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: field %s is %s; %s", where, key, b ? "true" : "false", why);
    return st;
}

/* |a - b| within rounding of a value written to JSON. */
static int same_eps(double a, double b) { return fabs(a - b) <= 1e-3 * fabs(b); }

/* A token id field: an integer, the first of a list of them (Llama 3's
 * instruct models name several eos ids), or absent / null (-1). */
static int32_t token_id(const cJSON *r, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, key);
    if (cJSON_IsArray(v)) v = cJSON_GetArrayItem(v, 0);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 2147483647.0 ||
        v->valuedouble != floor(v->valuedouble))
        return -1;
    return (int32_t)v->valuedouble;
}

/* ---- names a folder may carry that the model does not hold */

/* GPT-2: h.N.attn.bias / h.N.attn.masked_bias, the causal-mask buffers
 * older files carry; lm_head.weight, the tied head. */
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

/* T5: the encoder's and decoder's embed_tokens, copies of shared.weight. */
static const char *t5_alias(const char *name)
{
    if (strcmp(name, "encoder.embed_tokens.weight") == 0 || strcmp(name, "decoder.embed_tokens.weight") == 0)
        return "shared.weight";
    return NULL;
}

/* Llama family: lm_head.weight when the head is tied (some writers keep the
 * copy); the rotary inv_freq buffers older transformers saved. */
static const char *llama_alias(const char *name)
{
    if (strcmp(name, "lm_head.weight") == 0) return "model.embed_tokens.weight";
    const char *suffix = ".self_attn.rotary_emb.inv_freq";
    size_t n = strlen(name), k = strlen(suffix);
    if (strncmp(name, "model.layers.", 13) == 0 && n > k && strcmp(name + n - k, suffix) == 0) return "";
    return NULL;
}

/* ---- the table */

#define LLAMA_FIELDS                                                                                                   \
    {"num_hidden_layers", NULL, "hidden_size", "num_attention_heads", "head_dim", "intermediate_size", "vocab_size"}
static const dyn_hf_arch ARCHS[] = {
    {"GPT2LMHeadModel", "gpt2", DYN_MODEL_GPT, 1, "transformer.", gpt2_alias,
     {"n_layer", NULL, "n_embd", "n_head", "n_embd / n_head", "n_inner", "vocab_size"}},
    {"T5ForConditionalGeneration", "t5", DYN_MODEL_T5, 0, NULL, t5_alias,
     {"num_layers", "num_decoder_layers", "d_model", "num_heads", "d_kv", "d_ff", "vocab_size"}},
    {"LlamaForCausalLM", "llama", DYN_MODEL_LLAMA, 0, NULL, llama_alias, LLAMA_FIELDS},
    {"Qwen2ForCausalLM", "qwen2", DYN_MODEL_LLAMA, 0, NULL, llama_alias, LLAMA_FIELDS},
    {"MistralForCausalLM", "mistral", DYN_MODEL_LLAMA, 0, NULL, llama_alias, LLAMA_FIELDS},
};
#define N_ARCHS (sizeof ARCHS / sizeof ARCHS[0])
#define SUPPORTED                                                                                                      \
    "GPT2LMHeadModel, T5ForConditionalGeneration (v1.1, gated-gelu), LlamaForCausalLM, Qwen2ForCausalLM, "            \
    "MistralForCausalLM"

const char *dyn_hf_supported(void) { return SUPPORTED; }

const dyn_hf_arch *dyn_hf_arch_find(const char *name)
{
    for (size_t i = 0; i < N_ARCHS; i++)
        if (strcmp(ARCHS[i].name, name) == 0) return &ARCHS[i];
    return NULL;
}

/* The row named by "architectures" (a list of one name), else by
 * "model_type". */
static dyn_status find_arch(const cJSON *root, const char *where, const dyn_hf_arch **arch, dyn_error *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    if (a != NULL && !cJSON_IsNull(a) &&
        (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 1 || !cJSON_IsString(cJSON_GetArrayItem(a, 0))))
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: field architectures is not a list of one name (supported: %s)",
                             where, SUPPORTED);
    const char *cls = cJSON_IsArray(a) ? cJSON_GetArrayItem(a, 0)->valuestring : NULL;
    const char *type = get_str(root, "model_type");
    for (size_t i = 0; i < N_ARCHS; i++)
        if ((cls && strcmp(cls, ARCHS[i].name) == 0) || (!cls && type && strcmp(type, ARCHS[i].model_type) == 0)) {
            *arch = &ARCHS[i];
            return DYN_OK;
        }
    return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: architecture %s is not supported (supported: %s)", where,
                         cls ? cls : type ? type : "(none named)", SUPPORTED);
}

/* ---- one parser per model kind */

static dyn_status parse_gpt2(const cJSON *r, const char *where, int32_t max_len, dyn_hf_config *h, dyn_error *err)
{
    dyn_model_config *c = &h->model;
    dyn_status st = DYN_OK;
    c->kind = DYN_MODEL_GPT;
    if (st == DYN_OK) st = get_int(r, "n_embd", where, -1, &c->hidden, err);
    if (st == DYN_OK) st = get_int(r, "n_layer", where, -1, &c->n_layers, err);
    if (st == DYN_OK) st = get_int(r, "n_head", where, -1, &c->heads, err);
    if (st == DYN_OK) st = get_int(r, "vocab_size", where, -1, &c->vocab, err);
    if (st == DYN_OK) st = get_int(r, "n_positions", where, -1, &h->positions, err);
    if (st == DYN_OK) st = get_int(r, "n_inner", where, 4 * c->hidden, &c->ffn, err);
    if (st != DYN_OK) return st;
    double eps;
    if ((st = get_real(r, "layer_norm_epsilon", where, DYN_LN_EPS, &eps, err)) != DYN_OK) return st;
    const char *act = get_str(r, "activation_function");
    if (act && strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: activation_function %s is not supported (dynapipe's GPT-2 uses gelu_new, the tanh "
                             "approximation)",
                             where, act);
    if (c->hidden % c->heads != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: n_embd = %d is not a multiple of n_head = %d", where,
                             c->hidden, c->heads);
    if (c->ffn != 4 * c->hidden)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: n_inner = %d is not supported (4 * n_embd = %d)", where,
                             c->ffn, 4 * c->hidden);
    if (!same_eps(eps, DYN_LN_EPS))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: layer_norm_epsilon = %g is not supported (LayerNorm %g)",
                             where, eps, (double)DYN_LN_EPS);
    if (st == DYN_OK)
        st = want_bool(r, where, "tie_word_embeddings", 1, 1, "dynapipe's GPT-2 ties the LM head to wte", err);
    if (st == DYN_OK)
        st = want_bool(r, where, "scale_attn_weights", 1, 1, "dynapipe's GPT-2 scales attention by 1/sqrt(head dim)",
                       err);
    if (st == DYN_OK)
        st = want_bool(r, where, "scale_attn_by_inverse_layer_idx", 0, 0,
                       "dynapipe's GPT-2 does not scale attention by layer", err);
    if (st == DYN_OK)
        st = want_bool(r, where, "add_cross_attention", 0, 0, "dynapipe's GPT-2 has no cross-attention", err);
    if (st != DYN_OK) return st;
    if (max_len > h->positions)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: the run's %d tokens exceed n_positions = %d", where,
                             max_len, h->positions);
    c->head_dim = c->hidden / c->heads;
    c->max_seqlen = max_len > 0 ? max_len : h->positions;
    h->fixed_seqlen = 1;
    return DYN_OK;
}

static dyn_status parse_t5(const cJSON *r, const char *where, int32_t max_len, dyn_hf_config *h, dyn_error *err)
{
    dyn_model_config *c = &h->model;
    dyn_status st = DYN_OK;
    int32_t buckets = 0, distance = 0;
    c->kind = DYN_MODEL_T5;
    if (st == DYN_OK) st = get_int(r, "d_model", where, -1, &c->hidden, err);
    if (st == DYN_OK) st = get_int(r, "d_kv", where, -1, &c->head_dim, err);
    if (st == DYN_OK) st = get_int(r, "d_ff", where, -1, &c->ffn, err);
    if (st == DYN_OK) st = get_int(r, "num_layers", where, -1, &c->n_layers, err);
    if (st == DYN_OK) st = get_int(r, "num_decoder_layers", where, c->n_layers, &c->n_dec_layers, err);
    if (st == DYN_OK) st = get_int(r, "num_heads", where, -1, &c->heads, err);
    if (st == DYN_OK) st = get_int(r, "vocab_size", where, -1, &c->vocab, err);
    if (st == DYN_OK) st = get_int(r, "relative_attention_num_buckets", where, 32, &buckets, err);
    if (st == DYN_OK) st = get_int(r, "relative_attention_max_distance", where, 128, &distance, err);
    if (st != DYN_OK) return st;
    double eps;
    if ((st = get_real(r, "layer_norm_epsilon", where, 1e-6, &eps, err)) != DYN_OK) return st;
    const char *ff = get_str(r, "feed_forward_proj");
    if (ff == NULL) ff = "relu"; /* Hugging Face's default: T5 v1.0 */
    if (strcmp(ff, "gated-gelu") != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: feed_forward_proj %s is not supported (%s; dynapipe's T5 is v1.1: gated-gelu)", where,
                             ff, strcmp(ff, "relu") == 0 ? "T5 v1.0, not gated" : "another feed-forward");
    if (buckets != DYN_T5_NUM_BUCKETS || distance != DYN_T5_MAX_DISTANCE || !same_eps(eps, DYN_RMS_EPS))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: T5 with %d buckets, max distance %d and layer_norm_epsilon %g is not supported (%d, "
                             "%d, %g)",
                             where, buckets, distance, eps, DYN_T5_NUM_BUCKETS, DYN_T5_MAX_DISTANCE,
                             (double)DYN_RMS_EPS);
    st = want_bool(r, where, "tie_word_embeddings", 1, 0,
                   "dynapipe's T5 is v1.1, whose LM head is its own (tied T5 v1.0 heads are not supported)", err);
    if (st != DYN_OK) return st;
    if (max_len < 1)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: T5 has no position limit: the run's max length is needed",
                             where);
    c->max_seqlen = max_len;
    return DYN_OK;
}

static dyn_status parse_rope_scaling(const cJSON *r, const char *where, dyn_model_config *c, dyn_error *err)
{
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(r, "rope_scaling");
    c->rope_scaling = DYN_ROPE_NONE;
    if (rs == NULL || cJSON_IsNull(rs)) return DYN_OK;
    if (!cJSON_IsObject(rs)) return dyn_error_set(err, DYN_ERR_PARSE, "%s: field rope_scaling must be an object", where);
    const char *type = get_str(rs, "rope_type");
    if (type == NULL) type = get_str(rs, "type"); /* older files */
    if (type == NULL || strcmp(type, "default") == 0) return DYN_OK;
    if (strcmp(type, "llama3") != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: rope_scaling type %s is not supported (none or llama3)",
                             where, type);
    dyn_status st = DYN_OK;
    int present = 0;
    c->rope_scaling = DYN_ROPE_LLAMA3;
    st = get_num(rs, "factor", where, &c->rope_factor, &present, err);
    if (st == DYN_OK && !present) st = dyn_error_set(err, DYN_ERR_PARSE, "%s: field rope_scaling.factor is missing", where);
    if (st == DYN_OK) st = get_real(rs, "low_freq_factor", where, 1.0, &c->rope_low_freq, err);
    if (st == DYN_OK) st = get_real(rs, "high_freq_factor", where, 4.0, &c->rope_high_freq, err);
    if (st == DYN_OK) st = get_int(rs, "original_max_position_embeddings", where, 8192, &c->rope_orig_ctx, err);
    return st;
}

static dyn_status parse_llama(const cJSON *r, const char *where, const dyn_hf_arch *arch, int32_t max_len,
                              dyn_hf_config *h, dyn_error *err)
{
    dyn_model_config *c = &h->model;
    dyn_status st = DYN_OK;
    int32_t attn_bias = 0, mlp_bias = 0, sliding = 0, window = 0;
    int qwen2 = strcmp(arch->name, "Qwen2ForCausalLM") == 0, mistral = strcmp(arch->name, "MistralForCausalLM") == 0;
    c->kind = DYN_MODEL_LLAMA;
    if (st == DYN_OK) st = get_int(r, "hidden_size", where, -1, &c->hidden, err);
    if (st == DYN_OK) st = get_int(r, "intermediate_size", where, -1, &c->ffn, err);
    if (st == DYN_OK) st = get_int(r, "num_hidden_layers", where, -1, &c->n_layers, err);
    if (st == DYN_OK) st = get_int(r, "num_attention_heads", where, -1, &c->heads, err);
    if (st == DYN_OK) st = get_int(r, "num_key_value_heads", where, c->heads, &c->kv_heads, err);
    if (st == DYN_OK) st = get_int(r, "head_dim", where, c->hidden / c->heads, &c->head_dim, err);
    if (st == DYN_OK) st = get_int(r, "vocab_size", where, -1, &c->vocab, err);
    if (st == DYN_OK) st = get_int(r, "max_position_embeddings", where, -1, &h->positions, err);
    if (st == DYN_OK) st = get_real(r, "rms_norm_eps", where, 1e-6, &c->rms_eps, err);
    if (st == DYN_OK) st = get_real(r, "rope_theta", where, 10000.0, &c->rope_theta, err);
    if (st == DYN_OK) st = get_bool(r, "tie_word_embeddings", where, 0, &c->tie_embeddings, err);
    if (st == DYN_OK) st = get_bool(r, "attention_bias", where, 0, &attn_bias, err);
    if (st == DYN_OK) st = get_bool(r, "mlp_bias", where, 0, &mlp_bias, err);
    if (st == DYN_OK) st = parse_rope_scaling(r, where, c, err);
    if (st != DYN_OK) return st;
    const char *act = get_str(r, "hidden_act");
    if (act && strcmp(act, "silu") != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: hidden_act %s is not supported (silu)", where, act);
    if (!qwen2 && (attn_bias || mlp_bias))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: attention_bias / mlp_bias true is not supported (Llama without biases; Qwen2's q/k/v "
                             "biases are)",
                             where);
    c->qkv_bias = qwen2;
    c->max_seqlen = max_len > 0 ? max_len : h->positions;
    /* Sliding windows: Qwen2 only with use_sliding_window; Mistral whenever
     * sliding_window is set. Harmless when it covers every sequence. */
    if (qwen2) st = get_bool(r, "use_sliding_window", where, 0, &sliding, err);
    if (mistral) sliding = 1;
    if (st == DYN_OK && sliding) st = get_int(r, "sliding_window", where, 0, &window, err);
    if (st != DYN_OK) return st;
    if (sliding && window > 0 && window < c->max_seqlen)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: sliding_window = %d is shorter than the run's %d tokens; sliding-window attention is "
                             "not supported (train with --max-seqlen %d or less)",
                             where, window, c->max_seqlen, window);
    return DYN_OK;
}

dyn_status dyn_hf_config_parse_full(const char *text, size_t len, const char *where, int32_t max_len,
                                    dyn_hf_config *out, dyn_error *err)
{
    cJSON *root = NULL;
    dyn_status st = dyn_json_parse(text, len, where, &root, err);
    if (st != DYN_OK) return st;
    dyn_hf_config h;
    memset(&h, 0, sizeof h);
    const dyn_hf_arch *arch = NULL;
    if (!cJSON_IsObject(root)) st = dyn_error_set(err, DYN_ERR_PARSE, "%s: not a JSON object", where);
    if (st == DYN_OK) st = find_arch(root, where, &arch, err);
    if (st == DYN_OK) {
        snprintf(h.arch, sizeof h.arch, "%s", arch->name);
        if (arch->kind == DYN_MODEL_GPT) st = parse_gpt2(root, where, max_len, &h, err);
        else if (arch->kind == DYN_MODEL_T5) st = parse_t5(root, where, max_len, &h, err);
        else st = parse_llama(root, where, arch, max_len, &h, err);
    }
    if (st == DYN_OK) {
        /* T5's decoder starts from decoder_start_token_id: dynapipe's T5
         * writes it in the bos place (rt_ckpt_hf_config). */
        h.bos_id = token_id(root, arch->kind == DYN_MODEL_T5 ? "decoder_start_token_id" : "bos_token_id");
        h.eos_id = token_id(root, "eos_token_id");
        h.pad_id = token_id(root, "pad_token_id");
    }
    cJSON_Delete(root);
    if (st == DYN_OK) *out = h;
    return st;
}

dyn_status dyn_hf_config_parse(const char *text, size_t len, const char *where, int32_t max_len,
                               dyn_model_config *out, dyn_error *err)
{
    dyn_hf_config h;
    dyn_status st = dyn_hf_config_parse_full(text, len, where, max_len, &h, err);
    if (st == DYN_OK) *out = h.model;
    return st;
}

dyn_status dyn_hf_config_load(const char *path, int32_t max_len, dyn_model_config *out, dyn_error *err)
{
    char *text = NULL;
    size_t len = 0;
    dyn_status st = dyn_file_read_all(path, &text, &len, err);
    if (st != DYN_OK) return st;
    st = dyn_hf_config_parse(text, len, path, max_len, out, err);
    free(text);
    return st;
}

/* The shape must also be one the model builds and dyn_model_config_validate
 * accepts (sizes within the limits), with room for dynapipe's byte data. */
static dyn_status validate(const char *path, const dyn_model_config *c, dyn_error *err)
{
    dyn_error e;
    if (c->vocab < DYN_VOCAB_BYTES)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: vocab_size %d; dynapipe needs at least %d (its byte data and special tokens)", path,
                             c->vocab, DYN_VOCAB_BYTES);
    dyn_model *tbl = model_table_create(c, &e);
    if (tbl == NULL) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: %s", path, e.msg);
    dyn_model_free(tbl);
    if (dyn_model_config_validate(c, &e) != DYN_OK)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: %s", path, e.msg);
    return DYN_OK;
}

dyn_status dyn_hf_config_read(const char *dir, int32_t max_len, dyn_hf_config *out, dyn_error *err)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/config.json", dir) >= sizeof path)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: folder name too long", dir);
    char *text = NULL;
    size_t len = 0;
    if (dyn_file_read_all(path, &text, &len, NULL) != DYN_OK)
        return dyn_error_set(err, DYN_ERR_IO, "%s: cannot read it (not a Hugging Face model folder?)", path);
    /* Where the weights fix the length (GPT-2), the file's length is the
     * run's: the caller compares a --max-seqlen given with it. */
    cJSON *root = cJSON_ParseWithLength(text, len);
    const dyn_hf_arch *arch = NULL;
    dyn_error ignored;
    if (root != NULL && find_arch(root, path, &arch, &ignored) == DYN_OK && arch->fixed_positions) max_len = 0;
    cJSON_Delete(root);
    dyn_status st = dyn_hf_config_parse_full(text, len, path, max_len, out, err);
    free(text);
    return st == DYN_OK ? validate(path, &out->model, err) : st;
}

char *dyn_hf_config_llama_json(const dyn_model_config *c, const dyn_hf_tokens *tok, dyn_error *err)
{
    if (c->kind != DYN_MODEL_LLAMA) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "config.json: not a Llama-family config (kind %d)", (int)c->kind);
        return NULL;
    }
    dyn_hf_tokens bytes = {DYN_TOK_BOS, DYN_TOK_EOS, DYN_TOK_PAD};
    if (tok == NULL) tok = &bytes;
    int qwen = c->qkv_bias != 0;
    cJSON *r = cJSON_CreateObject(), *arch = r ? cJSON_AddArrayToObject(r, "architectures") : NULL;
    int ok = arch != NULL && cJSON_AddItemToArray(arch, cJSON_CreateString(qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM"));
    ok = ok && cJSON_AddStringToObject(r, "model_type", qwen ? "qwen2" : "llama");
    ok = ok && cJSON_AddNumberToObject(r, "vocab_size", c->vocab);
    ok = ok && cJSON_AddNumberToObject(r, "hidden_size", c->hidden);
    ok = ok && cJSON_AddNumberToObject(r, "intermediate_size", c->ffn);
    ok = ok && cJSON_AddNumberToObject(r, "num_hidden_layers", c->n_layers);
    ok = ok && cJSON_AddNumberToObject(r, "num_attention_heads", c->heads);
    ok = ok && cJSON_AddNumberToObject(r, "num_key_value_heads", c->kv_heads);
    ok = ok && cJSON_AddNumberToObject(r, "head_dim", c->head_dim);
    ok = ok && cJSON_AddNumberToObject(r, "max_position_embeddings", c->max_seqlen);
    ok = ok && cJSON_AddNumberToObject(r, "rms_norm_eps", c->rms_eps);
    ok = ok && cJSON_AddNumberToObject(r, "rope_theta", c->rope_theta);
    ok = ok && cJSON_AddStringToObject(r, "hidden_act", "silu");
    ok = ok && cJSON_AddBoolToObject(r, "tie_word_embeddings", c->tie_embeddings != 0);
    ok = ok && cJSON_AddNumberToObject(r, "initializer_range", 0.02);
    ok = ok && cJSON_AddNumberToObject(r, "attention_dropout", 0);
    if (qwen) ok = ok && cJSON_AddBoolToObject(r, "use_sliding_window", 0);
    else ok = ok && cJSON_AddBoolToObject(r, "attention_bias", 0) && cJSON_AddBoolToObject(r, "mlp_bias", 0);
    if (c->rope_scaling == DYN_ROPE_LLAMA3) {
        cJSON *rs = cJSON_AddObjectToObject(r, "rope_scaling");
        ok = ok && rs && cJSON_AddStringToObject(rs, "rope_type", "llama3") &&
             cJSON_AddNumberToObject(rs, "factor", c->rope_factor) &&
             cJSON_AddNumberToObject(rs, "low_freq_factor", c->rope_low_freq) &&
             cJSON_AddNumberToObject(rs, "high_freq_factor", c->rope_high_freq) &&
             cJSON_AddNumberToObject(rs, "original_max_position_embeddings", c->rope_orig_ctx);
    } else {
        ok = ok && cJSON_AddNullToObject(r, "rope_scaling");
    }
    const struct {
        const char *key;
        int32_t id;
    } ids[] = {{"pad_token_id", tok->pad_id}, {"bos_token_id", tok->bos_id}, {"eos_token_id", tok->eos_id}};
    for (int i = 0; i < 3; i++)
        ok = ok && (ids[i].id >= 0 ? cJSON_AddNumberToObject(r, ids[i].key, ids[i].id) != NULL
                                   : cJSON_AddNullToObject(r, ids[i].key) != NULL);
    ok = ok && cJSON_AddStringToObject(r, "torch_dtype", "float32");
    char *text = ok ? cJSON_Print(r) : NULL;
    cJSON_Delete(r);
    if (text == NULL) dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for config.json");
    return text;
}
