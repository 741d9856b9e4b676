/* test_profile.c — the layer profiler (src/model/profile.c), the online
 * calibration's fit (src/runtime/calibrate.c) and the CLI around them:
 * a small grid profiled, written and read back with sizes checked against
 * the model's own tensor sizes; the median fit and its threshold on known
 * records; `dynapipe plan --cost-model` refusing a profile of another
 * shape; `dynapipe profile` refusing bad flags. Timings are only checked to
 * be positive: speed lives in the benchmarks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_testlib.h"
#include "dynapipe/cost.h"         /* defines: dyn_cost_* */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_preset */
#include "dynapipe/sched.h"        /* defines: dyn_stage_costs_build */
#include "model/model.h"           /* defines: dyn_model_create_stage */
#include "model/profile.h"         /* defines: dyn_profiler_*, dyn_profile_* */
#include "runtime/calibrate.h"     /* defines: rt_calib_* */
#include "util/rng.h"              /* defines: dyn_rng_* */

#define MB (1024.0 * 1024.0)

static void small_cfg(dyn_model_kind kind, dyn_model_config *cfg)
{
    const char *name = kind == DYN_MODEL_GPT ? "gpt-tiny" : kind == DYN_MODEL_T5 ? "t5-tiny" : "llama-tiny";
    assert_int_equal(dyn_model_config_preset(name, cfg, NULL), DYN_OK);
    cfg->max_seqlen = 64;
}

/* pts over grid g written as a profile table and read back (the file is
 * removed again); fails the test on any error. */
static dyn_cost_model *table_round_trip(const dyn_model_config *cfg, const dyn_cost_grid *g, const dyn_layer_cost *pts,
                                        const double states[DYN_LAYER_KIND_COUNT])
{
    dyn_error err;
    dyn_profile_meta meta;
    dyn_profile_meta_fill(&meta, 1, 1);
    char path[128];
    snprintf(path, sizeof path, "/tmp/dyn_test_profile_%d.table", (int)getpid());
    assert_int_equal(dyn_cost_table_write_profile(path, cfg, dyn_machine_builtin("cpu"), states, g, pts, &meta, &err),
                     DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_load_table(path, &err);
    if (cm == NULL) fail_msg("load: %s", err.msg);
    unlink(path);
    return cm;
}

/* Profile a 2 x 2 (x 2) grid, write it, read it back: every time positive,
 * the boundary a layer sends = rows x tokens x hidden floats, full
 * recompute stores less than none, and the table answers at the points. */
static void profile_small(dyn_model_kind kind)
{
    dyn_model_config cfg;
    small_cfg(kind, &cfg);
    dyn_error err;
    dyn_profiler *p = dyn_profiler_create(&cfg, 1, 1, 0, &err);
    if (p == NULL) fail_msg("create: %s", err.msg);
    int t5 = kind == DYN_MODEL_T5;
    int32_t rows[2] = {1, 3}, enc[2] = {8, 24}, dec_t5[2] = {8, 16}, dec_gpt[1] = {0};
    dyn_cost_grid g = {2, 2, t5 ? 2 : 1, rows, enc, t5 ? dec_t5 : dec_gpt};
    int64_t n = dyn_cost_grid_size(&g) * DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT;
    dyn_layer_cost *pts = calloc((size_t)n, sizeof *pts);
    assert_non_null(pts);
    double states[DYN_LAYER_KIND_COUNT];
    if (dyn_profile_grid_run(p, &g, pts, states, NULL, NULL, &err) != DYN_OK) fail_msg("run: %s", err.msg);
    /* one reference time per measurement (one sweep: one per measured
     * point), the fastest of them the best */
    int64_t runs, calm, n_points = t5 ? 2 * (4 + 4 + 8 + 8 + 8) : 2 * (4 + 4 + 4);
    dyn_profiler_probe_stats(p, &runs, &calm);
    assert_int_equal(runs, n_points);
    assert_true(calm >= 0 && calm <= runs); /* the best may be a side whose other side ran slower */
    double best = dyn_profiler_probe_best_ms(p);
    assert_true(best > 0 && dyn_profiler_probe_last_ms(p) >= best);
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        if (!dyn_cost_kind_present(&cfg, (dyn_layer_kind)k)) continue;
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++)
                for (int c = 0; c < g.n_dec; c++) {
                    const dyn_layer_cost *none = &pts[dyn_cost_grid_index(&g, k, DYN_RECOMPUTE_NONE, a, b, c)];
                    const dyn_layer_cost *full = &pts[dyn_cost_grid_index(&g, k, DYN_RECOMPUTE_FULL, a, b, c)];
                    assert_true(none->fwd_ms > 0 && none->bwd_ms > 0 && none->bwd_input_ms > 0);
                    assert_true(none->stored_mb > 0);
                    if (k == DYN_LAYER_ENCODER || k == DYN_LAYER_DECODER) assert_true(full->stored_mb < none->stored_mb);
                    /* what leaves the layer: (rows x len, hidden) floats;
                     * T5's bridge and decoder block send the encoder
                     * output too */
                    double toks = k == DYN_LAYER_DECODER || k == DYN_LAYER_BRIDGE
                                      ? (double)rows[a] * (enc[b] + dec_t5[c])
                                      : (double)rows[a] * enc[b];
                    if (k != DYN_LAYER_LM_HEAD) assert_true(fabs(none->output_mb - toks * cfg.hidden * 4.0 / MB) < 1e-12);
                    else assert_true(none->output_mb == 0.0);
                }
    }
    /* Two sweeps: each time the lower of two medians, memory as measured
     * (it does not vary between runs) */
    dyn_layer_cost *pts2 = calloc((size_t)n, sizeof *pts2);
    assert_non_null(pts2);
    dyn_profiler_set_sweeps(p, 2);
    if (dyn_profile_grid_run(p, &g, pts2, states, NULL, NULL, &err) != DYN_OK) fail_msg("run: %s", err.msg);
    for (int64_t i = 0; i < n; i++) {
        assert_true(pts2[i].stored_mb == pts[i].stored_mb && pts2[i].peak_mb == pts[i].peak_mb);
        assert_true(pts2[i].output_mb == pts[i].output_mb && pts2[i].kept_mb == pts[i].kept_mb);
        if (pts[i].fwd_ms > 0) assert_true(pts2[i].fwd_ms > 0 && pts2[i].bwd_ms > 0);
    }
    free(pts2);
    /* each kind on the axes it depends on (T5: the encoder ignores
     * targets), both modes */
    int64_t measured, unsettled;
    dyn_profiler_grid_stats(p, &measured, &unsettled);
    assert_int_equal(measured, n_points);
    assert_true(dyn_profiler_probe_best_ms(p) <= best);
    assert_true(unsettled >= 0 && unsettled <= measured);
    dyn_cost_model *cm = table_round_trip(&cfg, &g, pts, states);
    assert_int_equal(dyn_cost_model_check_shape(cm, &cfg, NULL), DYN_OK);
    dyn_mb_shape mb = {.rows = 3, .enc_len = 24, .dec_len = t5 ? 16 : 0};
    dyn_layer_cost c;
    assert_int_equal(dyn_cost_layer(cm, DYN_LAYER_ENCODER, &mb, DYN_RECOMPUTE_NONE, &c, NULL), DYN_OK);
    assert_memory_equal(&c, &pts[dyn_cost_grid_index(&g, DYN_LAYER_ENCODER, DYN_RECOMPUTE_NONE, 1, 1, g.n_dec - 1)],
                        sizeof c);
    dyn_cost_model_free(cm);
    free(pts);
    dyn_profiler_free(p);
}

