/* bench_sim.c — how fast the simulator and `--schedule auto` are.
 *
 * Workload: the built-in FLAN-like generator (seed 1), 65,536-token global
 * batches, max length 2048, planned by the dynapipe method for the paper's
 * GPT (gpt-6.7b preset: h=4096, ffn=16384, 32 heads, 32 layers) on the a100
 * machine with 80 GB per device, S = 4 and 8 pipeline stages (interleaved: v = 2 chunks).
 *
 * For each of BATCHES global batches and each schedule: the time to
 * simulate the plan once (dyn_sim_run on a warm workspace) and the time to
 * generate the plan (dyn_schedule_build), each the median of REPS
 * repetitions; then the median over batches. And the time `--schedule auto`
 * takes per global batch (all schedules x bounded order search x recompute,
 * dyn_schedule_auto, stage costs included), with its lower-bound pruning
 * and without (no_prune; alternating, same choice checked), plus the planner's DP time for
 * the same batch, so "complete plan" = DP + auto. Medians, side by side in
 * one run; absolute times move with the machine's load.
 *
 * Usage: bench_sim [--quick]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_args.h" /* defines: bench_args_check */
#include "dynapipe/data.h"         /* defines: dyn_dataset_*, dyn_sampler_* */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_preset */
#include "dynapipe/pipeline.h"     /* defines: dyn_batch_costs_* */
#include "dynapipe/plan.h"         /* defines: dyn_planner_* */
#include "dynapipe/sched.h"        /* defines: dyn_schedule_build */
#include "dynapipe/sim.h"          /* defines: dyn_sim_*, dyn_schedule_auto */
#include "util/util.h"             /* defines: dyn_time_ms, dyn_median */

static int BATCHES = 8, REPS = 21;

