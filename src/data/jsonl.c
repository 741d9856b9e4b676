/* jsonl.c — JSONL training data: one JSON object per line, in one of five
 * formats (one format per file):
 *   {"input": "...", "target": "..."}          text pair -> tokens (the codec's rule)
 *   {"input_ids": [..], "target_ids": [..]}    pre-tokenised pair
 *   {"text": "..."}                             decoder-only text
 *   {"input_ids": [..]}                         decoder-only ids
 *   {"messages": [{"role", "content"}, ..]}    chat -> an input/target pair
 * Text is encoded by the corpus's codec (codec.c: tokenizer, template, EOS),
 * at open (for the lengths) and again at each read. A chat record is
 * rendered by the tokenizer folder's chat template (data/chat.h): the input
 * is every message but the last with add_generation_prompt, the target the
 * rest of the whole conversation's rendering, whose last message must be
 * the assistant's (docs/guide-chat.md). Other keys are ignored. Opening reads the file once, line by line (one
 * line in memory at a time), parses and checks every record and keeps a
 * byte-offset index (offset, length and line number per record) and the
 * lengths; dyn_corpus_read seeks to the record and parses that one line
 * again. Every error names path:line, and the record index where it helps.
 * A line is held to the configuration reader's rules (util/json.h): UTF-8
 * only, no \u0000 in a string, no key twice. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "data/corpus_impl.h" /* defines: dyn_corpus, corpus_fit_lengths, corpus_reserve */
#include "util/json.h"        /* defines: dyn_json_text_problem, dyn_json_duplicate_key */
#include "util/util.h"        /* defines: dyn_calloc, DYN_RESERVE */

enum {
    FMT_NONE = 0,
    FMT_TEXT_PAIR = 1,
    FMT_IDS_PAIR = 2,
    FMT_TEXT = 3,
    FMT_IDS = 4,
    FMT_CHAT = 5
};

static const char *format_name(int f)
{
    switch (f) {
    case FMT_TEXT_PAIR: return "input/target strings";
    case FMT_IDS_PAIR: return "input_ids/target_ids arrays";
    case FMT_TEXT: return "a text string";
    case FMT_IDS: return "an input_ids array alone";
    case FMT_CHAT: return "a messages list";
    default: return "nothing";
    }
}

/* Which format an object uses; FMT_NONE with *why set if none fits. */
static int record_format(const cJSON *obj, const char **why)
{
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(obj, "input");
    const cJSON *tgt = cJSON_GetObjectItemCaseSensitive(obj, "target");
    const cJSON *in_ids = cJSON_GetObjectItemCaseSensitive(obj, "input_ids");
    const cJSON *tgt_ids = cJSON_GetObjectItemCaseSensitive(obj, "target_ids");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(obj, "text");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(obj, "messages");
    int kinds = (in || tgt) + (in_ids || tgt_ids) + (text != NULL) + (msgs != NULL);
    *why = NULL;
    if (kinds == 0) *why = "the record has none of input/target, input_ids/target_ids, text, messages";
    else if (kinds > 1) *why = "the record mixes input/target, input_ids/target_ids, text and messages: use one";
    else if (msgs) {
        if (!cJSON_IsArray(msgs)) *why = "messages must be a list of {\"role\", \"content\"} objects";
        else return FMT_CHAT;
    }
    else if (in || tgt) {
        if (!cJSON_IsString(in) || !cJSON_IsString(tgt)) *why = "input and target must both be strings";
        else return FMT_TEXT_PAIR;
    } else if (in_ids || tgt_ids) {
        if (!cJSON_IsArray(in_ids)) *why = "input_ids must be an array of integers";
        else if (tgt_ids == NULL) return FMT_IDS;
        else if (!cJSON_IsArray(tgt_ids)) *why = "target_ids must be an array of integers";
        else return FMT_IDS_PAIR;
    } else {
        if (!cJSON_IsString(text)) *why = "text must be a string";
        else return FMT_TEXT;
    }
    return FMT_NONE;
}