/* A point's sweeps: per time column the fastest, memory as first seen;
 * settled once its two fastest calm measurements agree within 5 % (or
 * 10 us) and nothing faster was seen. No reference time (0): all calm. */
static void test_sweep_point_settles(void **state)
{
    (void)state;
    dyn_sweep_point sp;
    memset(&sp, 0, sizeof sp);
    dyn_layer_cost a = {10, 20, 12, 9, 7, 3, 1, 2};
    dyn_sweep_point_add(&sp, &a, 0);
    assert_false(dyn_sweep_point_settled(&sp, 0)); /* seen once */
    assert_memory_equal(&sp.kept, &a, sizeof a);
    dyn_layer_cost slow = {13, 26, 15, 11, 99, 99, 99, 99}; /* 30 % slower, memory ignored */
    dyn_sweep_point_add(&sp, &slow, 0);
    assert_false(dyn_sweep_point_settled(&sp, 0));
    assert_memory_equal(&sp.kept, &a, sizeof a);
    dyn_layer_cost again = {10.2, 19, 12.5, 9.1, 7, 3, 1, 2}; /* 50.8 ms against 51: the same speed */
    dyn_sweep_point_add(&sp, &again, 0);
    assert_true(dyn_sweep_point_settled(&sp, 0));
    assert_int_equal(sp.n, 3);
    assert_true(sp.kept.fwd_ms == 10 && sp.kept.bwd_ms == 19 && sp.kept.bwd_input_ms == 12 && sp.kept.bwd_weight_ms == 9);
    assert_true(sp.kept.stored_mb == 7 && sp.kept.kept_mb == 2);
    /* a faster speed, seen once, unsettles it again; 5 % off settles */
    dyn_layer_cost fast = {5, 10, 6, 4, 7, 3, 1, 2};
    dyn_sweep_point_add(&sp, &fast, 0);
    assert_false(dyn_sweep_point_settled(&sp, 0));
    dyn_layer_cost near = {5.25, 10.5, 6.3, 4.2, 7, 3, 1, 2}; /* exactly 5 % slower */
    dyn_sweep_point_add(&sp, &near, 0);
    assert_true(dyn_sweep_point_settled(&sp, 0));
    assert_true(sp.fastest == 25);
    /* microseconds: 8 us apart is one speed, though 80 % slower */
    dyn_sweep_point tiny;
    memset(&tiny, 0, sizeof tiny);
    dyn_layer_cost t1 = {0.004, 0.006, 0, 0, 0, 0, 0, 0}, t2 = {0.008, 0.010, 0, 0, 0, 0, 0, 0};
    dyn_sweep_point_add(&tiny, &t1, 0);
    dyn_sweep_point_add(&tiny, &t2, 0);
    assert_true(dyn_sweep_point_settled(&tiny, 0));
}

/* The reference kernel decides which measurements count: two that agree
 * but ran while the reference was 30 % slow do not settle a point, a calm
 * pair does, and a faster measurement in a slow moment still unsettles
 * it. A full point keeps the measurements with the fastest references. */
static void test_sweep_point_calm(void **state)
{
    (void)state;
    dyn_sweep_point sp;
    memset(&sp, 0, sizeof sp);
    dyn_layer_cost slowed = {13, 26, 0, 0, 1, 1, 1, 1}, calm = {10, 20, 0, 0, 1, 1, 1, 1};
    dyn_sweep_point_add(&sp, &slowed, 1.30);
    dyn_sweep_point_add(&sp, &slowed, 1.31);
    assert_false(dyn_sweep_point_settled(&sp, 1.0)); /* agree, but slowed */
    assert_true(dyn_sweep_point_settled(&sp, 1.25)); /* against a best of 1.25 they are calm */
    dyn_sweep_point_add(&sp, &calm, 1.02);
    assert_false(dyn_sweep_point_settled(&sp, 1.0)); /* one calm measurement */
    dyn_sweep_point_add(&sp, &calm, 1.09);
    assert_true(dyn_sweep_point_settled(&sp, 1.0)); /* within 10 % of the best reference */
    dyn_layer_cost faster = {8, 16, 0, 0, 1, 1, 1, 1};
    dyn_sweep_point_add(&sp, &faster, 1.5);
    assert_false(dyn_sweep_point_settled(&sp, 1.0)); /* 20 % faster than the calm pair: not yet the speed */
    assert_true(sp.kept.fwd_ms == 8 && sp.fastest == 24);
    /* full: a ninth and a tenth measurement replace the two with the slowest references */
    dyn_sweep_point full;
    memset(&full, 0, sizeof full);
    for (int i = 0; i < DYN_SWEEP_KEEP; i++) dyn_sweep_point_add(&full, &slowed, 2.0 + i);
    assert_int_equal(full.n_kept, DYN_SWEEP_KEEP);
    dyn_sweep_point_add(&full, &calm, 1.0);
    dyn_sweep_point_add(&full, &calm, 1.0);
    assert_int_equal(full.n, DYN_SWEEP_KEEP + 2);
    assert_true(dyn_sweep_point_settled(&full, 1.0));
    int ones = 0;
    for (int i = 0; i < DYN_SWEEP_KEEP; i++) ones += full.probe[i] == 1.0;
    assert_int_equal(ones, 2);
    for (int i = 0; i < DYN_SWEEP_KEEP; i++) assert_true(full.probe[i] < 2.0 + DYN_SWEEP_KEEP - 2); /* the two slowest went */
    /* a slower reference than all kept ones is not kept */
    dyn_sweep_point_add(&full, &calm, 99.0);
    for (int i = 0; i < DYN_SWEEP_KEEP; i++) assert_true(full.probe[i] != 99.0);
}

