/* checkpoint.c — model weights as Hugging Face safetensors and the
 * optimizer / training-position companion file.
 *
 * Weights: one tensor per dyn_param_tensor under its Hugging Face name, F32.
 * Our matrices are nn.Linear (out, in); HF GPT-2's Conv1D layers (c_attn,
 * c_proj, c_fc) store (in, out) and HF T5's relative_attention_bias is an
 * Embedding (num_buckets, heads) where we keep (heads, num_buckets): those
 * tensors (hf_transposed) are transposed on the way out and back in.
 *
 * Loading is all-or-nothing: every expected tensor is read, checked and
 * converted into a staging copy of the whole parameter buffer; only when all
 * are good is the staging copy copied over the live parameters. Tensors in
 * the file that the model does not have are an error (a config mismatch),
 * except the aliases Hugging Face files may carry: T5's tied
 * encoder/decoder.embed_tokens.weight and GPT-2's attention-mask buffers
 * (h.N.attn.bias, h.N.attn.masked_bias) and tied lm_head.weight.
 *
 * Companion file (also safetensors, our layout): "<name>.exp_avg" and
 * "<name>.exp_avg_sq" per tensor, metadata dynapipe.step,
 * dynapipe.data_cursor, dynapipe.rng ("%016llx" x4, space separated) and
 * dynapipe.n_params. A stage model's companion file holds the moments of
 * every tensor it holds, shared copies included (their moments equal the
 * owner's: every holder takes the same step).
 *
 * Sharded weights (dyn_model_load_index): a folder with
 * model.safetensors.index.json, the Hub's convention for weights split over
 * several files ({"metadata": {...}, "weight_map": {name: file}}); every
 * tensor the model holds is read from the file the map names, so a stage
 * model reads its owned tensors from its own shard and its shared copies
 * from the owner's, and a whole model is assembled from all shards. The
 * index is written here too (dyn_model_index_write), so its format has one
 * owner. Every fact is checked both ways: a shard holds exactly the
 * tensors the index places in it, its own stage's shard nothing the stage
 * does not hold, its recorded shape (dynapipe.config) is the model's, and a
 * whole model's index names no tensor it lacks; an optimizer file holds
 * exactly two moments per held tensor. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/model_impl.h"
#include "model/safetensors.h" /* defines: dyn_safetensors_* */
#include "util/util.h"         /* defines: dyn_calloc */

static void transpose(float *dst, const float *src, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
}

static void hf_shape(const dyn_param_tensor *t, int64_t *shape)
{
    shape[0] = t->hf_transposed ? t->shape[1] : t->shape[0];
    shape[1] = t->hf_transposed ? t->shape[0] : t->shape[1];
}

/* Stage models (dyn_model_create_stage) save their owned tensors only and
 * cannot load yet: a file holds a whole model, a stage only part of it. */
static int is_stage(const dyn_model *m) { return m->first != 0 || m->last != m->L; }

static dyn_status refuse_stage(const dyn_model *m, const char *what, const char *path, dyn_error *err)
{
    return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                         "%s: %s of a stage model (layers [%d, %d) of %d) is not supported (a sharded checkpoint loads with dyn_model_load_index)",
                         path, what, m->first, m->last, m->L);
}

/* The "dynapipe.config" metadata of a weights file: the model's shape. */
static void config_meta(const dyn_model_config *c, char *out, size_t cap)
{
    int at = snprintf(out, cap,
                      "{\"kind\":\"%s\",\"n_layers\":%d,\"n_dec_layers\":%d,\"hidden\":%d,\"heads\":%d,"
                      "\"head_dim\":%d,\"ffn\":%d,\"vocab\":%d,\"max_seqlen\":%d",
                      c->kind == DYN_MODEL_GPT ? "gpt" : c->kind == DYN_MODEL_T5 ? "t5" : "llama", c->n_layers,
                      c->n_dec_layers, c->hidden, c->heads, c->head_dim,
                      c->ffn, c->vocab, c->max_seqlen);
    if (c->kind == DYN_MODEL_LLAMA && at > 0 && (size_t)at < cap)
        at += snprintf(out + at, cap - (size_t)at,
                       ",\"kv_heads\":%d,\"tie_embeddings\":%d,\"qkv_bias\":%d,\"rope_theta\":%.17g,"
                       "\"rms_eps\":%.17g,\"rope_scaling\":%d,\"rope_factor\":%.17g,\"rope_low_freq\":%.17g,"
                       "\"rope_high_freq\":%.17g,\"rope_orig_ctx\":%d",
                       c->kv_heads, c->tie_embeddings, c->qkv_bias, c->rope_theta, c->rms_eps, c->rope_scaling,
                       c->rope_factor, c->rope_low_freq, c->rope_high_freq, c->rope_orig_ctx);
    if (at > 0 && (size_t)at < cap) snprintf(out + at, cap - (size_t)at, "}");
}

