/* cli_profile.c — `dynapipe profile`: measure every layer kind of a model on
 * this machine over a grid of micro-batch shapes and write the cost table
 * the planner reads (--cost-model FILE); or, with --check, measure held-out
 * shapes and print how far a cost model's predictions are from them.
 * The measuring is src/model/profile.c; this file is flags, the progress
 * bar and the files. `dynapipe train --profile auto` calls
 * cli_profile_cached. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/flags.h"   /* defines: cli_flag, cli_flags_parse, cli_flags_usage */
#include "dynapipe/cost.h"
#include "dynapipe/model_config.h"
#include "model/profile.h" /* defines: dyn_profiler_*, dyn_profile_* */
#include "model/threads.h" /* defines: dyn_threads_init */
#include "runtime/group.h"   /* defines: dyn_rt_group_*, dyn_rt_under_mpirun */
#include "runtime/link.h"    /* defines: rt_link_measure */
#include "runtime/train.h"   /* defines: dyn_train_launch (mpirun re-execution) */
#include "util/rng.h"      /* defines: dyn_rng_* */
#include "util/util.h"     /* defines: dyn_time_ms, dyn_median */

#define CMD "profile"

typedef struct profile_args {
    dyn_model_kind kind;
    int have_kind;
    const char *model_config;
    int32_t max_seqlen, max_rows, threads, repeats, sweeps, quick, shapes, quiet, link, verbose;
    int repeats_given, threads_given, shapes_given, seed_given;
    int64_t max_tokens; /* --check: held-out shapes of at most this many rows x tokens (0: any) */
    uint64_t seed;
    const char *out, *check;
} profile_args;

/* The progress bar: done/total of the work (rows x tokens), time left
 * extrapolated from the time so far. */
typedef struct progress {
    double t0;
    int on;
    int last_pct;
} progress;

static void progress_show(void *ctx, int64_t done, int64_t total, double unused)
{
    (void)unused;
    progress *p = ctx;
    if (!p->on || total <= 0) return;
    int pct = (int)(100.0 * (double)done / (double)total);
    if (pct == p->last_pct && done < total) return;
    p->last_pct = pct;
    double el = (dyn_time_ms() - p->t0) / 1000.0;
    double left = done > 0 ? el * (double)(total - done) / (double)done : 0.0;
    char bar[31];
    int fill = pct * 30 / 100;
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = '\0';
    fprintf(stderr, "\rdynapipe profile: [%s] %3d%%  %.0f s elapsed, %.0f s left ", bar, pct, el, left);
    if (done >= total) fprintf(stderr, "\n");
    fflush(stderr);
}

