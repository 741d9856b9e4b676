/* bench_plan.c — how fast the micro-batching planner is, and how good the T5
 * ordering is.
 *
 *   1. Planning time per global batch on the built-in FLAN-like workload
 *      (65,536-token global batches), for GPT (gpt2-124m) and T5 (t5-base)
 *      on the a100 machine, max length 2048 and 4096, S = 4 and 8, loose
 *      memory (the machine's) and tight memory (model states + room for two
 *      max-length sequences per micro-batch on each of the S in flight).
 *      Fast DP: median over the batches of the per-batch median of REPS
 *      repetitions, on a warm planner (its cost cache filled by one pass over
 *      the batches; the cold first pass is printed too). Naive reference DP
 *      (one pass per candidate t_max) on the first NAIVE_BATCHES batches,
 *      side by side, with the ratio of the two on the same batches.
 *   2. Scaling: one global batch of n short GPT samples (8..64 tokens),
 *      n = 256 .. 8192, tight memory; time per sample should stay flat.
 *   3. T5 ordering: DP objective and padded tokens with the planner's
 *      ordering (best of lexicographic and serpentine orders) against the
 *      lexicographic order alone.
 *
 * Usage: bench_plan [--quick]   (--quick: fewer batches and repetitions)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/data.h"         /* defines: dyn_dataset_*, dyn_sampler_* */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_preset, dyn_machine_resolve */
#include "plan/plan_internal.h"    /* defines: struct dyn_planner (benchmark knobs) */
#include "util/rng.h"              /* defines: dyn_rng_* */
#include "util/util.h"             /* defines: dyn_time_ms */

static int BATCHES = 32, REPS = 5, NAIVE_BATCHES = 2;