dyn_status dyn_model_save(const dyn_model *m, const char *path, dyn_error *err)
{
    int n = 0; /* owned tensors: they come first in the table */
    while (n < m->n_tensors && !m->tensors[n].shared_copy) n++;
    size_t cap = n > 0 ? (size_t)n : 1; /* a stage may own no tensor */
    dyn_st_entry *e = dyn_calloc(cap, sizeof *e, "checkpoint entries", err);
    float **tmp = dyn_calloc(cap, sizeof *tmp, "checkpoint transposes", err);
    dyn_status st = e && tmp ? DYN_OK : DYN_ERR_NOMEM;
    for (int i = 0; i < n && st == DYN_OK; i++) {
        const dyn_param_tensor *t = &m->tensors[i];
        const float *p = m->params + t->offset;
        e[i].name = t->name;
        e[i].ndim = t->ndim;
        hf_shape(t, e[i].shape);
        e[i].data = p;
        if (t->hf_transposed) {
            tmp[i] = dyn_calloc(t->numel, sizeof(float), t->name, err);
            if (tmp[i] == NULL) st = DYN_ERR_NOMEM;
            else transpose(tmp[i], p, t->shape[0], t->shape[1]);
            e[i].data = tmp[i];
        }
    }
    if (st == DYN_OK) {
        char cfg[512];
        config_meta(&m->cfg, cfg, sizeof cfg);
        char layers[64];
        snprintf(layers, sizeof layers, "%d %d", m->first, m->last);
        /* dynapipe.layers "first last": the layers whose tensors the file holds */
        const char *meta[6] = {"format", "pt", "dynapipe.config", cfg, "dynapipe.layers", layers};
        st = dyn_safetensors_write(path, e, n, meta, is_stage(m) ? 3 : 2, err);
    }
    for (int i = 0; tmp && i < n; i++) free(tmp[i]);
    free(tmp);
    free(e);
    return st;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

static int is_known_alias(const dyn_model *m, const char *name)
{
    if (m->cfg.kind == DYN_MODEL_LLAMA) /* a tied head's copy; old files' rotary buffers */
        return (m->cfg.tie_embeddings && strcmp(name, "lm_head.weight") == 0) ||
               (strncmp(name, "model.layers.", 13) == 0 && ends_with(name, ".self_attn.rotary_emb.inv_freq"));
    if (m->cfg.kind == DYN_MODEL_T5)
        return strcmp(name, "encoder.embed_tokens.weight") == 0 || strcmp(name, "decoder.embed_tokens.weight") == 0;
    if (strcmp(name, "lm_head.weight") == 0) return 1;
    size_t len = strlen(name);
    const char *a = ".attn.bias", *b = ".attn.masked_bias";
    return strncmp(name, "h.", 2) == 0 &&
           ((len > strlen(a) && strcmp(name + len - strlen(a), a) == 0) ||
            (len > strlen(b) && strcmp(name + len - strlen(b), b) == 0));
}

/* Read tensor t (HF layout) from st into dst (our layout). */
static dyn_status read_tensor(const dyn_safetensors *st, const char *name, const dyn_param_tensor *t, int hf, float *dst,
                              float *scratch, dyn_error *err)
{
    int64_t shape[2];
    if (hf) hf_shape(t, shape);
    else shape[0] = t->shape[0], shape[1] = t->shape[1];
    if (!(hf && t->hf_transposed)) return dyn_safetensors_read(st, name, t->ndim, shape, dst, err);
    dyn_status s = dyn_safetensors_read(st, name, t->ndim, shape, scratch, err);
    if (s == DYN_OK) transpose(dst, scratch, shape[0], shape[1]);
    return s;
}

static size_t max_numel(const dyn_model *m)
{
    size_t mx = 1;
    for (int i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].numel > mx) mx = m->tensors[i].numel;
    return mx;
}

