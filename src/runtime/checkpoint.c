/* checkpoint.c — sharded checkpoints of `dynapipe train` (see checkpoint.h
 * for the layout and the atomicity argument).
 *
 * Save, collective over the world: rank 0 makes DIR/step-K.tmp; every rank
 * of replica 0 writes, per plan stage it holds, the stage's weight shard
 * (dyn_model_save: owned tensors only) and optimizer shard (the moments of
 * every tensor held); their tensor names travel to rank 0 over the pipeline
 * communicator; rank 0 writes the index, config.json and trainer_state.json
 * (hashing every shard), then commits (rename, `latest`). Between the
 * phases all ranks agree on success with one small allreduce, so a failure
 * anywhere leaves no step-K folder and the previous `latest` standing.
 *
 * Reading (resume and eval) never calls MPI: trainer_state.json first, then
 * every file's size and hash, and only then any tensor, so a corrupted or
 * truncated shard is reported before anything is loaded. */
#include "runtime/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dynapipe/model_config.h" /* defines: dyn_model_kind_name */
#include "model/layers.h"          /* defines: DYN_LN_EPS, DYN_RMS_EPS, DYN_T5_* */
#include "runtime/exec.h"          /* defines: rt_wait */
#include "util/util.h"

#define CKPT_FORMAT 1
#define PATH_CAP 4096

/* ---- small file-system helpers ---------------------------------------------- */

/* Paths: the entry points refuse folders longer than PATH_ROOT_MAX, so the
 * names built under them (at most a few dozen bytes more) always fit. */
#define PATH_ROOT_MAX 3900

static void pathf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void pathf(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

static dyn_status check_root(const char *p, dyn_error *err)
{
    if (strlen(p) > PATH_ROOT_MAX)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint path of %zu bytes, at most %d", strlen(p),
                             PATH_ROOT_MAX);
    return DYN_OK;
}

static uint64_t fnv1a64(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static dyn_status fsync_dir(const char *dir, dyn_error *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return dyn_error_set(err, DYN_ERR_IO, "%s: cannot open folder: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0) return dyn_error_set(err, DYN_ERR_IO, "%s: fsync: %s", dir, strerror(e));
    return DYN_OK;
}

/* Remove a flat folder (a stale or replaced checkpoint: files only). */
static dyn_status remove_flat_dir(const char *dir, dyn_error *err)
{
    DIR *d = opendir(dir);
    if (d == NULL) return errno == ENOENT ? DYN_OK : dyn_error_set(err, DYN_ERR_IO, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    char p[PATH_CAP];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        pathf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) != 0) {
            closedir(d);
            return dyn_error_set(err, DYN_ERR_IO, "%s: cannot remove: %s", p, strerror(errno));
        }
    }
    closedir(d);
    if (rmdir(dir) != 0) return dyn_error_set(err, DYN_ERR_IO, "%s: cannot remove: %s", dir, strerror(errno));
    return DYN_OK;
}

static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static void shard_name(char *out, size_t cap, const char *kind, int32_t s, int32_t n)
{
    snprintf(out, cap, "%s-%05d-of-%05d.safetensors", kind, s + 1, n);
}

/* ---- config.json -------------------------------------------------------------- */