int cli_profile_write(const dyn_model_config *cfg, int threads, int repeats, int sweeps, int quick, int32_t max_rows,
                      int64_t max_tokens, int show_progress, const char *path)
{
    dyn_error err;
    dyn_profiler *p = dyn_profiler_create(cfg, threads, repeats, 1, &err);
    if (p == NULL) {
        cli_errorf(CMD, "%s", err.msg);
        return CLI_EXIT_FAIL;
    }
    dyn_profiler_set_max_tokens(p, max_tokens);
    dyn_profiler_set_sweeps(p, sweeps);
    dyn_profiler_set_derive_full(p, quick);
    /* T5's bridge and head are timed on two planes, always: timed at
     * every point, the head's nearly flat input axis was noise that the
     * monotone fit turned into a rise (dyn_profiler_set_sum_planes). */
    dyn_profiler_set_sum_planes(p, 1);
    /* --quick: the embedding and the bridge on the full grid, the others on the
     * quick one (dyn_profiler_set_coarse), full recompute not timed
     * (dyn_profiler_set_derive_full) */
    dyn_cost_grid g, coarse = {0, 0, 0, NULL, NULL, NULL};
    if (dyn_profile_grid_default(cfg, 0, max_rows, &g, &err) != DYN_OK ||
        (quick && (dyn_profile_grid_default(cfg, 1, max_rows, &coarse, &err) != DYN_OK ||
                   dyn_profiler_set_coarse(p, &coarse, &err) != DYN_OK))) {
        dyn_profile_grid_free(&coarse);
        dyn_profile_grid_free(&g);
        dyn_profiler_free(p);
        cli_errorf(CMD, "%s", err.msg);
        return CLI_EXIT_USAGE;
    }
    int64_t n = dyn_cost_grid_size(&g) * DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT;
    dyn_layer_cost *pts = calloc((size_t)n, sizeof *pts);
    int rc = CLI_EXIT_OK;
    if (pts == NULL) {
        cli_errorf(CMD, "out of memory for %lld points", (long long)n);
        rc = CLI_EXIT_FAIL;
    } else {
        progress pr = {dyn_time_ms(), show_progress > 0, -1};
        double states[DYN_LAYER_KIND_COUNT];
        dyn_profile_meta meta;
        dyn_profile_meta_fill(&meta, threads, repeats);
        if (dyn_profile_grid_run(p, &g, pts, states, progress_show, &pr, &err) != DYN_OK ||
            dyn_profiler_measure_optimizer(p, &meta.optimizer_ms_per_mparam, &err) != DYN_OK ||
            dyn_cost_table_write_profile(path, cfg, dyn_machine_builtin("cpu"), states, &g, pts, &meta, &err) !=
                DYN_OK) {
            cli_errorf(CMD, "%s", err.msg);
            rc = CLI_EXIT_FAIL;
        } else if (show_progress >= 0) {
            int64_t measured, unsettled, runs, calm;
            dyn_profiler_grid_stats(p, &measured, &unsettled);
            dyn_profiler_probe_stats(p, &runs, &calm);
            fprintf(stderr, "dynapipe profile: %d rows x %d input x %d target lengths", g.n_rows, g.n_enc, g.n_dec);
            if (quick)
                fprintf(stderr, " (the blocks and the head on %d x %d x %d)", coarse.n_rows, coarse.n_enc,
                        coarse.n_dec);
            fprintf(stderr, ", %d sweep%s", sweeps, sweeps == 1 ? "" : "s");
            if (sweeps >= 2) fprintf(stderr, " (%lld of %lld points settled)", (long long)(measured - unsettled),
                                     (long long)measured);
            fprintf(stderr, ", %lld of %lld measurements calm", (long long)calm, (long long)runs);
            fprintf(stderr, ", in %.1f s -> %s\n", (dyn_time_ms() - pr.t0) / 1000.0, path);
        }
    }
    free(pts);
    dyn_profile_grid_free(&coarse);
    dyn_profile_grid_free(&g);
    dyn_profiler_free(p);
    return rc;
}

/* mkdir -p of the directory part of path. */
static int mkdirs(char *path)
{
    for (char *s = path + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        int bad = mkdir(path, 0755) != 0 && errno != EEXIST;
        *s = '/';
        if (bad) return -1;
    }
    return 0;
}

int cli_profile_cached(const dyn_model_config *cfg, int threads, int64_t max_tokens, char *path, size_t cap, int make)
{
    const char *base = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    char dir[512];
    if (base && base[0]) snprintf(dir, sizeof dir, "%s/dynapipe", base);
    else if (home && home[0]) snprintf(dir, sizeof dir, "%s/.cache/dynapipe", home);
    else snprintf(dir, sizeof dir, "build/dynapipe-cache");
    /* the table format's version in the name: a profile of an older
     * format (a version 1 T5 table is refused) is made again */
    int w = snprintf(path, cap, "%s/profile%d-%s-l%d-d%d-h%d-H%d-k%d-f%d-v%d-s%d-t%d-m%lld.table", dir,
                     DYN_COST_TABLE_VERSION, dyn_model_kind_name(cfg->kind), cfg->n_layers, cfg->n_dec_layers,
                     cfg->hidden, cfg->heads, cfg->head_dim, cfg->ffn, cfg->vocab, cfg->max_seqlen, threads,
                     (long long)max_tokens);
    if (w < 0 || (size_t)w >= cap) {
        cli_errorf("train", "--profile auto: cache path too long");
        return CLI_EXIT_FAIL;
    }
    if (!make || access(path, R_OK) == 0) return 0;
    if (mkdirs(path) != 0) {
        cli_errorf("train", "--profile auto: cannot create %s: %s", dir, strerror(errno));
        return CLI_EXIT_FAIL;
    }
    fprintf(stderr, "dynapipe train: no profile of this shape yet; profiling (--quick grid) into %s\n", path);
    return cli_profile_write(cfg, threads, 3, 2, 1, 32, max_tokens, isatty(2) ? 1 : 0, path);
}