dyn_status dyn_model_load(dyn_model *m, const char *path, dyn_error *err)
{
    if (is_stage(m)) return refuse_stage(m, "loading weights", path, err);
    dyn_safetensors *st = dyn_safetensors_open(path, err);
    if (st == NULL) return err ? err->code : DYN_ERR_CORRUPT;
    dyn_status s = DYN_OK;
    for (int i = 0; i < dyn_safetensors_count(st) && s == DYN_OK; i++) {
        const char *name = dyn_safetensors_name(st, i);
        if (dyn_model_find_tensor(m, name) == NULL && !is_known_alias(m, name))
            s = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s' is not part of this model (config mismatch?)", path,
                              name);
    }
    float *staging = s == DYN_OK ? dyn_calloc(m->n_params, sizeof(float), "checkpoint staging", err) : NULL;
    float *scratch = staging ? dyn_calloc(max_numel(m), sizeof(float), "checkpoint staging", err) : NULL;
    if (s == DYN_OK && scratch == NULL) s = DYN_ERR_NOMEM;
    for (int i = 0; i < m->n_tensors && s == DYN_OK; i++) {
        const dyn_param_tensor *t = &m->tensors[i];
        s = read_tensor(st, t->name, t, 1, staging + t->offset, scratch, err);
    }
    if (s == DYN_OK) memcpy(m->params, staging, m->n_params * sizeof(float));
    free(scratch);
    free(staging);
    dyn_safetensors_free(st);
    return s;
}

/* ---------------------------------------------------------- sharded weights */

#define INDEX_MAX_FILES 64
#define INDEX_NAME "model.safetensors.index.json"

dyn_status dyn_model_index_write(const char *dir, const dyn_index_entry *e, int n, dyn_error *err)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/" INDEX_NAME, dir) >= sizeof path)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: folder name too long for the index", dir);
    cJSON *idx = cJSON_CreateObject();
    cJSON *md = idx ? cJSON_AddObjectToObject(idx, "metadata") : NULL;
    cJSON *map = md ? cJSON_AddObjectToObject(idx, "weight_map") : NULL;
    int ok = map != NULL;
    double total = 0;
    for (int i = 0; ok && i < n; i++) {
        ok = cJSON_AddStringToObject(map, e[i].name, e[i].file) != NULL;
        total += (double)e[i].bytes;
    }
    ok = ok && cJSON_AddNumberToObject(md, "total_size", total) && cJSON_AddStringToObject(md, "format", "pt");
    char *text = ok ? cJSON_Print(idx) : NULL;
    cJSON_Delete(idx);
    size_t len = text ? strlen(text) : 0;
    char *line = text ? realloc(text, len + 2) : NULL;
    if (line == NULL) {
        free(text);
        return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory writing %s", path);
    }
    line[len] = '\n';
    line[len + 1] = '\0';
    dyn_status s = dyn_file_write_atomic(path, line, len + 1, err);
    free(line);
    return s;
}

/* Shard `file` (opened as st) of the index map under dir agrees with the
 * index and the model: it holds exactly the tensors the index places in
 * it, its dynapipe.config (when present) is m's shape, and, when m owns
 * tensors of it (its own shard), every tensor in it is one m holds. */
static dyn_status check_shard(const dyn_model *m, const char *dir, const cJSON *map, const char *file,
                              const dyn_safetensors *st, int owns, dyn_error *err)
{
    char cfg[512];
    config_meta(&m->cfg, cfg, sizeof cfg);
    const char *have = dyn_safetensors_meta(st, "dynapipe.config");
    if (have != NULL && strcmp(have, cfg) != 0)
        return dyn_error_set(err, DYN_ERR_CORRUPT,
                             "%s/%s: written for the model %s, but the model being loaded is %s (the checkpoint's "
                             "state and its weights disagree)",
                             dir, file, have, cfg);
    for (int i = 0; i < dyn_safetensors_count(st); i++) {
        const char *name = dyn_safetensors_name(st, i);
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(map, name);
        if (!cJSON_IsString(f) || strcmp(f->valuestring, file) != 0)
            return dyn_error_set(err, DYN_ERR_CORRUPT, "%s/%s: holds tensor '%s', which %s/" INDEX_NAME " %s%s%s", dir,
                                 file, name, dir, cJSON_IsString(f) ? "places in " : "does not list",
                                 cJSON_IsString(f) ? f->valuestring : "", cJSON_IsString(f) ? "" : " (an extra tensor)");
        if (owns && dyn_model_find_tensor(m, name) == NULL && !is_known_alias(m, name))
            return dyn_error_set(err, DYN_ERR_CORRUPT, "%s/%s: tensor '%s' is not part of this model (layers [%d, %d))",
                                 dir, file, name, m->first, m->last);
    }
    const cJSON *e = NULL;
    cJSON_ArrayForEach(e, map)
    {
        if (cJSON_IsString(e) && strcmp(e->valuestring, file) == 0 && dyn_safetensors_shape(st, e->string, NULL, NULL) < 0)
            return dyn_error_set(err, DYN_ERR_CORRUPT, "%s/" INDEX_NAME " places tensor '%s' in %s, which lacks it", dir,
                                 e->string, file);
    }
    return DYN_OK;
}

