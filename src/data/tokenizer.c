/*
 * tokenizer.c — the tokenizer handle: which file a path names, the byte
 * tokenizer, encode/decode dispatch with the checks every kind shares (ids
 * within the vocabulary, buffers restored on failure) and the special ids
 * read from the files beside a tokenizer (tokenizer_config.json,
 * special_tokens_map.json, config.json). The kinds themselves live in
 * tok_bpe.c (Hugging Face byte-level BPE) and tok_spm.cc (SentencePiece).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/tokenizer_impl.h" /* defines: struct dyn_tokenizer, dyn_tokenizer_ops */
#include "dynapipe/corpus.h"      /* defines: DYN_CORPUS_TOK_*, DYN_CORPUS_VOCAB_BYTES */
#include "util/json.h"            /* defines: dyn_json_parse */
#include "util/util.h"            /* defines: dyn_calloc, dyn_file_read_all, DYN_RESERVE */

/* ---- buffers ---------------------------------------------------------- */

void dyn_token_buf_free(dyn_token_buf *b)
{
    if (b == NULL) return;
    free(b->ids);
    memset(b, 0, sizeof *b);
}

void dyn_byte_buf_free(dyn_byte_buf *b)
{
    if (b == NULL) return;
    free(b->data);
    memset(b, 0, sizeof *b);
}

dyn_status dyn_token_buf_reserve(dyn_token_buf *b, size_t extra, dyn_error *err)
{
    if (extra <= b->cap - b->n) return DYN_OK;
    if (extra > SIZE_MAX / sizeof(int32_t) / 2 - b->n)
        return dyn_error_set(err, DYN_ERR_NOMEM, "token buffer: %zu ids is too many", extra);
    size_t need = b->n + extra;
    if (DYN_RESERVE(b->ids, b->cap, b->cap || need > 64 ? need : 64) != 0)
        return dyn_error_set(err, DYN_ERR_NOMEM, "token buffer: out of memory (%zu ids)", need);
    return DYN_OK;
}

dyn_status dyn_byte_buf_reserve(dyn_byte_buf *b, size_t extra, dyn_error *err)
{
    if (extra < b->cap - b->n) return DYN_OK; /* strict: room for the NUL */
    if (extra > SIZE_MAX / 4 - b->n)
        return dyn_error_set(err, DYN_ERR_NOMEM, "byte buffer: %zu bytes is too many", extra);
    size_t need = b->n + extra + 1; /* room for the NUL */
    if (DYN_RESERVE(b->data, b->cap, b->cap || need > 256 ? need : 256) != 0)
        return dyn_error_set(err, DYN_ERR_NOMEM, "byte buffer: out of memory (%zu bytes)", need);
    return DYN_OK;
}

dyn_status dyn_byte_buf_append(dyn_byte_buf *b, const void *data, size_t len, dyn_error *err)
{
    dyn_status st = dyn_byte_buf_reserve(b, len, err);
    if (st != DYN_OK) return st;
    if (len) memcpy(b->data + b->n, data, len);
    b->n += len;
    b->data[b->n] = '\0';
    return DYN_OK;
}

/* ---- the handle -------------------------------------------------------- */

dyn_tokenizer *dyn_tokenizer_new(dyn_tokenizer_kind kind, const char *source,
                                 const dyn_tokenizer_ops *ops, void *impl, dyn_error *err)
{
    dyn_tokenizer *t = dyn_calloc(1, sizeof *t, "tokenizer", err);
    char *src = t ? strdup(source) : NULL;
    if (t == NULL || src == NULL) {
        if (t) dyn_error_set(err, DYN_ERR_NOMEM, "tokenizer: out of memory");
        free(t);
        if (ops->free_impl) ops->free_impl(impl);
        return NULL;
    }
    t->kind = kind;
    t->source = src;
    t->ops = ops;
    t->impl = impl;
    t->sp = (dyn_tokenizer_specials){-1, -1, -1, -1};
    return t;
}

void dyn_tokenizer_free(dyn_tokenizer *t)
{
    if (t == NULL) return;
    if (t->ops->free_impl) t->ops->free_impl(t->impl);
    free(t->source);
    free(t);
}

dyn_tokenizer_kind dyn_tokenizer_kind_of(const dyn_tokenizer *t) { return t->kind; }
int32_t dyn_tokenizer_vocab_size(const dyn_tokenizer *t) { return t->vocab; }
dyn_tokenizer_specials dyn_tokenizer_specials_of(const dyn_tokenizer *t) { return t->sp; }
const char *dyn_tokenizer_source(const dyn_tokenizer *t) { return t->source; }

dyn_status dyn_tokenizer_encode(dyn_tokenizer *t, const char *text, size_t len, int add_special,
                                dyn_token_buf *out, dyn_error *err)
{
    size_t n0 = out->n;
    dyn_status st = t->ops->encode(t, text, len, add_special, out, err);
    if (st != DYN_OK) out->n = n0;
    return st;
}

