/* ckpt_state.c — trainer_state.json (see ckpt_state.h): one table of
 * fields (JSON name, type, place in rt_ckpt_meta, range) from which both
 * the writer and the reader work, in table order, which is the file's key
 * order. A field inside a nested object names that object ("model",
 * "lr_schedule"); the fields of one object are consecutive in the table.
 *
 * The reader refuses, naming the field, anything missing, of another type
 * or out of its range, and checks a number's range before converting it
 * (so 1e300 or 1.5 for an int is a message, not undefined behaviour). The
 * ranges are those the command line and the planner can produce. */
#include "runtime/ckpt_state.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "dynapipe/model_config.h" /* defines: dyn_model_kind_name, dyn_model_kind_parse */

typedef enum field_type {
    F_FORMAT, /* number: RT_CKPT_FORMAT written; the one this dynapipe reads */
    F_CONST,  /* string `text` written; not read ("rng": "none") */
    F_I32,    /* int32_t in [lo, hi] */
    F_I64,    /* int64_t in [lo, hi] */
    F_F32,    /* float in [lo, hi] */
    F_F64,    /* double in [lo, hi] (written with every digit it needs) */
    F_HEX64,  /* uint64_t as 16 hex digits */
    F_STR,    /* char[hi], NUL-terminated */
    F_KIND,   /* dyn_model_kind by name */
    F_CUTS,   /* stage_first_layer: n_stages + 1 layer numbers in [lo, hi] */
    F_FILES,  /* {name: {"bytes": n, "fnv1a64": hex}} of every file hashed */
} field_type;

typedef struct field {
    const char *object; /* the nested object holding it, NULL: top level */
    const char *name;
    field_type type;
    size_t offset;      /* in rt_ckpt_meta */
    double lo, hi;      /* numbers: the range read; F_STR: hi = capacity */
    int optional;       /* 1: the object may be absent (then the field stays as preset);
                         * 2: the same, and it is written for Llama-family models only;
                         * 3: the field alone may be absent (older checkpoints; it stays 0) */
    const char *text;   /* F_CONST */
} field;

#define AT(member) offsetof(rt_ckpt_meta, member)
#define BIG ((double)(INT64_MAX / 2)) /* step counts: far beyond any run, exact as a double (2^62) */
#define LR "lr_schedule"
#define ORD "order" /* the training order's settings and position (optional: older checkpoints) */
#define DO "data_options" /* rt_ckpt_data; absent from checkpoints written before it */
#define CAP(member) sizeof(((rt_ckpt_meta *)0)->member)