/* Check the ids of arr (all in [0, vocab)) and, when dst != NULL, copy the
 * first `keep` of them. */
static dyn_status ids_check(const cJSON *arr, const char *field, int32_t vocab, const char *where,
                            int64_t rec, int32_t *dst, int64_t keep, dyn_error *err)
{
    int64_t k = 0;
    for (const cJSON *e = arr->child; e; e = e->next, k++) {
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || floor(e->valuedouble) != e->valuedouble)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: record %lld: %s[%lld] is not an integer",
                                 where, (long long)rec, field, (long long)k);
        double v = e->valuedouble;
        if (v < 0 || v >= vocab)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "%s: record %lld: %s[%lld] = %.0f is outside the vocabulary [0, %d)",
                                 where, (long long)rec, field, (long long)k, v, vocab);
        if (dst && k < keep) dst[k] = (int32_t)v;
    }
    return DYN_OK;
}

static int64_t array_len(const cJSON *arr)
{
    int64_t n = 0;
    for (const cJSON *e = arr->child; e; e = e->next) n++;
    return n;
}

/* Parse one line (len bytes, not NUL-terminated) into *obj: UTF-8 and
 * \u0000 checked first, then one JSON object and nothing after it but
 * blanks, with no key twice. What cJSON lets through is refused as the
 * configuration reader does, so that every reader (a tokenizer too) sees
 * the same record: bytes that are not UTF-8 (they would become byte
 * tokens), \u0000 (it would cut a string short), and a key given twice
 * (cJSON keeps the first). The caller frees *obj (also set on error). */
static dyn_status record_object(const char *line, size_t len, const char *where, cJSON **obj, dyn_error *err)
{
    size_t bad;
    const char *bad_why;
    *obj = NULL;
    if (dyn_json_text_problem(line, len, &bad, &bad_why))
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: byte %zu of the line: %s", where, bad + 1, bad_why);
    const char *end = NULL;
    *obj = cJSON_ParseWithLengthOpts(line, len, &end, 0);
    if (*obj == NULL) {
        size_t at = end && end >= line && end <= line + len ? (size_t)(end - line) : 0;
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: malformed JSON near byte %zu of the line", where, at + 1);
    }
    for (const char *p = end; p && p < line + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n')
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: text after the JSON object (one object per line)", where);
    if (!cJSON_IsObject(*obj)) return dyn_error_set(err, DYN_ERR_PARSE, "%s: expected a JSON object", where);
    const char *dup = dyn_json_duplicate_key(*obj);
    if (dup) return dyn_error_set(err, DYN_ERR_PARSE, "%s: key \"%s\" appears twice in one object", where, dup);
    return DYN_OK;
}

/* The record's format, checked against c->json_format (set by the first
 * record), and its one or two sources (*b NULL: decoder-only). */
static dyn_status record_sources(dyn_corpus *c, const cJSON *obj, const char *where, int *fmt_out,
                                 const cJSON **a, const cJSON **b, dyn_error *err)
{
    const char *why;
    int fmt = record_format(obj, &why);
    if (fmt == FMT_NONE) return dyn_error_set(err, DYN_ERR_PARSE, "%s: %s", where, why);
    if (c->json_format == FMT_NONE) c->json_format = fmt;
    if (fmt != c->json_format)
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: the record has %s but the first record has %s (one format per file)",
                             where, format_name(fmt), format_name(c->json_format));
    *b = NULL;
    if (fmt == FMT_TEXT_PAIR) {
        *a = cJSON_GetObjectItemCaseSensitive(obj, "input");
        *b = cJSON_GetObjectItemCaseSensitive(obj, "target");
    } else if (fmt == FMT_IDS_PAIR) {
        *a = cJSON_GetObjectItemCaseSensitive(obj, "input_ids");
        *b = cJSON_GetObjectItemCaseSensitive(obj, "target_ids");
    } else if (fmt == FMT_CHAT) {
        *a = *b = cJSON_GetObjectItemCaseSensitive(obj, "messages"); /* b != NULL: a pair */
    } else {
        *a = cJSON_GetObjectItemCaseSensitive(obj, fmt == FMT_TEXT ? "text" : "input_ids");
    }
    *fmt_out = fmt;
    return DYN_OK;
}

