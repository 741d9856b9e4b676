/* error.c — the dyn_error record: fill, clear and name status codes.
 *
 * A message is always one line of printable text: control bytes that come
 * from the input (a tensor name with a newline, a JSON key with a tab) are
 * written as \n, \t, \r or \xNN, so a caller that prints the message
 * prints exactly one line. */
#include "dynapipe/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Copy src into dst[cap], escaping control bytes; truncates at whole escapes. */
static void error_escape(char *dst, size_t cap, const char *src)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
        char esc[5];
        size_t n = 0;
        if (*p == '\n') memcpy(esc, "\\n", n = 2);
        else if (*p == '\t') memcpy(esc, "\\t", n = 2);
        else if (*p == '\r') memcpy(esc, "\\r", n = 2);
        else if (*p < 0x20 || *p == 0x7f) {
            esc[0] = '\\';
            esc[1] = 'x';
            esc[2] = hex[*p >> 4];
            esc[3] = hex[*p & 15];
            n = 4;
        } else {
            esc[0] = (char)*p;
            n = 1;
        }
        if (o + n >= cap) break;
        memcpy(dst + o, esc, n);
        o += n;
    }
    dst[o] = '\0';
}

dyn_status dyn_error_set(dyn_error *err, dyn_status code, const char *fmt, ...)
{
    if (err == NULL) return code;
    err->code = code;
    char raw[DYN_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    error_escape(err->msg, sizeof err->msg, raw);
    return code;
}

dyn_status dyn_error_prefix(dyn_error *err, dyn_status code, const char *prefix)
{
    if (err == NULL) return code;
    char msg[DYN_ERROR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return dyn_error_set(err, code, "%s: %s", prefix, msg);
}

void dyn_error_clear(dyn_error *err)
{
    if (err == NULL) return;
    err->code = DYN_OK;
    err->msg[0] = '\0';
}

const char *dyn_status_name(dyn_status code)
{
    switch (code) {
    case DYN_OK: return "ok";
    case DYN_ERR_INVALID_ARG: return "invalid argument";
    case DYN_ERR_IO: return "i/o error";
    case DYN_ERR_PARSE: return "parse error";
    case DYN_ERR_NOMEM: return "out of memory";
    case DYN_ERR_INFEASIBLE: return "infeasible";
    case DYN_ERR_CORRUPT: return "corrupt data";
    case DYN_ERR_INTERNAL: return "internal error";
    case DYN_ERR_NUMERIC: return "non-finite number";
    }
    return "unknown status";
}
