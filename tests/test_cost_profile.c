/* test_cost_profile.c — profile tables as `dynapipe profile` writes them:
 * interpolation exact at grid points and monotone between them, the
 * isotonic fit of noisy points, the profile line's round trip, refusal of
 * another model shape, and axes far longer than the old 23-value limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dynapipe/cost.h"         /* defines: dyn_cost_*, dyn_machine_builtin */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_preset */
#include "util/util.h"              /* defines: dyn_file_read_all, dyn_file_write_atomic */

static const char *tmp_path(const char *name)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "/tmp/dyn_test_cost_profile_%d_%s", (int)getpid(), name);
    return buf;
}

/* Deterministic uniform in [0, 1) (an LCG; the test needs no library RNG). */
static double unif(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (double)((*s >> 8) & 0xffffff) / 16777216.0;
}

static double get_value(const dyn_layer_cost *c, int v)
{
    const double a[8] = {c->fwd_ms,    c->bwd_ms,  c->bwd_input_ms, c->bwd_weight_ms,
                         c->stored_mb, c->peak_mb, c->output_mb,    c->kept_mb};
    return a[v];
}

/* Points with positive random increments along every axis (so monotone),
 * on a T5 grid with uneven spacing; written and loaded back. */
typedef struct synth {
    dyn_model_config cfg;
    dyn_cost_grid g;
    dyn_layer_cost *pts;
} synth;

static const int32_t S_ROWS[] = {1, 2, 3, 8, 9, 32};
static const int32_t S_ENC[] = {8, 16, 24, 64, 200, 512};
static const int32_t S_DEC[] = {8, 40, 48, 128};