static const field FIELDS[] = {
    {NULL,    "format",              F_FORMAT, 0,                       0, 1000, 0, NULL},
    {NULL,    "step",                F_I64,    AT(step),                0, BIG, 0, NULL},
    {NULL,    "sampler_position",    F_I64,    AT(sampler_pos),         0, BIG, 0, NULL},
    {NULL,    "rng",                 F_CONST,  0,                       0, 0, 0, "none"},
    {"model", "kind",                F_KIND,   AT(model.kind),          0, 0, 0, NULL},
    {"model", "n_layers",            F_I32,    AT(model.n_layers),      1, 1 << 20, 0, NULL},
    {"model", "n_dec_layers",        F_I32,    AT(model.n_dec_layers),  0, 1 << 20, 0, NULL},
    {"model", "hidden",              F_I32,    AT(model.hidden),        1, 1 << 20, 0, NULL},
    {"model", "heads",               F_I32,    AT(model.heads),         1, 1 << 20, 0, NULL},
    {"model", "head_dim",            F_I32,    AT(model.head_dim),      1, 1 << 20, 0, NULL},
    {"model", "ffn",                 F_I32,    AT(model.ffn),           1, 1 << 24, 0, NULL},
    {"model", "vocab",               F_I32,    AT(model.vocab),         1, 1 << 24, 0, NULL},
    {"model", "max_seqlen",          F_I32,    AT(model.max_seqlen),    1, 1 << 24, 0, NULL},
    /* the Llama family's fields (dyn_model_config); absent for GPT and T5 */
    {"llama", "kv_heads",            F_I32,    AT(model.kv_heads),      1, 1 << 20, 2, NULL},
    {"llama", "tie_embeddings",      F_I32,    AT(model.tie_embeddings), 0, 1, 2, NULL},
    {"llama", "qkv_bias",            F_I32,    AT(model.qkv_bias),      0, 1, 2, NULL},
    {"llama", "rms_eps",             F_F64,    AT(model.rms_eps),       0, 1, 2, NULL},
    {"llama", "rope_theta",          F_F64,    AT(model.rope_theta),    0, 1e12, 2, NULL},
    {"llama", "rope_scaling",        F_I32,    AT(model.rope_scaling),  0, 1, 2, NULL},
    {"llama", "rope_factor",         F_F64,    AT(model.rope_factor),   0, 1e6, 2, NULL},
    {"llama", "rope_low_freq",       F_F64,    AT(model.rope_low_freq), 0, 1e6, 2, NULL},
    {"llama", "rope_high_freq",      F_F64,    AT(model.rope_high_freq), 0, 1e6, 2, NULL},
    {"llama", "rope_orig_ctx",       F_I32,    AT(model.rope_orig_ctx), 0, 1 << 24, 2, NULL},
    /* config.json's token ids (-1: null); absent in older checkpoints: the byte vocabulary's */
    {"tokens", "bos_token_id",       F_I32,    AT(tokens.bos_id),       -1, 1 << 24, 1, NULL},
    {"tokens", "eos_token_id",       F_I32,    AT(tokens.eos_id),       -1, 1 << 24, 1, NULL},
    {"tokens", "pad_token_id",       F_I32,    AT(tokens.pad_id),       -1, 1 << 24, 1, NULL},
    {NULL,    "seed",                F_HEX64,  AT(seed),                0, 0, 0, NULL},
    {NULL,    "stages",              F_I32,    AT(stages),              1, RT_CKPT_MAX_STAGES, 0, NULL},
    {NULL,    "dp",                  F_I32,    AT(dp),                  1, 1 << 20, 0, NULL},
    {NULL,    "chunks",              F_I32,    AT(chunks),              1, RT_CKPT_MAX_STAGES, 0, NULL},
    {NULL,    "stage_first_layer",   F_CUTS,   AT(lay_first),           0, 1 << 22, 0, NULL},
    {NULL,    "data",                F_STR,    AT(data_spec),           0, sizeof(((rt_ckpt_meta *)0)->data_spec), 0, NULL},
    {NULL,    "samples",             F_I32,    AT(n_samples),           0, INT32_MAX, 0, NULL},
    {NULL,    "split",               F_I32,    AT(split),               0, 1, 0, NULL},
    {NULL,    "global_batch_tokens", F_I64,    AT(global_batch_tokens), 1, BIG, 0, NULL},
    {LR,      "lr",                  F_F32,    AT(lr.max_lr),           0, 10, 1, NULL},
    {LR,      "min_lr",              F_F32,    AT(lr.min_lr),           0, 10, 1, NULL},
    {LR,      "warmup",              F_I64,    AT(lr.warmup_steps),     0, BIG, 1, NULL},
    {LR,      "total_steps",         F_I64,    AT(lr.total_steps),      1, BIG, 1, NULL},
    {ORD,     "shuffle",             F_I32,    AT(shuffle),             0, 1, 1, NULL},
    {ORD,     "epochs",              F_I64,    AT(epochs),              0, BIG, 1, NULL},
    {ORD,     "eval_split",          F_F64,    AT(eval_split),          0, 0.999999999, 1, NULL},
    {ORD,     "samples_per_epoch",   F_I32,    AT(per_epoch),           0, INT32_MAX, 1, NULL},
    {ORD,     "epoch",               F_I64,    AT(epoch),               0, BIG, 1, NULL},
    {ORD,     "index",               F_I64,    AT(index),               0, INT32_MAX, 1, NULL},
    {ORD,     "eval_data",           F_STR,    AT(eval_data),           0, CAP(eval_data), 1, NULL},
    {DO,      "truncate",            F_I32,    AT(data.truncate),       0, 1, 1, NULL},
    {DO,      "tokenizer",           F_STR,    AT(data.tokenizer),      0, CAP(data.tokenizer), 1, NULL},
    {DO,      "tokenizer_fnv1a64",   F_HEX64,  AT(data.tokenizer_fnv),  0, 0, 1, NULL},
    {DO,      "vocab",               F_I32,    AT(data.vocab),          1, 1 << 24, 1, NULL},
    {DO,      "template",            F_STR,    AT(data.template_str),   0, CAP(data.template_str), 1, NULL},
    {DO,      "chat_template_fnv1a64", F_HEX64, AT(data.chat_fnv),      0, 0, 3, NULL},
    {DO,      "pad_token_id",        F_I32,    AT(data.sp.pad),         0, 1 << 24, 1, NULL},
    {DO,      "bos_token_id",        F_I32,    AT(data.sp.bos),         -1, 1 << 24, 1, NULL},
    {DO,      "eos_token_id",        F_I32,    AT(data.sp.eos),         -1, 1 << 24, 1, NULL},
    {DO,      "decoder_start_token_id", F_I32, AT(data.sp.decoder_start), 0, 1 << 24, 1, NULL},
    {NULL,    "files",               F_FILES,  AT(files),               0, BIG, 0, NULL},
};
#define N_FIELDS ((int)(sizeof FIELDS / sizeof FIELDS[0]))