char *rt_ckpt_hf_config(const dyn_model_config *c, dyn_error *err)
{
    cJSON *r = cJSON_CreateObject();
    if (r == NULL) {
        dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for config.json");
        return NULL;
    }
    int gpt = c->kind == DYN_MODEL_GPT;
    cJSON *arch = cJSON_AddArrayToObject(r, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(gpt ? "GPT2LMHeadModel" : "T5ForConditionalGeneration"));
    cJSON_AddStringToObject(r, "model_type", gpt ? "gpt2" : "t5");
    cJSON_AddNumberToObject(r, "vocab_size", c->vocab);
    if (gpt) {
        cJSON_AddNumberToObject(r, "n_positions", c->max_seqlen);
        cJSON_AddNumberToObject(r, "n_ctx", c->max_seqlen);
        cJSON_AddNumberToObject(r, "n_embd", c->hidden);
        cJSON_AddNumberToObject(r, "n_layer", c->n_layers);
        cJSON_AddNumberToObject(r, "n_head", c->heads);
        cJSON_AddNumberToObject(r, "n_inner", c->ffn);
        cJSON_AddStringToObject(r, "activation_function", "gelu_new");
        cJSON_AddNumberToObject(r, "layer_norm_epsilon", DYN_LN_EPS);
        cJSON_AddNumberToObject(r, "resid_pdrop", 0);
        cJSON_AddNumberToObject(r, "embd_pdrop", 0);
        cJSON_AddNumberToObject(r, "attn_pdrop", 0);
        cJSON_AddBoolToObject(r, "tie_word_embeddings", 1);
        cJSON_AddBoolToObject(r, "scale_attn_weights", 1);
    } else {
        cJSON_AddNumberToObject(r, "d_model", c->hidden);
        cJSON_AddNumberToObject(r, "d_kv", c->head_dim);
        cJSON_AddNumberToObject(r, "d_ff", c->ffn);
        cJSON_AddNumberToObject(r, "num_layers", c->n_layers);
        cJSON_AddNumberToObject(r, "num_decoder_layers", c->n_dec_layers);
        cJSON_AddNumberToObject(r, "num_heads", c->heads);
        cJSON_AddNumberToObject(r, "relative_attention_num_buckets", DYN_T5_NUM_BUCKETS);
        cJSON_AddNumberToObject(r, "relative_attention_max_distance", DYN_T5_MAX_DISTANCE);
        cJSON_AddNumberToObject(r, "dropout_rate", 0);
        cJSON_AddNumberToObject(r, "layer_norm_epsilon", DYN_RMS_EPS);
        cJSON_AddStringToObject(r, "feed_forward_proj", "gated-gelu");
        cJSON_AddBoolToObject(r, "is_encoder_decoder", 1);
        cJSON_AddBoolToObject(r, "tie_word_embeddings", 0);
        cJSON_AddNumberToObject(r, "decoder_start_token_id", DYN_TOK_BOS);
    }
    cJSON_AddNumberToObject(r, "pad_token_id", DYN_TOK_PAD);
    cJSON_AddNumberToObject(r, "eos_token_id", DYN_TOK_EOS);
    if (gpt) cJSON_AddNumberToObject(r, "bos_token_id", DYN_TOK_EOS); /* GPT-2's convention: bos = eos */
    cJSON_AddStringToObject(r, "torch_dtype", "float32");
    char *text = cJSON_Print(r);
    cJSON_Delete(r);
    if (text == NULL) dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for config.json");
    return text;
}

/* ---- trainer_state.json ------------------------------------------------------- */

static cJSON *meta_to_json(const rt_ckpt_meta *m)
{
    cJSON *r = cJSON_CreateObject();
    if (r == NULL) return NULL;
    char hex[32];
    cJSON_AddNumberToObject(r, "format", CKPT_FORMAT);
    cJSON_AddNumberToObject(r, "step", (double)m->step);
    cJSON_AddNumberToObject(r, "sampler_position", (double)m->sampler_pos);
    cJSON_AddStringToObject(r, "rng", "none");
    cJSON *md = cJSON_AddObjectToObject(r, "model");
    cJSON_AddStringToObject(md, "kind", dyn_model_kind_name(m->model.kind));
    cJSON_AddNumberToObject(md, "n_layers", m->model.n_layers);
    cJSON_AddNumberToObject(md, "n_dec_layers", m->model.n_dec_layers);
    cJSON_AddNumberToObject(md, "hidden", m->model.hidden);
    cJSON_AddNumberToObject(md, "heads", m->model.heads);
    cJSON_AddNumberToObject(md, "head_dim", m->model.head_dim);
    cJSON_AddNumberToObject(md, "ffn", m->model.ffn);
    cJSON_AddNumberToObject(md, "vocab", m->model.vocab);
    cJSON_AddNumberToObject(md, "max_seqlen", m->model.max_seqlen);
    snprintf(hex, sizeof hex, "%016" PRIx64, m->seed);
    cJSON_AddStringToObject(r, "seed", hex);
    cJSON_AddNumberToObject(r, "stages", m->stages);
    cJSON_AddNumberToObject(r, "dp", m->dp);
    cJSON_AddNumberToObject(r, "chunks", m->chunks);
    cJSON *cuts = cJSON_AddArrayToObject(r, "stage_first_layer");
    for (int32_t s = 0; s <= m->n_stages; s++) cJSON_AddItemToArray(cuts, cJSON_CreateNumber(m->lay_first[s]));
    cJSON_AddStringToObject(r, "data", m->data_spec);
    cJSON_AddNumberToObject(r, "samples", m->n_samples);
    cJSON_AddNumberToObject(r, "split", m->split);
    cJSON_AddNumberToObject(r, "global_batch_tokens", (double)m->global_batch_tokens);
    cJSON *lr = cJSON_AddObjectToObject(r, "lr_schedule");
    cJSON_AddNumberToObject(lr, "lr", m->lr.max_lr);
    cJSON_AddNumberToObject(lr, "min_lr", m->lr.min_lr);
    cJSON_AddNumberToObject(lr, "warmup", (double)m->lr.warmup_steps);
    cJSON_AddNumberToObject(lr, "total_steps", (double)m->lr.total_steps);
    cJSON *files = cJSON_AddObjectToObject(r, "files");
    for (int32_t i = 0; i < m->n_files; i++) {
        cJSON *f = cJSON_AddObjectToObject(files, m->files[i].name);
        cJSON_AddNumberToObject(f, "bytes", (double)m->files[i].bytes);
        snprintf(hex, sizeof hex, "%016" PRIx64, m->files[i].fnv);
        cJSON_AddStringToObject(f, "fnv1a64", hex);
    }
    return r;
}

