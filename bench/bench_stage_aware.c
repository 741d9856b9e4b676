/* bench_stage_aware.c — would a stage-aware DP objective help? For the
 * plans dyn_pipeline_plan keeps (S = 2, machine "cpu", FLAN-like lengths),
 * the DP's objective charges each micro-batch its bottleneck stage,
 * (S - 1) t_max + sum_j max_s t(j, s), as if every stage took that long; a
 * stage-aware one would charge (S - 1) t_max + max_s sum_j t(j, s), each
 * stage's own load (t = forward + backward, ms). Printed per model and
 * limit, means over the batches: the ratio of the two sums (how much the
 * uniform-stage view overcharges), each objective's error against the
 * simulated makespan, and the stages' load imbalance (max / min of
 * sum_j t(j, s)). If the sums agree and the uniform objective predicts the
 * makespan as well, a stage-aware DP has nothing to gain on these shapes.
 *
 * usage: bench_stage_aware [batches (default 6)] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_args.h"             /* defines: bench_args_check */
#include "dynapipe/cost.h"          /* defines: dyn_cost_model_create_analytic, dyn_machine_builtin */
#include "dynapipe/data.h"          /* defines: dyn_dataset_synthetic_flan, dyn_sampler_* */
#include "dynapipe/model_config.h"  /* defines: dyn_model_config_preset */
#include "dynapipe/pipeline.h"      /* defines: dyn_pipeline_* */

static int fail(const char *what, const dyn_error *err)
{
    fprintf(stderr, "bench_stage_aware: %s: %s\n", what, err->msg);
    return 1;
}

static int run(const char *preset, int32_t L, int batches, int packing)
{
    dyn_error err;
    dyn_model_config cfg;
    if (dyn_model_config_preset(preset, &cfg, &err) != DYN_OK) return fail("preset", &err);
    cfg.max_seqlen = L;
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), &err);
    if (cm == NULL) return fail("cost model", &err);
    dyn_plan_options po;
    dyn_plan_options_default(&po);
    po.stages = 2;
    po.max_seqlen = L;
    po.enable_packing = packing;
    dyn_planner *pl = dyn_planner_create(cm, &po, &err);
    dyn_pipeline_options pio;
    dyn_pipeline_options_default(&pio);
    dyn_pipeline *pipe = pl ? dyn_pipeline_create(pl, &pio, &err) : NULL;
    dyn_dataset ds = {0};
    if (pipe == NULL || dyn_dataset_synthetic_flan(3, 4000, L, cfg.kind, &ds, &err) != DYN_OK) return fail("setup", &err);
    dyn_sampler *smp = dyn_sampler_create(&ds, 16384, &err);
    if (smp == NULL) return fail("sampler", &err);
    double ratio = 0, err_uni = 0, err_aware = 0, imb = 0;
    int n_done = 0;
    for (int b = 0; b < batches; b++) {
        const dyn_sample *batch;
        int32_t n;
        dyn_pipeline_result res;
        if (dyn_sampler_next(smp, &batch, &n, &err) != DYN_OK) return fail("sampler", &err);
        if (dyn_pipeline_plan(pipe, batch, n, &res, &err) != DYN_OK) return fail("plan", &err);
        const dyn_replica_plan *rp = &res.replicas[0];
        const dyn_stage_costs *c = &rp->costs;
        int32_t S = c->n_stages, M = c->n_microbatches;
        double sum_max = 0, tmax = 0, load[64] = {0};
        for (int32_t j = 0; j < M; j++) {
            double worst = 0;
            for (int32_t s = 0; s < S && s < 64; s++) {
                double t = c->fwd_ms[j * S + s] + c->bwd_ms[j * S + s];
                load[s] += t;
                if (t > worst) worst = t;
            }
            sum_max += worst;
            if (worst > tmax) tmax = worst;
        }
        double max_load = 0, min_load = INFINITY;
        for (int32_t s = 0; s < S && s < 64; s++) {
            if (load[s] > max_load) max_load = load[s];
            if (load[s] < min_load) min_load = load[s];
        }
        double uni = (S - 1) * tmax + sum_max, aware = (S - 1) * tmax + max_load;
        ratio += sum_max / max_load;
        err_uni += fabs(uni - rp->makespan_ms) / rp->makespan_ms;
        err_aware += fabs(aware - rp->makespan_ms) / rp->makespan_ms;
        imb += max_load / min_load;
        n_done++;
        dyn_pipeline_result_free(&res);
    }
    printf("| %s | %d | %s | %.3f | %.1f%% | %.1f%% | %.2f |\n", preset, L, packing ? "candidates" : "DP only",
           ratio / n_done, 100 * err_uni / n_done, 100 * err_aware / n_done, imb / n_done);
    dyn_sampler_free(smp);
    dyn_dataset_free(&ds);
    dyn_pipeline_free(pipe);
    dyn_planner_free(pl);
    dyn_cost_model_free(cm);
    return 0;
}

int main(int argc, char **argv)
{
    bench_args_check(argc, argv, "usage: bench_stage_aware [batches (default 6)]", NULL);
    int batches = argc > 1 ? atoi(argv[1]) : 6;
    if (batches < 1) batches = 1;
    printf("| model | max length | plans | sum max_s / max_s sum | uniform objective error | stage-aware error "
           "| stage load max/min |\n| --- | ---: | --- | ---: | ---: | ---: | ---: |\n");
    const char *presets[] = {"gpt-tiny", "t5-tiny"};
    const int32_t limits[] = {2048, 4096};
    for (int p = 0; p < 2; p++)
        for (int l = 0; l < 2; l++)
            for (int k = 0; k < 2; k++)
                if (run(presets[p], limits[l], batches, k)) return 1;
    return 0;
}
