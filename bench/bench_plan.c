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
 * Usage: bench_plan [--quick | --t5]   (--quick: fewer batches and repetitions;
 *        --t5: as --quick, T5 rows and T5 scaling only, no naive DP, for profiling)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_args.h" /* defines: bench_args_check */
#include "dynapipe/data.h"         /* defines: dyn_dataset_*, dyn_sampler_* */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_preset, dyn_machine_resolve */
#include "plan/plan_internal.h"    /* defines: struct dyn_planner (benchmark knobs) */
#include "util/rng.h"              /* defines: dyn_rng_* */
#include "util/util.h"             /* defines: dyn_time_ms, dyn_median */

static int BATCHES = 32, REPS = 5, NAIVE_BATCHES = 2;
static int ONLY_T5 = 0; /* --t5: only the T5 grid rows and T5 scaling, no naive DP (profiling) */

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
    double mbs;      /* micro-batches per global batch */
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
                r.mbs += (double)pl.n_microbatches / nb;
            }
            dyn_batch_plan_free(&pl);
        }
        per[i] = dyn_median(rep, reps);
        r.mean_ms += per[i] / nb;
    }
    r.evals = (double)(p->dp_evals - evals0) / ((double)nb * reps);
    r.med_ms = dyn_median(per, nb);
    free(per);
    free(rep);
    return r;
}

/* The analytic model's own fixed costs per micro-batch (the machine's
 * gemm_n_half and layer_overhead_ms; docs/cost-model.md) are small on the
 * a100 for these lengths; the "overhead" rows add a further OVERHEAD_MS per
 * micro-batch per stage to make merging pay more and the DP work harder for
 * its answer. */
#define OVERHEAD_MS 0.5
typedef struct overhead_ctx {
    dyn_planner *base; /* owns the analytic stage-cost function */
    double ms;
} overhead_ctx;

static dyn_status overhead_fn(void *ctx, const dyn_mb_shape *mb, dyn_mb_cost *out, dyn_error *err)
{
    const overhead_ctx *o = ctx;
    dyn_status st = o->base->fn(o->base->ctx, mb, out, err);
    out->time_ms += o->ms;
    return st;
}

static overhead_ctx overhead_slot;

/* The analytic cost model of a preset on the a100 at max length maxlen. */
static dyn_cost_model *a100_model(const char *preset, int32_t maxlen)
{
    dyn_machine m;
    dyn_error err;
    CHECK(dyn_machine_resolve("a100", &m, &err), err);
    dyn_model_config cfg;
    CHECK(dyn_model_config_preset(preset, &cfg, &err), err);
    cfg.max_seqlen = maxlen;
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, &m, &err);
    if (cm == NULL) CHECK(err.code, err);
    return cm;
}

/* A planner over the analytic costs whose memory limit is the model states
 * plus S * per_stage * peak(sh) (sh == NULL: the machine's memory). */
static dyn_planner *make_planner_for(const dyn_cost_model *cm, int32_t maxlen, int32_t S,
                                     const dyn_mb_shape *sh, double per_stage)
{
    dyn_error err;
    dyn_plan_options o;
    dyn_plan_options_default(&o);
    o.max_seqlen = maxlen;
    o.enable_packing = 0; /* the DP alone: what this benchmark times */
    o.stages = S;
    dyn_planner *p = dyn_planner_create(cm, &o, &err);
    if (p == NULL) CHECK(err.code, err);
    if (sh != NULL) {
        dyn_mb_cost c;
        CHECK(p->fn(p->ctx, sh, &c, &err), err);
        o.memory_limit_mb = p->states_mb + S * per_stage * c.peak_mb;
        dyn_planner_free(p);
        p = dyn_planner_create(cm, &o, &err);
        if (p == NULL) CHECK(err.code, err);
    }
    return p;
}

