/* test_version.c — include/dynapipe/version.h: dyn_version is the headers'
 * version, and dyn_abi_sizeof reports sizeof of every struct it names (what
 * the Python binding checks its ctypes mirrors against), 0 otherwise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "dynapipe/data.h"     /* defines: dyn_dataset */
#include "dynapipe/pipeline.h" /* defines: dyn_pipeline_options, dyn_replica_plan, dyn_pipeline_result */
#include "dynapipe/plan.h"     /* defines: dyn_plan_options, dyn_batch_plan */
#include "dynapipe/sched.h"    /* defines: dyn_instr, dyn_exec_plan, dyn_stage_costs */
#include "dynapipe/version.h"  /* defines: dyn_version, dyn_abi_sizeof */

static void test_version(void **state)
{
    (void)state;
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", DYN_VERSION_MAJOR, DYN_VERSION_MINOR, DYN_VERSION_PATCH);
    assert_string_equal(DYN_VERSION_STRING, want);
    assert_string_equal(dyn_version(), DYN_VERSION_STRING);
}

static void test_abi_sizes(void **state)
{
    (void)state;
    const struct {
        const char *name;
        size_t size;
    } want[] = {
        {"dyn_error", sizeof(dyn_error)},
        {"dyn_sample", sizeof(dyn_sample)},
        {"dyn_model_config", sizeof(dyn_model_config)},
        {"dyn_machine", sizeof(dyn_machine)},
        {"dyn_mb_shape", sizeof(dyn_mb_shape)},
        {"dyn_plan_options", sizeof(dyn_plan_options)},
        {"dyn_plan_microbatch", sizeof(dyn_plan_microbatch)},
        {"dyn_batch_plan", sizeof(dyn_batch_plan)},
        {"dyn_dataset", sizeof(dyn_dataset)},
        {"dyn_instr", sizeof(dyn_instr)},
        {"dyn_rank_plan", sizeof(dyn_rank_plan)},
        {"dyn_exec_plan", sizeof(dyn_exec_plan)},
        {"dyn_stage_costs", sizeof(dyn_stage_costs)},
        {"dyn_pipeline_options", sizeof(dyn_pipeline_options)},
        {"dyn_replica_plan", sizeof(dyn_replica_plan)},
        {"dyn_pipeline_result", sizeof(dyn_pipeline_result)},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_true(want[i].size > 0);
        assert_int_equal(dyn_abi_sizeof(want[i].name), want[i].size);
    }
    assert_int_equal(dyn_abi_sizeof("dyn_no_such_struct"), 0);
    assert_int_equal(dyn_abi_sizeof("dyn_sampler"), 0); /* opaque: no size to mirror */
    assert_int_equal(dyn_abi_sizeof(""), 0);
    assert_int_equal(dyn_abi_sizeof(NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_abi_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
