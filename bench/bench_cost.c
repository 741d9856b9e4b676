/* bench_cost.c — how cheap a cost query is (the planner calls dyn_cost_layer
 * in its inner loops) and how fast the built-in generator and TSV reader are.
 * Prints medians over several runs, and the table/analytic ratio measured
 * side by side in the same run, since this machine is shared and noisy.
 *
 *   build/bench_cost [runs]      (default 7 runs) */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench_args.h" /* defines: bench_args_check */
#include "dynapipe/cost.h"         /* defines: dyn_cost_* */
#include "dynapipe/data.h"         /* defines: dyn_dataset_synthetic_flan */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_preset */
#include "util/util.h"             /* defines: dyn_time_ms, dyn_median */

#define MAX_RUNS 31

/* ns per dyn_cost_layer call over a sweep of shapes like the planner's. The
 * sum is returned through *sink so the calls cannot be optimised away. */
static double time_queries(const dyn_cost_model *cm, int t5, double *sink)
{
    enum { N = 200000 };
    double t0 = dyn_time_ms(), acc = 0;
    for (int i = 0; i < N; i++) {
        dyn_mb_shape mb = {.rows = 1 + i % 64, .enc_len = 8 + 8 * (i % 512), .dec_len = t5 ? 8 + 8 * (i % 97) : 0};
        dyn_layer_cost c;
        dyn_layer_kind k = (i & 1) ? DYN_LAYER_ENCODER : (t5 ? DYN_LAYER_DECODER : DYN_LAYER_LM_HEAD);
        if (dyn_cost_layer(cm, k, &mb, (dyn_recompute)(i % 3), &c, NULL) != DYN_OK) abort();
        acc += c.fwd_ms + c.stored_mb;
    }
    *sink += acc;
    return (dyn_time_ms() - t0) * 1e6 / N;
}

int main(int argc, char **argv)
{
    bench_args_check(argc, argv, "usage: bench_cost [runs]\n  times the analytic cost model, the FLAN-like generator and the TSV reader", NULL);
    int runs = argc > 1 ? atoi(argv[1]) : 7;
    if (runs < 1 || runs > MAX_RUNS) runs = 7;
    double sink = 0;
    dyn_error err;
    printf("bench_cost: %d runs, medians\n", runs);
    const char *models[2] = {"gpt2-124m", "t5-base"};
    for (int mi = 0; mi < 2; mi++) {
        dyn_model_config cfg;
        if (dyn_model_config_preset(models[mi], &cfg, &err) != DYN_OK) return 1;
        int t5 = cfg.kind == DYN_MODEL_T5;
        dyn_cost_model *an = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), &err);
        if (an == NULL) return 1;
        /* A table of a realistic size: 7 x 10 x (T5: 8) points per slice. */
        int32_t rows[7] = {1, 2, 4, 8, 16, 32, 64};
        int32_t enc[10] = {8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
        int32_t dec_t5[8] = {8, 16, 32, 64, 128, 256, 512, 1024}, dec_gpt[1] = {0};
        dyn_cost_grid g = {7, 10, t5 ? 8 : 1, rows, enc, t5 ? dec_t5 : dec_gpt};
        char path[64];
        snprintf(path, sizeof path, "/tmp/bench_cost_%d.table", (int)getpid());
        if (dyn_cost_table_write_from_model(path, an, &g, &err) != DYN_OK) {
            fprintf(stderr, "bench_cost: %s\n", err.msg);
            return 1;
        }
        dyn_cost_model *tb = dyn_cost_model_load_table(path, &err);
        unlink(path);
        if (tb == NULL) return 1;
        double ta[MAX_RUNS], tt[MAX_RUNS], ratio[MAX_RUNS];
        for (int r = 0; r < runs; r++) {
            ta[r] = time_queries(an, t5, &sink);
            tt[r] = time_queries(tb, t5, &sink);
            ratio[r] = tt[r] / ta[r];
        }
        printf("  %-10s analytic %6.1f ns/query   table %6.1f ns/query   table/analytic %.2fx\n", models[mi],
               dyn_median(ta, runs), dyn_median(tt, runs), dyn_median(ratio, runs));
        dyn_cost_model_free(an);
        dyn_cost_model_free(tb);
    }
    double tg[MAX_RUNS];
    for (int r = 0; r < runs; r++) {
        dyn_dataset ds = {0};
        double t0 = dyn_time_ms();
        if (dyn_dataset_synthetic_flan((uint64_t)r, 1000000, 2048, DYN_MODEL_GPT, &ds, &err) != DYN_OK) return 1;
        tg[r] = (dyn_time_ms() - t0) * 1e6 / 1000000;
        sink += ds.samples[ds.n - 1].input_len;
        dyn_dataset_free(&ds);
    }
    printf("  synthetic flan: %.1f ns/sample (1M samples)\n", dyn_median(tg, runs));
    printf("  (checksum %g)\n", sink);
    return 0;
}