static dyn_status json_i64(const cJSON *o, const char *key, const char *path, int64_t lo, int64_t hi, int64_t *out,
                           dyn_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int64_t)v->valuedouble || v->valuedouble < (double)lo ||
        v->valuedouble > (double)hi)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"%s\" missing or not an integer in [%lld, %lld]", path, key,
                             (long long)lo, (long long)hi);
    *out = (int64_t)v->valuedouble;
    return DYN_OK;
}

static dyn_status json_i32(const cJSON *o, const char *key, const char *path, int32_t lo, int32_t hi, int32_t *out,
                           dyn_error *err)
{
    int64_t v = 0;
    dyn_status st = json_i64(o, key, path, lo, hi, &v, err);
    if (st == DYN_OK) *out = (int32_t)v;
    return st;
}

/* "lr_schedule": optional (checkpoints written before it was recorded lack
 * it; then total_steps stays 0 = unknown), but when present complete. */
static dyn_status lr_from_json(const cJSON *r, const char *path, dyn_lr_schedule *lr, dyn_error *err)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(r, "lr_schedule");
    if (o == NULL) return DYN_OK;
    const cJSON *max_lr = cJSON_GetObjectItemCaseSensitive(o, "lr");
    const cJSON *min_lr = cJSON_GetObjectItemCaseSensitive(o, "min_lr");
    if (!cJSON_IsNumber(max_lr) || !cJSON_IsNumber(min_lr))
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"lr_schedule\" without numbers \"lr\" and \"min_lr\"", path);
    lr->max_lr = (float)max_lr->valuedouble;
    lr->min_lr = (float)min_lr->valuedouble;
    dyn_status st = json_i64(o, "warmup", path, 0, INT64_MAX / 2, &lr->warmup_steps, err);
    if (st == DYN_OK) st = json_i64(o, "total_steps", path, 1, INT64_MAX / 2, &lr->total_steps, err);
    return st;
}

