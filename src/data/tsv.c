/* tsv.c — reading sample lengths from a TSV file: `input_len<TAB>target_len`
 * per line, '#' comments, blank lines, one optional header line. Every error
 * names path:line, so a user can fix a million-line file in one go. */
#include "dynapipe/data.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h" /* defines: dyn_file_read_all */

/* Trim spaces (not tabs: they separate fields) and a trailing '\r'. */
static char *trim(char *s, char **end)
{
    char *e = *end;
    while (s < e && (*s == ' ' || *s == '\r')) s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\r')) e--;
    *e = '\0';
    *end = e;
    return s;
}

static int is_blank(const char *s)
{
    for (; *s; s++)
        if (!isspace((unsigned char)*s)) return 0;
    return 1;
}

/* A header's first field does not look like a number at all (no leading
 * digit or sign); "12x" or "3.5" are malformed numbers, not headers. */
static int looks_like_header(const char *line)
{
    while (*line == ' ') line++;
    return !(isdigit((unsigned char)*line) || *line == '-' || *line == '+' || *line == '.');
}

/* Parse one length field. Returns 0 and sets *v, or -1 with *why set. */
static int parse_len(const char *field, long *v, const char **why)
{
    if (*field == '\0') {
        *why = "empty field";
        return -1;
    }
    char *end = NULL;
    errno = 0;
    long x = strtol(field, &end, 10);
    if (end == field || *end != '\0') {
        *why = "not an integer";
        return -1;
    }
    if (errno == ERANGE || x > INT32_MAX || x < INT32_MIN) {
        *why = "out of range";
        return -1;
    }
    *v = x;
    return 0;
}

/* Parse the two fields of a data line into *in / *tgt; 0 or -1 with err set. */
static int parse_line(char *line, const char *path, long long lineno, dyn_model_kind kind, long *in, long *tgt,
                      dyn_error *err)
{
    char *fields[3] = {NULL, NULL, NULL};
    int nf = 0;
    char *p = line;
    for (;;) {
        char *tab = strchr(p, '\t');
        if (nf < 3) fields[nf] = p;
        nf++;
        if (tab == NULL) break;
        *tab = '\0';
        p = tab + 1;
    }
    if (nf != 2) {
        dyn_error_set(err, DYN_ERR_PARSE,
                      "%s:%lld: expected 2 tab-separated fields (input_len, target_len), got %d", path,
                      lineno, nf);
        return -1;
    }
    const char *names[2] = {"input_len", "target_len"};
    long vals[2];
    for (int k = 0; k < 2; k++) {
        char *end = fields[k] + strlen(fields[k]);
        char *f = trim(fields[k], &end);
        const char *why = NULL;
        if (parse_len(f, &vals[k], &why) != 0) {
            dyn_error_set(err, DYN_ERR_PARSE, "%s:%lld: %s '%s': %s", path, lineno, names[k], f, why);
            return -1;
        }
        /* A GPT sample may have no target: the whole sequence is the sample. */
        long min = k == 1 && kind != DYN_MODEL_T5 ? 0 : 1;
        if (vals[k] < min) {
            dyn_error_set(err, DYN_ERR_PARSE, "%s:%lld: %s %ld must be %s", path, lineno, names[k], vals[k],
                          min ? "positive" : ">= 0");
            return -1;
        }
    }
    *in = vals[0];
    *tgt = vals[1];
    return 0;
}

/* The text of *path ("-": standard input, then named "<stdin>" in *path);
 * a file with NUL bytes is refused. */
static dyn_status tsv_read_text(const char **path, char **text, size_t *len, dyn_error *err)
{
    const int from_stdin = strcmp(*path, "-") == 0;
    if (from_stdin) *path = "<stdin>";
    dyn_status st = from_stdin ? dyn_stream_read_all(stdin, *path, text, len, err)
                               : dyn_file_read_all(*path, text, len, err);
    if (st != DYN_OK) return st;
    if (memchr(*text, '\0', *len) != NULL) {
        free(*text);
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: binary file (contains NUL bytes)", *path);
    }
    return DYN_OK;
}

/* The length rule for sample n (lengths in, tgt) of line lineno: with clip
 * an over-long sample is cut (*i32, *t32); without, it is an error (-1). */
static int tsv_fit(const char *path, long long lineno, int32_t n, dyn_model_kind kind, int32_t max_seqlen,
                   int clip, long in, long tgt, int32_t *i32, int32_t *t32, dyn_error *err)
{
    *i32 = (int32_t)in;
    *t32 = (int32_t)tgt;
    if (dyn_lengths_fit(kind, max_seqlen, *i32, *t32)) return 0;
    if (clip) {
        dyn_lengths_clip(kind, max_seqlen, i32, t32);
        return 0;
    }
    if (kind != DYN_MODEL_T5)
        dyn_error_set(err, DYN_ERR_PARSE,
                      "%s:%lld: sample %d: input_len + target_len = %ld tokens exceeds "
                      "max_seqlen %d (GPT: the limit is on input+target; give --clip to cut it)",
                      path, lineno, n, in + tgt, max_seqlen);
    else
        dyn_error_set(err, DYN_ERR_PARSE,
                      "%s:%lld: sample %d: %s = %ld tokens exceeds max_seqlen %d (T5: the "
                      "limit is on each side; give --clip to cut it)",
                      path, lineno, n, in > max_seqlen ? "input_len" : "target_len",
                      in > max_seqlen ? in : tgt, max_seqlen);
    return -1;
}

dyn_status dyn_dataset_read_tsv(const char *path, int32_t max_seqlen, dyn_model_kind kind,
                                int clip, dyn_dataset *out, dyn_error *err)
{
    if (max_seqlen < 2)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: max_seqlen %d < 2", path, max_seqlen);
    char *text = NULL;
    size_t len = 0;
    dyn_status st = tsv_read_text(&path, &text, &len, err);
    if (st != DYN_OK) return st;
    /* Upper bound on samples: number of lines. */
    size_t cap = 1;
    for (size_t i = 0; i < len; i++) cap += text[i] == '\n';
    dyn_sample *s = dyn_calloc(cap, sizeof *s, "TSV samples", err);
    if (s == NULL) {
        free(text);
        return DYN_ERR_NOMEM;
    }
    int32_t n = 0;
    int seen_content = 0;
    long long lineno = 0; /* a file of more than 2^31 lines is possible */
    char *line = text;
    while (line < text + len) {
        char *nl = strchr(line, '\n');
        char *end = nl ? nl : text + len;
        char *next = nl ? nl + 1 : text + len;
        lineno++;
        *end = '\0';
        char *l = trim(line, &end);
        line = next;
        if (is_blank(l) || l[0] == '#') continue;
        if (!seen_content) {
            seen_content = 1;
            if (looks_like_header(l)) continue;
        }
        long in, tgt;
        if (parse_line(l, path, lineno, kind, &in, &tgt, err) != 0) goto fail;
        if (n == INT32_MAX) { /* sample ids and the count are int32 */
            dyn_error_set(err, DYN_ERR_PARSE, "%s:%lld: more than %d samples", path, lineno, INT32_MAX);
            goto fail;
        }
        int32_t i32, t32;
        if (tsv_fit(path, lineno, n, kind, max_seqlen, clip, in, tgt, &i32, &t32, err) != 0) goto fail;
        s[n] = (dyn_sample){.id = n, .task = -1, .input_len = i32, .target_len = t32};
        n++;
    }
    free(text);
    out->n = n;
    out->samples = s;
    return DYN_OK;
fail:
    free(text);
    free(s);
    return err ? err->code : DYN_ERR_PARSE;
}
