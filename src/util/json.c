/* json.c — strict JSON parsing with line/column errors (json.h). */
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

/* The first key that appears twice in one object anywhere under node, or
 * NULL. Quadratic in an object's size: configuration objects are small. */
static const char *json_duplicate_key(const cJSON *node)
{
    for (; node != NULL; node = node->next) {
        if (cJSON_IsObject(node))
            for (const cJSON *a = node->child; a; a = a->next)
                for (const cJSON *b = a->next; b; b = b->next)
                    if (a->string && b->string && strcmp(a->string, b->string) == 0) return a->string;
        const char *d = json_duplicate_key(node->child);
        if (d) return d;
    }
    return NULL;
}

dyn_status dyn_json_parse(const char *text, size_t len, const char *where, cJSON **root, dyn_error *err)
{
    *root = NULL;
    const char *end = NULL;
    cJSON *r = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    int line, col;
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
    const char *dup = json_duplicate_key(r);
    if (dup) {
        dyn_status st = dyn_error_set(err, DYN_ERR_PARSE, "%s: key \"%s\" appears twice in one object", where, dup);
        cJSON_Delete(r);
        return st;
    }
    *root = r;
    return DYN_OK;
}