#define CHECK(st, err)                                                                 \
    do {                                                                               \
        if ((st) != DYN_OK) {                                                          \
            fprintf(stderr, "bench_plan: %s:%d: %s\n", __FILE__, __LINE__, (err).msg); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct batch {
    const dyn_sample *s;
    int32_t n;
} batch;

/* Global batches of the workload for kind and max length. */
static int make_batches(dyn_model_kind kind, int32_t maxlen, dyn_dataset *ds, batch *out, int want)
{
    dyn_error err;
    CHECK(dyn_dataset_synthetic_flan(1, want * 400 + 1000, maxlen, kind, ds, &err), err);
    dyn_sampler *sp = dyn_sampler_create(ds, 65536, &err);
    if (sp == NULL) CHECK(err.code, err);
    int got = 0;
    while (got < want) {
        CHECK(dyn_sampler_next(sp, &out[got].s, &out[got].n, &err), err);
        if (out[got].n == 0) break;
        got++;
    }
    dyn_sampler_free(sp);
    return got;
}

/* Mean over batches of the per-batch median plan time (ms) and mean
 * objective; also the mean padded and real tokens. */
typedef struct run_stats {
    double med_ms;   /* median over batches of per-batch medians */
    double mean_ms;  /* mean over batches of per-batch medians */
    double objective;
    double padded, real;
    double evals;
} run_stats;

static run_stats time_batches(dyn_planner *p, const batch *b, int nb, int reps)
{
    run_stats r = {0};
    double *per = calloc((size_t)nb, sizeof(double)), *rep = calloc((size_t)reps, sizeof(double));
    if (!per || !rep) exit(1);
    int64_t evals0 = p->dp_evals;
    for (int i = 0; i < nb; i++) {
        for (int k = 0; k < reps; k++) {
            dyn_batch_plan pl;
            dyn_error err;
            CHECK(dyn_planner_plan(p, b[i].s, b[i].n, &pl, &err), err);
            rep[k] = pl.plan_time_ms;
            if (k == 0) {
                r.objective += pl.objective_ms / nb;
                r.padded += (double)pl.padded_tokens / nb;
                r.real += (double)pl.real_tokens / nb;
            }
            dyn_batch_plan_free(&pl);
        }
        per[i] = median(rep, reps);
        r.mean_ms += per[i] / nb;
    }
    r.evals = (double)(p->dp_evals - evals0) / ((double)nb * reps);
    r.med_ms = median(per, nb);
    free(per);
    free(rep);
    return r;
}

static dyn_planner *make_planner(const dyn_cost_model *cm, int32_t maxlen, int32_t S, int tight,
                                 double *limit_out)
{
    dyn_error err;
    dyn_plan_options o;
    dyn_plan_options_default(&o);
    o.max_seqlen = maxlen;
    o.stages = S;
    dyn_planner *p = dyn_planner_create(cm, &o, &err);
    if (p == NULL) CHECK(err.code, err);
    if (tight) {
        /* two max-length rows per micro-batch on each of the S in flight */
        dyn_mb_shape sh = {.rows = 2, .enc_len = maxlen,
                           .dec_len = dyn_cost_model_config(cm)->kind == DYN_MODEL_T5 ? maxlen : 0};
        dyn_mb_cost c;
        CHECK(p->fn(p->ctx, &sh, &c, &err), err);
        o.memory_limit_mb = p->states_mb + S * c.peak_mb;
        dyn_planner_free(p);
        p = dyn_planner_create(cm, &o, &err);
        if (p == NULL) CHECK(err.code, err);
    }
    *limit_out = p->opt.memory_limit_mb;
    return p;
}

static void bench_grid(void)
{
    printf("== planning time per 65,536-token global batch (built-in FLAN-like workload, a100)\n");
    printf("%-4s %6s %2s %-6s %9s %5s %8s %9s %9s %7s %11s %11s %9s\n", "model", "maxlen", "S",
           "memory", "limit_MB", "n", "evals", "cold_ms", "fast_ms", "p50/p90", "naive_ms",
           "fast_same", "speedup");
    dyn_machine m;
    dyn_error err;
    CHECK(dyn_machine_resolve("a100", &m, &err), err);
    for (int kind = 0; kind < 2; kind++)
        for (int32_t maxlen = 2048; maxlen <= 4096; maxlen *= 2) {
            dyn_model_config cfg;
            CHECK(dyn_model_config_preset(kind == 0 ? "gpt2-124m" : "t5-base", &cfg, &err), err);
            cfg.max_seqlen = maxlen;
            dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, &m, &err);
            if (cm == NULL) CHECK(err.code, err);
            dyn_dataset ds = {0};
            batch *b = calloc((size_t)BATCHES, sizeof *b);
            if (b == NULL) exit(1);
            int nb = make_batches((dyn_model_kind)kind, maxlen, &ds, b, BATCHES);
            double mean_n = 0;
            for (int i = 0; i < nb; i++) mean_n += (double)b[i].n / nb;
            for (int32_t S = 4; S <= 8; S *= 2)
                for (int tight = 0; tight < 2; tight++) {
                    double limit;
                    dyn_planner *p = make_planner(cm, maxlen, S, tight, &limit);
                    double t0 = dyn_time_ms();
                    run_stats cold = time_batches(p, b, nb, 1);
                    (void)cold;
                    double cold_ms = (dyn_time_ms() - t0) / nb;
                    run_stats fast = time_batches(p, b, nb, REPS);
                    /* p90 of per-batch medians, for the tail */
                    double *per = calloc((size_t)nb, sizeof(double));
                    if (per == NULL) exit(1);
                    for (int i = 0; i < nb; i++) {
                        run_stats one = time_batches(p, b + i, 1, REPS);
                        per[i] = one.med_ms;
                    }
                    qsort(per, (size_t)nb, sizeof(double), cmp_double);
                    double p90 = per[(int)(0.9 * (nb - 1))];
                    free(per);
                    /* naive vs fast on the same first batches */
                    run_stats fast_few = time_batches(p, b, NAIVE_BATCHES, REPS);
                    p->use_naive_dp = 1;
                    run_stats naive = time_batches(p, b, NAIVE_BATCHES, 1);
                    p->use_naive_dp = 0;
                    if (fabs(naive.objective - fast_few.objective) > 1e-9 * naive.objective) {
                        fprintf(stderr, "bench_plan: fast and naive DP disagree: %.17g vs %.17g\n",
                                fast_few.objective, naive.objective);
                        exit(1);
                    }
                    printf("%-4s %6d %2d %-6s %9.0f %5.0f %8.1f %9.3f %9.3f %7.2f %11.2f %11.3f %8.0fx\n",
                           kind == 0 ? "gpt" : "t5", maxlen, S, tight ? "tight" : "loose", limit, mean_n,
                           fast.evals, cold_ms, fast.med_ms, p90 / fast.med_ms, naive.mean_ms,
                           fast_few.mean_ms, naive.mean_ms / fast_few.mean_ms);
                    dyn_planner_free(p);
                }
            free(b);
            dyn_dataset_free(&ds);
            dyn_cost_model_free(cm);
        }
    printf("cold_ms: first pass (empty cost cache), mean per batch; fast_ms: median over batches of\n"
           "the median of %d runs (warm cache); p50/p90: p90 / median; naive_ms and fast_same: the\n"
           "naive reference and the fast DP on the first %d batches (mean); speedup = their ratio.\n\n",
           REPS, NAIVE_BATCHES);
}

static void bench_scaling(void)
{
    printf("== scaling: one global batch of n short GPT samples (8..64 tokens), S = 4, gpt2-124m, a100\n");
    printf("%6s %10s %12s %12s %12s\n", "n", "fast_ms", "us/sample", "naive_ms", "evals");
    dyn_machine m;
    dyn_error err;
    CHECK(dyn_machine_resolve("a100", &m, &err), err);
    dyn_model_config cfg;
    CHECK(dyn_model_config_preset("gpt2-124m", &cfg, &err), err);
    cfg.max_seqlen = 2048;
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, &m, &err);
    if (cm == NULL) CHECK(err.code, err);
    enum { NMAX = 8192 };
    dyn_sample *s = calloc(NMAX, sizeof *s);
    if (s == NULL) exit(1);
    dyn_rng rng;
    dyn_rng_seed(&rng, 5);
    for (int32_t i = 0; i < NMAX; i++)
        s[i] = (dyn_sample){i, -1, 4 + (int32_t)dyn_rng_below(&rng, 40), 4 + (int32_t)dyn_rng_below(&rng, 20)};
    double limit;
    dyn_planner *p = make_planner(cm, 2048, 4, 1, &limit);
    for (int32_t n = 256; n <= NMAX; n *= 2) {
        batch b = {s, n};
        time_batches(p, &b, 1, 1); /* warm the cache */
        run_stats r = time_batches(p, &b, 1, REPS);
        double naive_ms = NAN;
        if (n <= 1024) {
            p->use_naive_dp = 1;
            naive_ms = time_batches(p, &b, 1, 1).mean_ms;
            p->use_naive_dp = 0;
        }
        printf("%6d %10.3f %12.3f %12.2f %12.1f\n", n, r.med_ms, 1e3 * r.med_ms / n, naive_ms, r.evals);
    }
    printf("naive_ms: the naive reference DP (only up to n = 1024: it grows much faster)\n\n");
    dyn_planner_free(p);
    free(s);
    dyn_cost_model_free(cm);
}