#define CHECK(st, err)                                                                \
    do {                                                                              \
        if ((st) != DYN_OK) {                                                         \
            fprintf(stderr, "bench_sim: %s:%d: %s\n", __FILE__, __LINE__, (err).msg); \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static void bench_stages(int32_t S, const dyn_dataset *ds, const dyn_cost_model *cm, const dyn_machine *m)
{
    dyn_error err;
    const int32_t v = 2;
    dyn_plan_options po;
    dyn_plan_options_default(&po);
    po.stages = S;
    po.max_seqlen = 2048;
    dyn_planner *planner = dyn_planner_create(cm, &po, &err);
    if (planner == NULL) CHECK(DYN_ERR_INVALID_ARG, err);
    dyn_batch_costs *bc = dyn_batch_costs_create(cm, S, v, NULL, &err);
    if (bc == NULL) CHECK(DYN_ERR_INVALID_ARG, err);
    dyn_sampler *sampler = dyn_sampler_create(ds, 65536, &err);
    if (sampler == NULL) CHECK(DYN_ERR_INVALID_ARG, err);
    dyn_sim *sim = dyn_sim_create(&err);
    dyn_sim_options so;
    dyn_sim_options_from_machine(&so, m, 0);

    double sim_ms[DYN_SCHEDULE_COUNT][64], build_ms[DYN_SCHEDULE_COUNT][64], instrs[DYN_SCHEDULE_COUNT][64];
    double auto_ms[64], auto_u_ms[64], dp_ms[64], n_mb[64], n_sims[64], n_sims_u[64];
    double *reps = calloc((size_t)REPS, sizeof(double));
    int nb = 0;
    for (; nb < BATCHES; nb++) {
        const dyn_sample *batch;
        int32_t n;
        CHECK(dyn_sampler_next(sampler, &batch, &n, &err), err);
        if (n == 0) break;
        dyn_batch_plan bp;
        CHECK(dyn_planner_plan(planner, batch, n, &bp, &err), err);
        /* DP time on a warm cache: re-plan and take the median. */
        for (int r = 0; r < REPS; r++) {
            dyn_batch_plan again;
            double t0 = dyn_time_ms();
            CHECK(dyn_planner_plan(planner, batch, n, &again, &err), err);
            reps[r] = dyn_time_ms() - t0;
            dyn_batch_plan_free(&again);
        }
        dp_ms[nb] = dyn_median(reps, REPS);
        CHECK(dyn_batch_costs_set_batch(bc, &bp, 0, &err), err);
        int32_t M;
        const dyn_mb_shape *shapes = dyn_batch_costs_shapes(bc, &M);
        n_mb[nb] = M;
        for (int k = 0; k < DYN_SCHEDULE_COUNT; k++) {
            int32_t vk = k == DYN_SCHEDULE_INTERLEAVED ? v : 1;
            const dyn_stage_costs *c;
            CHECK(dyn_batch_costs_get(bc, vk, DYN_RECOMPUTE_NONE, &c, &err), err);
            dyn_sched_options sopt;
            dyn_sched_options_default(&sopt);
            sopt.n_ranks = S;
            sopt.chunks = vk;
            sopt.memory_limit_mb = m->device_memory_mb;
            dyn_exec_plan plan;
            for (int r = 0; r < REPS; r++) {
                double t0 = dyn_time_ms();
                CHECK(dyn_schedule_build((dyn_schedule)k, c, shapes, &sopt, &plan, &err), err);
                reps[r] = dyn_time_ms() - t0;
                if (r + 1 < REPS) dyn_exec_plan_free(&plan);
            }
            build_ms[k][nb] = dyn_median(reps, REPS);
            const dyn_sim_result *res;
            CHECK(dyn_sim_run(sim, &plan, c, &so, &res, &err), err); /* warm the workspace */
            instrs[k][nb] = res->n_instrs;
            for (int r = 0; r < REPS; r++) {
                double t0 = dyn_time_ms();
                CHECK(dyn_sim_run(sim, &plan, c, &so, &res, &err), err);
                reps[r] = dyn_time_ms() - t0;
            }
            sim_ms[k][nb] = dyn_median(reps, REPS);
            dyn_exec_plan_free(&plan);
        }
        /* Pruned (the default) and unpruned (no_prune) alternately, so
         * both see the same load; they must choose the same. */
        int32_t *order = calloc((size_t)M, sizeof(int32_t));
        double *reps_u = calloc((size_t)REPS, sizeof(double));
        for (int r = 0; r < REPS; r++) {
            double ms[2];
            for (int np = 0; np < 2; np++) {
                dyn_auto_options ao = {S, v, m->device_memory_mb, 3, 0, 0, np};
                dyn_auto_choice ch = {.order = order};
                dyn_exec_plan best;
                double t0 = dyn_time_ms();
                /* Stage costs are part of the work: rebuild them each time. */
                CHECK(dyn_batch_costs_set_batch(bc, &bp, 0, &err), err);
                shapes = dyn_batch_costs_shapes(bc, &M);
                CHECK(dyn_schedule_auto(sim, dyn_batch_costs_get, bc, shapes, &ao, &so, &ch, &best, NULL, &err), err);
                (np ? reps_u : reps)[r] = dyn_time_ms() - t0;
                (np ? n_sims_u : n_sims)[nb] = ch.n_simulations;
                ms[np] = ch.makespan_ms;
                dyn_exec_plan_free(&best);
            }
            if (ms[0] != ms[1]) {
                fprintf(stderr, "bench_sim: pruned auto chose %.6f ms, unpruned %.6f ms\n", ms[0], ms[1]);
                exit(1);
            }
        }
        auto_ms[nb] = dyn_median(reps, REPS);
        auto_u_ms[nb] = dyn_median(reps_u, REPS);
        free(reps_u);
        free(order);
        dyn_batch_plan_free(&bp);
    }
    printf("S = %d: %d global batches, median %.0f micro-batches (replica 0)\n", S, nb, dyn_median(n_mb, nb));
    printf("  %-17s %12s %14s %14s\n", "schedule", "instructions", "simulate_ms", "generate_ms");
    for (int k = 0; k < DYN_SCHEDULE_COUNT; k++)
        printf("  %-17s %12.0f %14.4f %14.4f\n", dyn_schedule_name((dyn_schedule)k), dyn_median(instrs[k], nb),
               dyn_median(sim_ms[k], nb), dyn_median(build_ms[k], nb));
    double u = dyn_median(auto_u_ms, nb), us = dyn_median(n_sims_u, nb);
    double a = dyn_median(auto_ms, nb), d = dyn_median(dp_ms, nb);
    printf("  auto unpruned (%.0f simulations): %.3f ms\n", us, u);
    printf("  auto (all schedules x order search, pruned: %.0f simulations): %.3f ms (%.2fx faster, same choice); "
           "DP %.3f ms; complete plan %.3f ms\n",
           dyn_median(n_sims, nb), a, u / a, d, a + d);
    free(reps);
    dyn_sim_free(sim);
    dyn_sampler_free(sampler);
    dyn_batch_costs_free(bc);
    dyn_planner_free(planner);
}

/* `--schedule auto` on packing's micro-batches of the same batches: fewer
 * (about 16 instead of about 46), to show how auto's cost follows the
 * number of micro-batches. */
static void bench_auto_packing(int32_t S, const dyn_dataset *ds, const dyn_cost_model *cm, const dyn_machine *m)
{
    dyn_error err;
    dyn_plan_options po;
    dyn_plan_options_default(&po);
    po.method = DYN_BATCH_PACKING;
    po.stages = S;
    po.max_seqlen = 2048;
    dyn_planner *planner = dyn_planner_create(cm, &po, &err);
    if (planner == NULL) CHECK(DYN_ERR_INVALID_ARG, err);
    dyn_batch_costs *bc = dyn_batch_costs_create(cm, S, 2, NULL, &err);
    if (bc == NULL) CHECK(DYN_ERR_INVALID_ARG, err);
    dyn_sampler *sampler = dyn_sampler_create(ds, 65536, &err);
    if (sampler == NULL) CHECK(DYN_ERR_INVALID_ARG, err);
    dyn_sim *sim = dyn_sim_create(&err);
    dyn_sim_options so;
    dyn_sim_options_from_machine(&so, m, 0);
    double auto_ms[64], n_mb[64], *reps = calloc((size_t)REPS, sizeof(double));
    int nb = 0;
    for (; nb < BATCHES; nb++) {
        const dyn_sample *batch;
        int32_t n, M;
        CHECK(dyn_sampler_next(sampler, &batch, &n, &err), err);
        if (n == 0) break;
        dyn_batch_plan bp;
        CHECK(dyn_planner_plan(planner, batch, n, &bp, &err), err);
        dyn_auto_options ao = {S, 2, m->device_memory_mb, 3, 0, 0, 0};
        for (int r = 0; r < REPS; r++) {
            double t0 = dyn_time_ms();
            CHECK(dyn_batch_costs_set_batch(bc, &bp, 0, &err), err);
            const dyn_mb_shape *shapes = dyn_batch_costs_shapes(bc, &M);
            int32_t *order = calloc((size_t)M, sizeof(int32_t));
            dyn_auto_choice ch = {.order = order};
            dyn_exec_plan best;
            CHECK(dyn_schedule_auto(sim, dyn_batch_costs_get, bc, shapes, &ao, &so, &ch, &best, NULL, &err), err);
            reps[r] = dyn_time_ms() - t0;
            dyn_exec_plan_free(&best);
            free(order);
        }
        n_mb[nb] = M;
        auto_ms[nb] = dyn_median(reps, REPS);
        dyn_batch_plan_free(&bp);
    }
    printf("  auto on packing's micro-batches (median %.0f): %.3f ms\n", dyn_median(n_mb, nb), dyn_median(auto_ms, nb));
    free(reps);
    dyn_sim_free(sim);
    dyn_sampler_free(sampler);
    dyn_batch_costs_free(bc);
    dyn_planner_free(planner);
}

int main(int argc, char **argv)
{
    static const char *const known[] = {"--quick", NULL};
    bench_args_check(argc, argv, "usage: bench_sim [--quick]\n  times the simulator and --schedule auto on planned batches", known);
    if (argc > 1 && strcmp(argv[1], "--quick") == 0) {
        BATCHES = 3;
        REPS = 5;
    }
    dyn_error err;
    dyn_model_config cfg;
    CHECK(dyn_model_config_preset("gpt-6.7b", &cfg, &err), err);
    cfg.max_seqlen = 2048;
    /* a100 with 80 GB: at S = 4 the 40 GB card cannot hold a quarter of
     * gpt-6.7b's training states plus a 2048-token sequence. */
    dyn_machine a100_80 = *dyn_machine_builtin("a100");
    a100_80.device_memory_mb = 81920;
    const dyn_machine *m = &a100_80;
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, m, &err);
    if (cm == NULL) CHECK(DYN_ERR_INVALID_ARG, err);
    dyn_dataset ds;
    CHECK(dyn_dataset_synthetic_flan(1, 20000, 2048, DYN_MODEL_GPT, &ds, &err), err);
    printf("bench_sim: gpt-6.7b on a100 (80 GB), FLAN-like seed 1, 65536-token global batches, max length 2048,\n"
           "dynapipe micro-batching; medians of %d repetitions per batch, then over batches\n", REPS);
    bench_stages(4, &ds, cm, m);
    bench_auto_packing(4, &ds, cm, m);
    bench_stages(8, &ds, cm, m);
    bench_auto_packing(8, &ds, cm, m);
    dyn_dataset_free(&ds);
    dyn_cost_model_free(cm);
    return 0;
}