/* ---- --check: held-out shapes ---------------------------------------------- */

/* The held-out shapes, ns per kind (shape[k * ns + i]): random rows, lengths
 * that are not multiples of 8 (so never grid points), within --max-tokens;
 * the same seed gives the same shapes. */
static void check_shapes_draw(const profile_args *a, const dyn_model_config *cfg, dyn_mb_shape *shape)
{
    int ns = a->shapes;
    dyn_rng rng;
    dyn_rng_seed(&rng, a->seed);
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        if (!dyn_cost_kind_present(cfg, (dyn_layer_kind)k)) continue;
        for (int i = 0; i < ns; i++) {
            int32_t r = 1 + (int32_t)(dyn_rng_uniform(&rng) * a->max_rows);
            int32_t e, d;
            if (r > a->max_rows) r = a->max_rows;
            /* lengths up to what fits --max-tokens with r rows (at least 9..16) */
            int32_t top = cfg->max_seqlen;
            if (a->max_tokens > 0 && a->max_tokens / r < top) top = (int32_t)(a->max_tokens / r);
            if (top < 17) top = 17;
            do e = 9 + (int32_t)(dyn_rng_uniform(&rng) * (top - 9)); while (e % 8 == 0);
            do d = 9 + (int32_t)(dyn_rng_uniform(&rng) * (top - 9)); while (d % 8 == 0);
            shape[k * ns + i] = (dyn_mb_shape){.rows = r, .enc_len = e, .dec_len = cfg->kind == DYN_MODEL_T5 ? d : 0};
        }
    }
}

/* One pass over the shapes (unsettled: only those not yet settled);
 * *measured counts the shapes it measured. */
static int check_pass(const profile_args *a, const dyn_model_config *cfg, dyn_profiler *p,
                      const dyn_mb_shape *shape, dyn_sweep_point *seen, int unsettled, int *measured)
{
    int ns = a->shapes;
    dyn_error err;
    double probe_best = dyn_profiler_probe_best_ms(p); /* one rule for the whole pass */
    *measured = 0;
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        if (!dyn_cost_kind_present(cfg, (dyn_layer_kind)k)) continue;
        for (int i = 0; i < ns; i++) {
            const dyn_mb_shape *sh = &shape[k * ns + i];
            dyn_sweep_point *sp = &seen[k * ns + i];
            if (unsettled && dyn_sweep_point_settled(sp, probe_best)) continue;
            dyn_layer_cost lc;
            if (dyn_profiler_measure(p, (dyn_layer_kind)k, DYN_RECOMPUTE_NONE, sh->rows, sh->enc_len, sh->dec_len,
                                     &lc, &err) != DYN_OK) {
                cli_errorf(CMD, "%s", err.msg);
                return CLI_EXIT_FAIL;
            }
            dyn_sweep_point_add(sp, &lc, dyn_profiler_probe_last_ms(p));
            (*measured)++;
        }
    }
    return CLI_EXIT_OK;
}

/* The shapes measured as the profile's points are: --sweeps passes over
 * all of them, then (with two or more) as many again at most over those
 * not settled (dyn_profile_grid_run); seen[k * ns + i] keeps each one's. */
static int check_measure(const profile_args *a, const dyn_model_config *cfg, dyn_profiler *p,
                         const dyn_mb_shape *shape, dyn_sweep_point *seen)
{
    int rc = CLI_EXIT_OK, measured = 1;
    for (int sw = 0; sw < a->sweeps && rc == CLI_EXIT_OK; sw++) rc = check_pass(a, cfg, p, shape, seen, 0, &measured);
    /* a settling pass that measured nothing: all are settled */
    for (int sw = 0; a->sweeps >= 2 && sw < a->sweeps && measured > 0 && rc == CLI_EXIT_OK; sw++)
        rc = check_pass(a, cfg, p, shape, seen, 1, &measured);
    return rc;
}