static dyn_status meta_from_json(const cJSON *r, const char *path, rt_ckpt_meta *m, dyn_error *err)
{
    memset(m, 0, sizeof *m);
    int32_t format = 0;
    dyn_status st = json_i32(r, "format", path, 0, 1000, &format, err);
    if (st == DYN_OK && format != CKPT_FORMAT)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: checkpoint format %d, this dynapipe reads %d", path, format,
                             CKPT_FORMAT);
    if (st == DYN_OK) st = json_i64(r, "step", path, 0, INT64_MAX / 2, &m->step, err);
    if (st == DYN_OK) st = json_i64(r, "sampler_position", path, 0, INT32_MAX, &m->sampler_pos, err);
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(r, "model");
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(md, "kind");
    if (st == DYN_OK && !cJSON_IsString(kind))
        st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"model\" missing or without \"kind\"", path);
    if (st == DYN_OK) {
        if (strcmp(kind->valuestring, dyn_model_kind_name(DYN_MODEL_GPT)) == 0) m->model.kind = DYN_MODEL_GPT;
        else if (strcmp(kind->valuestring, dyn_model_kind_name(DYN_MODEL_T5)) == 0) m->model.kind = DYN_MODEL_T5;
        else st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: unknown model kind '%s'", path, kind->valuestring);
    }
    if (st == DYN_OK) st = json_i32(md, "n_layers", path, 1, 1 << 20, &m->model.n_layers, err);
    if (st == DYN_OK) st = json_i32(md, "n_dec_layers", path, 0, 1 << 20, &m->model.n_dec_layers, err);
    if (st == DYN_OK) st = json_i32(md, "hidden", path, 1, 1 << 20, &m->model.hidden, err);
    if (st == DYN_OK) st = json_i32(md, "heads", path, 1, 1 << 20, &m->model.heads, err);
    if (st == DYN_OK) st = json_i32(md, "head_dim", path, 1, 1 << 20, &m->model.head_dim, err);
    if (st == DYN_OK) st = json_i32(md, "ffn", path, 1, 1 << 24, &m->model.ffn, err);
    if (st == DYN_OK) st = json_i32(md, "vocab", path, 1, 1 << 24, &m->model.vocab, err);
    if (st == DYN_OK) st = json_i32(md, "max_seqlen", path, 1, 1 << 24, &m->model.max_seqlen, err);
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(r, "seed");
    if (st == DYN_OK && (!cJSON_IsString(seed) || sscanf(seed->valuestring, "%" SCNx64, &m->seed) != 1))
        st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"seed\" missing or not hex", path);
    if (st == DYN_OK) st = json_i32(r, "stages", path, 1, RT_CKPT_MAX_STAGES, &m->stages, err);
    if (st == DYN_OK) st = json_i32(r, "dp", path, 1, 1 << 20, &m->dp, err);
    if (st == DYN_OK) st = json_i32(r, "chunks", path, 1, RT_CKPT_MAX_STAGES, &m->chunks, err);
    const cJSON *cuts = cJSON_GetObjectItemCaseSensitive(r, "stage_first_layer");
    int n = cJSON_IsArray(cuts) ? cJSON_GetArraySize(cuts) : 0;
    if (st == DYN_OK && (n < 2 || n > RT_CKPT_MAX_STAGES + 1 || n - 1 != m->stages * m->chunks))
        st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"stage_first_layer\" must list stages x chunks + 1 layers",
                           path);
    for (int i = 0; st == DYN_OK && i < n; i++) {
        const cJSON *v = cJSON_GetArrayItem(cuts, i);
        if (!cJSON_IsNumber(v)) st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"stage_first_layer\" not numbers", path);
        else m->lay_first[i] = (int32_t)v->valuedouble;
    }
    m->n_stages = n - 1;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(r, "data");
    if (st == DYN_OK && (!cJSON_IsString(data) || strlen(data->valuestring) >= sizeof m->data_spec))
        st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"data\" missing", path);
    if (st == DYN_OK) snprintf(m->data_spec, sizeof m->data_spec, "%s", data->valuestring);
    if (st == DYN_OK) st = json_i32(r, "samples", path, 0, INT32_MAX, &m->n_samples, err);
    if (st == DYN_OK) st = json_i32(r, "split", path, 0, 1, &m->split, err);
    if (st == DYN_OK) st = json_i64(r, "global_batch_tokens", path, 1, INT64_MAX / 2, &m->global_batch_tokens, err);
    if (st == DYN_OK) st = lr_from_json(r, path, &m->lr, err);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(r, "files");
    if (st == DYN_OK && !cJSON_IsObject(files))
        st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"files\" missing", path);
    for (const cJSON *f = files ? files->child : NULL; st == DYN_OK && f; f = f->next) {
        if (m->n_files == RT_CKPT_MAX_FILES || strlen(f->string) >= sizeof m->files[0].name ||
            strchr(f->string, '/') != NULL) {
            st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: bad \"files\" entry '%s'", path, f->string);
            break;
        }
        rt_ckpt_file *x = &m->files[m->n_files++];
        snprintf(x->name, sizeof x->name, "%s", f->string);
        int64_t bytes = 0;
        st = json_i64(f, "bytes", path, 0, INT64_MAX / 2, &bytes, err);
        x->bytes = (uint64_t)bytes;
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(f, "fnv1a64");
        if (st == DYN_OK && (!cJSON_IsString(h) || sscanf(h->valuestring, "%" SCNx64, &x->fnv) != 1))
            st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: file %s without a hash", path, x->name);
    }
    return st;
}

/* ---- reading --------------------------------------------------------------- */

dyn_status rt_ckpt_resolve(const char *path, char *dir, size_t cap, dyn_error *err)
{
    if (check_root(path, err) != DYN_OK) return err->code;
    char p[PATH_CAP];
    pathf(p, sizeof p, "%s/trainer_state.json", path);
    if (is_file(p)) {
        pathf(dir, cap, "%s", path);
        return DYN_OK;
    }
    pathf(p, sizeof p, "%s/latest", path);
    if (!is_file(p))
        return dyn_error_set(err, DYN_ERR_IO, "%s: no checkpoint here (neither trainer_state.json nor latest)", path);
    char *text = NULL;
    dyn_status st = dyn_file_read_all(p, &text, NULL, err);
    if (st != DYN_OK) return st;
    size_t n = strcspn(text, "\n");
    text[n] = '\0';
    if (n == 0 || strchr(text, '/') != NULL || strcmp(text, "..") == 0) {
        st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: '%s' is not a checkpoint folder name", p, text);
    } else {
        pathf(dir, cap, "%s/%s", path, text);
        if (!is_dir(dir)) st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s names %s, which does not exist", p, dir);
    }
    free(text);
    return st;
}