dyn_status dyn_model_load_index(dyn_model *m, const char *dir, dyn_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/" INDEX_NAME, dir);
    char *text = NULL;
    dyn_status s = dyn_file_read_all(path, &text, NULL, err);
    if (s != DYN_OK) return s;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *map = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(map)) {
        cJSON_Delete(root);
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: not JSON with a \"weight_map\" object", path);
    }
    const char *names[INDEX_MAX_FILES];
    dyn_safetensors *files[INDEX_MAX_FILES];
    int owns[INDEX_MAX_FILES]; /* whether the model owns a tensor of that shard (reads its own shard) */
    int n_files = 0;
    float *staging = dyn_calloc(m->n_params ? m->n_params : 1, sizeof(float), "checkpoint staging", err);
    float *scratch = staging ? dyn_calloc(max_numel(m), sizeof(float), "checkpoint staging", err) : NULL;
    if (scratch == NULL) s = DYN_ERR_NOMEM;
    for (int i = 0; i < m->n_tensors && s == DYN_OK; i++) {
        const dyn_param_tensor *t = &m->tensors[i];
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(map, t->name);
        if (!cJSON_IsString(f) || strchr(f->valuestring, '/') != NULL) {
            s = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: no shard named for tensor '%s' (a checkpoint of another model?)",
                              path, t->name);
            break;
        }
        int k = 0;
        while (k < n_files && strcmp(names[k], f->valuestring) != 0) k++;
        if (k == n_files) {
            if (n_files == INDEX_MAX_FILES) {
                s = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: more than %d shards", path, INDEX_MAX_FILES);
                break;
            }
            char fp[4096];
            snprintf(fp, sizeof fp, "%s/%s", dir, f->valuestring);
            if ((files[k] = dyn_safetensors_open(fp, err)) == NULL) {
                s = err ? err->code : DYN_ERR_CORRUPT;
                break;
            }
            owns[k] = 0;
            names[n_files++] = f->valuestring;
        }
        if (!t->shared_copy) owns[k] = 1;
        s = read_tensor(files[k], t->name, t, 1, staging + t->offset, scratch, err);
    }
    for (int k = 0; k < n_files && s == DYN_OK; k++) s = check_shard(m, dir, map, names[k], files[k], owns[k], err);
    if (s == DYN_OK && !is_stage(m)) { /* a whole model: the index names no tensor it lacks */
        const cJSON *e = NULL;
        cJSON_ArrayForEach(e, map)
        {
            if (dyn_model_find_tensor(m, e->string) == NULL && !is_known_alias(m, e->string)) {
                s = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: lists tensor '%s', which is not part of this model", path,
                                  e->string);
                break;
            }
        }
    }
    if (s == DYN_OK) memcpy(m->params, staging, m->n_params * sizeof(float));
    for (int k = 0; k < n_files; k++) dyn_safetensors_free(files[k]);
    cJSON_Delete(root);
    free(scratch);
    free(staging);
    return s;
}

/* ---------------------------------------------------------------- train state */

dyn_status dyn_model_save_train_state(const dyn_model *m, const dyn_train_state *ts, const char *path, dyn_error *err)
{
    int n = m->n_tensors;
    dyn_st_entry *e = dyn_calloc((size_t)(2 * n), sizeof *e, "train-state entries", err);
    char *names = e ? dyn_calloc((size_t)(2 * n), 128, "train-state names", err) : NULL;
    if (names == NULL) {
        free(e);
        return DYN_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) {
        const dyn_param_tensor *t = &m->tensors[i];
        for (int k = 0; k < 2; k++) {
            char *nm = names + (size_t)(2 * i + k) * 128;
            snprintf(nm, 128, "%s.%s", t->name, k ? "exp_avg_sq" : "exp_avg");
            dyn_st_entry *x = &e[2 * i + k];
            x->name = nm;
            x->ndim = t->ndim;
            x->shape[0] = t->shape[0];
            x->shape[1] = t->shape[1];
            x->data = (k ? m->m2 : m->m1) + t->offset;
        }
    }
    char step[32], cursor[32], rng[80], np[32];
    snprintf(step, sizeof step, "%" PRId64, m->step);
    snprintf(cursor, sizeof cursor, "%" PRId64, ts->data_cursor);
    snprintf(rng, sizeof rng, "%016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %016" PRIx64, ts->rng.s[0], ts->rng.s[1],
             ts->rng.s[2], ts->rng.s[3]);
    snprintf(np, sizeof np, "%zu", m->n_params);
    const char *meta[8] = {"dynapipe.step", step, "dynapipe.data_cursor", cursor, "dynapipe.rng", rng,
                           "dynapipe.n_params", np};
    dyn_status s = dyn_safetensors_write(path, e, 2 * n, meta, 4, err);
    free(names);
    free(e);
    return s;
}