static dyn_planner *make_planner(const dyn_cost_model *cm, int32_t maxlen, int32_t S, int tight,
                                 double *limit_out)
{
    /* tight: room for 1.5 max-length sequences per micro-batch on each of
     * the S in flight (T5: a max-length input with a quarter-length target) */
    int t5 = dyn_cost_model_config(cm)->kind == DYN_MODEL_T5;
    dyn_mb_shape sh = {.rows = 1, .enc_len = maxlen, .dec_len = t5 ? maxlen / 4 : 0};
    dyn_planner *p = make_planner_for(cm, maxlen, S, tight ? &sh : NULL, 1.5);
    *limit_out = p->opt.memory_limit_mb;
    return p;
}

/* Wraps base in a planner over its costs plus OVERHEAD_MS per micro-batch;
 * base lives in overhead_slot until free_planner. */
static dyn_planner *add_overhead(dyn_planner *base)
{
    dyn_error err;
    overhead_slot.base = base;
    overhead_slot.ms = OVERHEAD_MS;
    dyn_planner *p = dyn_planner_create_custom(base->kind, overhead_fn, &overhead_slot,
                                               base->states_mb, &base->opt, &err);
    if (p == NULL) CHECK(err.code, err);
    return p;
}

static dyn_planner *make_overhead_planner(const dyn_cost_model *cm, int32_t maxlen, int32_t S,
                                          int tight, double *limit_out)
{
    return add_overhead(make_planner(cm, maxlen, S, tight, limit_out));
}

/* The scaling workload: NMAX short samples (input 4..43, target 4..23 tokens). */
enum { NMAX = 8192 };
static dyn_sample *short_samples(void)
{
    dyn_sample *s = calloc(NMAX, sizeof *s);
    if (s == NULL) exit(1);
    dyn_rng rng;
    dyn_rng_seed(&rng, 5);
    for (int32_t i = 0; i < NMAX; i++)
        s[i] = (dyn_sample){i, -1, 4 + (int32_t)dyn_rng_below(&rng, 40), 4 + (int32_t)dyn_rng_below(&rng, 20)};
    return s;
}

static void free_planner(dyn_planner *p)
{
    if (p->fn == overhead_fn) {
        dyn_planner_free(overhead_slot.base);
        overhead_slot.base = NULL;
    }
    dyn_planner_free(p);
}

static void bench_grid(void)
{
    printf("== planning time per 65,536-token global batch (built-in FLAN-like workload, a100)\n");
    printf("%-4s %6s %2s %-6s %8s %9s %5s %6s %6s %8s %8s %7s %10s %9s %8s\n", "model", "maxlen",
           "S", "memory", "overhead", "limit_MB", "n", "mbs", "evals", "cold_ms", "fast_ms",
           "p90/p50", "naive_ms", "fast_same", "speedup");
    for (int kind = ONLY_T5; kind < 2; kind++)
        for (int32_t maxlen = 2048; maxlen <= 4096; maxlen *= 2) {
            dyn_cost_model *cm = a100_model(kind == 0 ? "gpt2-124m" : "t5-base", maxlen);
            dyn_dataset ds = {0};
            batch *b = calloc((size_t)BATCHES, sizeof *b);
            if (b == NULL) exit(1);
            int nb = make_batches((dyn_model_kind)kind, maxlen, &ds, b, BATCHES);
            double mean_n = 0;
            for (int i = 0; i < nb; i++) mean_n += (double)b[i].n / nb;
            for (int32_t S = 4; S <= 8; S *= 2)
                for (int tight = 0; tight < 2; tight++)
                for (int ovh = 0; ovh < 2; ovh++) {
                    double limit;
                    dyn_planner *p = ovh ? make_overhead_planner(cm, maxlen, S, tight, &limit)
                                         : make_planner(cm, maxlen, S, tight, &limit);
                    double t0 = dyn_time_ms();
                    run_stats cold = time_batches(p, b, nb, 1);
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
                    p->use_naive_dp = !ONLY_T5;
                    run_stats naive = time_batches(p, b, NAIVE_BATCHES, 1);
                    p->use_naive_dp = 0;
                    if (fabs(naive.objective - fast_few.objective) > 1e-9 * naive.objective) {
                        fprintf(stderr, "bench_plan: fast and naive DP disagree: %.17g vs %.17g\n",
                                fast_few.objective, naive.objective);
                        exit(1);
                    }
                    printf("%-4s %6d %2d %-6s %8.1f %9.0f %5.0f %6.1f %6.1f %8.3f %8.3f %7.2f %10.2f "
                           "%9.3f %7.0fx\n",
                           kind == 0 ? "gpt" : "t5", maxlen, S, tight ? "tight" : "loose",
                           ovh ? OVERHEAD_MS : 0.0, limit, mean_n, cold.mbs, fast.evals, cold_ms,
                           fast.med_ms, p90 / fast.med_ms, naive.mean_ms, fast_few.mean_ms,
                           naive.mean_ms / fast_few.mean_ms);
                    free_planner(p);
                }
            free(b);
            dyn_dataset_free(&ds);
            dyn_cost_model_free(cm);
        }
    printf("n: samples per global batch; mbs: micro-batches chosen; evals: DP passes per batch;\n"
           "cold_ms: first pass (empty cost cache), mean per batch; fast_ms: median over batches of\n"
           "the median of %d runs (warm cache); p90/p50: p90 over batches / median; naive_ms and\n"
           "fast_same: the naive reference DP (one pass per candidate t_max, all runs) and the fast\n"
           "DP on the first %d batches (mean ms); speedup = their ratio. overhead: ms added per\n"
           "micro-batch per stage to the analytic cost (see the source).\n\n",
           REPS, NAIVE_BATCHES);
}