dyn_status dyn_tokenizer_decode(dyn_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                                dyn_byte_buf *out, dyn_error *err)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->vocab)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "%s: token id %d (position %zu) is outside the vocabulary [0, %d)",
                                 t->source, (int)ids[i], i, (int)t->vocab);
    size_t n0 = out->n;
    dyn_status st = dyn_byte_buf_reserve(out, 0, err);
    if (st == DYN_OK) st = t->ops->decode(t, ids, n, skip_special, out, err);
    if (st != DYN_OK) {
        out->n = n0;
        if (out->data) out->data[n0] = '\0';
    }
    return st;
}

/* ---- bytes ------------------------------------------------------------- */

static dyn_status bytes_encode(dyn_tokenizer *t, const char *text, size_t len, int add_special,
                               dyn_token_buf *out, dyn_error *err)
{
    (void)t;
    (void)add_special; /* the byte vocabulary's separators are the caller's */
    dyn_status st = dyn_token_buf_reserve(out, len, err);
    if (st != DYN_OK) return st;
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = 0; i < len; i++) out->ids[out->n++] = p[i];
    return DYN_OK;
}

static dyn_status bytes_decode(dyn_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                               dyn_byte_buf *out, dyn_error *err)
{
    (void)t;
    static const char *names[] = {"<pad>", "<s>", "<eos>", "<sep>"};
    for (size_t i = 0; i < n; i++) {
        dyn_status st;
        if (ids[i] < 256) {
            char c = (char)(unsigned char)ids[i];
            st = dyn_byte_buf_append(out, &c, 1, err);
        } else if (!skip_special) {
            st = dyn_byte_buf_append(out, names[ids[i] - 256], strlen(names[ids[i] - 256]), err);
        } else {
            st = DYN_OK;
        }
        if (st != DYN_OK) return st;
    }
    return DYN_OK;
}

static const dyn_tokenizer_ops bytes_ops = {bytes_encode, bytes_decode, NULL};

dyn_tokenizer *dyn_tokenizer_bytes(dyn_error *err)
{
    dyn_tokenizer *t = dyn_tokenizer_new(DYN_TOKENIZER_BYTES, "bytes", &bytes_ops, NULL, err);
    if (t == NULL) return NULL;
    t->vocab = DYN_CORPUS_VOCAB_BYTES;
    t->sp.pad = DYN_CORPUS_TOK_PAD;
    t->sp.decoder_start = DYN_CORPUS_TOK_BOS;
    t->sp.eos = DYN_CORPUS_TOK_EOS;
    return t;
}

/* ---- which file -------------------------------------------------------- */