/* With a coarse grid the embedding is measured at every point and the
 * other kinds only on the coarse one; their other points are the
 * multilinear blend of their coarse cell (checked on memory, which does
 * not vary between runs). A coarse axis that is not a subset is refused. */
static void test_profile_coarse_grid(void **state)
{
    (void)state;
    dyn_model_config cfg;
    small_cfg(DYN_MODEL_GPT, &cfg);
    dyn_error err;
    dyn_profiler *p = dyn_profiler_create(&cfg, 1, 1, 0, &err);
    if (p == NULL) fail_msg("create: %s", err.msg);
    int32_t rows[3] = {1, 2, 3}, enc[3] = {8, 16, 24}, dec[1] = {0}, crows[2] = {1, 3}, cenc[2] = {8, 24};
    dyn_cost_grid g = {3, 3, 1, rows, enc, dec}, coarse = {2, 2, 1, crows, cenc, dec};
    assert_int_equal(dyn_profiler_set_coarse(p, &coarse, &err), DYN_OK);
    int64_t n = dyn_cost_grid_size(&g) * DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT;
    dyn_layer_cost *pts = calloc((size_t)n, sizeof *pts);
    assert_non_null(pts);
    double states[DYN_LAYER_KIND_COUNT];
    if (dyn_profile_grid_run(p, &g, pts, states, NULL, NULL, &err) != DYN_OK) fail_msg("run: %s", err.msg);
    int64_t measured, unsettled;
    dyn_profiler_grid_stats(p, &measured, &unsettled);
    assert_int_equal(measured, 2 * 9 + 2 * (4 + 4)); /* embed: every point, both modes; block, head: corners */
    const int kinds[2] = {DYN_LAYER_ENCODER, DYN_LAYER_LM_HEAD};
    for (int ki = 0; ki < 2; ki++)
        for (int m = 0; m < DYN_RECOMPUTE_COUNT; m++) {
            const dyn_layer_cost *c[2][2];
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 2; b++) c[a][b] = &pts[dyn_cost_grid_index(&g, kinds[ki], m, 2 * a, 2 * b, 0)];
            const dyn_layer_cost *mid = &pts[dyn_cost_grid_index(&g, kinds[ki], m, 1, 1, 0)];
            const dyn_layer_cost *edge = &pts[dyn_cost_grid_index(&g, kinds[ki], m, 1, 0, 0)];
            double blend = 0.25 * (c[0][0]->stored_mb + c[0][1]->stored_mb + c[1][0]->stored_mb + c[1][1]->stored_mb);
            assert_true(c[0][0]->stored_mb > 0 && fabs(mid->stored_mb - blend) <= 1e-9 * blend);
            assert_true(fabs(edge->peak_mb - 0.5 * (c[0][0]->peak_mb + c[1][0]->peak_mb)) <= 1e-9 * edge->peak_mb);
            assert_true(mid->fwd_ms > 0 && mid->bwd_input_ms > 0);
        }
    /* refused: a coarse value the grid lacks, or a missing end */
    int32_t bad_rows[2] = {1, 4}, short_enc[2] = {8, 16};
    dyn_cost_grid bad = {2, 2, 1, bad_rows, cenc, dec}, short_g = {2, 2, 1, crows, short_enc, dec};
    assert_int_equal(dyn_profiler_set_coarse(p, &bad, &err), DYN_OK);
    assert_int_equal(dyn_profile_grid_run(p, &g, pts, states, NULL, NULL, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "rows axis"));
    assert_int_equal(dyn_profiler_set_coarse(p, &short_g, &err), DYN_OK);
    assert_int_equal(dyn_profile_grid_run(p, &g, pts, states, NULL, NULL, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "enc_len axis"));
    free(pts);
    dyn_profiler_free(p);
}

/* Grid runs on g of a profiler set up by set(p, 1) and of a plain one:
 * their points (free both) and how many points each timed. */
typedef struct run_pair {
    dyn_layer_cost *pts, *ref;
    int64_t measured, measured_plain;
} run_pair;

static run_pair grid_run_pair(const dyn_model_config *cfg, const dyn_cost_grid *g, void (*set)(dyn_profiler *, int))
{
    dyn_error err;
    dyn_profiler *p = dyn_profiler_create(cfg, 1, 1, 0, &err), *q = dyn_profiler_create(cfg, 1, 1, 0, &err);
    if (p == NULL || q == NULL) fail_msg("create: %s", err.msg);
    set(p, 1);
    int64_t n = dyn_cost_grid_size(g) * DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT, unsettled;
    run_pair r = {calloc((size_t)n, sizeof(dyn_layer_cost)), calloc((size_t)n, sizeof(dyn_layer_cost)), 0, 0};
    assert_true(r.pts && r.ref);
    double states[DYN_LAYER_KIND_COUNT];
    if (dyn_profile_grid_run(p, g, r.pts, states, NULL, NULL, &err) != DYN_OK) fail_msg("run: %s", err.msg);
    if (dyn_profile_grid_run(q, g, r.ref, states, NULL, NULL, &err) != DYN_OK) fail_msg("run: %s", err.msg);
    dyn_profiler_grid_stats(p, &r.measured, &unsettled);
    dyn_profiler_grid_stats(q, &r.measured_plain, &unsettled);
    dyn_profiler_free(p);
    dyn_profiler_free(q);
    return r;
}

/* With dyn_profiler_set_derive_full only the plain points are timed. Under
 * full recompute the embedding and the head take their plain points
 * whole; a block takes the plain forward and weight half, the plain
 * backward and input half plus the forward, and memory as a timed run
 * of full recompute measures it (memory does not vary between runs).
 * T5: its decoder blocks too. */