static void bench_t5_order(void)
{
    printf("== T5 ordering: planner's order (best of lexicographic and serpentine) vs lexicographic\n");
    printf("%6s %2s %-6s %14s %14s %9s %12s %12s\n", "maxlen", "S", "memory", "objective_lex",
           "objective", "gain", "padded_lex", "padded");
    dyn_machine m;
    dyn_error err;
    CHECK(dyn_machine_resolve("a100", &m, &err), err);
    for (int32_t maxlen = 2048; maxlen <= 4096; maxlen *= 2) {
        dyn_model_config cfg;
        CHECK(dyn_model_config_preset("t5-base", &cfg, &err), err);
        cfg.max_seqlen = maxlen;
        dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, &m, &err);
        if (cm == NULL) CHECK(err.code, err);
        dyn_dataset ds = {0};
        batch *b = calloc((size_t)BATCHES, sizeof *b);
        if (b == NULL) exit(1);
        int nb = make_batches(DYN_MODEL_T5, maxlen, &ds, b, BATCHES);
        for (int32_t S = 4; S <= 8; S *= 2)
            for (int tight = 0; tight < 2; tight++) {
                double limit;
                dyn_planner *p = make_planner(cm, maxlen, S, tight, &limit);
                run_stats best = time_batches(p, b, nb, 1);
                p->t5_lex_only = 1;
                run_stats lex = time_batches(p, b, nb, 1);
                printf("%6d %2d %-6s %14.3f %14.3f %8.2f%% %12.0f %12.0f\n", maxlen, S,
                       tight ? "tight" : "loose", lex.objective, best.objective,
                       100.0 * (lex.objective - best.objective) / lex.objective, lex.padded,
                       best.padded);
                dyn_planner_free(p);
            }
        free(b);
        dyn_dataset_free(&ds);
        dyn_cost_model_free(cm);
    }
    printf("objective: mean DP objective (predicted iteration ms) per global batch; padded: mean\n"
           "padded tokens per global batch.\n");
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--quick") == 0) {
        BATCHES = 8;
        REPS = 3;
        NAIVE_BATCHES = 1;
    }
    bench_grid();
    bench_scaling();
    bench_t5_order();
    return 0;
}
