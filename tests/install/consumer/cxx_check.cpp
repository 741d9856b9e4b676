// cxx_check.cpp — a C++ program that includes every public header and calls
// into the C library: it links only if the headers declare the functions
// extern "C" (tests/install/run.sh checks that no header is missing here).
// Prints a few names; exits 1 if any call misbehaves.
#include <cstdio>
#include <cstring>

#include <dynapipe/common.h>
#include <dynapipe/cost.h>
#include <dynapipe/corpus.h>
#include <dynapipe/data.h>
#include <dynapipe/dynapipe.h>
#include <dynapipe/model_config.h>
#include <dynapipe/pipeline.h>
#include <dynapipe/plan.h>
#include <dynapipe/sched.h>
#include <dynapipe/sim.h>
#include <dynapipe/version.h>

int main()
{
    dyn_error err;
    dyn_model_config cfg;
    if (dyn_model_config_preset("gpt-tiny", &cfg, &err) != DYN_OK) return 1;
    dyn_plan_options opt;
    dyn_plan_options_default(&opt);
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    if (po.schedule != DYN_SCHEDULE_AUTO) return 1;
    dyn_sim *sim = dyn_sim_create(&err);
    if (sim == nullptr) return 1;
    dyn_sim_free(sim);
    if (std::strcmp(dyn_version(), DYN_VERSION_STRING) != 0 || dyn_abi_sizeof("dyn_sample") != sizeof(dyn_sample)) return 1;
    std::printf("c++: %s %s %s %s\n", dyn_model_kind_name(cfg.kind), dyn_batching_name(opt.method),
                dyn_schedule_name(DYN_SCHEDULE_ZB), dyn_status_name(DYN_ERR_INFEASIBLE));
    return std::strcmp(dyn_batching_name(opt.method), "dynapipe") == 0 ? 0 : 1;
}