static void derive_full_check(dyn_model_kind kind)
{
    dyn_model_config cfg;
    small_cfg(kind, &cfg);
    int32_t rows[2] = {1, 3}, enc[2] = {8, 24}, dec[2] = {4, 12};
    dyn_cost_grid g = {2, 2, kind == DYN_MODEL_T5 ? 2 : 1, rows, enc, kind == DYN_MODEL_T5 ? dec : (int32_t[]){0}};
    run_pair rp = grid_run_pair(&cfg, &g, dyn_profiler_set_derive_full);
    dyn_layer_cost *pts = rp.pts, *ref = rp.ref;
    assert_int_equal(2 * rp.measured, rp.measured_plain); /* the plain points only */
    int blocks = 0;
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++)
        for (int32_t a = 0; a < g.n_rows; a++)
            for (int32_t b = 0; b < g.n_enc; b++)
                for (int32_t d = 0; d < g.n_dec; d++) {
                    const dyn_layer_cost *nn = &pts[dyn_cost_grid_index(&g, k, DYN_RECOMPUTE_NONE, a, b, d)];
                    const dyn_layer_cost *f = &pts[dyn_cost_grid_index(&g, k, DYN_RECOMPUTE_FULL, a, b, d)];
                    const dyn_layer_cost *rf = &ref[dyn_cost_grid_index(&g, k, DYN_RECOMPUTE_FULL, a, b, d)];
                    if (nn->fwd_ms == 0) continue; /* a kind this model lacks */
                    if (k != DYN_LAYER_ENCODER && k != DYN_LAYER_DECODER) {
                        assert_memory_equal(f, nn, sizeof *f);
                        continue;
                    }
                    blocks++;
                    assert_true(f->fwd_ms == nn->fwd_ms && f->bwd_weight_ms == nn->bwd_weight_ms);
                    assert_true(f->bwd_ms == nn->bwd_ms + nn->fwd_ms);
                    assert_true(f->bwd_input_ms == nn->bwd_input_ms + nn->fwd_ms);
                    assert_true(f->stored_mb == rf->stored_mb && f->peak_mb == rf->peak_mb);
                    assert_true(f->kept_mb == rf->kept_mb && f->output_mb == rf->output_mb);
                    assert_true(f->stored_mb < nn->stored_mb); /* full recompute keeps only the input */
                }
    assert_int_equal(blocks, (kind == DYN_MODEL_T5 ? 2 : 1) * g.n_rows * g.n_enc * g.n_dec);
    free(pts);
    free(ref);
}

static void test_profile_derive_full(void **state)
{
    (void)state;
    derive_full_check(DYN_MODEL_GPT);
    derive_full_check(DYN_MODEL_T5);
}

/* dyn_profile_points_sum_planes on synthetic points: T5's bridge and
 * head off the two planes take, per time column and mode, the sum of
 * their two plane points less the common corner; their memory, the plane
 * points, the other kinds and every GPT point stay as they were. */
/* The plane sum x + y - o, floored at the larger plane point (a noisy corner
 * must not make a point cheaper than either plane); counts the floored ones. */
static double expect_sum(double x, double y, double o, int *floored)
{
    double m = x > y ? x : y;
    if (x + y - o >= m) return x + y - o;
    ++*floored;
    return m;
}

static void test_profile_sum_planes_formula(void **state)
{
    (void)state;
    dyn_model_config cfg;
    int32_t rows[2] = {1, 4}, enc[3] = {8, 16, 40}, dec[3] = {8, 24, 32};
    dyn_cost_grid g = {2, 3, 3, rows, enc, dec};
    int64_t n = dyn_cost_grid_size(&g) * DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT;
    dyn_layer_cost *pts = calloc((size_t)n, sizeof *pts), *before = calloc((size_t)n, sizeof *before);
    assert_true(pts && before);
    for (int64_t i = 0; i < n; i++) {
        double v = 1.0 + (double)((i * 7919) % 1009);
        pts[i] = (dyn_layer_cost){v, 2 * v, 1.5 * v, 0.5 * v, v / 3, v / 5, v / 7, v / 11};
    }
    memcpy(before, pts, (size_t)n * sizeof *pts);
    small_cfg(DYN_MODEL_GPT, &cfg);
    dyn_profile_points_sum_planes(&cfg, &g, pts);
    assert_memory_equal(pts, before, (size_t)n * sizeof *pts);
    small_cfg(DYN_MODEL_T5, &cfg);
    dyn_profile_points_sum_planes(&cfg, &g, pts);
    int changed = 0, floored = 0;
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++)
        for (int m = 0; m < DYN_RECOMPUTE_COUNT; m++)
            for (int32_t a = 0; a < g.n_rows; a++)
                for (int32_t b = 0; b < g.n_enc; b++)
                    for (int32_t d = 0; d < g.n_dec; d++) {
                        int64_t i = dyn_cost_grid_index(&g, k, m, a, b, d);
                        int summed = (k == DYN_LAYER_BRIDGE || k == DYN_LAYER_LM_HEAD) && b > 0 && d > 0;
                        if (!summed) {
                            assert_memory_equal(&pts[i], &before[i], sizeof pts[i]);
                            continue;
                        }
                        const dyn_layer_cost *x = &before[dyn_cost_grid_index(&g, k, m, a, b, 0)];
                        const dyn_layer_cost *y = &before[dyn_cost_grid_index(&g, k, m, a, 0, d)];
                        const dyn_layer_cost *o = &before[dyn_cost_grid_index(&g, k, m, a, 0, 0)];
                        assert_true(pts[i].fwd_ms == expect_sum(x->fwd_ms, y->fwd_ms, o->fwd_ms, &floored));
                        assert_true(pts[i].bwd_ms == expect_sum(x->bwd_ms, y->bwd_ms, o->bwd_ms, &floored));
                        assert_true(pts[i].bwd_input_ms ==
                                    expect_sum(x->bwd_input_ms, y->bwd_input_ms, o->bwd_input_ms, &floored));
                        assert_true(pts[i].bwd_weight_ms ==
                                    expect_sum(x->bwd_weight_ms, y->bwd_weight_ms, o->bwd_weight_ms, &floored));
                        assert_true(pts[i].stored_mb == before[i].stored_mb && pts[i].peak_mb == before[i].peak_mb);
                        assert_true(pts[i].output_mb == before[i].output_mb && pts[i].kept_mb == before[i].kept_mb);
                        changed++;
                    }
    assert_int_equal(changed, 2 * DYN_RECOMPUTE_COUNT * 2 * 2 * 2); /* 2 kinds, every mode, 2 rows x 2 x 2 */
    assert_true(floored > 0 && floored < 4 * changed); /* the random points exercise both branches */
    free(pts);
    free(before);
}

/* A T5 grid run with dyn_profiler_set_sum_planes times the bridge and
 * the head only on the two planes (the other kinds everywhere); their
 * points off the planes have the memory a timed run measures there
 * (memory does not vary between runs) and times from the planes. */