static void bench_scaling(void)
{
    printf("== scaling: one global batch of n short GPT samples (8..64 tokens), S = 4, gpt2-124m, a100,\n"
           "   A: analytic costs as they are (the machine's n_half and launch overhead), the grid's tight memory;\n"
           "   B: analytic + %.1f ms per micro-batch, memory for 64 rows of 64 tokens per micro-batch\n",
           OVERHEAD_MS);
    printf("%6s | %9s %9s %6s %6s %9s | %9s %9s %6s %6s %9s\n", "n", "A fast_ms", "us/sample", "mbs",
           "evals", "naive_ms", "B fast_ms", "us/sample", "mbs", "evals", "naive_ms");
    dyn_cost_model *cm = a100_model("gpt2-124m", 2048);
    dyn_sample *s = short_samples();
    for (int32_t n = 256; n <= NMAX; n *= 2) {
        batch b = {s, n};
        printf("%6d", n);
        for (int mem = 0; mem < 2; mem++) {
            double limit;
            dyn_mb_shape sh = {.rows = 64, .enc_len = 64}; /* B: limit = states + S * peak(64 x 64) */
            dyn_planner *p = mem == 0 ? make_planner(cm, 2048, 4, 1, &limit)
                                      : add_overhead(make_planner_for(cm, 2048, 4, &sh, 1.0));
            time_batches(p, &b, 1, 1); /* warm the cache */
            run_stats r = time_batches(p, &b, 1, REPS);
            double naive_ms = NAN;
            if (n <= 1024) {
                p->use_naive_dp = 1;
                naive_ms = time_batches(p, &b, 1, 1).mean_ms;
                p->use_naive_dp = 0;
            }
            printf(" | %9.3f %9.3f %6.0f %6.0f %9.2f", r.med_ms, 1e3 * r.med_ms / n, r.mbs, r.evals,
                   naive_ms);
            free_planner(p);
        }
        printf("\n");
    }
    printf("naive_ms: the naive reference DP (only up to n = 1024: it grows much faster)\n\n");
    free(s);
    dyn_cost_model_free(cm);
}

/* T5 scaling: many short (input, target) pairs; runs need the running
 * maxima of both lengths, so each position has its own band row; the long
 * stretches of one padded shape inside the bands take the DP's affine
 * segment deques (src/plan/dp.c). */