/* Per kind, the median and worst relative error of fwd + bwd time and of
 * stored memory between cm and the measurements (with --verbose each shape
 * first); rel_t, rel_m: ns scratch values each. */
static int check_report(const profile_args *a, const dyn_model_config *cfg, const dyn_cost_model *cm,
                        const dyn_mb_shape *shape, const dyn_sweep_point *seen, double probe_best, double *rel_t,
                        double *rel_m)
{
    int ns = a->shapes;
    dyn_error err;
    printf("%-8s %14s %14s %14s %14s\n", "kind", "time_median%", "time_worst%", "stored_med%", "stored_worst%");
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        if (!dyn_cost_kind_present(cfg, (dyn_layer_kind)k)) continue;
        for (int i = 0; i < ns; i++) {
            const dyn_mb_shape *sh = &shape[k * ns + i];
            const dyn_layer_cost *m = &seen[k * ns + i].kept;
            dyn_layer_cost pred;
            if (dyn_cost_layer(cm, (dyn_layer_kind)k, sh, DYN_RECOMPUTE_NONE, &pred, &err) != DYN_OK) {
                cli_errorf(CMD, "%s", err.msg);
                return CLI_EXIT_FAIL;
            }
            double tm = m->fwd_ms + m->bwd_ms, tp = pred.fwd_ms + pred.bwd_ms;
            rel_t[i] = tm > 0 ? fabs(tp - tm) / tm : 0.0;
            rel_m[i] = m->stored_mb > 0 ? fabs(pred.stored_mb - m->stored_mb) / m->stored_mb : 0.0;
            if (a->verbose)
                printf("# %-8s rows %3d enc %4d dec %4d  measured %10.4f ms  predicted %10.4f ms  %+6.1f%%%s\n",
                       dyn_layer_kind_name((dyn_layer_kind)k), sh->rows, sh->enc_len, sh->dec_len, tm, tp,
                       tm > 0 ? 100.0 * (tp - tm) / tm : 0.0,
                       a->sweeps >= 2 && !dyn_sweep_point_settled(&seen[k * ns + i], probe_best) ? "  (not settled)"
                                                                                                 : "");
        }
        /* dyn_median sorts in place: after it the worst is the last */
        double med_t = dyn_median(rel_t, ns), med_m = dyn_median(rel_m, ns);
        printf("%-8s %14.1f %14.1f %14.1f %14.1f\n", dyn_layer_kind_name((dyn_layer_kind)k), 100.0 * med_t,
               100.0 * rel_t[ns - 1], 100.0 * med_m, 100.0 * rel_m[ns - 1]);
    }
    return CLI_EXIT_OK;
}