static void test_profile_sum_planes_run(void **state)
{
    (void)state;
    dyn_model_config cfg;
    small_cfg(DYN_MODEL_T5, &cfg);
    int32_t rows[2] = {1, 3}, enc[3] = {8, 24, 40}, dec[2] = {8, 32};
    dyn_cost_grid g = {2, 3, 2, rows, enc, dec};
    run_pair rp = grid_run_pair(&cfg, &g, dyn_profiler_set_sum_planes);
    dyn_layer_cost *pts = rp.pts, *ref = rp.ref;
    /* off the planes: 2 rows x 2 inputs x 1 target, per kind and timed mode */
    assert_int_equal(rp.measured_plain - rp.measured, 2 * 2 * (2 * 2 * 1));
    int off = 0;
    const int kinds[2] = {DYN_LAYER_BRIDGE, DYN_LAYER_LM_HEAD};
    for (int ki = 0; ki < 2; ki++)
        for (int m = 0; m < DYN_RECOMPUTE_COUNT; m++)
            for (int32_t a = 0; a < g.n_rows; a++)
                for (int32_t b = 1; b < g.n_enc; b++) {
                    const dyn_layer_cost *t = &pts[dyn_cost_grid_index(&g, kinds[ki], m, a, b, 1)];
                    const dyn_layer_cost *r = &ref[dyn_cost_grid_index(&g, kinds[ki], m, a, b, 1)];
                    assert_true(t->stored_mb == r->stored_mb && t->peak_mb == r->peak_mb);
                    assert_true(t->output_mb == r->output_mb && t->kept_mb == r->kept_mb);
                    assert_true(t->stored_mb > 0 && t->fwd_ms > 0 && t->bwd_ms > 0);
                    assert_true(t->bwd_input_ms > 0 && t->bwd_weight_ms > 0);
                    off++;
                }
    assert_int_equal(off, 2 * DYN_RECOMPUTE_COUNT * 2 * 2);
    free(pts);
    free(ref);
}

static void test_profile_gpt_small_grid(void **state)
{
    (void)state;
    profile_small(DYN_MODEL_GPT);
}

static void test_profile_t5_small_grid(void **state)
{
    (void)state;
    profile_small(DYN_MODEL_T5);
}

static void test_profile_llama_small_grid(void **state)
{
    (void)state;
    profile_small(DYN_MODEL_LLAMA);
}

/* Stored bytes of a stage as the planner counts them from a profile (the
 * layers measured alone, less each layer's input after the stage's first:
 * dyn_stage_costs_build) against a stage model running those layers, for
 * GPT and T5, every stage (T5: the embedding with the first encoder block,
 * the last encoder block with the bridge, the decoder blocks with the
 * head). Within 0.2 %: each arena pads its tensors to an
 * alignment, which a layer measured alone pads differently (the GPT
 * embedding stage differs by 80 floats of 75,000). */
static double stage_model_stored_mb(const dyn_model_config *cfg, const dyn_model_microbatch *mb, int first, int last)
{
    dyn_error err;
    dyn_model *m = dyn_model_create_stage(cfg, 1, first, last, &err);
    if (m == NULL) fail_msg("stage [%d, %d): %s", first, last, err.msg);
    int L = dyn_model_num_layers(m);
    size_t ni = dyn_model_boundary_floats(m, first, mb), no = dyn_model_boundary_floats(m, last, mb);
    float *in = calloc(ni + 1, sizeof(float)), *out = calloc(no + 1, sizeof(float));
    dyn_model_acts *a = dyn_model_acts_create(&err);
    assert_true(in && out && a);
    double loss;
    assert_int_equal(dyn_model_stage_forward(m, a, mb, first, last, first > 0 ? in : NULL, last < L ? out : NULL, 0,
                                             last < L ? NULL : &loss, NULL, &err),
                     DYN_OK);
    double mb_ = (double)dyn_model_acts_stored_bytes(a) / MB;
    dyn_model_acts_free(a);
    dyn_model_free(m);
    free(in), free(out);
    return mb_;
}

static void stage_stored_check(dyn_model_kind kind)
{
    dyn_model_config cfg;
    small_cfg(kind, &cfg);
    int t5 = kind == DYN_MODEL_T5;
    cfg.n_layers = 4;
    if (t5) cfg.n_dec_layers = 2;
    dyn_error err;
    dyn_profiler *p = dyn_profiler_create(&cfg, 1, 1, 0, &err);
    if (p == NULL) fail_msg("create: %s", err.msg);
    /* two input lengths, the shape at the second: a layer whose memory
     * depends on the input length but was measured at one length only
     * (T5's head, whose input carries the encoder output) would miss */
    int32_t rows[1] = {3}, enc[2] = {8, 24}, dec[1] = {t5 ? 16 : 0};
    dyn_cost_grid g = {1, 2, 1, rows, enc, dec};
    int64_t n = DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT * dyn_cost_grid_size(&g);
    dyn_layer_cost *pts = calloc((size_t)n, sizeof *pts);
    double states[DYN_LAYER_KIND_COUNT];
    assert_non_null(pts);
    if (dyn_profile_grid_run(p, &g, pts, states, NULL, NULL, &err) != DYN_OK) fail_msg("run: %s", err.msg);
    dyn_cost_model *cm = table_round_trip(&cfg, &g, pts, states);
    /* planner layers: GPT [E, B1..B4, H]; T5 [E, e1..e4, BR, d1, d2, H] */
    int32_t kinds[10], nl = 0;
    kinds[nl++] = DYN_LAYER_EMBED;
    for (int i = 0; i < 4; i++) kinds[nl++] = DYN_LAYER_ENCODER;
    if (t5) kinds[nl++] = DYN_LAYER_BRIDGE;
    for (int i = 0; t5 && i < 2; i++) kinds[nl++] = DYN_LAYER_DECODER;
    kinds[nl++] = DYN_LAYER_LM_HEAD;
    int32_t first_gpt[4] = {0, 2, 4, 6}, first_t5[5] = {0, 2, 4, 6, 9};
    dyn_stage_assignment a = {t5 ? 4 : 3, nl, kinds, t5 ? first_t5 : first_gpt, 0};
    dyn_mb_shape shape = {.rows = 3, .enc_len = 24, .dec_len = t5 ? 16 : 0};
    dyn_stage_costs sc;
    assert_int_equal(dyn_stage_costs_build(cm, &a, &shape, 1, DYN_RECOMPUTE_NONE, &sc, &err), DYN_OK);
    int32_t in_len = t5 ? 24 : 12, tg_len = t5 ? 16 : 12;
    int32_t tok[48];
    for (int i = 0; i < 48; i++) tok[i] = (i * 7) % 200;
    dyn_token_sample smp[3];
    for (int r = 0; r < 3; r++) smp[r] = (dyn_token_sample){tok, in_len, tok + in_len, tg_len};
    dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(kind, smp, 3, &err);
    assert_non_null(mb);
    for (int32_t s = 0; s < a.n_stages; s++) {
        /* planner layer c is model layer c (GPT), and c + 1 past the bridge
         * (T5: the bridge is the final norm and the decoder embedding) */
        int first = a.stage_first[s], last = a.stage_first[s + 1];
        if (t5 && first > 5) first += 1;
        if (t5 && last > 5) last += 1;
        double model = stage_model_stored_mb(&cfg, mb, first, last);
        print_message("  %s stage %d (model layers [%d, %d)): planner %.6f MB, stage model %.6f MB\n",
                      dyn_model_kind_name(kind),
                      s, first, last, sc.stored_mb[s], model);
        assert_true(fabs(sc.stored_mb[s] - model) <= 2e-3 * model);
    }
    dyn_model_microbatch_free(mb);
    dyn_stage_costs_free(&sc);
    dyn_cost_model_free(cm);
    free(pts);
    dyn_profiler_free(p);
}