char *dyn_tok_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL) return strdup(".");
    if (slash == path) return strdup("/");
    size_t n = (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (d == NULL) return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

static int is_regular(const char *path)
{
    struct stat s;
    return stat(path, &s) == 0 && S_ISREG(s.st_mode);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Messages quote text from the files (token strings, type names), which may
 * hold control characters: make each one '?' so the message stays one
 * printable line. */
static dyn_tokenizer *one_line(dyn_tokenizer *t, dyn_error *err)
{
    if (t == NULL && err != NULL)
        for (char *p = err->msg; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    return t;
}

static dyn_tokenizer *load_path(const char *path, dyn_error *err);

dyn_tokenizer *dyn_tokenizer_load(const char *path, dyn_error *err) { return one_line(load_path(path, err), err); }

static dyn_tokenizer *load_path(const char *path, dyn_error *err)
{
    if (path == NULL || path[0] == '\0') {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "tokenizer: empty path");
        return NULL;
    }
    if (strcmp(path, "bytes") == 0) return dyn_tokenizer_bytes(err);
    struct stat s;
    if (stat(path, &s) != 0) {
        dyn_error_set(err, DYN_ERR_IO, "%s: cannot open tokenizer: %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISDIR(s.st_mode))
        return ends_with(path, ".json") ? dyn_tokenizer_load_bpe_json(path, err) : dyn_tokenizer_load_spm(path, err);

    size_t n = strlen(path) + 32;
    char *json = malloc(n), *model = malloc(n);
    if (json == NULL || model == NULL) {
        free(json);
        free(model);
        dyn_error_set(err, DYN_ERR_NOMEM, "tokenizer: out of memory");
        return NULL;
    }
    snprintf(json, n, "%s/tokenizer.json", path);
    snprintf(model, n, "%s/tokenizer.model", path);
    if (!is_regular(model)) snprintf(model, n, "%s/spiece.model", path);
    int have_json = is_regular(json), have_model = is_regular(model);
    dyn_tokenizer *t = NULL;
    if (have_json) {
        dyn_error e1;
        dyn_error_clear(&e1);
        t = dyn_tokenizer_load_bpe_json(json, &e1);
        /* An unsupported tokenizer.json (a Unigram T5 file, a Llama 2 BPE
         * with byte fallback) gives way to the SentencePiece model beside it;
         * a malformed one is an error. */
        if (t == NULL && have_model && e1.code == DYN_ERR_INVALID_ARG) t = dyn_tokenizer_load_spm(model, err);
        else if (t == NULL && err) *err = e1;
    } else if (have_model) {
        t = dyn_tokenizer_load_spm(model, err);
    } else {
        dyn_error_set(err, DYN_ERR_IO, "%s: no tokenizer.json, tokenizer.model or spiece.model in this folder", path);
    }
    free(json);
    free(model);
    return t;
}

/* ---- special ids from the files beside a tokenizer ---------------------- */

/* The token text of a tokenizer_config.json / special_tokens_map.json field:
 * a string or {"content": string}; NULL for null or absent. *bad is set for
 * any other shape. */
static const char *token_text(const cJSON *v, int *bad)
{
    if (v == NULL || cJSON_IsNull(v)) return NULL;
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (cJSON_IsString(c)) return c->valuestring;
    }
    *bad = 1;
    return NULL;
}

static dyn_status read_json_file(const char *path, cJSON **root, dyn_error *err)
{
    char *text = NULL;
    size_t len = 0;
    dyn_status st = dyn_file_read_all(path, &text, &len, err);
    if (st != DYN_OK) return st;
    st = dyn_json_parse(text, len, path, root, err);
    free(text);
    if (st == DYN_OK && !cJSON_IsObject(*root)) {
        cJSON_Delete(*root);
        *root = NULL;
        st = dyn_error_set(err, DYN_ERR_PARSE, "%s: not a JSON object", path);
    }
    return st;
}

/* Fill each still-unset id in sp from the token fields of a
 * tokenizer_config.json-like file. */
static dyn_status specials_from_tokens(const char *path, const cJSON *root, int32_t vocab,
                                       dyn_tok_lookup_fn lookup, void *ctx, dyn_tokenizer_specials *sp,
                                       int *seen, dyn_error *err)
{
    static const char *keys[] = {"pad_token", "bos_token", "eos_token"};
    int32_t *slots[] = {&sp->pad, &sp->bos, &sp->eos};
    for (int k = 0; k < 3; k++) {
        if (seen[k]) continue;
        int bad = 0;
        const char *tok = token_text(cJSON_GetObjectItemCaseSensitive(root, keys[k]), &bad);
        if (bad) return dyn_error_set(err, DYN_ERR_PARSE, "%s: \"%s\" is neither a string nor {\"content\": string}", path, keys[k]);
        if (tok == NULL) continue;
        int32_t id = lookup(ctx, tok);
        if (id < 0 || id >= vocab)
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: %s \"%s\" is not in the tokenizer's vocabulary", path, keys[k], tok);
        *slots[k] = id;
        seen[k] = 1;
    }
    return DYN_OK;
}

dyn_status dyn_tok_read_specials(const char *dir, int32_t vocab, dyn_tok_lookup_fn lookup, void *ctx,
                                 dyn_tokenizer_specials *sp, int *add_bos, int *add_eos, dyn_error *err)
{
    size_t n = strlen(dir) + 40;
    char *path = malloc(n);
    if (path == NULL) return dyn_error_set(err, DYN_ERR_NOMEM, "tokenizer: out of memory");
    int seen[4] = {0, 0, 0, 0}; /* pad, bos, eos, decoder_start: set by a file */
    dyn_status st = DYN_OK;
    static const char *token_files[] = {"tokenizer_config.json", "special_tokens_map.json"};
    for (int f = 0; f < 2 && st == DYN_OK; f++) {
        snprintf(path, n, "%s/%s", dir, token_files[f]);
        if (!is_regular(path)) continue;
        cJSON *root = NULL;
        st = read_json_file(path, &root, err);
        if (st != DYN_OK) break;
        st = specials_from_tokens(path, root, vocab, lookup, ctx, sp, seen, err);
        if (st == DYN_OK && f == 0) {
            const cJSON *ab = cJSON_GetObjectItemCaseSensitive(root, "add_bos_token");
            const cJSON *ae = cJSON_GetObjectItemCaseSensitive(root, "add_eos_token");
            if (cJSON_IsBool(ab) && add_bos) *add_bos = cJSON_IsTrue(ab);
            if (cJSON_IsBool(ae) && add_eos) *add_eos = cJSON_IsTrue(ae);
        }
        cJSON_Delete(root);
    }
    snprintf(path, n, "%s/config.json", dir);
    if (st == DYN_OK && is_regular(path)) {
        cJSON *root = NULL;
        st = read_json_file(path, &root, err);
        static const char *keys[] = {"pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"};
        int32_t *slots[] = {&sp->pad, &sp->bos, &sp->eos, &sp->decoder_start};
        for (int k = 0; st == DYN_OK && k < 4; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[k]);
            if (cJSON_IsArray(v)) v = cJSON_GetArrayItem(v, 0); /* several eos ids: the first */
            if (v == NULL || cJSON_IsNull(v) || seen[k]) continue;
            double d = cJSON_IsNumber(v) ? v->valuedouble : -1.0;
            if (!cJSON_IsNumber(v) || !(d >= 0 && d < vocab) || d != (double)(int64_t)d)
                st = dyn_error_set(err, DYN_ERR_PARSE, "%s: %s must be a token id in [0, %d)", path, keys[k], (int)vocab);
            else
                *slots[k] = (int32_t)d;
        }
        cJSON_Delete(root);
    }
    free(path);
    if (st == DYN_OK && sp->decoder_start < 0) sp->decoder_start = sp->pad;
    return st;
}
