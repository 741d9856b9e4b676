/* json.c — strict JSON parsing with line/column errors (json.h): cJSON
 * underneath, plus the checks it does not make (UTF-8, \u0000, duplicate
 * keys, trailing text), shared with the JSONL data reader. */
#include "util/json.h"

#include <string.h>

/* 1-based line and column of byte offset off in text. */
static void json_position(const char *text, size_t off, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

/* Length of the well-formed UTF-8 sequence at p[0..n) (1..4), or 0 when it
 * is not one: a stray continuation byte, an overlong form, a surrogate
 * (U+D800..DFFF), beyond U+10FFFF, or cut short (RFC 3629, table 3-7 of
 * the Unicode standard). */
static size_t utf8_sequence(const unsigned char *p, size_t n)
{
    unsigned char b = p[0];
    if (b < 0x80) return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF; /* the allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) len = 2;
    else if (b == 0xE0) len = 3, lo = 0xA0;
    else if (b >= 0xE1 && b <= 0xEC) len = 3;
    else if (b == 0xED) len = 3, hi = 0x9F;
    else if (b >= 0xEE && b <= 0xEF) len = 3;
    else if (b == 0xF0) len = 4, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3) len = 4;
    else if (b == 0xF4) len = 4, hi = 0x8F;
    else return 0;
    if (n < len || p[1] < lo || p[1] > hi) return 0;
    for (size_t k = 2; k < len; k++)
        if (p[k] < 0x80 || p[k] > 0xBF) return 0;
    return len;
}

int dyn_json_text_problem(const char *text, size_t len, size_t *at, const char **why)
{
    const unsigned char *t = (const unsigned char *)text;
    int in_string = 0;
    for (size_t i = 0; i < len;) {
        size_t k = utf8_sequence(t + i, len - i);
        if (k == 0) {
            *at = i;
            *why = "not valid UTF-8";
            return 1;
        }
        if (k == 1 && t[i] == '"') {
            in_string = !in_string;
        } else if (k == 1 && in_string && t[i] == '\\' && i + 1 < len) {
            if (t[i + 1] == 'u' && i + 6 <= len && memcmp(t + i + 2, "0000", 4) == 0) {
                *at = i;
                *why = "\\u0000 (a NUL character) in a string, which would end it early";
                return 1;
            }
            k = 2; /* the escaped character: a quote there does not end the string */
        }
        i += k;
    }
    return 0;
}

const char *dyn_json_duplicate_key(const cJSON *node)
{
    for (; node != NULL; node = node->next) {
        if (cJSON_IsObject(node))
            for (const cJSON *a = node->child; a; a = a->next)
                for (const cJSON *b = a->next; b; b = b->next)
                    if (a->string && b->string && strcmp(a->string, b->string) == 0) return a->string;
        const char *d = dyn_json_duplicate_key(node->child);
        if (d) return d;
    }
    return NULL;
}

dyn_status dyn_json_parse(const char *text, size_t len, const char *where, cJSON **root, dyn_error *err)
{
    *root = NULL;
    int line, col;
    size_t bad;
    const char *why;
    if (dyn_json_text_problem(text, len, &bad, &why)) {
        json_position(text, bad, &line, &col);
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: line %d, column %d: %s", where, line, col, why);
    }
    const char *end = NULL;
    cJSON *r = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (r == NULL) {
        size_t off = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        const char *ep = cJSON_GetErrorPtr();
        if (ep && ep >= text && ep <= text + len) off = (size_t)(ep - text);
        json_position(text, off, &line, &col);
        if (off >= len)
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: line %d, column %d: not valid JSON (ends early)", where,
                                 line, col);
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: line %d, column %d: not valid JSON", where, line, col);
    }
    size_t off = (size_t)(end - text);
    while (off < len && (text[off] == ' ' || text[off] == '\t' || text[off] == '\n' || text[off] == '\r'))
        off++;
    if (off < len && text[off] != '\0') {
        cJSON_Delete(r);
        json_position(text, off, &line, &col);
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: line %d, column %d: text after the JSON value", where, line,
                             col);
    }
    const char *dup = dyn_json_duplicate_key(r);
    if (dup) {
        dyn_status st = dyn_error_set(err, DYN_ERR_PARSE, "%s: key \"%s\" appears twice in one object", where, dup);
        cJSON_Delete(r);
        return st;
    }
    *root = r;
    return DYN_OK;
}