dyn_status rt_ckpt_read(const char *dir, rt_ckpt_meta *meta, dyn_error *err)
{
    if (check_root(dir, err) != DYN_OK) return err->code;
    char p[PATH_CAP];
    pathf(p, sizeof p, "%s/trainer_state.json", dir);
    char *text = NULL;
    dyn_status st = dyn_file_read_all(p, &text, NULL, err);
    if (st != DYN_OK) return st;
    cJSON *r = cJSON_Parse(text);
    free(text);
    if (r == NULL) return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: not valid JSON", p);
    st = meta_from_json(r, p, meta, err);
    cJSON_Delete(r);
    for (int32_t i = 0; st == DYN_OK && i < meta->n_files; i++) {
        const rt_ckpt_file *f = &meta->files[i];
        pathf(p, sizeof p, "%s/%s", dir, f->name);
        char *data = NULL;
        size_t len = 0;
        if (dyn_file_read_all(p, &data, &len, err) != DYN_OK) {
            st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: missing or unreadable (the checkpoint lists it)", p);
            break;
        }
        if (len != f->bytes)
            st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: %zu bytes, the checkpoint wrote %llu (truncated or replaced)",
                               p, len, (unsigned long long)f->bytes);
        else if (fnv1a64((const unsigned char *)data, len) != f->fnv)
            st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: contents differ from what the checkpoint wrote (corrupted)",
                               p);
        free(data);
    }
    return st;
}

dyn_status rt_ckpt_check(const rt_ckpt_meta *m, const dyn_train_options *o, dyn_error *err)
{
    const dyn_model_config *a = &m->model, *b = &o->model;
    if (a->kind != b->kind)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint of a %s model, this run trains %s",
                             dyn_model_kind_name(a->kind), dyn_model_kind_name(b->kind));
#define SAME(field, what)                                                                                         \
    if (a->field != b->field)                                                                                     \
    return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint has %s %d, this run %d", what, (int)a->field,      \
                         (int)b->field)
    SAME(n_layers, "layers");
    SAME(n_dec_layers, "decoder layers");
    SAME(hidden, "hidden size");
    SAME(heads, "heads");
    SAME(head_dim, "head dim");
    SAME(ffn, "ffn size");
    SAME(vocab, "vocabulary");
    SAME(max_seqlen, "max-seqlen");
#undef SAME
    int32_t chunks = o->schedule == DYN_SCHEDULE_INTERLEAVED ? o->plan.chunks : 1;
    if (m->stages != o->plan.stages)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint of %d pipeline stages, this run has --stages %d",
                             m->stages, o->plan.stages);
    if (m->chunks != chunks)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint of %d chunks per rank, this run has %d", m->chunks,
                             chunks);
    if (strcmp(m->data_spec, o->data_spec) != 0 || m->n_samples != o->n_samples || m->split != o->split)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint trained on --data %s (%d samples), this run on %s (%d)",
                             m->data_spec, m->n_samples, o->data_spec, o->n_samples);
    if (m->global_batch_tokens != o->global_batch_tokens)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint has --global-batch-tokens %lld, this run %lld",
                             (long long)m->global_batch_tokens, (long long)o->global_batch_tokens);
    if (m->step >= o->steps)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint is at step %lld; --steps %lld leaves nothing to train",
                             (long long)m->step, (long long)o->steps);
    return DYN_OK;
}

int rt_ckpt_schedule_note(const rt_ckpt_meta *meta, const dyn_train_options *o, char *note, size_t cap)
{
    const dyn_lr_schedule *a = &meta->lr, *b = &o->lr;
    if (a->total_steps == 0) return 0; /* not recorded */
    if (a->max_lr == b->max_lr && a->min_lr == b->min_lr && a->warmup_steps == b->warmup_steps &&
        a->total_steps == b->total_steps)
        return 0;
    /* The rate the checkpoint's run would have used next, and this run's. */
    snprintf(note, cap,
             "the checkpoint was trained on a schedule of %lld steps (lr %g, min-lr %g, warm-up %lld), this run's "
             "is %lld steps (lr %g, min-lr %g, warm-up %lld): step %lld trains at lr %.3g instead of %.3g",
             (long long)a->total_steps, (double)a->max_lr, (double)a->min_lr, (long long)a->warmup_steps,
             (long long)b->total_steps, (double)b->max_lr, (double)b->min_lr, (long long)b->warmup_steps,
             (long long)meta->step, (double)dyn_lr_at(b, meta->step), (double)dyn_lr_at(a, meta->step));
    return 1;
}

