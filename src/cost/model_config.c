/* model_config.c — model shapes: the built-in presets (the paper's GPT and T5,
 * real Llama shapes and small ones for tests), JSON model files, validation
 * and parameter counts. The counts here are the ones the analytic cost model
 * charges as model states, so there is one place that knows what a layer
 * holds. */
#include "dynapipe/model_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cost/cost_internal.h" /* defines: cost_layer_params */
#include "dynapipe/cost.h"
#include "util/json.h" /* defines: dyn_json_parse */
#include "util/util.h"          /* defines: dyn_file_read_all */

typedef struct preset {
    const char *name;
    dyn_model_config cfg;
} preset;

/* GPT and T5: kind, n_layers, n_dec_layers, hidden, heads, head_dim, ffn,
 * vocab, max_seqlen; the Llama-family fields after them are 0 (GPT and T5
 * ignore them). Llama presets name their fields. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const preset PRESETS[] = {
    /* Small shapes for tests: every size distinct, so a swapped field shows. */
    {"gpt-tiny", {DYN_MODEL_GPT, 2, 0, 64, 4, 16, 256, 512, 256}},
    /* GPT-2 small. */
    {"gpt2-124m", {DYN_MODEL_GPT, 12, 0, 768, 12, 64, 3072, 50257, 1024}},
    /* The DynaPipe paper's GPT: 32 layers, h = 4096, ffn = 16384, 32 heads. */
    {"gpt-6.7b", {DYN_MODEL_GPT, 32, 0, 4096, 32, 128, 16384, 50257, 4096}},
    {"t5-tiny", {DYN_MODEL_T5, 2, 2, 64, 4, 16, 128, 512, 256}},
    /* Small byte-level models `dynapipe train` trains by default: big enough
     * that matrix products, not per-call overhead, take most of the time on
     * one CPU core, small enough for a run of a minute or two on two. */
    {"gpt-mini", {DYN_MODEL_GPT, 4, 0, 256, 4, 64, 1024, 260, 2048}},
    {"t5-mini", {DYN_MODEL_T5, 4, 4, 256, 4, 64, 512, 260, 2048}},
    /* T5 v1.1 base. */
    {"t5-base", {DYN_MODEL_T5, 12, 12, 768, 12, 64, 2048, 32128, 2048}},
    /* The paper's T5 (T5 v1.1 11B): 24 + 24 layers, d_model 1024, d_ff 65536,
     * 128 heads of d_kv 128 (attention inner size 16384 > d_model). */
    {"t5-11b", {DYN_MODEL_T5, 24, 24, 1024, 128, 128, 65536, 32128, 4096}},
    /* Llama family. The small ones mirror gpt-tiny and gpt-mini (layers,
     * hidden, heads, vocabulary, max_seqlen) with half as many key/value
     * heads and ffn = 8h/3 rounded up to a multiple of 16 (Llama's rule:
     * the three SwiGLU matrices then hold GPT's 8h^2 parameters), untied
     * head, no q/k/v biases, rope_theta 10000, rms_eps 1e-5. */
    {"llama-tiny", {.kind = DYN_MODEL_LLAMA, .n_layers = 2, .hidden = 64, .heads = 4, .head_dim = 16, .ffn = 176,
                    .vocab = 512, .max_seqlen = 256, .kv_heads = 2, .rope_theta = 10000.0, .rms_eps = 1e-5}},
    {"llama-mini", {.kind = DYN_MODEL_LLAMA, .n_layers = 4, .hidden = 256, .heads = 4, .head_dim = 64, .ffn = 688,
                    .vocab = 260, .max_seqlen = 2048, .kv_heads = 2, .rope_theta = 10000.0, .rms_eps = 1e-5}},
    /* SmolLM2-135M (Hugging Face config.json), a Llama of GPT-2 small's
     * size: 30 layers of 576, 9 query and 3 key/value heads, tied head. */
    {"smollm2-135m", {.kind = DYN_MODEL_LLAMA, .n_layers = 30, .hidden = 576, .heads = 9, .head_dim = 64,
                      .ffn = 1536, .vocab = 49152, .max_seqlen = 8192, .kv_heads = 3, .tie_embeddings = 1,
                      .rope_theta = 100000.0, .rms_eps = 1e-5}},
    /* Llama 3.2 1B (Hugging Face config.json): tied head, llama3 rotary
     * scaling (factor 32 over 8192 positions). */
    {"llama3.2-1b", {.kind = DYN_MODEL_LLAMA, .n_layers = 16, .hidden = 2048, .heads = 32, .head_dim = 64,
                     .ffn = 8192, .vocab = 128256, .max_seqlen = 131072, .kv_heads = 8, .tie_embeddings = 1,
                     .rope_scaling = DYN_ROPE_LLAMA3, .rope_theta = 500000.0, .rms_eps = 1e-5, .rope_factor = 32.0,
                     .rope_low_freq = 1.0, .rope_high_freq = 4.0, .rope_orig_ctx = 8192}},
    /* Llama 3 8B: 32 layers, 32 query and 8 key/value heads, untied head. */
    {"llama3-8b", {.kind = DYN_MODEL_LLAMA, .n_layers = 32, .hidden = 4096, .heads = 32, .head_dim = 128,
                   .ffn = 14336, .vocab = 128256, .max_seqlen = 8192, .kv_heads = 8, .rope_theta = 500000.0,
                   .rms_eps = 1e-5}},
};
#pragma GCC diagnostic pop
#define N_PRESETS ((int32_t)(sizeof PRESETS / sizeof PRESETS[0]))

