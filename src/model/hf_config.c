/* hf_config.c — Hugging Face config.json to dyn_model_config for GPT-2,
 * T5 v1.1 and the Llama family (Llama, Qwen2, Mistral), and the Llama
 * family's config.json back. Contract and field list in hf_config.h. */
#include "model/hf_config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/layers.h" /* defines: DYN_LN_EPS, DYN_RMS_EPS, DYN_T5_NUM_BUCKETS, DYN_T5_MAX_DISTANCE */
#include "model/model.h"  /* defines: DYN_TOK_* */
#include "util/json.h"    /* defines: dyn_json_parse */
#include "util/util.h"    /* defines: dyn_file_read_all */

typedef enum hf_arch { ARCH_GPT2, ARCH_T5, ARCH_LLAMA, ARCH_QWEN2, ARCH_MISTRAL } hf_arch;

static const struct {
    const char *cls, *type;
    hf_arch arch;
} ARCHS[] = {
    {"GPT2LMHeadModel", "gpt2", ARCH_GPT2},
    {"T5ForConditionalGeneration", "t5", ARCH_T5},
    {"LlamaForCausalLM", "llama", ARCH_LLAMA},
    {"Qwen2ForCausalLM", "qwen2", ARCH_QWEN2},
    {"MistralForCausalLM", "mistral", ARCH_MISTRAL},
};
#define N_ARCHS (sizeof ARCHS / sizeof ARCHS[0])
#define SUPPORTED "GPT2LMHeadModel, T5ForConditionalGeneration, LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM"

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

static dyn_status find_arch(const cJSON *root, const char *where, hf_arch *arch, dyn_error *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const char *cls = cJSON_IsArray(a) && cJSON_GetArraySize(a) > 0 && cJSON_IsString(cJSON_GetArrayItem(a, 0))
                          ? cJSON_GetArrayItem(a, 0)->valuestring
                          : NULL;
    const char *type = get_str(root, "model_type");
    for (size_t i = 0; i < N_ARCHS; i++)
        if ((cls && strcmp(cls, ARCHS[i].cls) == 0) || (!cls && type && strcmp(type, ARCHS[i].type) == 0)) {
            *arch = ARCHS[i].arch;
            return DYN_OK;
        }
    return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: architecture %s is not supported (supported: " SUPPORTED ")",
                         where, cls ? cls : type ? type : "(none named)");
}

/* |a - b| within rounding of a value written to JSON. */
static int same_eps(double a, double b) { return fabs(a - b) <= 1e-3 * fabs(b); }

static dyn_status parse_gpt2(const cJSON *r, const char *where, int32_t max_len, dyn_model_config *c, dyn_error *err)
{
    dyn_status st = DYN_OK;
    int32_t positions = 0;
    c->kind = DYN_MODEL_GPT;
    if (st == DYN_OK) st = get_int(r, "n_embd", where, -1, &c->hidden, err);
    if (st == DYN_OK) st = get_int(r, "n_layer", where, -1, &c->n_layers, err);
    if (st == DYN_OK) st = get_int(r, "n_head", where, -1, &c->heads, err);
    if (st == DYN_OK) st = get_int(r, "vocab_size", where, -1, &c->vocab, err);
    if (st == DYN_OK) st = get_int(r, "n_positions", where, -1, &positions, err);
    if (st == DYN_OK) st = get_int(r, "n_inner", where, 4 * c->hidden, &c->ffn, err);
    if (st != DYN_OK) return st;
    double eps;
    if ((st = get_real(r, "layer_norm_epsilon", where, DYN_LN_EPS, &eps, err)) != DYN_OK) return st;
    const char *act = get_str(r, "activation_function");
    if (act && strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: activation_function %s is not supported (gelu_new)", where,
                             act);
    if (c->ffn != 4 * c->hidden)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: n_inner = %d is not supported (4 * n_embd = %d)", where,
                             c->ffn, 4 * c->hidden);
    if (!same_eps(eps, DYN_LN_EPS))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: layer_norm_epsilon = %g is not supported (%g)", where, eps,
                             (double)DYN_LN_EPS);
    if (max_len > positions)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: the run's %d tokens exceed n_positions = %d", where,
                             max_len, positions);
    c->head_dim = c->hidden / c->heads;
    c->max_seqlen = max_len > 0 ? max_len : positions;
    return DYN_OK;
}

