/* bench_cluster.c — does the planner keep up at cluster scale?
 *
 * For the paper's shapes (gpt-6.7b, t5-11b) on the A100 description with
 * 80 GB per device, 8 pipeline stages x 1, 2 or 4 replicas (8 to 32 GPUs),
 * max length 512 / 2048 / 8192 and global batches of 16k to 131k tokens
 * (the grid of scripts/cluster_sim.sh): the wall time of planning one global
 * batch exactly as `dynapipe train`'s planner thread does it
 * (dyn_pipeline_plan: the dynapipe DP, replica balance, then every
 * replica's schedule by `--schedule auto` with the runtime's default order
 * search of 2 groups, and the same for each of dynapipe's candidates, the
 * baselines' plans), against the iteration time that plan predicts (the
 * slowest replica's simulated makespan). Planning runs ahead of training
 * (--plan-ahead), and global batches are independent, so k planner threads
 * (or k planning ranks) keep up when plan time <= k x iteration time:
 * "threads" = ceil(plan / iteration). Recomputation: none, or the first of
 * selective / full under which every batch fits.
 *
 * Medians over BATCHES global batches (built-in FLAN-like lengths, seed 1),
 * each planned by a fresh pipeline after one warm-up batch, on one core of
 * this machine; absolute times move with its load.
 *
 * Usage: bench_cluster [--quick]   (--quick: 2 batches, max length 2048 only)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/data.h"         /* defines: dyn_dataset_*, dyn_sampler_* */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_preset */
#include "dynapipe/pipeline.h"     /* defines: dyn_pipeline_* */
#include "dynapipe/plan.h"         /* defines: dyn_planner_* */
#include "util/util.h"             /* defines: dyn_time_ms, dyn_median */

#define MAX_BATCHES 8
static int BATCHES = 4, QUICK = 0;

typedef struct cluster_point {
    double plan_ms, iter_ms; /* medians over batches */
    int n_mb;                /* micro-batches of the first batch, all replicas */
    dyn_recompute rc;
} cluster_point;

/* Plan BATCHES global batches of one configuration under recompute rc.
 * DYN_ERR_INFEASIBLE when one does not fit; exits on any other error. */