/* ---- writing ----------------------------------------------------------------- */

static cJSON *hex_item(uint64_t v)
{
    char hex[32];
    snprintf(hex, sizeof hex, "%016" PRIx64, v);
    return cJSON_CreateString(hex);
}

static cJSON *files_to_json(const rt_ckpt_meta *m)
{
    cJSON *files = cJSON_CreateObject();
    for (int32_t i = 0; files && i < m->n_files; i++) {
        cJSON *f = cJSON_AddObjectToObject(files, m->files[i].name);
        if (f == NULL || !cJSON_AddNumberToObject(f, "bytes", (double)m->files[i].bytes) ||
            !cJSON_AddItemToObject(f, "fnv1a64", hex_item(m->files[i].fnv))) {
            cJSON_Delete(files);
            return NULL;
        }
    }
    return files;
}

/* Field f of *m as a JSON item (NULL when out of memory). */
static cJSON *field_to_json(const field *f, const rt_ckpt_meta *m)
{
    const char *p = (const char *)m + f->offset;
    switch (f->type) {
    case F_FORMAT: return cJSON_CreateNumber(RT_CKPT_FORMAT);
    case F_CONST: return cJSON_CreateString(f->text);
    case F_I32: return cJSON_CreateNumber(*(const int32_t *)p);
    case F_I64: return cJSON_CreateNumber((double)*(const int64_t *)p);
    case F_F32: return cJSON_CreateNumber(*(const float *)p);
    case F_F64: return cJSON_CreateNumber(*(const double *)p);
    case F_HEX64: return hex_item(*(const uint64_t *)p);
    case F_STR: return cJSON_CreateString(p);
    case F_KIND: return cJSON_CreateString(dyn_model_kind_name(*(const dyn_model_kind *)p));
    case F_CUTS: {
        cJSON *a = cJSON_CreateArray();
        for (int32_t s = 0; a && s <= m->n_stages; s++)
            if (!cJSON_AddItemToArray(a, cJSON_CreateNumber(m->lay_first[s]))) {
                cJSON_Delete(a);
                return NULL;
            }
        return a;
    }
    case F_FILES: return files_to_json(m);
    }
    return NULL;
}

/* Whether field f is written: "data_options" only when m records it (a
 * checkpoint read without it is written back without it). */
static int written(const field *f, const rt_ckpt_meta *m)
{
    if (f->optional == 2 && m->model.kind != DYN_MODEL_LLAMA) return 0; /* a Llama's own fields */
    return f->object == NULL || strcmp(f->object, DO) != 0 || m->data.recorded;
}

cJSON *rt_ckpt_state_to_json(const rt_ckpt_meta *m)
{
    cJSON *r = cJSON_CreateObject(), *obj = NULL;
    for (int i = 0; r && i < N_FIELDS; i++) {
        const field *f = &FIELDS[i];
        if (!written(f, m)) continue;
        cJSON *to = r;
        if (f->object) {
            obj = cJSON_GetObjectItemCaseSensitive(r, f->object);
            if (obj == NULL) obj = cJSON_AddObjectToObject(r, f->object);
            to = obj;
        }
        cJSON *item = field_to_json(f, m);
        if (to == NULL || item == NULL || !cJSON_AddItemToObject(to, f->name, item)) {
            cJSON_Delete(item);
            cJSON_Delete(r);
            return NULL;
        }
    }
    return r;
}