static int run_check(const profile_args *a, const dyn_model_config *cfg)
{
    dyn_error err;
    dyn_cost_model *cm = strcmp(a->check, "analytic") == 0
                             ? dyn_cost_model_create_analytic(cfg, dyn_machine_builtin("cpu"), &err)
                             : dyn_cost_model_load_table(a->check, &err);
    if (cm == NULL) {
        cli_errorf(CMD, "--check: %s", err.msg);
        return CLI_EXIT_FAIL;
    }
    if (dyn_cost_model_check_shape(cm, cfg, &err) != DYN_OK) {
        cli_errorf(CMD, "--check %s: %s", a->check, err.msg);
        dyn_cost_model_free(cm);
        return CLI_EXIT_USAGE;
    }
    /* Like with like: a profile's points are medians of its repeats after
     * one warm-up at its thread count, so its held-out shapes are measured
     * the same way unless the flags say otherwise. */
    int threads = a->threads, repeats = a->repeats;
    dyn_profile_meta meta;
    if (dyn_cost_model_profile_meta(cm, &meta)) {
        if (!a->repeats_given) repeats = meta.repeats;
        if (!a->threads_given) threads = meta.threads;
    }
    size_t n = (size_t)DYN_LAYER_KIND_COUNT * (size_t)a->shapes;
    dyn_profiler *p = dyn_profiler_create(cfg, threads, repeats, 1, &err);
    double *rel_t = calloc((size_t)a->shapes, sizeof(double)), *rel_m = calloc((size_t)a->shapes, sizeof(double));
    dyn_mb_shape *shape = calloc(n, sizeof *shape);
    dyn_sweep_point *seen = calloc(n, sizeof *seen);
    int rc = CLI_EXIT_OK;
    if (p == NULL || rel_t == NULL || rel_m == NULL || shape == NULL || seen == NULL) {
        cli_errorf(CMD, "%s", p == NULL ? err.msg : "out of memory");
        rc = CLI_EXIT_FAIL;
    }
    if (rc == CLI_EXIT_OK) {
        check_shapes_draw(a, cfg, shape);
        rc = check_measure(a, cfg, p, shape, seen);
    }
    if (rc == CLI_EXIT_OK) {
        printf("# %s vs measured, %d held-out shapes per kind (rows 1..%d, lengths 9..%d, not multiples of 8",
               a->check, a->shapes, a->max_rows, cfg->max_seqlen);
        if (a->max_tokens > 0) printf(", at most %lld rows x tokens", (long long)a->max_tokens);
        printf("), recompute none, %d threads, median of %d repeats after 1 warm-up, lowest of %d sweep%s",
               threads, repeats, a->sweeps, a->sweeps == 1 ? "" : "s");
        double probe_best = dyn_profiler_probe_best_ms(p);
        if (a->sweeps >= 2) {
            int measured = 0, settled = 0;
            for (size_t i = 0; i < n; i++) {
                measured += seen[i].n > 0;
                settled += dyn_sweep_point_settled(&seen[i], probe_best);
            }
            printf(" (%d of %d shapes settled)", settled, measured);
        }
        int64_t runs = 0, calm = 0;
        dyn_profiler_probe_stats(p, &runs, &calm);
        printf("; %lld of %lld measurements calm\n", (long long)calm, (long long)runs);
        rc = check_report(a, cfg, cm, shape, seen, probe_best, rel_t, rel_m);
    }
    free(shape);
    free(seen);
    if (rc == CLI_EXIT_OK) {
        /* the optimizer step per million parameters, predicted vs measured */
        double opt = 0, pred = dyn_cost_optimizer_ms(cm, 1e6);
        if (dyn_profiler_measure_optimizer(p, &opt, &err) != DYN_OK) {
            cli_errorf(CMD, "%s", err.msg);
            rc = CLI_EXIT_FAIL;
        } else {
            printf("optimizer: %.3f ms per million parameters predicted, %.3f measured (%.1f%%)\n", pred, opt,
                   opt > 0 ? 100.0 * fabs(pred - opt) / opt : 0.0);
        }
    }
    dyn_profiler_free(p);
    free(rel_t), free(rel_m);
    dyn_cost_model_free(cm);
    return rc;
}

/* ---- --link: two MPI ranks ------------------------------------------------- */