dyn_status rt_ckpt_load_stage(const char *dir, const rt_ckpt_meta *meta, int32_t stage, dyn_model *m, dyn_error *err)
{
    int first = 0, last = 0;
    dyn_model_stage_range(m, &first, &last);
    if (stage < 0 || stage >= meta->n_stages || meta->lay_first[stage] != first || meta->lay_first[stage + 1] != last)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: plan stage %d holds layers [%d, %d) here, the checkpoint's [%d, %d) (another cost "
                             "model or stage split)",
                             dir, stage, first, last, stage < meta->n_stages ? meta->lay_first[stage] : -1,
                             stage < meta->n_stages ? meta->lay_first[stage + 1] : -1);
    char name[128], p[PATH_CAP];
    shard_name(name, sizeof name, "optimizer", stage, meta->n_stages);
    pathf(p, sizeof p, "%s/%s", dir, name);
    dyn_train_state ts;
    dyn_status st = dyn_model_load_train_state(m, &ts, p, err);
    if (st == DYN_OK && dyn_model_step_count(m) != meta->step)
        st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: step %lld, trainer_state.json says %lld", p,
                           (long long)dyn_model_step_count(m), (long long)meta->step);
    if (st == DYN_OK) st = dyn_model_load_index(m, dir, err);
    return st;
}

dyn_model *rt_ckpt_load_model(const char *dir, rt_ckpt_meta *meta, dyn_error *err)
{
    if (rt_ckpt_read(dir, meta, err) != DYN_OK) return NULL;
    dyn_model *m = dyn_model_create(&meta->model, meta->seed, err);
    if (m == NULL) return NULL;
    if (dyn_model_load_index(m, dir, err) != DYN_OK) {
        dyn_model_free(m);
        return NULL;
    }
    dyn_model_set_step_count(m, meta->step);
    return m;
}

/* ---- saving ---------------------------------------------------------------- */

/* Every rank's status -> the same status everywhere: DYN_OK only if all
 * succeeded. A rank that did not fail itself reports the failure elsewhere. */
static dyn_status agree(const rt_ckpt_job *j, dyn_status mine, dyn_error *err)
{
    int bad = mine != DYN_OK, any = 0;
    MPI_Request req;
    dyn_error e2;
    dyn_status st = dyn_rt_mpi_check(MPI_Iallreduce(&bad, &any, 1, MPI_INT, MPI_MAX, j->g->world, &req),
                                     "MPI_Iallreduce (checkpoint)", &e2);
    if (st == DYN_OK) st = rt_wait(&req, j->o->timeout_s, NULL, NULL, "the checkpoint agreement", &e2);
    if (mine != DYN_OK) return mine;
    if (st != DYN_OK) {
        *err = e2;
        return st;
    }
    if (any) return dyn_error_set(err, DYN_ERR_IO, "checkpoint: another rank failed to write its part");
    return DYN_OK;
}

/* This rank's shards (replica 0 only); the names of its owned tensors, as
 * "stage name bytes\n" lines, into *list. */
static dyn_status write_shards(const rt_ckpt_job *j, const char *tmp, char **list, size_t *list_len, dyn_error *err)
{
    size_t cap = 256, len = 0;
    char *buf = malloc(cap);
    if (buf == NULL) return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for checkpoint names");
    buf[0] = '\0';
    dyn_status st = DYN_OK;
    for (int32_t c = 0; st == DYN_OK && c < j->n_local; c++) {
        int32_t s = c * j->g->stages + j->g->stage_rank;
        dyn_model *m = j->models[c];
        char name[128], p[PATH_CAP];
        shard_name(name, sizeof name, "model", s, j->n_stages);
        pathf(p, sizeof p, "%s/%s", tmp, name);
        st = dyn_model_save(m, p, err);
        shard_name(name, sizeof name, "optimizer", s, j->n_stages);
        pathf(p, sizeof p, "%s/%s", tmp, name);
        dyn_train_state ts;
        memset(&ts, 0, sizeof ts);
        ts.data_cursor = j->sampler_pos;
        if (st == DYN_OK) st = dyn_model_save_train_state(m, &ts, p, err);
        for (int t = 0; st == DYN_OK && t < dyn_model_num_tensors(m); t++) {
            const dyn_param_tensor *pt = dyn_model_tensor(m, t);
            if (pt->shared_copy) continue;
            if (len + strlen(pt->name) + 48 > cap) {
                cap = 2 * cap + strlen(pt->name) + 48;
                char *nb = realloc(buf, cap);
                if (nb == NULL) {
                    st = dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for checkpoint names");
                    break;
                }
                buf = nb;
            }
            len += (size_t)snprintf(buf + len, cap - len, "%d %s %zu\n", s, pt->name, pt->numel * sizeof(float));
        }
    }
    *list = buf;
    *list_len = len;
    return st;
}