static void test_stage_stored_gpt(void **state)
{
    (void)state;
    stage_stored_check(DYN_MODEL_GPT);
}

static void test_stage_stored_t5(void **state)
{
    (void)state;
    stage_stored_check(DYN_MODEL_T5);
}

/* Llama: GPT's layer layout (planner layer c is model layer c) with its
 * own block, rotary tables and untied head. */
static void test_stage_stored_llama(void **state)
{
    (void)state;
    stage_stored_check(DYN_MODEL_LLAMA);
}

/* The default grid: increasing axes, dense (every 8) at short lengths,
 * ending at max_seqlen and max rows; --quick has fewer points. */
static void test_default_grid(void **state)
{
    (void)state;
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("t5-tiny", &cfg, NULL), DYN_OK);
    cfg.max_seqlen = 512;
    dyn_cost_grid full, quick;
    assert_int_equal(dyn_profile_grid_default(&cfg, 0, 32, &full, NULL), DYN_OK);
    assert_int_equal(dyn_profile_grid_default(&cfg, 1, 32, &quick, NULL), DYN_OK);
    assert_int_equal(full.enc_len[0], 8);
    assert_int_equal(full.enc_len[1], 16);
    assert_int_equal(full.enc_len[full.n_enc - 1], 512);
    assert_int_equal(full.rows[full.n_rows - 1], 32);
    assert_int_equal(quick.enc_len[quick.n_enc - 1], 512);
    assert_true(quick.n_enc < full.n_enc && quick.n_rows < full.n_rows && full.n_dec < full.n_enc);
    for (int i = 1; i < full.n_enc; i++) assert_true(full.enc_len[i] > full.enc_len[i - 1]);
    for (int i = 1; i < full.n_rows; i++) assert_true(full.rows[i] > full.rows[i - 1]);
    /* quick: a subset of the full axes; no cell next to the longest length
     * narrower than a step of the full axis (440 next to 512 went) */
    const int32_t *qa[2] = {quick.enc_len, quick.dec_len}, *fa[2] = {full.enc_len, full.dec_len};
    const int32_t qn[2] = {quick.n_enc, quick.n_dec}, fn[2] = {full.n_enc, full.n_dec};
    for (int ax = 0; ax < 2; ax++) {
        for (int32_t i = 0, j = 0; i < qn[ax]; i++) {
            while (j < fn[ax] && fa[ax][j] != qa[ax][i]) j++;
            assert_true(j < fn[ax]);
        }
        assert_true(qn[ax] >= 3 && qa[ax][qn[ax] - 1] >= 1.25 * qa[ax][qn[ax] - 2]);
    }
    assert_int_equal(quick.enc_len[quick.n_enc - 2], 224);
    dyn_profile_grid_free(&full);
    dyn_profile_grid_free(&quick);
}

/* Per (rank, direction) the factor is the median of carried x measured /
 * predicted: the first record already gives one (the first correction
 * comes early), an outlier moves it by one place, and records planned
 * with an older factor still count (their estimate is absolute). */
static void test_calibration_median_and_threshold(void **state)
{
    (void)state;
    rt_calib *c = rt_calib_create(2, 8, 0.05);
    assert_non_null(c);
    double f[2 * RT_CALIB_DIRS];
    const double one[RT_CALIB_DIRS] = {1, 1, 1};
    /* rank 0's forward runs 1.5x the prediction, rank 1's 1.2x; the
     * optimizer step 2x on both; one stalled iteration (9x) on rank 0 */
    const double r0[8] = {1.5, 1.6, 1.4, 1.5, 9.0, 1.5, 1.55, 1.45};
    double meas[RT_CALIB_DIRS] = {r0[0] * 10, 20, 4}, pred[RT_CALIB_DIRS] = {10, 20, 2};
    rt_calib_add(c, 0, meas, pred, one);
    assert_int_equal(rt_calib_update(c, f), 1); /* one record is enough */
    assert_true(fabs(f[0] - 1.5) < 1e-12);
    assert_true(fabs(f[1] - 1.0) < 1e-12);
    assert_true(fabs(f[2] - 2.0) < 1e-12);
    assert_true(fabs(f[RT_CALIB_DIRS] - 1.0) < 1e-12); /* rank 1: no record yet */
    for (int i = 1; i < 8; i++) {
        double m0[RT_CALIB_DIRS] = {r0[i] * 10, 20, 4}, m1[RT_CALIB_DIRS] = {12, 30, 4};
        rt_calib_add(c, 0, m0, pred, one);
        rt_calib_add(c, 1, m1, pred, one);
    }
    assert_int_equal(rt_calib_update(c, f), 1); /* rank 1 moved */
    assert_true(fabs(f[0] - 1.5) < 1e-12);      /* median of the 8 rank-0 ratios: (1.5 + 1.5) / 2 */
    assert_true(fabs(f[RT_CALIB_DIRS] - 1.2) < 1e-12);
    assert_true(fabs(f[RT_CALIB_DIRS + 1] - 1.5) < 1e-12);
    /* plans now carry the factors: measured within 2 % of them is no move */
    const double carried0[RT_CALIB_DIRS] = {1.5, 1.0, 2.0}, carried1[RT_CALIB_DIRS] = {1.2, 1.5, 2.0};
    for (int i = 0; i < 8; i++) {
        double m0[RT_CALIB_DIRS] = {10.2, 20, 2}, p0[RT_CALIB_DIRS] = {10, 20, 2};
        double m1[RT_CALIB_DIRS] = {10, 20.2, 2}, p1[RT_CALIB_DIRS] = {10, 20, 2};
        rt_calib_add(c, 0, m0, p0, carried0);
        rt_calib_add(c, 1, m1, p1, carried1);
    }
    assert_int_equal(rt_calib_update(c, f), 0);
    /* the machine slows by 1.2 more on rank 0's forward: 1.5 x 1.2; bad
     * records (no prediction, rank out of range) are ignored */
    for (int i = 0; i < 8; i++) {
        double m0[RT_CALIB_DIRS] = {12, 20, 2}, p0[RT_CALIB_DIRS] = {10, 20, 2};
        double bad[RT_CALIB_DIRS] = {5, 5, 5}, zero[RT_CALIB_DIRS] = {0, 0, 0};
        rt_calib_add(c, 0, m0, p0, carried0);
        rt_calib_add(c, 0, bad, zero, carried0);
        rt_calib_add(c, 7, bad, p0, carried0);
    }
    assert_int_equal(rt_calib_update(c, f), 1);
    assert_true(fabs(f[0] - 1.8) < 1e-12);
    assert_true(fabs(f[RT_CALIB_DIRS] - 1.2 * 1.0) < 0.03); /* rank 1 stays */
    rt_calib_free(c);
    assert_null(rt_calib_create(0, 8, 0.05));
    assert_null(rt_calib_create(2, 0, 0.05));
}

