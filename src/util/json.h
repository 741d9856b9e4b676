/* json.h — the one strict JSON reader behind every configuration file
 * (machine and model descriptions): cJSON underneath, plus what cJSON does
 * not check. A syntax error names the line and column; text after the value
 * (other than white space) and an object with the same key twice are
 * refused, so a file cannot say two things at once. */
#ifndef DYN_UTIL_JSON_H
#define DYN_UTIL_JSON_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "dynapipe/common.h"

/* Parse text[0..len) (len bytes; it need not be NUL-terminated) into *root
 * (the caller frees it with cJSON_Delete). where names the source in the
 * message ("m.json: line 3, column 7: not valid JSON"). DYN_ERR_PARSE on a
 * syntax error, trailing text or a duplicate key; DYN_ERR_NOMEM. */
dyn_status dyn_json_parse(const char *text, size_t len, const char *where, cJSON **root, dyn_error *err);

#endif