const char *dyn_model_config_preset_name(int32_t i)
{
    return i >= 0 && i < N_PRESETS ? PRESETS[i].name : NULL;
}

dyn_status dyn_model_config_preset(const char *name, dyn_model_config *out, dyn_error *err)
{
    for (int32_t i = 0; i < N_PRESETS; i++) {
        if (name != NULL && strcmp(name, PRESETS[i].name) == 0) {
            *out = PRESETS[i].cfg;
            return DYN_OK;
        }
    }
    char known[384] = "";
    for (int32_t i = 0; i < N_PRESETS; i++) { /* the table's names, so the message never lags it */
        size_t at = strlen(known);
        snprintf(known + at, sizeof known - at, "%s%s", i ? ", " : "", PRESETS[i].name);
    }
    return dyn_error_set(err, DYN_ERR_INVALID_ARG, "unknown model preset '%s' (known: %s)", name ? name : "(null)",
                         known);
}

const char *dyn_model_kind_name(dyn_model_kind kind)
{
    switch (kind) {
    case DYN_MODEL_GPT: return "gpt";
    case DYN_MODEL_T5: return "t5";
    case DYN_MODEL_LLAMA: return "llama";
    }
    return "?";
}

dyn_status dyn_model_kind_parse(const char *name, dyn_model_kind *out, dyn_error *err)
{
    if (name && strcmp(name, "gpt") == 0) *out = DYN_MODEL_GPT;
    else if (name && strcmp(name, "t5") == 0) *out = DYN_MODEL_T5;
    else if (name && strcmp(name, "llama") == 0) *out = DYN_MODEL_LLAMA;
    else
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "unknown model kind '%s' (gpt, t5 or llama)",
                             name ? name : "(null)");
    return DYN_OK;
}

/* The Llama fields: grouped-query heads that divide the query heads, an
 * even head_dim (rotary pairs), 0/1 flags, positive theta and epsilon, and
 * a rotary scaling src/model computes (none, or llama3 with sane factors).
 * The same rules as src/model's own check, so a shape the planner accepts
 * is one the runtime builds. */
static dyn_status validate_llama(const dyn_model_config *c, dyn_error *err)
{
    if (c->n_dec_layers != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "model: llama has no decoder stack, n_dec_layers = %d must be 0", c->n_dec_layers);
    if (c->kv_heads < 1 || c->kv_heads > c->heads || c->heads % c->kv_heads != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "model: llama kv_heads = %d must divide heads = %d",
                             c->kv_heads, c->heads);
    if (c->head_dim % 2 != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "model: llama head_dim = %d must be even (rotary pairs)",
                             c->head_dim);
    if ((c->tie_embeddings != 0 && c->tie_embeddings != 1) || (c->qkv_bias != 0 && c->qkv_bias != 1))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "model: llama tie_embeddings = %d and qkv_bias = %d must be 0 or 1", c->tie_embeddings,
                             c->qkv_bias);
    if (!(c->rope_theta > 0) || !isfinite(c->rope_theta) || !(c->rms_eps > 0) || !isfinite(c->rms_eps))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "model: llama rope_theta = %g and rms_eps = %g must be finite and > 0", c->rope_theta,
                             c->rms_eps);
    if (c->rope_scaling == DYN_ROPE_LLAMA3) {
        if (!(c->rope_factor > 0) || !(c->rope_low_freq > 0) || !(c->rope_high_freq > c->rope_low_freq) ||
            !isfinite(c->rope_factor) || !isfinite(c->rope_high_freq) || c->rope_orig_ctx < 1)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "model: llama3 rope scaling needs factor > 0, 0 < low_freq < high_freq and "
                                 "original context >= 1 (got %g, %g, %g, %d)",
                                 c->rope_factor, c->rope_low_freq, c->rope_high_freq, c->rope_orig_ctx);
    } else if (c->rope_scaling != DYN_ROPE_NONE) {
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "model: llama rope_scaling %d is neither none (0) nor llama3 (1)", c->rope_scaling);
    }
    return DYN_OK;
}