/* Encode text source a (and b, when not NULL; chat: a is the messages)
 * by the codec's rule into *ct (the codec's buffers), every id checked
 * against the vocabulary. */
static dyn_status record_encode(dyn_corpus *c, int fmt, const cJSON *a, const cJSON *b, const char *where,
                                int64_t rec, dyn_codec_tokens *ct, dyn_error *err)
{
    dyn_error e;
    dyn_status es = fmt == FMT_CHAT ? dyn_codec_encode_chat(c->codec, a, ct, &e)
        : b == NULL
        ? dyn_codec_encode_text(c->codec, a->valuestring, strlen(a->valuestring), ct, &e)
        : dyn_codec_encode_pair(c->codec, a->valuestring, strlen(a->valuestring), b->valuestring,
                                strlen(b->valuestring), ct, &e);
    if (es != DYN_OK) return dyn_error_set(err, es, "%s: record %lld: %s", where, (long long)rec, e.msg);
    /* Every rule adds special ids (bytes: sep 259, eos 258): every id is
     * checked against the vocabulary. */
    const int32_t *side[2] = {ct->input, ct->target};
    int64_t len[2] = {ct->input_len, ct->target_len};
    for (int s2 = 0; s2 < 2; s2++)
        for (int64_t k = 0; k < len[s2]; k++)
            if (side[s2][k] < 0 || side[s2][k] >= c->opt.vocab)
                return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                     "%s: record %lld: token %d of the %s is outside the vocabulary [0, %d)", where,
                                     (long long)rec, side[s2][k], s2 ? "target" : "input", c->opt.vocab);
    return DYN_OK;
}

/* Input and target lengths from the sources' na and nb tokens (pair) or
 * na tokens (decoder-only: input = s[0..1), target = s[1..n)). */
static dyn_status record_lengths(int pair, int64_t na, int64_t nb, const char *where, int64_t rec, int64_t *in,
                                 int64_t *tgt, dyn_error *err)
{
    if (!pair) {
        if (na < 2)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "%s: record %lld: a decoder-only sequence needs at least 2 tokens, got %lld", where,
                                 (long long)rec, (long long)na);
        *in = 1;
        *tgt = na - 1;
        return DYN_OK;
    }
    if (na < 1 || nb < 1)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: record %lld: empty %s (a sample needs at least one "
                             "input and one target token)", where, (long long)rec, na < 1 ? "input" : "target");
    *in = na;
    *tgt = nb;
    return DYN_OK;
}

/* Check the ids of array sources (every one, also past the kept lengths)
 * and, with fill != 0, copy the kept tokens into c->tok_in / c->tok_tgt. */
static dyn_status record_ids(dyn_corpus *c, const cJSON *a, const cJSON *b, const char *where, int64_t rec,
                             int fill, int64_t in, int64_t tgt, dyn_error *err)
{
    dyn_status st;
    if (b != NULL) {
        if ((st = ids_check(a, "input_ids", c->opt.vocab, where, rec, fill ? c->tok_in : NULL, in, err)) != DYN_OK)
            return st;
        return ids_check(b, "target_ids", c->opt.vocab, where, rec, fill ? c->tok_tgt : NULL, tgt, err);
    }
    /* Check every id, then copy the kept prefix (1 + tgt) split in two. */
    if ((st = ids_check(a, "input_ids", c->opt.vocab, where, rec, NULL, 0, err)) != DYN_OK) return st;
    if (fill) {
        int64_t k = 0;
        for (const cJSON *e = a->child; e && k < 1 + tgt; e = e->next, k++) {
            if (k == 0) c->tok_in[0] = (int32_t)e->valuedouble;
            else c->tok_tgt[k - 1] = (int32_t)e->valuedouble;
        }
    }
    return DYN_OK;
}

