/* model_config.c — model shapes: the built-in presets (the paper's GPT and T5
 * and small ones for tests), JSON model files, validation and parameter
 * counts. The counts here are the ones the analytic cost model charges as
 * model states, so there is one place that knows what a layer holds. */
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

/* kind, n_layers, n_dec_layers, hidden, heads, head_dim, ffn, vocab, max_seqlen;
 * the Llama-family fields after them are 0 here (GPT and T5 ignore them). */
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
    char known[256] = "";
    for (int32_t i = 0; i < N_PRESETS; i++) { /* the table's names, so the message never lags it */
        size_t at = strlen(known);
        snprintf(known + at, sizeof known - at, "%s%s", i ? ", " : "", PRESETS[i].name);
    }
    return dyn_error_set(err, DYN_ERR_INVALID_ARG, "unknown model preset '%s' (known: %s)", name ? name : "(null)",
                         known);
}

const char *dyn_model_kind_name(dyn_model_kind kind)
{
    return kind == DYN_MODEL_GPT ? "gpt" : kind == DYN_MODEL_T5 ? "t5" : "?";
}

dyn_status dyn_model_kind_parse(const char *name, dyn_model_kind *out, dyn_error *err)
{
    if (name && strcmp(name, "gpt") == 0) *out = DYN_MODEL_GPT;
    else if (name && strcmp(name, "t5") == 0) *out = DYN_MODEL_T5;
    else
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "unknown model kind '%s' (gpt or t5)",
                             name ? name : "(null)");
    return DYN_OK;
}

dyn_status dyn_model_config_validate(const dyn_model_config *c, dyn_error *err)
{
    if (c->kind != DYN_MODEL_GPT && c->kind != DYN_MODEL_T5)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "model: kind %d is neither gpt nor t5", (int)c->kind);
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
    if (c->kind == DYN_MODEL_GPT) /* the LM head is tied to the token table: count it once */
        return per_layer - (int64_t)c->vocab * c->hidden;
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

static int known_key(const char *k, const char *const *keys)
{
    for (; *keys; keys++)
        if (strcmp(k, *keys) == 0) return 1;
    return 0;
}

/* "preset" (a preset the file overrides; *have_preset) and "kind"
 * (required without a preset) into *c. */
static dyn_status config_preset_kind(const cJSON *root, const char *where, dyn_model_config *c, int *have_preset,
                                     dyn_error *err)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "preset");
    *have_preset = 0;
    if (p != NULL) {
        if (!cJSON_IsString(p))
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: field \"preset\" must be a string", where);
        if (dyn_model_config_preset(p->valuestring, c, err) != DYN_OK)
            return dyn_error_prefix(err, DYN_ERR_PARSE, where);
        *have_preset = 1;
    }
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(root, "kind");
    if (k != NULL) {
        if (!cJSON_IsString(k))
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: field \"kind\" must be \"gpt\" or \"t5\"", where);
        dyn_model_kind kind;
        if (dyn_model_kind_parse(k->valuestring, &kind, NULL) != DYN_OK)
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: field \"kind\" must be \"gpt\" or \"t5\", not \"%s\"",
                                 where, k->valuestring);
        c->kind = kind;
    } else if (!*have_preset) {
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: missing field \"kind\"", where);
    }
    return DYN_OK;
}

/* The integer fields into *c: required without a preset, optional
 * overrides with one; then head_dim derived where it is not given. */
static dyn_status config_sizes(const cJSON *root, const char *where, int have_preset, dyn_model_config *c,
                               dyn_error *err)
{
    struct { const char *key; int32_t *dst; int required; } f[] = {
        {"n_layers", &c->n_layers, 1}, {"hidden", &c->hidden, 1},   {"heads", &c->heads, 1},
        {"ffn", &c->ffn, 1},           {"vocab", &c->vocab, 1},     {"max_seqlen", &c->max_seqlen, 1},
        {"n_dec_layers", &c->n_dec_layers, c->kind == DYN_MODEL_T5}, {"head_dim", &c->head_dim, 0},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (cJSON_GetObjectItemCaseSensitive(root, f[i].key) == NULL && (have_preset || !f[i].required))
            continue;
        dyn_status st = json_int(root, f[i].key, where, f[i].dst, err);
        if (st != DYN_OK) return st;
    }
    /* A preset's head_dim goes with its hidden/heads: re-derive it when they
     * are overridden and head_dim is not. */
    if (have_preset && cJSON_GetObjectItemCaseSensitive(root, "head_dim") == NULL &&
        (cJSON_GetObjectItemCaseSensitive(root, "hidden") || cJSON_GetObjectItemCaseSensitive(root, "heads")))
        c->head_dim = 0;
    if (c->head_dim == 0 && c->heads > 0) {
        if (c->hidden % c->heads != 0)
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: heads %d does not divide hidden %d (give head_dim)",
                                 where, c->heads, c->hidden);
        c->head_dim = c->hidden / c->heads;
    }
    return DYN_OK;
}

dyn_status dyn_model_config_parse(const char *text, const char *where, dyn_model_config *out,
                                  dyn_error *err)
{
    static const char *const KEYS[] = {"preset", "kind", "n_layers", "n_dec_layers", "hidden", "heads",
                                       "head_dim", "ffn", "vocab", "max_seqlen", NULL};
    cJSON *root = NULL;
    dyn_status st = dyn_json_parse(text, strlen(text), where, &root, err);
    if (st != DYN_OK) return st;
    dyn_model_config c;
    memset(&c, 0, sizeof c);
    int have_preset = 0;
    if (!cJSON_IsObject(root)) st = dyn_error_set(err, DYN_ERR_PARSE, "%s: expected a JSON object", where);
    for (const cJSON *it = st == DYN_OK ? root->child : NULL; it; it = it->next)
        if (!known_key(it->string, KEYS)) {
            st = dyn_error_set(err, DYN_ERR_PARSE, "%s: unknown field \"%s\"", where, it->string);
            break;
        }
    if (st == DYN_OK) st = config_preset_kind(root, where, &c, &have_preset, err);
    if (st == DYN_OK) st = config_sizes(root, where, have_preset, &c, err);
    /* Prefix the source so the user knows which file is wrong. */
    if (st == DYN_OK && dyn_model_config_validate(&c, err) != DYN_OK) st = dyn_error_prefix(err, DYN_ERR_PARSE, where);
    if (st == DYN_OK) *out = c;
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
