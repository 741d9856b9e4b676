/* fuzz_plan.c — libFuzzer harness for the binary execution-plan reader
 * (dyn_exec_plan_deserialize) and the validator behind it: any bytes either
 * load and validate, or are refused with one clean line; never a crash,
 * leak or undefined behaviour. */
#include "fuzz_common.h"

#include "dynapipe/sched.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dyn_exec_plan plan;
    dyn_error err;
    dyn_error_clear(&err);
    dyn_status st = dyn_exec_plan_deserialize(data, size, &plan, &err);
    fuzz_check_message(st, &err);
    if (st != DYN_OK) return 0;
    st = dyn_exec_plan_validate(&plan, &err);
    fuzz_check_message(st, &err);
    dyn_exec_plan_free(&plan);
    return 0;
}