static void synth_make(synth *s, unsigned seed)
{
    assert_int_equal(dyn_model_config_preset("t5-tiny", &s->cfg, NULL), DYN_OK);
    s->g = (dyn_cost_grid){6, 6, 4, S_ROWS, S_ENC, S_DEC};
    int64_t gs = dyn_cost_grid_size(&s->g), total = gs * DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT;
    s->pts = calloc((size_t)total, sizeof *s->pts);
    assert_non_null(s->pts);
    for (int64_t p = 0; p < total; p++) {
        int64_t q = p % gs;
        int a = (int)(q / (6 * 4)), b = (int)(q / 4 % 6), c = (int)(q % 4);
        double v[8];
        for (int j = 0; j < 8; j++)
            v[j] = 0.1 * a * (1 + unif(&seed)) + 0.01 * S_ENC[b] * (1 + unif(&seed)) + 0.02 * S_DEC[c] +
                   0.001 * S_ROWS[a] * S_ENC[b] * S_DEC[c] * (1 + 0.1 * unif(&seed));
        /* make it monotone exactly: a running maximum over the three axes
         * (each factor above is increasing but the noise is not) */
        dyn_layer_cost *o = &s->pts[p];
        *o = (dyn_layer_cost){v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
        if (a > 0 || b > 0 || c > 0) {
            for (int j = 0; j < 8; j++) {
                double m = 0;
                if (a > 0) m = fmax(m, get_value(&s->pts[p - 24], j));
                if (b > 0) m = fmax(m, get_value(&s->pts[p - 4], j));
                if (c > 0) m = fmax(m, get_value(&s->pts[p - 1], j));
                v[j] = fmax(v[j], m + 0.001 * unif(&seed));
            }
            *o = (dyn_layer_cost){v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
        }
    }
}

static dyn_cost_model *synth_load(synth *s, const char *name)
{
    const char *path = tmp_path(name);
    double states[DYN_LAYER_KIND_COUNT] = {1, 2, 3, 4, 5};
    dyn_error err;
    if (dyn_cost_table_write(path, &s->cfg, dyn_machine_builtin("cpu"), states, &s->g, s->pts, &err) != DYN_OK)
        fail_msg("write: %s", err.msg);
    dyn_cost_model *cm = dyn_cost_model_load_table(path, &err);
    if (cm == NULL) fail_msg("load: %s", err.msg);
    unlink(path);
    return cm;
}

static dyn_layer_cost query(const dyn_cost_model *cm, int kind, int rc, int32_t r, int32_t e, int32_t d)
{
    dyn_mb_shape mb = {.rows = r, .enc_len = e, .dec_len = d};
    dyn_layer_cost c;
    dyn_error err;
    if (dyn_cost_layer(cm, (dyn_layer_kind)kind, &mb, (dyn_recompute)rc, &c, &err) != DYN_OK)
        fail_msg("query: %s", err.msg);
    return c;
}

static void test_interpolation_exact_at_grid_points(void **state)
{
    (void)state;
    synth s;
    synth_make(&s, 7);
    dyn_cost_model *cm = synth_load(&s, "exact.table");
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++)
        for (int rc = 0; rc < DYN_RECOMPUTE_COUNT; rc++)
            for (int a = 0; a < 6; a++)
                for (int b = 0; b < 6; b++)
                    for (int c = 0; c < 4; c++) {
                        dyn_layer_cost got = query(cm, k, rc, S_ROWS[a], S_ENC[b], S_DEC[c]);
                        const dyn_layer_cost *want =
                            &s.pts[dyn_cost_grid_index(&s.g, (dyn_layer_kind)k, (dyn_recompute)rc, a, b, c)];
                        for (int j = 0; j < 8; j++) assert_true(get_value(&got, j) == get_value(want, j));
                    }
    dyn_cost_model_free(cm);
    free(s.pts);
}

/* Every integer step along each axis, inside and past the grid, never
 * decreases any value. */
static void test_interpolation_monotone_between_points(void **state)
{
    (void)state;
    synth s;
    synth_make(&s, 11);
    dyn_cost_model *cm = synth_load(&s, "mono.table");
    int32_t fixed_r[] = {1, 5, 20, 40}, fixed_e[] = {8, 100, 300, 700}, fixed_d[] = {1, 44, 90, 200};
    for (int k = 1; k < DYN_LAYER_KIND_COUNT; k++)
        for (int f1 = 0; f1 < 4; f1++)
            for (int f2 = 0; f2 < 4; f2++) {
                dyn_layer_cost prev[3];
                for (int32_t x = 1; x <= 700; x++) {
                    dyn_layer_cost now[3] = {
                        query(cm, k, DYN_RECOMPUTE_NONE, x > 40 ? 40 : x, fixed_e[f1], fixed_d[f2]),
                        query(cm, k, DYN_RECOMPUTE_NONE, fixed_r[f1], x, fixed_d[f2]),
                        query(cm, k, DYN_RECOMPUTE_NONE, fixed_r[f1], fixed_e[f2], x > 200 ? 200 : x)};
                    if (x > 1)
                        for (int ax = 0; ax < 3; ax++)
                            for (int j = 0; j < 8; j++)
                                if (get_value(&now[ax], j) < get_value(&prev[ax], j) - 1e-12)
                                    fail_msg("kind %d axis %d value %d decreases at %d", k, ax, j, x);
                    memcpy(prev, now, sizeof prev);
                }
            }
    dyn_cost_model_free(cm);
    free(s.pts);
}

/* Noisy points: the loaded table is monotone, and the isotonic fit is the
 * least-squares one (hand-worked: 3 1 2 -> 2 2 2; 1 4 2 3 -> 1 3 3 3). */
static void test_noisy_points_are_fitted_monotone(void **state)
{
    (void)state;
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("gpt-tiny", &cfg, NULL), DYN_OK);
    int32_t rows[1] = {1}, enc[4] = {8, 16, 32, 64}, dec[1] = {0};
    dyn_cost_grid g = {1, 4, 1, rows, enc, dec};
    dyn_layer_cost pts[DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT * 4];
    memset(pts, 0, sizeof pts);
    const double fwd[4] = {3, 1, 2, 5}, bwd[4] = {1, 4, 2, 3};
    for (int k = 0; k < DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT; k++)
        for (int b = 0; b < 4; b++) pts[k * 4 + b].fwd_ms = fwd[b], pts[k * 4 + b].bwd_ms = bwd[b];
    double states[DYN_LAYER_KIND_COUNT] = {0};
    const char *path = tmp_path("noisy.table");
    assert_int_equal(dyn_cost_table_write(path, &cfg, dyn_machine_builtin("cpu"), states, &g, pts, NULL), DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_load_table(path, NULL);
    assert_non_null(cm);
    unlink(path);
    const double want_f[4] = {2, 2, 2, 5}, want_b[4] = {1, 3, 3, 3};
    for (int b = 0; b < 4; b++) {
        dyn_layer_cost c = query(cm, DYN_LAYER_ENCODER, DYN_RECOMPUTE_SELECTIVE, 1, enc[b], 0);
        assert_true(fabs(c.fwd_ms - want_f[b]) < 1e-12);
        assert_true(fabs(c.bwd_ms - want_b[b]) < 1e-12);
    }
    dyn_cost_model_free(cm);
}

/* A profile (with its profile line) reads back point for point; a model of
 * another shape is refused with a message naming both shapes. */
static void test_profile_round_trip_and_shape_refused(void **state)
{
    (void)state;
    synth s;
    synth_make(&s, 3);
    dyn_profile_meta meta = {.threads = 2, .repeats = 5, .optimizer_ms_per_mparam = 2.5};
    snprintf(meta.host, sizeof meta.host, "box-1");
    snprintf(meta.cpu, sizeof meta.cpu, "Some CPU @ 2.0GHz");
    snprintf(meta.dtype, sizeof meta.dtype, "fp32");
    const char *path = tmp_path("meta.table");
    double states[DYN_LAYER_KIND_COUNT] = {1, 2, 3, 4, 5};
    dyn_error err;
    assert_int_equal(dyn_cost_table_write_profile(path, &s.cfg, dyn_machine_builtin("cpu"), states, &s.g, s.pts,
                                                  &meta, &err), DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_load_table(path, &err);
    if (cm == NULL) fail_msg("load: %s", err.msg);
    dyn_profile_meta got;
    assert_int_equal(dyn_cost_model_profile_meta(cm, &got), 1);
    assert_string_equal(got.host, "box-1");
    assert_string_equal(got.cpu, "Some_CPU_@_2.0GHz");
    assert_string_equal(got.dtype, "fp32");
    assert_int_equal(got.threads, 2);
    assert_int_equal(got.repeats, 5);
    assert_true(got.optimizer_ms_per_mparam == 2.5);
    assert_true(fabs(dyn_cost_optimizer_ms(cm, 3e6) - 7.5) < 1e-12); /* measured, not from mem_gbps */
    int32_t mr, me, md;
    assert_int_equal(dyn_cost_model_grid_max(cm, &mr, &me, &md), 1);
    assert_int_equal(mr, 32);
    assert_int_equal(me, 512);
    assert_int_equal(md, 128);
    for (int64_t p = 0; p < dyn_cost_grid_size(&s.g); p++) {
        int a = (int)(p / 24), b = (int)(p / 4 % 6), c = (int)(p % 4);
        dyn_layer_cost q = query(cm, DYN_LAYER_DECODER, DYN_RECOMPUTE_FULL, S_ROWS[a], S_ENC[b], S_DEC[c]);
        const dyn_layer_cost *w = &s.pts[dyn_cost_grid_index(&s.g, DYN_LAYER_DECODER, DYN_RECOMPUTE_FULL, a, b, c)];
        assert_memory_equal(&q, w, sizeof q);
    }
    assert_int_equal(dyn_cost_model_check_shape(cm, &s.cfg, &err), DYN_OK);
    dyn_model_config other = s.cfg;
    other.hidden *= 2;
    assert_int_equal(dyn_cost_model_check_shape(cm, &other, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "another shape"));
    dyn_model_config gpt;
    assert_int_equal(dyn_model_config_preset("gpt-tiny", &gpt, NULL), DYN_OK);
    assert_int_equal(dyn_cost_model_check_shape(cm, &gpt, &err), DYN_ERR_INVALID_ARG);
    dyn_cost_model_free(cm);
    /* an analytic model has no profile and no grid */
    cm = dyn_cost_model_create_analytic(&gpt, dyn_machine_builtin("cpu"), NULL);
    assert_int_equal(dyn_cost_model_profile_meta(cm, &got), 0);
    assert_int_equal(dyn_cost_model_grid_max(cm, &mr, &me, &md), 0);
    dyn_cost_model_free(cm);
    /* a table written before kept_mb and the optimizer figure (7 values a
     * point, no optimizer key) loads, with both 0 */
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(dyn_file_read_all(path, &text, &len, &err), DYN_OK);
    char *old = malloc(len + 1);
    assert_non_null(old);
    size_t n = 0;
    for (char *line = text; line < text + len;) {
        char *eol = memchr(line, '\n', (size_t)(text + len - line));
        size_t l = eol ? (size_t)(eol - line) : (size_t)(text + len - line);
        char *next = eol ? eol + 1 : text + len;
        if (strncmp(line, "point ", 6) == 0) {
            while (l > 0 && line[l - 1] != ' ') l--; /* drop the last value */
            l--;
        } else if (strncmp(line, "profile ", 8) == 0) {
            char *k = strstr(line, " optimizer_ms_per_mparam=");
            assert_true(k != NULL && k < line + l);
            l = (size_t)(k - line);
        }
        memcpy(old + n, line, l);
        n += l;
        old[n++] = '\n';
        line = next;
    }
    assert_int_equal(dyn_file_write_atomic(path, old, n, &err), DYN_OK);
    free(text);
    free(old);
    cm = dyn_cost_model_load_table(path, &err);
    if (cm == NULL) fail_msg("old table: %s", err.msg);
    dyn_layer_cost q = query(cm, DYN_LAYER_ENCODER, DYN_RECOMPUTE_NONE, S_ROWS[1], S_ENC[2], S_DEC[1]);
    const dyn_layer_cost *w = &s.pts[dyn_cost_grid_index(&s.g, DYN_LAYER_ENCODER, DYN_RECOMPUTE_NONE, 1, 2, 1)];
    assert_true(q.kept_mb == 0.0 && q.stored_mb == w->stored_mb);
    assert_int_equal(dyn_cost_model_profile_meta(cm, &got), 1);
    assert_true(got.optimizer_ms_per_mparam == 0.0);
    dyn_cost_model_free(cm);
    unlink(path);
    free(s.pts);
}

/* 600 values on an axis (the old reader stopped at 23): each axis in turn,
 * values read back exactly at the far end. */
static void test_long_axes_load(void **state)
{
    (void)state;
    enum { N = 600 };
    int32_t *ax = malloc(N * sizeof *ax);
    assert_non_null(ax);
    for (int i = 0; i < N; i++) ax[i] = 8 * (i + 1);
    for (int which = 0; which < 3; which++) {
        dyn_model_config cfg;
        assert_int_equal(dyn_model_config_preset(which == 2 ? "t5-tiny" : "gpt-tiny", &cfg, NULL), DYN_OK);
        int32_t one[1] = {8}, zero[1] = {0};
        dyn_cost_grid g = {which == 0 ? N : 1, which == 1 ? N : 1, which == 2 ? N : 1, which == 0 ? ax : one,
                           which == 1 ? ax : one, which == 2 ? ax : (cfg.kind == DYN_MODEL_GPT ? zero : one)};
        int64_t gs = dyn_cost_grid_size(&g), total = gs * DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT;
        dyn_layer_cost *pts = calloc((size_t)total, sizeof *pts);
        assert_non_null(pts);
        for (int64_t p = 0; p < total; p++) pts[p].fwd_ms = 0.5 * (double)(p % gs) + 1.0;
        const char *path = tmp_path("long.table");
        double states[DYN_LAYER_KIND_COUNT] = {0};
        dyn_error err;
        if (dyn_cost_table_write(path, &cfg, dyn_machine_builtin("cpu"), states, &g, pts, &err) != DYN_OK)
            fail_msg("write: %s", err.msg);
        dyn_cost_model *cm = dyn_cost_model_load_table(path, &err);
        if (cm == NULL) fail_msg("load axis %d: %s", which, err.msg);
        int32_t x = ax[N - 1], x2 = ax[N / 2] + 4; /* the last point, and halfway between two */
        dyn_layer_cost c = query(cm, DYN_LAYER_ENCODER, 0, which == 0 ? x : 8, which == 1 ? x : 8, which == 2 ? x : 8);
        assert_true(c.fwd_ms == 0.5 * (N - 1) + 1.0);
        c = query(cm, DYN_LAYER_ENCODER, 0, which == 0 ? x2 : 8, which == 1 ? x2 : 8, which == 2 ? x2 : 8);
        assert_true(fabs(c.fwd_ms - (0.5 * (N / 2) + 1.25)) < 1e-12);
        dyn_cost_model_free(cm);
        unlink(path);
        free(pts);
    }
    free(ax);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interpolation_exact_at_grid_points),
        cmocka_unit_test(test_interpolation_monotone_between_points),
        cmocka_unit_test(test_noisy_points_are_fitted_monotone),
        cmocka_unit_test(test_profile_round_trip_and_shape_refused),
        cmocka_unit_test(test_long_axes_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