/* The table at path with its machine line's link terms replaced. */
static int table_set_link(const char *path, double latency_ms, double gbps)
{
    dyn_error err;
    char *text = NULL;
    size_t len = 0;
    if (dyn_file_read_all(path, &text, &len, &err) != DYN_OK) {
        cli_errorf(CMD, "--out: %s", err.msg);
        return CLI_EXIT_FAIL;
    }
    char *line = strstr(text, "\nmachine ");
    char *out = malloc(len + 256);
    if (line == NULL || out == NULL) {
        cli_errorf(CMD, "--out %s: %s", path, out ? "no machine line (not a cost table?)" : "out of memory");
        free(text), free(out);
        return CLI_EXIT_FAIL;
    }
    line++;
    char *eol = strchr(line, '\n');
    size_t n = (size_t)(line - text), m = 0;
    memcpy(out, text, n);
    /* copy the machine line token by token, replacing the three link keys */
    char *tok_end = eol ? eol : text + len;
    for (char *t = line; t < tok_end;) {
        char *sp = memchr(t, ' ', (size_t)(tok_end - t));
        char *te = sp ? sp : tok_end;
        size_t tl = (size_t)(te - t);
        char rep[96];
        if (tl > 16 && strncmp(t, "link_latency_ms=", 16) == 0) m = (size_t)snprintf(rep, sizeof rep, "link_latency_ms=%.17g", latency_ms);
        else if (tl > 10 && strncmp(t, "link_gbps=", 10) == 0) m = (size_t)snprintf(rep, sizeof rep, "link_gbps=%.17g", gbps);
        else if (tl > 13 && strncmp(t, "dp_link_gbps=", 13) == 0) m = (size_t)snprintf(rep, sizeof rep, "dp_link_gbps=%.17g", gbps);
        else m = 0;
        if (m) memcpy(out + n, rep, m), n += m;
        else memcpy(out + n, t, tl), n += tl;
        if (sp) out[n++] = ' ';
        t = sp ? sp + 1 : tok_end;
    }
    size_t rest = (size_t)(text + len - tok_end);
    memcpy(out + n, tok_end, rest);
    n += rest;
    int rc = CLI_EXIT_OK;
    /* check it still reads as a table before replacing the file */
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.link-check", path);
    dyn_cost_model *cm = NULL;
    if (dyn_file_write_atomic(tmp, out, n, &err) != DYN_OK || (cm = dyn_cost_model_load_table(tmp, &err)) == NULL ||
        rename(tmp, path) != 0) {
        cli_errorf(CMD, "--out %s: %s", path, cm == NULL ? err.msg : strerror(errno));
        unlink(tmp);
        rc = CLI_EXIT_FAIL;
    }
    dyn_cost_model_free(cm);
    free(text), free(out);
    return rc;
}

static int run_link(const profile_args *a, int argc, char **argv)
{
    if (!dyn_rt_under_mpirun()) {
        dyn_train_options o;
        dyn_train_options_default(&o);
        o.plan.stages = 2;
        o.plan.dp = 1;
        return dyn_train_launch(&o, NULL, argc + 1, argv - 1);
    }
    dyn_rt_group g;
    dyn_error err;
    memset(&g, 0, sizeof g);
    if (dyn_rt_group_init(&g, &argc, &argv, 2, 1, &err) != DYN_OK) {
        cli_errorf(CMD, "--link: %s", err.msg);
        return CLI_EXIT_FAIL;
    }
    enum { N_SIZES = 10 };
    rt_link_point pts[N_SIZES];
    double lat = 0, gbps = 0;
    dyn_status st = rt_link_measure(g.world, N_SIZES, 50, 30.0, pts, &lat, &gbps, &err);
    int rc = CLI_EXIT_OK;
    if (st != DYN_OK) {
        cli_errorf(CMD, "--link: rank %d: %s", g.world_rank, err.msg);
        rc = CLI_EXIT_FAIL;
    } else if (g.world_rank == 0) {
        printf("# one-way time between two ranks (median of 50 round trips / 2)\n%12s %12s %10s\n", "bytes",
               "ms", "GB/s");
        for (int i = 0; i < N_SIZES; i++)
            printf("%12lld %12.5f %10.3f\n", (long long)pts[i].bytes, pts[i].one_way_ms,
                   (double)pts[i].bytes / (pts[i].one_way_ms * 1e-3) * 1e-9);
        printf("link_latency_ms=%.5f link_gbps=%.3f\n", lat, gbps);
        if (a->out) rc = table_set_link(a->out, lat, gbps);
    }
    dyn_rt_group_free(&g);
    return rc;
}

/* ---- flags ----------------------------------------------------------------- */

static int parse_kind(const char *cmd, const cli_flag *f, const char *v, void *args)
{
    profile_args *a = args;
    dyn_error e;
    if (dyn_model_kind_parse(v, &a->kind, &e) != DYN_OK) {
        cli_errorf(cmd, "%s: expected gpt, t5 or llama, got '%s'", f->name, v);
        return -1;
    }
    a->have_kind = 1;
    return 0;
}