dyn_status dyn_model_config_validate(const dyn_model_config *c, dyn_error *err)
{
    if (c->kind != DYN_MODEL_GPT && c->kind != DYN_MODEL_T5 && c->kind != DYN_MODEL_LLAMA)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "model: kind %d is none of gpt, t5 and llama", (int)c->kind);
    struct { const char *name; int32_t v; } pos[] = {
        {"n_layers", c->n_layers}, {"hidden", c->hidden}, {"heads", c->heads},
        {"head_dim", c->head_dim}, {"ffn", c->ffn},       {"vocab", c->vocab},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "model: %s = %d must be positive",
                                 pos[i].name, pos[i].v);
    if (c->max_seqlen < 2)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "model: max_seqlen = %d must be >= 2", c->max_seqlen);
    /* Upper bounds far above any real model (GPT-3 has hidden 12288, 96
     * layers) but low enough that every size computed from them (parameter
     * counts in int64, FLOPs and bytes in double) stays exact and finite. */
    struct { const char *name; int32_t v, max; } top[] = {
        {"n_layers", c->n_layers, DYN_MODEL_MAX_LAYERS}, {"n_dec_layers", c->n_dec_layers, DYN_MODEL_MAX_LAYERS},
        {"hidden", c->hidden, DYN_MODEL_MAX_HIDDEN},     {"heads", c->heads, DYN_MODEL_MAX_HIDDEN},
        {"head_dim", c->head_dim, DYN_MODEL_MAX_HIDDEN}, {"ffn", c->ffn, DYN_MODEL_MAX_FFN},
        {"vocab", c->vocab, DYN_MODEL_MAX_VOCAB},        {"max_seqlen", c->max_seqlen, DYN_MODEL_MAX_SEQLEN},
    };
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (top[i].v > top[i].max)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "model: %s = %d is above the limit %d", top[i].name,
                                 top[i].v, top[i].max);
    if ((int64_t)c->heads * c->head_dim > DYN_MODEL_MAX_HIDDEN)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "model: heads * head_dim = %lld is above the limit %d (attention width)",
                             (long long)c->heads * c->head_dim, DYN_MODEL_MAX_HIDDEN);
    if (c->kind == DYN_MODEL_LLAMA) return validate_llama(c, err);
    if (c->kind == DYN_MODEL_GPT) {
        if (c->n_dec_layers != 0)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "model: gpt has no decoder stack, n_dec_layers = %d must be 0",
                                 c->n_dec_layers);
        if ((int64_t)c->heads * c->head_dim != c->hidden)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "model: gpt needs heads * head_dim == hidden (%d * %d != %d)",
                                 c->heads, c->head_dim, c->hidden);
    } else if (c->n_dec_layers <= 0) {
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "model: t5 needs n_dec_layers >= 1 (got %d)",
                             c->n_dec_layers);
    }
    return DYN_OK;
}

int64_t dyn_model_config_params(const dyn_model_config *c)
{
    int64_t per_layer = cost_layer_params(c, DYN_LAYER_EMBED) +
                        (int64_t)c->n_layers * cost_layer_params(c, DYN_LAYER_ENCODER) +
                        cost_layer_params(c, DYN_LAYER_BRIDGE) +
                        (int64_t)c->n_dec_layers * cost_layer_params(c, DYN_LAYER_DECODER) +
                        cost_layer_params(c, DYN_LAYER_LM_HEAD);
    /* GPT's LM head is tied to the token table, a Llama's when it says so:
     * count the table once. */
    if (c->kind == DYN_MODEL_GPT || (c->kind == DYN_MODEL_LLAMA && c->tie_embeddings))
        return per_layer - (int64_t)c->vocab * c->hidden;
    if (c->kind == DYN_MODEL_LLAMA) return per_layer;
    /* T5: one relative-bias table (heads x 32 buckets) per stack, owned
     * by each stack's first block. The per-layer counts leave them out
     * because they are negligible for memory planning; a whole-model
     * count must match the real model. */
    return per_layer + 2 * (int64_t)c->heads * 32;
}