static dyn_status parse_t5(const cJSON *r, const char *where, int32_t max_len, dyn_model_config *c, dyn_error *err)
{
    dyn_status st = DYN_OK;
    int32_t buckets = 0, distance = 0, tie = 0;
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
    if (st == DYN_OK) st = get_bool(r, "tie_word_embeddings", where, 1, &tie, err);
    if (st != DYN_OK) return st;
    double eps;
    if ((st = get_real(r, "layer_norm_epsilon", where, 1e-6, &eps, err)) != DYN_OK) return st;
    const char *ff = get_str(r, "feed_forward_proj");
    if (ff == NULL || strcmp(ff, "gated-gelu") != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: feed_forward_proj %s is not supported (T5 v1.1's gated-gelu)", where, ff ? ff : "(none)");
    if (buckets != DYN_T5_NUM_BUCKETS || distance != DYN_T5_MAX_DISTANCE || tie || !same_eps(eps, DYN_RMS_EPS))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: T5 with %d buckets, max distance %d, tie_word_embeddings %s and epsilon %g is not "
                             "supported (32, 128, false, 1e-6)",
                             where, buckets, distance, tie ? "true" : "false", eps);
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

static dyn_status parse_llama(const cJSON *r, const char *where, hf_arch arch, int32_t max_len, dyn_model_config *c,
                              dyn_error *err)
{
    dyn_status st = DYN_OK;
    int32_t positions = 0, attn_bias = 0, mlp_bias = 0, sliding = 0, window = 0;
    c->kind = DYN_MODEL_LLAMA;
    if (st == DYN_OK) st = get_int(r, "hidden_size", where, -1, &c->hidden, err);
    if (st == DYN_OK) st = get_int(r, "intermediate_size", where, -1, &c->ffn, err);
    if (st == DYN_OK) st = get_int(r, "num_hidden_layers", where, -1, &c->n_layers, err);
    if (st == DYN_OK) st = get_int(r, "num_attention_heads", where, -1, &c->heads, err);
    if (st == DYN_OK) st = get_int(r, "num_key_value_heads", where, c->heads, &c->kv_heads, err);
    if (st == DYN_OK) st = get_int(r, "head_dim", where, c->hidden / c->heads, &c->head_dim, err);
    if (st == DYN_OK) st = get_int(r, "vocab_size", where, -1, &c->vocab, err);
    if (st == DYN_OK) st = get_int(r, "max_position_embeddings", where, -1, &positions, err);
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
    if (arch == ARCH_LLAMA && (attn_bias || mlp_bias))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: attention_bias / mlp_bias true is not supported (Llama without biases; Qwen2's q/k/v "
                             "biases are)",
                             where);
    c->qkv_bias = arch == ARCH_QWEN2;
    c->max_seqlen = max_len > 0 ? max_len : positions;
    /* Sliding windows: Qwen2 only with use_sliding_window; Mistral whenever
     * sliding_window is set. Harmless when it covers every sequence. */
    if (arch == ARCH_QWEN2) st = get_bool(r, "use_sliding_window", where, 0, &sliding, err);
    if (arch == ARCH_MISTRAL) sliding = 1;
    if (st == DYN_OK && sliding) st = get_int(r, "sliding_window", where, 0, &window, err);
    if (st != DYN_OK) return st;
    if (sliding && window > 0 && window < c->max_seqlen)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: sliding_window = %d is shorter than the run's %d tokens; sliding-window attention is "
                             "not supported",
                             where, window, c->max_seqlen);
    return DYN_OK;
}

dyn_status dyn_hf_config_parse(const char *text, size_t len, const char *where, int32_t max_len,
                               dyn_model_config *out, dyn_error *err)
{
    cJSON *root = NULL;
    dyn_status st = dyn_json_parse(text, len, where, &root, err);
    if (st != DYN_OK) return st;
    dyn_model_config c;
    memset(&c, 0, sizeof c);
    hf_arch arch = ARCH_GPT2;
    if (!cJSON_IsObject(root)) st = dyn_error_set(err, DYN_ERR_PARSE, "%s: not a JSON object", where);
    if (st == DYN_OK) st = find_arch(root, where, &arch, err);
    if (st == DYN_OK) {
        if (arch == ARCH_GPT2) st = parse_gpt2(root, where, max_len, &c, err);
        else if (arch == ARCH_T5) st = parse_t5(root, where, max_len, &c, err);
        else st = parse_llama(root, where, arch, max_len, &c, err);
    }
    cJSON_Delete(root);
    if (st == DYN_OK) *out = c;
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

char *dyn_hf_config_llama_json(const dyn_model_config *c, dyn_error *err)
{
    if (c->kind != DYN_MODEL_LLAMA) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "config.json: not a Llama-family config (kind %d)", (int)c->kind);
        return NULL;
    }
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
    ok = ok && cJSON_AddNumberToObject(r, "pad_token_id", DYN_TOK_PAD);
    ok = ok && cJSON_AddNumberToObject(r, "bos_token_id", DYN_TOK_BOS);
    ok = ok && cJSON_AddNumberToObject(r, "eos_token_id", DYN_TOK_EOS);
    ok = ok && cJSON_AddStringToObject(r, "torch_dtype", "float32");
    char *text = ok ? cJSON_Print(r) : NULL;
    cJSON_Delete(r);
    if (text == NULL) dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for config.json");
    return text;
}