/* A level shift (another process starts competing): three records in a
 * row beyond 15 % of the window's median replace the window, so the factor
 * follows in three iterations, not half a window; one stall does not. */
static void test_calibration_level_shift(void **state)
{
    (void)state;
    rt_calib *c = rt_calib_create(1, 8, 0.03);
    assert_non_null(c);
    const double one[RT_CALIB_DIRS] = {1, 1, 1};
    double f[RT_CALIB_DIRS];
    for (int i = 0; i < 8; i++) {
        double m[RT_CALIB_DIRS] = {i == 4 ? 30 : 10, 10, 10}, p[RT_CALIB_DIRS] = {10, 10, 10};
        rt_calib_add(c, 0, m, p, one);
    }
    assert_int_equal(rt_calib_update(c, f), 0); /* the stall at record 5 moved nothing */
    for (int i = 0; i < 2; i++) {
        double m[RT_CALIB_DIRS] = {20, 10, 10}, p[RT_CALIB_DIRS] = {10, 10, 10};
        rt_calib_add(c, 0, m, p, one);
    }
    assert_int_equal(rt_calib_update(c, f), 0); /* two: still the old median */
    double m[RT_CALIB_DIRS] = {20, 10, 10}, p[RT_CALIB_DIRS] = {10, 10, 10};
    rt_calib_add(c, 0, m, p, one);
    assert_int_equal(rt_calib_update(c, f), 1);
    assert_true(fabs(f[0] - 2.0) < 1e-12 && fabs(f[1] - 1.0) < 1e-12);
    rt_calib_free(c);
}

/* Noisy records with outliers converge to the true factor: each record is
 * the true factor times 1 +- 5 % noise, and one in five is a stall of 3-6x;
 * after every record the planner carries what update returned, as the
 * runtime does. */
static void test_calibration_converges(void **state)
{
    (void)state;
    rt_calib *c = rt_calib_create(1, 8, 0.03);
    assert_non_null(c);
    const double truth[RT_CALIB_DIRS] = {1.7, 1.3, 0.6};
    double carried[RT_CALIB_DIRS] = {1, 1, 1};
    dyn_rng rng;
    dyn_rng_seed(&rng, 7);
    for (int i = 0; i < 40; i++) {
        double meas[RT_CALIB_DIRS], pred[RT_CALIB_DIRS];
        for (int d = 0; d < RT_CALIB_DIRS; d++) {
            double base = 10.0 + 90.0 * dyn_rng_uniform(&rng); /* uncalibrated prediction */
            double noise = 1.0 + 0.1 * (dyn_rng_uniform(&rng) - 0.5);
            double stall = i % 5 == 2 ? 3.0 + 3.0 * dyn_rng_uniform(&rng) : 1.0;
            pred[d] = base * carried[d];
            meas[d] = base * truth[d] * noise * stall;
        }
        rt_calib_add(c, 0, meas, pred, carried);
        double f[RT_CALIB_DIRS];
        if (rt_calib_update(c, f))
            for (int d = 0; d < RT_CALIB_DIRS; d++) carried[d] = f[d];
    }
    for (int d = 0; d < RT_CALIB_DIRS; d++) assert_true(fabs(carried[d] / truth[d] - 1.0) < 0.06);
    rt_calib_free(c);
}

/* A table's time scale multiplies times only. */
static void test_cost_time_scale(void **state)
{
    (void)state;
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("gpt-tiny", &cfg, NULL), DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), NULL);
    dyn_mb_shape mb = {.rows = 2, .enc_len = 64};
    dyn_layer_cost a, b, h;
    assert_int_equal(dyn_cost_layer(cm, DYN_LAYER_ENCODER, &mb, DYN_RECOMPUTE_NONE, &a, NULL), DYN_OK);
    assert_int_equal(dyn_cost_model_set_time_scale(cm, DYN_LAYER_ENCODER, 2.0, 0.5, NULL), DYN_OK);
    assert_int_equal(dyn_cost_layer(cm, DYN_LAYER_ENCODER, &mb, DYN_RECOMPUTE_NONE, &b, NULL), DYN_OK);
    assert_int_equal(dyn_cost_layer(cm, DYN_LAYER_LM_HEAD, &mb, DYN_RECOMPUTE_NONE, &h, NULL), DYN_OK);
    assert_true(b.fwd_ms == 2.0 * a.fwd_ms && b.bwd_ms == 0.5 * a.bwd_ms && b.bwd_weight_ms == 0.5 * a.bwd_weight_ms);
    assert_true(b.stored_mb == a.stored_mb && b.peak_mb == a.peak_mb);
    dyn_layer_cost h0;
    dyn_cost_model *cm0 = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), NULL);
    assert_int_equal(dyn_cost_layer(cm0, DYN_LAYER_LM_HEAD, &mb, DYN_RECOMPUTE_NONE, &h0, NULL), DYN_OK);
    assert_memory_equal(&h, &h0, sizeof h); /* other kinds untouched */
    assert_int_equal(dyn_cost_model_set_time_scale(cm, DYN_LAYER_ENCODER, 0.0, 1.0, NULL), DYN_ERR_INVALID_ARG);
    dyn_cost_model_free(cm);
    dyn_cost_model_free(cm0);
}