/* Copy the kept tokens of encoded text into c->tok_in / c->tok_tgt. */
static void record_copy_text(dyn_corpus *c, const dyn_codec_tokens *ct, int pair, int64_t in, int64_t tgt)
{
    if (!pair) { /* one sequence: first token, then the rest */
        c->tok_in[0] = ct->input[0];
        for (int64_t k = 0; k < tgt; k++) c->tok_tgt[k] = ct->input[1 + k];
    } else {
        for (int64_t k = 0; k < in; k++) c->tok_in[k] = ct->input[k];
        for (int64_t k = 0; k < tgt; k++) c->tok_tgt[k] = ct->target[k];
    }
}

/* The record in obj as record rec: its sources, their tokens (text:
 * encoded), the length rule, and with fill != 0 the tokens. */
static dyn_status record_fill(dyn_corpus *c, const cJSON *obj, const char *where, int64_t rec, int fill,
                              dyn_corpus_sample *out, dyn_error *err)
{
    int fmt = FMT_NONE;
    const cJSON *a = NULL, *b = NULL; /* the two sources: strings or arrays */
    dyn_status st = record_sources(c, obj, where, &fmt, &a, &b, err);
    if (st != DYN_OK) return st;
    int is_text = fmt == FMT_TEXT_PAIR || fmt == FMT_TEXT || fmt == FMT_CHAT;
    dyn_codec_tokens ct = {0}; /* text: the record's tokens by the codec's rule */
    if (is_text && (st = record_encode(c, fmt, a, b, where, rec, &ct, err)) != DYN_OK) return st;
    int64_t na = is_text ? ct.input_len : array_len(a);
    int64_t nb = b == NULL ? 0 : is_text ? ct.target_len : array_len(b);
    int64_t in, tgt;
    int truncated;
    if ((st = record_lengths(b != NULL, na, nb, where, rec, &in, &tgt, err)) != DYN_OK) return st;
    if ((st = corpus_fit_lengths(&c->opt, where, rec, &in, &tgt, &truncated, err)) != DYN_OK) return st;
    if (fill && (st = corpus_reserve(c, (size_t)in, (size_t)tgt, err)) != DYN_OK) return st;
    if (is_text) {
        if (fill) record_copy_text(c, &ct, b != NULL, in, tgt);
    } else if ((st = record_ids(c, a, b, where, rec, fill, in, tgt, err)) != DYN_OK) {
        return st;
    }
    *out = (dyn_corpus_sample){.index = rec, .task = -1, .input_len = (int32_t)in, .target_len = (int32_t)tgt,
                               .input = c->tok_in, .target = c->tok_tgt, .truncated = truncated};
    return DYN_OK;
}

/* Parse one line (len bytes, not NUL-terminated) as record rec. Checks the
 * format against c->json_format (set by the first record), every id and the
 * length rule. Fills out's lengths and, with fill != 0, the tokens. */
static dyn_status record_parse(dyn_corpus *c, const char *line, size_t len, const char *where, int64_t rec,
                               int fill, dyn_corpus_sample *out, dyn_error *err)
{
    cJSON *obj;
    dyn_status st = record_object(line, len, where, &obj, err);
    if (st == DYN_OK) st = record_fill(c, obj, where, rec, fill, out, err);
    cJSON_Delete(obj);
    return st;
}

/* Append record (offset, bytes, line, lengths) to the index, growing it. */
static dyn_status index_push(dyn_corpus *c, int64_t *cap, int64_t off, int32_t bytes, int64_t line,
                             int32_t in, int32_t tgt, dyn_error *err)
{
    if (c->n == *cap) { /* five arrays of one capacity: 1024, then doubling */
        size_t old = (size_t)*cap, need = old ? old + 1 : 1024, got = old;
        if (DYN_RESERVE(c->offset, got, need) != 0 || DYN_RESERVE(c->line_no, (size_t){old}, need) != 0 ||
            DYN_RESERVE(c->line_len, (size_t){old}, need) != 0 || DYN_RESERVE(c->len_in, (size_t){old}, need) != 0 ||
            DYN_RESERVE(c->len_tgt, (size_t){old}, need) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory for the index of %lld records", c->path,
                                 (long long)(old ? 2 * old : need));
        *cap = (int64_t)got;
    }
    c->offset[c->n] = off;
    c->line_len[c->n] = bytes;
    c->line_no[c->n] = line;
    c->len_in[c->n] = in;
    c->len_tgt[c->n] = tgt;
    c->n++;
    return DYN_OK;
}