/* Parse a whole-string decimal int64 metadata value. */
static dyn_status meta_i64(const dyn_safetensors *st, const char *path, const char *key, int64_t *out, dyn_error *err)
{
    const char *v = dyn_safetensors_meta(st, key);
    char *end = NULL;
    if (v == NULL) return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: metadata '%s' missing", path, key);
    long long x = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || x < 0)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: metadata '%s' is '%s', expected a non-negative integer", path,
                             key, v);
    *out = (int64_t)x;
    return DYN_OK;
}

dyn_status dyn_model_load_train_state(dyn_model *m, dyn_train_state *ts, const char *path, dyn_error *err)
{
    dyn_safetensors *st = dyn_safetensors_open(path, err);
    if (st == NULL) return err ? err->code : DYN_ERR_CORRUPT;
    int64_t step = 0, cursor = 0, np = 0;
    dyn_rng rng;
    dyn_status s = meta_i64(st, path, "dynapipe.step", &step, err);
    if (s == DYN_OK) s = meta_i64(st, path, "dynapipe.data_cursor", &cursor, err);
    if (s == DYN_OK) s = meta_i64(st, path, "dynapipe.n_params", &np, err);
    if (s == DYN_OK && (size_t)np != m->n_params)
        s = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: optimizer state for %lld parameters, model has %zu", path,
                          (long long)np, m->n_params);
    if (s == DYN_OK) {
        const char *v = dyn_safetensors_meta(st, "dynapipe.rng");
        int used = 0;
        if (v == NULL || sscanf(v, "%" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 "%n", &rng.s[0], &rng.s[1], &rng.s[2],
                                &rng.s[3], &used) != 4 || v[used] != '\0')
            s = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: metadata 'dynapipe.rng' missing or not four hex words", path);
    }
    for (int i = 0; s == DYN_OK && i < dyn_safetensors_count(st); i++) { /* exactly two moments per tensor */
        const char *name = dyn_safetensors_name(st, i), *dot = strrchr(name, '.');
        char base[128];
        size_t len = dot ? (size_t)(dot - name) : 0;
        int ok = dot != NULL && len < sizeof base && (strcmp(dot, ".exp_avg") == 0 || strcmp(dot, ".exp_avg_sq") == 0);
        if (ok) {
            memcpy(base, name, len);
            base[len] = '\0';
            ok = dyn_model_find_tensor(m, base) != NULL;
        }
        if (!ok)
            s = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s' is not a moment of a tensor this model holds", path,
                              name);
    }
    float *staging = s == DYN_OK ? dyn_calloc(2 * m->n_params, sizeof(float), "train-state staging", err) : NULL;
    if (s == DYN_OK && staging == NULL) s = DYN_ERR_NOMEM;
    for (int i = 0; i < m->n_tensors && s == DYN_OK; i++) {
        const dyn_param_tensor *t = &m->tensors[i];
        char name[128];
        for (int k = 0; k < 2 && s == DYN_OK; k++) {
            snprintf(name, sizeof name, "%s.%s", t->name, k ? "exp_avg_sq" : "exp_avg");
            s = read_tensor(st, name, t, 0, staging + (size_t)k * m->n_params + t->offset, NULL, err);
        }
    }
    if (s == DYN_OK) {
        memcpy(m->m1, staging, m->n_params * sizeof(float));
        memcpy(m->m2, staging + m->n_params, m->n_params * sizeof(float));
        m->step = step;
        ts->data_cursor = cursor;
        ts->rng = rng;
    }
    free(staging);
    dyn_safetensors_free(st);
    return s;
}