/* Gather the name lists of replica 0's pipeline on its rank 0. */
static dyn_status gather_names(const rt_ckpt_job *j, const char *mine, size_t len, char **all, dyn_error *err)
{
    int S = j->g->stages, me = j->g->stage_rank, n = (int)len;
    int *counts = NULL, *displs = NULL;
    dyn_status st = DYN_OK;
    *all = NULL;
    if (me == 0) {
        counts = dyn_calloc((size_t)S, sizeof(int), "checkpoint", err);
        displs = dyn_calloc((size_t)S, sizeof(int), "checkpoint", err);
        if (counts == NULL || displs == NULL) st = DYN_ERR_NOMEM;
    }
    MPI_Request req;
    if (st == DYN_OK)
        st = dyn_rt_mpi_check(MPI_Igather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, j->g->pipe, &req), "MPI_Igather", err);
    if (st == DYN_OK) st = rt_wait(&req, j->o->timeout_s, NULL, NULL, "the checkpoint names gather", err);
    size_t total = 0;
    if (st == DYN_OK && me == 0) {
        for (int r = 0; r < S; r++) {
            displs[r] = (int)total;
            total += (size_t)counts[r];
        }
        if ((*all = calloc(total + 1, 1)) == NULL) st = dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for names");
    }
    if (st == DYN_OK)
        st = dyn_rt_mpi_check(MPI_Igatherv(mine, n, MPI_CHAR, *all, counts, displs, MPI_CHAR, 0, j->g->pipe, &req),
                              "MPI_Igatherv", err);
    if (st == DYN_OK) st = rt_wait(&req, j->o->timeout_s, NULL, NULL, "the checkpoint names gather", err);
    free(counts);
    free(displs);
    return st;
}

static dyn_status write_json_file(const char *path, cJSON *root, dyn_error *err)
{
    char *text = root ? cJSON_Print(root) : NULL;
    if (text == NULL) return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory writing %s", path);
    size_t n = strlen(text);
    char *t2 = realloc(text, n + 2);
    if (t2 == NULL) {
        free(text);
        return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory writing %s", path);
    }
    t2[n] = '\n';
    t2[n + 1] = '\0';
    dyn_status st = dyn_file_write_atomic(path, t2, n + 1, err);
    free(t2);
    return st;
}

/* Rank 0: index, config and trainer state into tmp, given the gathered
 * name lists. */
static dyn_status write_rank0_files(const rt_ckpt_job *j, const char *tmp, const char *names, dyn_error *err)
{
    rt_ckpt_meta *m = dyn_calloc(1, sizeof *m, "checkpoint", err);
    if (m == NULL) return DYN_ERR_NOMEM;
    const dyn_train_options *o = j->o;
    m->step = j->step;
    m->sampler_pos = j->sampler_pos;
    m->stages = j->g->stages;
    m->dp = j->g->dp;
    m->chunks = j->n_stages / j->g->stages;
    m->n_stages = j->n_stages;
    memcpy(m->lay_first, j->lay_first, ((size_t)j->n_stages + 1) * sizeof(int32_t));
    m->model = o->model;
    m->seed = o->seed;
    snprintf(m->data_spec, sizeof m->data_spec, "%s", o->data_spec);
    m->n_samples = o->n_samples;
    m->split = o->split;
    m->global_batch_tokens = o->global_batch_tokens;
    m->lr = o->lr;
    char p[PATH_CAP], shard[128];
    /* index */
    cJSON *idx = cJSON_CreateObject();
    cJSON *md = idx ? cJSON_AddObjectToObject(idx, "metadata") : NULL;
    cJSON *map = idx ? cJSON_AddObjectToObject(idx, "weight_map") : NULL;
    dyn_status st = map ? DYN_OK : dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the index");
    double total = 0;
    for (const char *line = names; st == DYN_OK && *line;) {
        int s = -1;
        char name[128];
        size_t bytes = 0;
        if (sscanf(line, "%d %127s %zu", &s, name, &bytes) != 3 || s < 0 || s >= j->n_stages) {
            st = dyn_error_set(err, DYN_ERR_INTERNAL, "checkpoint: bad tensor list line");
            break;
        }
        shard_name(shard, sizeof shard, "model", s, j->n_stages);
        cJSON_AddStringToObject(map, name, shard);
        total += (double)bytes;
        const char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : line + strlen(line);
    }
    if (st == DYN_OK) {
        cJSON_AddNumberToObject(md, "total_size", total);
        cJSON_AddStringToObject(md, "format", "pt");
        pathf(p, sizeof p, "%s/model.safetensors.index.json", tmp);
        st = write_json_file(p, idx, err);
    }
    cJSON_Delete(idx);
    if (st == DYN_OK) {
        char *cfg = rt_ckpt_hf_config(&o->model, err);
        if (cfg == NULL) st = DYN_ERR_NOMEM;
        pathf(p, sizeof p, "%s/config.json", tmp);
        if (cfg) st = dyn_file_write_atomic(p, cfg, strlen(cfg), err);
        free(cfg);
    }
    /* the hashes of every file written so far */
    const char *fixed[2] = {"config.json", "model.safetensors.index.json"};
    for (int32_t i = 0; st == DYN_OK && i < 2 * j->n_stages + 2; i++) {
        rt_ckpt_file *f = &m->files[m->n_files++];
        if (i < 2) snprintf(f->name, sizeof f->name, "%s", fixed[i]);
        else shard_name(f->name, sizeof f->name, (i - 2) % 2 ? "optimizer" : "model", (i - 2) / 2, j->n_stages);
        pathf(p, sizeof p, "%s/%s", tmp, f->name);
        char *data = NULL;
        size_t len = 0;
        st = dyn_file_read_all(p, &data, &len, err);
        if (st == DYN_OK) {
            f->bytes = len;
            f->fnv = fnv1a64((const unsigned char *)data, len);
        }
        free(data);
    }
    if (st == DYN_OK) {
        cJSON *ts = meta_to_json(m);
        pathf(p, sizeof p, "%s/trainer_state.json", tmp);
        st = write_json_file(p, ts, err);
        cJSON_Delete(ts);
    }
    free(m);
    return st;
}