static void bench_scaling_t5(void)
{
    printf("== scaling, T5: one global batch of n short samples (input 4..43, target 4..23 tokens),\n"
           "   S = 4, t5-base, a100, analytic + %.1f ms per micro-batch, memory for 64 rows of 64+64\n",
           OVERHEAD_MS);
    printf("%6s %10s %10s %6s %6s %10s\n", "n", "fast_ms", "us/sample", "mbs", "evals", "naive_ms");
    dyn_cost_model *cm = a100_model("t5-base", 2048);
    dyn_sample *s = short_samples();
    dyn_mb_shape sh = {.rows = 64, .enc_len = 64, .dec_len = 64};
    dyn_planner *p = add_overhead(make_planner_for(cm, 2048, 4, &sh, 1.0));
    for (int32_t n = 256; n <= NMAX; n *= 2) {
        batch b = {s, n};
        time_batches(p, &b, 1, 1); /* warm the cache */
        run_stats r = time_batches(p, &b, 1, REPS);
        double naive_ms = NAN;
        if (n <= 512 && !ONLY_T5) {
            p->use_naive_dp = 1;
            naive_ms = time_batches(p, &b, 1, 1).mean_ms;
            p->use_naive_dp = 0;
        }
        printf("%6d %10.3f %10.3f %6.0f %6.0f %10.2f\n", n, r.med_ms, 1e3 * r.med_ms / n, r.mbs, r.evals,
               naive_ms);
    }
    printf("naive_ms: only up to n = 512\n\n");
    free_planner(p);
    free(s);
    dyn_cost_model_free(cm);
}

static void bench_t5_order(void)
{
    printf("== T5 ordering: planner's order (best of lexicographic and serpentine) vs lexicographic\n");
    printf("%6s %2s %-6s %14s %14s %9s %12s %12s\n", "maxlen", "S", "memory", "objective_lex",
           "objective", "gain", "padded_lex", "padded");
    for (int32_t maxlen = 2048; maxlen <= 4096; maxlen *= 2) {
        dyn_cost_model *cm = a100_model("t5-base", maxlen);
        dyn_dataset ds = {0};
        batch *b = calloc((size_t)BATCHES, sizeof *b);
        if (b == NULL) exit(1);
        int nb = make_batches(DYN_MODEL_T5, maxlen, &ds, b, BATCHES);
        for (int32_t S = 4; S <= 8; S *= 2)
            for (int tight = 0; tight < 2; tight++) {
                double limit;
                dyn_planner *p = make_overhead_planner(cm, maxlen, S, tight, &limit);
                run_stats best = time_batches(p, b, nb, 1);
                p->t5_lex_only = 1;
                run_stats lex = time_batches(p, b, nb, 1);
                printf("%6d %2d %-6s %14.3f %14.3f %8.2f%% %12.0f %12.0f\n", maxlen, S,
                       tight ? "tight" : "loose", lex.objective, best.objective,
                       100.0 * (lex.objective - best.objective) / lex.objective, lex.padded,
                       best.padded);
                free_planner(p);
            }
        free(b);
        dyn_dataset_free(&ds);
        dyn_cost_model_free(cm);
    }
    printf("objective: mean DP objective (predicted iteration ms) per global batch; padded: mean\n"
           "padded tokens per global batch; costs: analytic + %.1f ms per micro-batch.\n", OVERHEAD_MS);
}

int main(int argc, char **argv)
{
    static const char *const known[] = {"--quick", "--t5", NULL};
    bench_args_check(argc, argv, "usage: bench_plan [--quick] [--t5]\n  times the micro-batch planner (fast and naive DP, baselines) on FLAN-like batches", known);
    if (argc > 1 && strcmp(argv[1], "--quick") == 0) {
        BATCHES = 8;
        REPS = 3;
        NAIVE_BATCHES = 1;
    }
    if (argc > 1 && strcmp(argv[1], "--t5") == 0) {
        BATCHES = 8;
        REPS = 3;
        NAIVE_BATCHES = 1;
        ONLY_T5 = 1;
        bench_grid();
        bench_scaling_t5();
        return 0;
    }
    bench_grid();
    bench_scaling();
    bench_scaling_t5();
    bench_t5_order();
    return 0;
}
