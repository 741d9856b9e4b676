/* fuzz_config.c — libFuzzer harness for the JSON configuration readers
 * (model shapes, machine descriptions): parsed and validated, or refused
 * with one clean line; an accepted model's parameter count is positive. */
#include "fuzz_common.h"

#include "dynapipe/model_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text == NULL) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    dyn_model_config cfg;
    dyn_machine m;
    dyn_error err;
    dyn_error_clear(&err);
    dyn_status st = dyn_model_config_parse(text, "fuzz.json", &cfg, &err);
    fuzz_check_message(st, &err);
    if (st == DYN_OK && dyn_model_config_params(&cfg) <= 0) abort();
    st = dyn_machine_parse(text, "fuzz.json", &m, &err);
    fuzz_check_message(st, &err);
    free(text);
    return 0;
}
