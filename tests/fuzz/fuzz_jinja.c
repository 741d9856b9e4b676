/* fuzz_jinja.c — libFuzzer harness for the Jinja interpreter (util/jinja.h):
 * any bytes as a template are compiled and, when they compile, rendered
 * over a small chat conversation; either works or fails with one printable
 * line, within the interpreter's limits (depth, output, steps, memory). */
#include "fuzz_common.h"

#include <cjson/cJSON.h>

#include "util/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static cJSON *vars;
    if (vars == NULL) {
        vars = cJSON_Parse("{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", "
                           "\"content\": \"h\\u00e9 <|x|>\"}, {\"role\": \"assistant\", \"content\": \" a \"}], "
                           "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}");
        if (vars == NULL) abort();
    }
    dyn_error err;
    dyn_error_clear(&err);
    dyn_jinja *t = dyn_jinja_create((const char *)data, size, &err);
    if (t == NULL) {
        fuzz_check_message(err.code, &err);
        return 0;
    }
    char *out = NULL;
    size_t len = 0;
    dyn_status st = dyn_jinja_render(t, vars, &out, &len, &err);
    fuzz_check_message(st, &err);
    if (st == DYN_OK && (out == NULL || strlen(out) > len || len > DYN_JINJA_MAX_OUTPUT)) abort();
    if (st != DYN_OK && out != NULL) abort();
    free(out);
    dyn_jinja_free(t);
    return 0;
}