static dyn_status cluster_measure(const dyn_model_config *cfg, const dyn_machine *m, int32_t dp, int64_t gbt,
                                  dyn_recompute rc, cluster_point *out)
{
    dyn_error err;
    dyn_dataset ds;
    if (dyn_dataset_synthetic_flan(1, 20000, cfg->max_seqlen, cfg->kind, &ds, &err) != DYN_OK) {
        fprintf(stderr, "bench_cluster: %s\n", err.msg);
        exit(1);
    }
    dyn_cost_model *cm = dyn_cost_model_create_analytic(cfg, m, &err);
    dyn_plan_options po;
    dyn_plan_options_default(&po);
    po.stages = 8;
    po.dp = dp;
    po.max_seqlen = cfg->max_seqlen;
    po.recompute = rc;
    dyn_planner *planner = cm ? dyn_planner_create(cm, &po, &err) : NULL;
    dyn_pipeline_options opt;
    dyn_pipeline_options_default(&opt);
    opt.schedule = DYN_SCHEDULE_AUTO;
    opt.order_groups = 2; /* dynapipe train's default */
    dyn_pipeline *pipe = planner ? dyn_pipeline_create(planner, &opt, &err) : NULL;
    dyn_sampler *smp = pipe ? dyn_sampler_create(&ds, gbt, &err) : NULL;
    if (smp == NULL) {
        fprintf(stderr, "bench_cluster: %s\n", err.msg);
        exit(1);
    }
    double plan_ms[MAX_BATCHES], iter_ms[MAX_BATCHES];
    dyn_status st = DYN_OK;
    int nb = 0;
    for (int k = -1; st == DYN_OK && k < BATCHES; k++) { /* k = -1: warm-up, not timed */
        const dyn_sample *batch;
        int32_t n;
        if ((st = dyn_sampler_next(smp, &batch, &n, &err)) != DYN_OK || n == 0) break;
        dyn_pipeline_result res;
        double t0 = dyn_time_ms();
        st = dyn_pipeline_plan(pipe, batch, n, &res, &err);
        double ms = dyn_time_ms() - t0;
        if (st != DYN_OK) break;
        double worst = 0;
        for (int32_t r = 0; r < res.n_replicas; r++)
            if (res.replicas[r].makespan_ms > worst) worst = res.replicas[r].makespan_ms;
        if (k == 0) out->n_mb = res.batch.n_microbatches;
        if (k >= 0) {
            plan_ms[nb] = ms;
            iter_ms[nb] = worst;
            nb++;
        }
        dyn_pipeline_result_free(&res);
    }
    if (st != DYN_OK && st != DYN_ERR_INFEASIBLE) {
        fprintf(stderr, "bench_cluster: %s\n", err.msg);
        exit(1);
    }
    if (st == DYN_OK && nb == 0) {
        fprintf(stderr, "bench_cluster: no global batch planned\n");
        exit(1);
    }
    if (st == DYN_OK) {
        out->plan_ms = dyn_median(plan_ms, nb);
        out->iter_ms = dyn_median(iter_ms, nb);
        out->rc = rc;
    }
    dyn_sampler_free(smp);
    dyn_pipeline_free(pipe);
    dyn_planner_free(planner);
    dyn_cost_model_free(cm);
    dyn_dataset_free(&ds);
    return st;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--quick") == 0) {
        BATCHES = 2;
        QUICK = 1;
    }
    dyn_machine a100 = *dyn_machine_builtin("a100");
    a100.device_memory_mb = 81920; /* docs/examples/a100-80gb.json */
    static const char *const presets[] = {"gpt-6.7b", "t5-11b"};
    static const int32_t lens[] = {512, 2048, 8192};
    static const struct { int32_t gpus; int64_t gbt; } runs[] = {{8, 16384}, {8, 65536}, {16, 65536}, {32, 131072}};
    printf("bench_cluster: planning one global batch as dynapipe train does (DP + balance + auto per replica, "
           "order groups 2) vs its predicted iteration time; a100 80 GB, S = 8, FLAN-like seed 1, medians of %d "
           "batches\n\n",
           BATCHES);
    printf("| model | GPUs (S x D) | max len | global batch | micro-batches | recompute | plan ms | iteration ms | "
           "plan / iteration | planner threads |\n");
    printf("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n");
    for (size_t p = 0; p < sizeof presets / sizeof presets[0]; p++)
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
            if (QUICK && lens[l] != 2048) continue;
            for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
                dyn_model_config cfg;
                dyn_error err;
                if (dyn_model_config_preset(presets[p], &cfg, &err) != DYN_OK) {
                    fprintf(stderr, "bench_cluster: %s\n", err.msg);
                    return 1;
                }
                cfg.max_seqlen = lens[l];
                int32_t dp = runs[r].gpus / 8;
                cluster_point pt = {0};
                dyn_status st = DYN_ERR_INFEASIBLE;
                static const dyn_recompute modes[] = {DYN_RECOMPUTE_NONE, DYN_RECOMPUTE_SELECTIVE, DYN_RECOMPUTE_FULL};
                for (int k = 0; k < 3 && st == DYN_ERR_INFEASIBLE; k++)
                    st = cluster_measure(&cfg, &a100, dp, runs[r].gbt, modes[k], &pt);
                if (st != DYN_OK) {
                    printf("| %s | %d (8 x %d) | %d | %lld | - | infeasible | - | - | - | - |\n", presets[p],
                           runs[r].gpus, dp, lens[l], (long long)runs[r].gbt);
                    continue;
                }
                double ratio = pt.plan_ms / pt.iter_ms;
                int threads = (int)ceil(ratio);
                if (threads < 1) threads = 1;
                printf("| %s | %d (8 x %d) | %d | %lld | %d | %s | %.1f | %.1f | %.3f | %d |\n", presets[p], runs[r].gpus,
                       dp, lens[l], (long long)runs[r].gbt, pt.n_mb, dyn_recompute_name(pt.rc), pt.plan_ms, pt.iter_ms,
                       ratio, threads);
                fflush(stdout);
            }
        }
    return 0;
}