#define PF profile_args
static const cli_flag profile_flags[] = {
    CLI_FN("--model", "gpt|t5|llama", parse_kind, "model kind (required)"),
    {.name = "--model-config", .metavar = "NAME|FILE", .type = CLI_FLAG_PATH, .field = offsetof(PF, model_config),
     .help = "preset or model JSON", .def = "gpt-tiny / t5-tiny / llama-tiny"},
    CLI_I32("--max-seqlen", "L", PF, max_seqlen, 8, 1 << 20, "longest length on the grid"),
    CLI_I32("--max-rows", "R", PF, max_rows, 1, 1 << 16, "most micro-batch rows on the grid"),
    {.name = "--threads", .metavar = "T", .type = CLI_FLAG_I32, .field = offsetof(PF, threads),
     .given = CLI_GIVEN(PF, threads_given), .min = 1, .max = 1024, .help = "kernel threads while measuring"},
    {.name = "--repeats", .metavar = "N", .type = CLI_FLAG_I32, .field = offsetof(PF, repeats),
     .given = CLI_GIVEN(PF, repeats_given), .min = 1, .max = 1000, .help = "timed repeats per point, median kept",
     .def = "5; --quick 3"},
    {.name = "--sweeps", .metavar = "N", .type = CLI_FLAG_I32, .field = offsetof(PF, sweeps), .min = 1, .max = 100,
     .help = "passes over the grid (or --check's shapes), then with\n"
             "N >= 2 up to N more over the points whose fastest two\n"
             "calm medians differ by over 5% and 10 us (calm: a\n"
             "reference kernel timed around it ran within 10% of\n"
             "its fastest); each time keeps a point's lowest median",
     .def = "2; --quick 1"},
    CLI_BOOL("--quick", PF, quick, 1,
             "a third of the points per axis but for the embedding,\n"
             "and full recompute derived, not timed (gpt-mini with\n"
             "--max-tokens 16384: under a minute; t5-tiny: 75 s)"),
    CLI_PATH("--out", "FILE", PF, out, "the cost table (written atomically)"),
    CLI_PATH("--check", "analytic|FILE", PF, check,
            "instead: measure --shapes held-out shapes and print the\n"
            "predicted vs measured error per layer kind"),
    {.name = "--shapes", .metavar = "N", .type = CLI_FLAG_I32, .field = offsetof(PF, shapes),
     .given = CLI_GIVEN(PF, shapes_given), .min = 1, .max = 100000, .help = "held-out shapes per kind for --check"},
    CLI_BOOL("--verbose", PF, verbose, 1, "--check: one line per held-out shape as well"),
    {.name = "--seed", .metavar = "N", .type = CLI_FLAG_I64, .field = offsetof(PF, seed),
     .given = CLI_GIVEN(PF, seed_given), .min = 0, .max = INT64_MAX, .help = "held-out shapes' seed"},
    {.name = "--max-tokens", .metavar = "N", .type = CLI_FLAG_I64, .field = offsetof(PF, max_tokens), .min = 1,
     .max = INT64_MAX,
     .help = "grid points over N rows x tokens are scaled from fewer\n"
             "rows, not measured; --check: held-out shapes of at\n"
             "most N. --check's repeats and threads default to the\n"
             "checked profile's own",
     .def = "no limit"},
    CLI_BOOL("--quiet", PF, quiet, 1, "no progress bar"),
    CLI_BOOL("--link", PF, link, 1,
             "instead: latency and bandwidth between two MPI ranks\n"
             "(started with mpirun); with --out FILE of an existing\n"
             "table, its machine line takes them (link_latency_ms,\n"
             "link_gbps, dp_link_gbps)"),
    CLI_END,
};
#undef PF

static void profile_args_init(profile_args *a)
{
    memset(a, 0, sizeof *a);
    a->max_seqlen = 512, a->max_rows = 32, a->threads = 1, a->repeats = 0, a->shapes = 24, a->seed = 1;
}

