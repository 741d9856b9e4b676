/* version.c — dyn_version and dyn_abi_sizeof (include/dynapipe/version.h):
 * what a binding checks before it trusts its own copy of the struct layouts.
 * It sits at the library's top level, beside the parts rather than in one,
 * because it names the public structs of all of them (data, plan, sched,
 * pipeline); src/util knows no domain. */
#include "dynapipe/version.h"

#include <string.h>

#include "dynapipe/data.h"     /* defines: dyn_dataset */
#include "dynapipe/pipeline.h" /* defines: dyn_pipeline_options, dyn_replica_plan, dyn_pipeline_result */
#include "dynapipe/plan.h"     /* defines: dyn_plan_options, dyn_batch_plan, ... */
#include "dynapipe/sched.h"    /* defines: dyn_instr, dyn_rank_plan, dyn_exec_plan, dyn_stage_costs */

const char *dyn_version(void)
{
    return DYN_VERSION_STRING;
}

size_t dyn_abi_sizeof(const char *type_name)
{
    static const struct {
        const char *name;
        size_t size;
    } sizes[] = {
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
        {"dyn_ideal_bound", sizeof(dyn_ideal_bound)},
    };
    if (type_name == NULL) return 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (strcmp(sizes[i].name, type_name) == 0) return sizes[i].size;
    return 0;
}
