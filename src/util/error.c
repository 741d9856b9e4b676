/* error.c — the dyn_error record: fill, clear and name status codes. */
#include "dynapipe/common.h"

#include <stdarg.h>
#include <stdio.h>

dyn_status dyn_error_set(dyn_error *err, dyn_status code, const char *fmt, ...)
{
    if (err == NULL) return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
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
    }
    return "unknown status";
}