/* ---- reading ----------------------------------------------------------------- */

/* "object.name" or "name": how messages name field f. */
static const char *qualified(const field *f, char *buf, size_t cap)
{
    if (f->object) snprintf(buf, cap, "%s.%s", f->object, f->name);
    else snprintf(buf, cap, "%s", f->name);
    return buf;
}

/* Item v as a number in [lo, hi], an integer if asked; checked before any
 * conversion. what names it in the message. */
static dyn_status number_in(const cJSON *v, double lo, double hi, int integer, const char *path, const char *what,
                            double *out, dyn_error *err)
{
    double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(x >= lo && x <= hi) || (integer && x != floor(x))) {
        if (integer)
            return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"%s\" missing or not an integer in [%.0f, %.0f]", path,
                                 what, lo, hi);
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"%s\" missing or not a number in [%g, %g]", path, what, lo,
                             hi);
    }
    *out = x;
    return DYN_OK;
}

static dyn_status hex_from(const cJSON *v, const char *path, const char *what, uint64_t *out, dyn_error *err)
{
    if (!cJSON_IsString(v) || sscanf(v->valuestring, "%" SCNx64, out) != 1)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"%s\" missing or not hex", path, what);
    return DYN_OK;
}

static dyn_status cuts_from(const field *f, const cJSON *v, const char *path, rt_ckpt_meta *m, dyn_error *err)
{
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    if (n < 2 || n > RT_CKPT_MAX_STAGES + 1 || n - 1 != m->stages * m->chunks)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"%s\" must list stages x chunks + 1 layers", path, f->name);
    for (int i = 0; i < n; i++) {
        char what[64];
        double x = 0;
        snprintf(what, sizeof what, "%s[%d]", f->name, i);
        dyn_status st = number_in(cJSON_GetArrayItem(v, i), f->lo, f->hi, 1, path, what, &x, err);
        if (st != DYN_OK) return st;
        m->lay_first[i] = (int32_t)x;
    }
    m->n_stages = n - 1;
    return DYN_OK;
}

static dyn_status files_from(const field *f, const cJSON *v, const char *path, rt_ckpt_meta *m, dyn_error *err)
{
    if (!cJSON_IsObject(v)) return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"%s\" missing", path, f->name);
    for (const cJSON *e = v->child; e; e = e->next) {
        if (m->n_files == RT_CKPT_MAX_FILES || strlen(e->string) >= sizeof m->files[0].name ||
            strchr(e->string, '/') != NULL)
            return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: bad \"%s\" entry '%s'", path, f->name, e->string);
        rt_ckpt_file *x = &m->files[m->n_files++];
        snprintf(x->name, sizeof x->name, "%s", e->string);
        char what[128];
        double bytes = 0;
        snprintf(what, sizeof what, "%s.%s.bytes", f->name, x->name);
        dyn_status st = number_in(cJSON_GetObjectItemCaseSensitive(e, "bytes"), f->lo, f->hi, 1, path, what, &bytes,
                                  err);
        if (st != DYN_OK) return st;
        x->bytes = (uint64_t)bytes;
        snprintf(what, sizeof what, "%s.%s.fnv1a64", f->name, x->name);
        if ((st = hex_from(cJSON_GetObjectItemCaseSensitive(e, "fnv1a64"), path, what, &x->fnv, err)) != DYN_OK)
            return st;
    }
    return DYN_OK;
}