/* An integer JSON field: present, a number, integral and within int32. */
static dyn_status json_int(const cJSON *obj, const char *key, const char *where, int32_t *out,
                           dyn_error *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (it == NULL) return dyn_error_set(err, DYN_ERR_PARSE, "%s: missing field \"%s\"", where, key);
    double v = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!(v == floor(v)) || v < -2147483648.0 || v > 2147483647.0)
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: field \"%s\" must be an integer", where, key);
    *out = (int32_t)v;
    return DYN_OK;
}

/* A positive finite number field (absent: left as it is). */
static dyn_status json_pos_double(const cJSON *obj, const char *key, const char *where, double *out,
                                  dyn_error *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (it == NULL) return DYN_OK;
    if (!cJSON_IsNumber(it) || !(it->valuedouble > 0) || !isfinite(it->valuedouble))
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: field \"%s\" must be a number > 0", where, key);
    *out = it->valuedouble;
    return DYN_OK;
}

/* A flag field: true/false or 0/1 (absent: left as it is). */
static dyn_status json_flag(const cJSON *obj, const char *key, const char *where, int32_t *out, dyn_error *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (it == NULL) return DYN_OK;
    if (cJSON_IsBool(it)) *out = cJSON_IsTrue(it) ? 1 : 0;
    else if (cJSON_IsNumber(it) && (it->valuedouble == 0 || it->valuedouble == 1)) *out = (int32_t)it->valuedouble;
    else return dyn_error_set(err, DYN_ERR_PARSE, "%s: field \"%s\" must be true, false, 0 or 1", where, key);
    return DYN_OK;
}

/* The Llama fields of a model JSON over c (kind llama): defaults as Hugging
 * Face's LlamaConfig where neither a preset nor the file gives them
 * (kv_heads = heads, rope_theta 10000, rms_eps 1e-6, untied, no biases). */
static dyn_status parse_llama_fields(const cJSON *root, const char *where, dyn_model_config *c, dyn_error *err)
{
    dyn_status st;
    if (cJSON_GetObjectItemCaseSensitive(root, "kv_heads") != NULL) {
        if ((st = json_int(root, "kv_heads", where, &c->kv_heads, err)) != DYN_OK) return st;
    } else if (c->kv_heads == 0) {
        c->kv_heads = c->heads;
    }
    if (c->rope_theta == 0) c->rope_theta = 10000.0;
    if (c->rms_eps == 0) c->rms_eps = 1e-6;
    if ((st = json_flag(root, "tie_embeddings", where, &c->tie_embeddings, err)) != DYN_OK) return st;
    if ((st = json_flag(root, "qkv_bias", where, &c->qkv_bias, err)) != DYN_OK) return st;
    if ((st = json_pos_double(root, "rope_theta", where, &c->rope_theta, err)) != DYN_OK) return st;
    return json_pos_double(root, "rms_eps", where, &c->rms_eps, err);
}

static const char *const LLAMA_KEYS[] = {"kv_heads", "tie_embeddings", "qkv_bias", "rope_theta", "rms_eps", NULL};

static int known_key(const char *k, const char *const *keys)
{
    for (; *keys; keys++)
        if (strcmp(k, *keys) == 0) return 1;
    return 0;
}

