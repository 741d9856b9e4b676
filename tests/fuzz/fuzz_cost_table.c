/* fuzz_cost_table.c — libFuzzer harness for the cost-table reader
 * (dyn_cost_model_load_table): a table loads, or is refused with one clean
 * line. */
#include "fuzz_common.h"

#include "dynapipe/cost.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_scratch(data, size, ".tsv");
    dyn_error err;
    dyn_error_clear(&err);
    dyn_cost_model *cm = dyn_cost_model_load_table(path, &err);
    fuzz_check_message(cm ? DYN_OK : DYN_ERR_PARSE, &err);
    dyn_cost_model_free(cm);
    unlink(path);
    return 0;
}