/* `dynapipe plan` with a profile of another shape: one line, exit 2. */
static void test_cli_refuses_other_shape(void **state)
{
    (void)state;
    dyn_model_config cfg;
    small_cfg(DYN_MODEL_GPT, &cfg);
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), NULL);
    int32_t rows[2] = {1, 8}, enc[3] = {8, 32, 64}, dec[1] = {0};
    dyn_cost_grid g = {2, 3, 1, rows, enc, dec};
    char path[700];
    snprintf(path, sizeof path, "%s/tiny.table", dir);
    assert_int_equal(dyn_cost_table_write_from_model(path, cm, &g, NULL), DYN_OK);
    dyn_cost_model_free(cm);
    char args[1200];
    snprintf(args, sizeof args,
             "--model gpt --model-config gpt2-124m --cost-model %s --synthetic flan:1 --global-batch-tokens 4096 "
             "--max-seqlen 64 --stages 2",
             path);
    int rc = cli_run("plan", args);
    cli_assert_one_line_error("plan", args, rc, 2, "another shape");
    /* the same shape plans, with one warning for lengths past the grid */
    snprintf(args, sizeof args,
             "--model gpt --model-config gpt-tiny --cost-model %s --synthetic flan:1 --global-batch-tokens 4096 "
             "--max-seqlen 128 --stages 2 --batches 1",
             path);
    assert_int_equal(cli_run("plan", args), 0);
    char *msg = slurp(err_path);
    assert_non_null(strstr(msg, "extrapolated"));
    size_t lines = 0, len = strlen(msg);
    for (size_t i = 0; i < len; i++) lines += msg[i] == '\n';
    assert_int_equal(lines, 1); /* one warning */
    free(msg);
}

static void test_cli_profile_flags(void **state)
{
    (void)state;
    int rc = cli_run("profile", "--quick --out x.table");
    cli_assert_one_line_error("profile", "--quick", rc, 2, "--model");
    rc = cli_run("profile", "--model gpt");
    cli_assert_one_line_error("profile", "--model gpt", rc, 2, "--out");
    rc = cli_run("profile", "--model gpt --max-rows 0 --out x.table");
    cli_assert_one_line_error("profile", "--max-rows 0", rc, 2, "--max-rows");
    rc = cli_run("profile", "--model gpt --sweeps 0 --out x.table");
    cli_assert_one_line_error("profile", "--sweeps 0", rc, 2, "--sweeps");
    rc = cli_run("profile", "--model t5 --model-config gpt-tiny --out x.table");
    cli_assert_one_line_error("profile", "t5 vs gpt-tiny", rc, 2, "does not match");
    char path[700], args[800];
    write_file("bad.table", "not a table\n", path, sizeof path);
    snprintf(args, sizeof args, "--model gpt --check %s", path);
    rc = cli_run("profile", args);
    cli_assert_one_line_error("profile", args, rc, 1, "not a cost table");
}

/* `dynapipe profile --model llama` writes a table whose model line is the
 * Llama shape (kv_heads and all), and `plan --cost-model` plans with it;
 * --check compares it with the analytic Llama model. */
static void test_cli_profile_llama(void **state)
{
    (void)state;
    char table[700], args[1200];
    snprintf(table, sizeof table, "%s/llama.table", dir);
    snprintf(args, sizeof args, "--model llama --max-seqlen 32 --max-rows 2 --quick --quiet --out %s", table);
    assert_int_equal(cli_run("profile", args), 0);
    char *text = slurp(table);
    assert_non_null(strstr(text, "model kind=llama n_layers=2 n_dec_layers=0 hidden=64 heads=4 head_dim=16 ffn=176 "
                                 "vocab=512 max_seqlen=32 kv_heads=2 tie_embeddings=0 qkv_bias=0"));
    assert_null(strstr(text, "point decoder"));
    free(text);
    dyn_error err;
    dyn_cost_model *cm = dyn_cost_model_load_table(table, &err);
    if (cm == NULL) fail_msg("%s", err.msg);
    dyn_model_config want;
    small_cfg(DYN_MODEL_LLAMA, &want);
    want.max_seqlen = 32;
    assert_memory_equal(dyn_cost_model_config(cm), &want, sizeof want);
    dyn_cost_model_free(cm);
    snprintf(args, sizeof args,
             "--model llama --cost-model %s --synthetic flan:1 --global-batch-tokens 1024 --max-seqlen 32 --stages 2 "
             "--batches 1",
             table);
    assert_int_equal(cli_run("plan", args), 0);
    text = slurp(out_path);
    assert_non_null(strstr(text, "llama model (2 layers, hidden 64)"));
    free(text);
    snprintf(args, sizeof args, "--model gpt --cost-model %s --synthetic flan:1 --global-batch-tokens 1024 "
                                "--max-seqlen 32 --stages 2", table);
    cli_assert_one_line_error("plan", args, cli_run("plan", args), 2, "does not match");
    assert_int_equal(cli_run("profile", "--model llama --check analytic --max-seqlen 32 --max-rows 2 --shapes 2 "
                                        "--sweeps 1 --repeats 1 --quiet"),
                     0);
    text = slurp(out_path);
    assert_non_null(strstr(text, "encoder"));
    free(text);
}

static int setup(void **state)
{
    (void)state;
    return cli_setup_dir();
}

static int teardown(void **state)
{
    (void)state;
    return cli_teardown_dir();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep_point_settles),
        cmocka_unit_test(test_sweep_point_calm),
        cmocka_unit_test(test_profile_coarse_grid),
        cmocka_unit_test(test_profile_derive_full),
        cmocka_unit_test(test_profile_sum_planes_formula),
        cmocka_unit_test(test_profile_sum_planes_run),
        cmocka_unit_test(test_profile_gpt_small_grid),
        cmocka_unit_test(test_profile_t5_small_grid),
        cmocka_unit_test(test_profile_llama_small_grid),
        cmocka_unit_test(test_default_grid),
        cmocka_unit_test(test_stage_stored_gpt),
        cmocka_unit_test(test_stage_stored_t5),
        cmocka_unit_test(test_stage_stored_llama),
        cmocka_unit_test(test_calibration_median_and_threshold),
        cmocka_unit_test(test_calibration_converges),
        cmocka_unit_test(test_calibration_level_shift),
        cmocka_unit_test(test_cost_time_scale),
        cmocka_unit_test(test_cli_refuses_other_shape),
        cmocka_unit_test(test_cli_profile_flags),
        cmocka_unit_test(test_cli_profile_llama),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