dyn_status dyn_model_config_parse(const char *text, const char *where, dyn_model_config *out,
                                  dyn_error *err)
{
    static const char *const KEYS[] = {"preset", "kind", "n_layers", "n_dec_layers", "hidden", "heads",
                                       "head_dim", "ffn", "vocab", "max_seqlen", "kv_heads", "tie_embeddings",
                                       "qkv_bias", "rope_theta", "rms_eps", NULL};
    cJSON *root = NULL;
    dyn_status st = dyn_json_parse(text, strlen(text), where, &root, err);
    if (st != DYN_OK) return st;
    dyn_model_config c;
    memset(&c, 0, sizeof c);
    int have_preset = 0;
    if (!cJSON_IsObject(root)) {
        st = dyn_error_set(err, DYN_ERR_PARSE, "%s: expected a JSON object", where);
        goto done;
    }
    for (const cJSON *it = root->child; it; it = it->next) {
        if (!known_key(it->string, KEYS)) {
            st = dyn_error_set(err, DYN_ERR_PARSE, "%s: unknown field \"%s\"", where, it->string);
            goto done;
        }
    }
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "preset");
    if (p != NULL) {
        if (!cJSON_IsString(p)) {
            st = dyn_error_set(err, DYN_ERR_PARSE, "%s: field \"preset\" must be a string", where);
            goto done;
        }
        if ((st = dyn_model_config_preset(p->valuestring, &c, err)) != DYN_OK) {
            st = dyn_error_prefix(err, DYN_ERR_PARSE, where);
            goto done;
        }
        have_preset = 1;
    }
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(root, "kind");
    if (k != NULL) {
        if (!cJSON_IsString(k)) {
            st = dyn_error_set(err, DYN_ERR_PARSE, "%s: field \"kind\" must be \"gpt\", \"t5\" or \"llama\"", where);
            goto done;
        }
        dyn_model_kind kind;
        if (dyn_model_kind_parse(k->valuestring, &kind, NULL) != DYN_OK) {
            st = dyn_error_set(err, DYN_ERR_PARSE,
                               "%s: field \"kind\" must be \"gpt\", \"t5\" or \"llama\", not \"%s\"", where,
                               k->valuestring);
            goto done;
        }
        c.kind = kind;
    } else if (!have_preset) {
        st = dyn_error_set(err, DYN_ERR_PARSE, "%s: missing field \"kind\"", where);
        goto done;
    }
    /* Required without a preset; optional overrides with one. */
    struct { const char *key; int32_t *dst; int required; } f[] = {
        {"n_layers", &c.n_layers, 1}, {"hidden", &c.hidden, 1},   {"heads", &c.heads, 1},
        {"ffn", &c.ffn, 1},           {"vocab", &c.vocab, 1},     {"max_seqlen", &c.max_seqlen, 1},
        {"n_dec_layers", &c.n_dec_layers, c.kind == DYN_MODEL_T5}, {"head_dim", &c.head_dim, 0},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (cJSON_GetObjectItemCaseSensitive(root, f[i].key) == NULL && (have_preset || !f[i].required))
            continue;
        if ((st = json_int(root, f[i].key, where, f[i].dst, err)) != DYN_OK) goto done;
    }
    /* A preset's head_dim goes with its hidden/heads: re-derive it when they
     * are overridden and head_dim is not. */
    if (have_preset && cJSON_GetObjectItemCaseSensitive(root, "head_dim") == NULL &&
        (cJSON_GetObjectItemCaseSensitive(root, "hidden") || cJSON_GetObjectItemCaseSensitive(root, "heads")))
        c.head_dim = 0;
    if (c.head_dim == 0 && c.heads > 0) {
        if (c.hidden % c.heads != 0) {
            st = dyn_error_set(err, DYN_ERR_PARSE, "%s: heads %d does not divide hidden %d (give head_dim)",
                               where, c.heads, c.hidden);
            goto done;
        }
        c.head_dim = c.hidden / c.heads;
    }
    if (c.kind == DYN_MODEL_LLAMA) {
        if ((st = parse_llama_fields(root, where, &c, err)) != DYN_OK) goto done;
    } else {
        /* a Llama preset turned into another kind keeps none of its Llama fields */
        dyn_model_config base = c;
        memset(&c, 0, sizeof c);
        c.kind = base.kind, c.n_layers = base.n_layers, c.n_dec_layers = base.n_dec_layers, c.hidden = base.hidden;
        c.heads = base.heads, c.head_dim = base.head_dim, c.ffn = base.ffn, c.vocab = base.vocab;
        c.max_seqlen = base.max_seqlen;
        for (const char *const *key = LLAMA_KEYS; *key; key++)
            if (cJSON_GetObjectItemCaseSensitive(root, *key) != NULL) {
                st = dyn_error_set(err, DYN_ERR_PARSE, "%s: field \"%s\" applies to kind llama only, not %s", where,
                                   *key, dyn_model_kind_name(c.kind));
                goto done;
            }
    }
    if ((st = dyn_model_config_validate(&c, err)) != DYN_OK) {
        /* Prefix the source so the user knows which file is wrong. */
        st = dyn_error_prefix(err, DYN_ERR_PARSE, where);
        goto done;
    }
    *out = c;
done:
    cJSON_Delete(root);
    return st;
}

dyn_status dyn_model_config_load(const char *path, dyn_model_config *out, dyn_error *err)
{
    char *text = NULL;
    dyn_status st = dyn_file_read_all(path, &text, NULL, err);
    if (st != DYN_OK) return st;
    st = dyn_model_config_parse(text, path, out, err);
    free(text);
    return st;
}