/* Rank 0: tmp -> final, then `latest`. */
static dyn_status commit(const char *root, const char *tmp, const char *final, const char *leaf, dyn_error *err)
{
    dyn_status st = fsync_dir(tmp, err);
    char old[PATH_CAP];
    pathf(old, sizeof old, "%s.old", final);
    int replaced = 0;
    if (st == DYN_OK && is_dir(final)) { /* the same step saved again (e.g. after a resume) */
        st = remove_flat_dir(old, err);
        if (st == DYN_OK && rename(final, old) != 0)
            st = dyn_error_set(err, DYN_ERR_IO, "%s: cannot move aside: %s", final, strerror(errno));
        replaced = st == DYN_OK;
    }
    if (st == DYN_OK && rename(tmp, final) != 0)
        st = dyn_error_set(err, DYN_ERR_IO, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    if (st == DYN_OK) st = fsync_dir(root, err);
    char latest[PATH_CAP], text[128];
    pathf(latest, sizeof latest, "%s/latest", root);
    snprintf(text, sizeof text, "%s\n", leaf);
    if (st == DYN_OK) st = dyn_file_write_atomic(latest, text, strlen(text), err);
    if (st == DYN_OK) st = fsync_dir(root, err);
    if (st == DYN_OK && replaced) st = remove_flat_dir(old, err);
    return st;
}

dyn_status rt_ckpt_save(const rt_ckpt_job *j, dyn_error *err)
{
    const char *root = j->o->save_dir;
    if (check_root(root, err) != DYN_OK) return agree(j, err->code, err);
    char leaf[64], tmp[PATH_CAP], final[PATH_CAP];
    snprintf(leaf, sizeof leaf, "step-%08lld", (long long)j->step);
    pathf(final, sizeof final, "%s/%s", root, leaf);
    pathf(tmp, sizeof tmp, "%s.tmp", final);
    dyn_status st = DYN_OK;
    if (j->n_stages > RT_CKPT_MAX_STAGES)
        st = dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint: %d plan stages, at most %d", j->n_stages,
                           RT_CKPT_MAX_STAGES);
    if (st == DYN_OK && j->g->world_rank == 0) {
        if (mkdir(root, 0777) != 0 && errno != EEXIST)
            st = dyn_error_set(err, DYN_ERR_IO, "%s: cannot create: %s", root, strerror(errno));
        if (st == DYN_OK) st = remove_flat_dir(tmp, err); /* a save that crashed */
        if (st == DYN_OK && mkdir(tmp, 0777) != 0)
            st = dyn_error_set(err, DYN_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    st = agree(j, st, err);
    char *mine = NULL, *all = NULL;
    size_t len = 0;
    if (st == DYN_OK && j->g->replica == 0) {
        st = write_shards(j, tmp, &mine, &len, err);
        /* every pipeline rank takes part in the gather, failed or not */
        dyn_error e2;
        dyn_status g = gather_names(j, mine, st == DYN_OK ? len : 0, &all, st == DYN_OK ? err : &e2);
        if (st == DYN_OK) st = g;
    }
    free(mine);
    st = agree(j, st, err);
    if (st == DYN_OK && j->g->world_rank == 0) {
        st = write_rank0_files(j, tmp, all, err);
        if (st == DYN_OK) st = commit(root, tmp, final, leaf, err);
    }
    free(all);
    return agree(j, st, err);
}