static int is_blank(const char *s, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (s[k] != ' ' && s[k] != '\t' && s[k] != '\r' && s[k] != '\n') return 0;
    return 1;
}

dyn_status jsonl_open(dyn_corpus *c, const char *path, dyn_error *err)
{
    c->src = SRC_JSONL;
    c->path = strdup(path);
    if (c->path == NULL) return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", path);
    int fd;
    dyn_status st = corpus_open_regular(path, &fd, err);
    if (st != DYN_OK) return st;
    c->fp = fdopen(fd, "rb");
    if (c->fp == NULL) {
        st = dyn_error_set(err, DYN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
        return st;
    }
    int64_t cap = 0, off = 0, lineno = 0;
    for (;;) {
        errno = 0;
        ssize_t got = getline(&c->line_buf, &c->line_cap, c->fp);
        if (got < 0) {
            if (ferror(c->fp))
                st = dyn_error_set(err, DYN_ERR_IO, "%s:%lld: read failed: %s", path, (long long)lineno + 1,
                                   strerror(errno));
            break;
        }
        lineno++;
        int64_t line_off = off;
        off += got;
        if (is_blank(c->line_buf, (size_t)got)) continue;
        if (got > INT32_MAX) {
            st = dyn_error_set(err, DYN_ERR_PARSE, "%s:%lld: line longer than 2 GiB", path, (long long)lineno);
            break;
        }
        char where[600];
        snprintf(where, sizeof where, "%s:%lld", path, (long long)lineno);
        dyn_corpus_sample s;
        if ((st = record_parse(c, c->line_buf, (size_t)got, where, c->n, 0, &s, err)) != DYN_OK) break;
        if ((st = index_push(c, &cap, line_off, (int32_t)got, lineno, s.input_len, s.target_len, err)) != DYN_OK)
            break;
    }
    if (st == DYN_OK && c->n == 0) st = dyn_error_set(err, DYN_ERR_PARSE, "%s: no records", path);
    c->decoder_only = c->json_format == FMT_TEXT || c->json_format == FMT_IDS;
    return st;
}

dyn_status jsonl_read(dyn_corpus *c, int64_t i, dyn_corpus_sample *out, dyn_error *err)
{
    size_t need = (size_t)c->line_len[i] + 1;
    if (DYN_RESERVE(c->line_buf, c->line_cap, need) != 0) /* also getline's buffer */
        return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory for a line", c->path);
    char where[600];
    snprintf(where, sizeof where, "%s:%lld", c->path, (long long)c->line_no[i]);
    if (fseeko(c->fp, (off_t)c->offset[i], SEEK_SET) != 0 ||
        fread(c->line_buf, 1, (size_t)c->line_len[i], c->fp) != (size_t)c->line_len[i])
        return dyn_error_set(err, DYN_ERR_IO, "%s: cannot read record %lld again (was the file changed?)", where,
                             (long long)i);
    dyn_status st = record_parse(c, c->line_buf, (size_t)c->line_len[i], where, i, 1, out, err);
    if (st == DYN_OK && (out->input_len != c->len_in[i] || out->target_len != c->len_tgt[i]))
        st = dyn_error_set(err, DYN_ERR_IO, "%s: record %lld changed since the file was opened", where, (long long)i);
    return st;
}

void jsonl_close(dyn_corpus *c)
{
    if (c->fp) fclose(c->fp);
    free(c->path);
    free(c->offset);
    free(c->line_len);
    free(c->line_no);
    free(c->len_in);
    free(c->len_tgt);
    free(c->line_buf);
}