/* Field f from item v (NULL when absent) into *m. */
static dyn_status field_from_json(const field *f, const cJSON *v, const char *path, rt_ckpt_meta *m, dyn_error *err)
{
    char *p = (char *)m + f->offset;
    char what[64];
    qualified(f, what, sizeof what);
    double x = 0;
    dyn_status st = DYN_OK;
    switch (f->type) {
    case F_CONST: return DYN_OK;
    case F_FORMAT:
        st = number_in(v, f->lo, f->hi, 1, path, what, &x, err);
        if (st == DYN_OK && x != RT_CKPT_FORMAT)
            st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: checkpoint format %d, this dynapipe reads %d", path, (int)x,
                               RT_CKPT_FORMAT);
        return st;
    case F_I32:
        if ((st = number_in(v, f->lo, f->hi, 1, path, what, &x, err)) == DYN_OK) *(int32_t *)p = (int32_t)x;
        return st;
    case F_I64:
        if ((st = number_in(v, f->lo, f->hi, 1, path, what, &x, err)) == DYN_OK) *(int64_t *)p = (int64_t)x;
        return st;
    case F_F32:
        if ((st = number_in(v, f->lo, f->hi, 0, path, what, &x, err)) == DYN_OK) *(float *)p = (float)x;
        return st;
    case F_F64:
        if ((st = number_in(v, f->lo, f->hi, 0, path, what, &x, err)) == DYN_OK) *(double *)p = x;
        return st;
    case F_HEX64: return hex_from(v, path, what, (uint64_t *)p, err);
    case F_STR:
        if (!cJSON_IsString(v) || strlen(v->valuestring) >= (size_t)f->hi)
            return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"%s\" missing or longer than %.0f bytes", path, what,
                                 f->hi - 1);
        memcpy(p, v->valuestring, strlen(v->valuestring) + 1);
        return DYN_OK;
    case F_KIND:
        if (!cJSON_IsString(v) || dyn_model_kind_parse(v->valuestring, (dyn_model_kind *)p, NULL) != DYN_OK)
            return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"%s\" missing or not a model kind (%s)", path, what,
                                 cJSON_IsString(v) ? v->valuestring : "none");
        return DYN_OK;
    case F_CUTS: return cuts_from(f, v, path, m, err);
    case F_FILES: return files_from(f, v, path, m, err);
    }
    return dyn_error_set(err, DYN_ERR_INTERNAL, "%s: field \"%s\" of no known type", path, what);
}

dyn_status rt_ckpt_state_from_json(const cJSON *r, const char *path, rt_ckpt_meta *m, dyn_error *err)
{
    memset(m, 0, sizeof *m);
    if (!cJSON_IsObject(r)) return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: not a JSON object", path);
    for (int i = 0; i < N_FIELDS; i++) {
        const field *f = &FIELDS[i];
        const cJSON *in = r;
        if (f->object) {
            in = cJSON_GetObjectItemCaseSensitive(r, f->object);
            if (in == NULL && f->optional == 2 && m->model.kind == DYN_MODEL_LLAMA)
                return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"%s\" missing (a Llama-family model's fields)", path,
                                     f->object);
            if (in == NULL && f->optional) continue;
            if (!cJSON_IsObject(in))
                return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"%s\" missing or not an object", path, f->object);
        }
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, f->name);
        if (v == NULL && f->optional == 3) continue;
        dyn_status st = field_from_json(f, v, path, m, err);
        if (st != DYN_OK) return st;
    }
    /* Checkpoints from before token ids were recorded wrote the byte
     * vocabulary's. */
    if (cJSON_GetObjectItemCaseSensitive(r, "tokens") == NULL) m->tokens = rt_ckpt_byte_tokens(m->model.kind);
    /* the position stated twice must be one */
    if (m->per_epoch > 0 && (m->epoch != m->sampler_pos / m->per_epoch || m->index != m->sampler_pos % m->per_epoch))
        return dyn_error_set(err, DYN_ERR_CORRUPT,
                             "%s: \"order\" epoch %lld, index %lld of %d samples per epoch is not sampler_position %lld",
                             path, (long long)m->epoch, (long long)m->index, m->per_epoch, (long long)m->sampler_pos);
    m->data.recorded = cJSON_GetObjectItemCaseSensitive(r, DO) != NULL;
    if (!m->data.recorded) { /* what such a run read: bytes, no template, no truncation */
        snprintf(m->data.tokenizer, sizeof m->data.tokenizer, "bytes");
        m->data.vocab = DYN_VOCAB_BYTES;
        m->data.sp = dyn_model_specials_bytes();
    }
    return DYN_OK;
}
