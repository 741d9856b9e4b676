/* json.h — the one strict JSON reader behind every configuration file
 * (machine and model descriptions): cJSON underneath, plus what cJSON does
 * not check. A syntax error names the line and column; text after the value
 * (other than white space), an object with the same key twice, bytes that
 * are not UTF-8 and a \u0000 escape are refused, so a file cannot say two
 * things at once and every reader sees the same strings. The JSONL data
 * reader (src/data/jsonl.c) applies the same checks per line. */
#ifndef DYN_UTIL_JSON_H
#define DYN_UTIL_JSON_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "dynapipe/common.h"

/* Parse text[0..len) (len bytes; it need not be NUL-terminated) into *root
 * (the caller frees it with cJSON_Delete). where names the source in the
 * message ("m.json: line 3, column 7: not valid JSON"). DYN_ERR_PARSE on a
 * syntax error, trailing text or a duplicate key; DYN_ERR_NOMEM. */
/* What cJSON lets through in text[0..len) that this reader refuses: bytes
 * that are not well-formed UTF-8 (anywhere), and a \u0000 escape inside a
 * string (cJSON decodes it into a C string, which then ends there). 1 with
 * *at (byte offset) and *why (a phrase) for the first problem, else 0. */
int dyn_json_text_problem(const char *text, size_t len, size_t *at, const char **why);

/* The first key that appears twice in one object anywhere in the list
 * starting at node (and below), or NULL. Quadratic in an object's size:
 * configuration objects and data records are small. */
const char *dyn_json_duplicate_key(const cJSON *node);

dyn_status dyn_json_parse(const char *text, size_t len, const char *where, cJSON **root, dyn_error *err);

#endif