static void usage(FILE *out)
{
    profile_args d;
    profile_args_init(&d);
    fprintf(out,
            "usage: dynapipe profile --model gpt|t5|llama [flags] --out FILE\n"
            "       dynapipe profile --model gpt|t5|llama [flags] --check analytic|FILE\n\n"
            "Measure forward, backward and split backward of each layer kind (embedding,\n"
            "GPT/Llama/T5-encoder block, T5 bridge, T5 decoder block, LM head), per recompute\n"
            "mode, with their activation memory, over a grid of micro-batch rows and\n"
            "lengths, and write the cost table the planner reads (--cost-model FILE).\n"
            "T5's bridge (the encoder's final norm and the decoder embedding) and head\n"
            "are timed at the shortest input and at the shortest target, and their sum\n"
            "is taken elsewhere: each is an input part plus a target part.\n\n");
    cli_flag_set set = {profile_flags, &d};
    cli_flags_usage(out, &set, 1, NULL);
}

static int parse(int argc, char **argv, profile_args *a)
{
    profile_args_init(a);
    cli_flag_set set = {profile_flags, a};
    int r = cli_flags_parse(CMD, &set, 1, argc, argv);
    if (r == 1) {
        usage(stdout);
        return -1;
    }
    if (r != 0) return CLI_EXIT_USAGE;
    if (a->link) return 0;
    if (!a->have_kind) {
        cli_errorf(CMD, "--model gpt|t5|llama is required");
        return CLI_EXIT_USAGE;
    }
    if ((a->out == NULL) == (a->check == NULL)) {
        cli_errorf(CMD, "give exactly one of --out FILE and --check analytic|FILE");
        return CLI_EXIT_USAGE;
    }
    const char *check_only = a->shapes_given ? "--shapes" : a->seed_given ? "--seed" : a->verbose ? "--verbose" : NULL;
    if (a->out != NULL && check_only != NULL) {
        cli_errorf(CMD, "%s applies to --check, not to --out %s", check_only, a->out);
        return CLI_EXIT_USAGE;
    }
    if (a->repeats == 0) a->repeats = a->quick ? 3 : 5;
    if (a->sweeps == 0) a->sweeps = a->quick ? 1 : 2; /* --quick stays a couple of minutes */
    return 0;
}

static int resolve(const profile_args *a, dyn_model_config *cfg)
{
    dyn_error err;
    static const char *const default_config[] = {[DYN_MODEL_GPT] = "gpt-tiny", [DYN_MODEL_T5] = "t5-tiny",
                                                 [DYN_MODEL_LLAMA] = "llama-tiny"};
    const char *src = a->model_config ? a->model_config : default_config[a->kind];
    if (dyn_model_config_preset(src, cfg, &err) != DYN_OK && dyn_model_config_load(src, cfg, &err) != DYN_OK) {
        cli_errorf(CMD, "--model-config: '%s' is neither a preset nor a readable model file (%s)", src, err.msg);
        return CLI_EXIT_USAGE;
    }
    if (cfg->kind != a->kind) {
        cli_errorf(CMD, "--model %s does not match the model config '%s'", dyn_model_kind_name(a->kind), src);
        return CLI_EXIT_USAGE;
    }
    cfg->max_seqlen = a->max_seqlen;
    if (dyn_model_config_validate(cfg, &err) != DYN_OK) {
        cli_errorf(CMD, "model shape: %s", err.msg);
        return CLI_EXIT_USAGE;
    }
    return 0;
}

int cli_profile_main(int argc, char **argv)
{
    dyn_threads_init();
    profile_args a;
    int rc = parse(argc, argv, &a);
    if (rc != 0) return rc < 0 ? CLI_EXIT_OK : rc;
    if (a.link) return run_link(&a, argc, argv);
    dyn_model_config cfg;
    if ((rc = resolve(&a, &cfg)) != 0) return rc;
    if (a.check) return run_check(&a, &cfg);
    /* the table is written after minutes of measuring: its folder is checked first */
    if (cli_output_check(CMD, "--out", a.out, 0) != 0) return CLI_EXIT_USAGE;
    return cli_profile_write(&cfg, a.threads, a.repeats, a.sweeps, a.quick, a.max_rows, a.max_tokens,
                             a.quiet ? -1 : isatty(2) ? 1 : 0, a.out);
}
