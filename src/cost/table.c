/* table.c — the profile-table cost model: measured points over a grid
 * (micro-batch rows x input length x target length, per layer kind and
 * recompute mode), read from a text file and interpolated multilinearly.
 *
 * Interpolation: along each axis find the grid interval holding the query
 * (binary search) and its fractional position t; the value is the usual
 * multilinear blend of the 2^k corners (weights in [0, 1], so the result is
 * never negative). Axes may have any number of values
 * (an exact table over every multiple of 8 up to 4096 has 512); the reader
 * allocates what the file needs.
 *
 * Monotone: the planner assumes costs non-decreasing in rows and lengths
 * (dyn_mb_cost_fn), and a multilinear blend of points that are
 * non-decreasing along every axis is itself non-decreasing along every axis
 * (along one axis it is (1-t)·A + t·B with A <= B). Measured points are
 * noisy, so every value of every (kind, recompute) slice is made
 * non-decreasing along each axis in turn by isotonic regression (pool
 * adjacent violators, least squares), by the profiler before writing and by
 * the reader after loading (a no-op on a table that already is). Isotonic
 * regression maps pointwise-ordered inputs to ordered outputs, so fitting a
 * later axis keeps the earlier axes monotone.
 *
 * Outside the grid the query is clamped to the grid on that axis and the result scaled by
 * x / (the axis' last value) past its end, x / (its first value) before its
 * start: proportional extrapolation, a product of non-negative
 * non-decreasing factors, so it stays monotone in every axis (linear
 * extrapolation from the last interval does not: its slope along one axis
 * may fall as another grows). Costs grow about linearly in rows and at
 * least linearly in lengths, so past the grid the rule is close in rows and
 * a lower bound in lengths (attention is quadratic); callers warn once when
 * a run's lengths leave the grid (dyn_cost_model_grid_max). An axis with a
 * single point (GPT's dec_len axis, {0}) is constant. A multilinear function
 * sampled on the grid is reproduced exactly inside it.
 *
 * The table ignores the *_attn fields of a shape (document-masked attention):
 * it was measured on dense rows, so it answers for dense rows. The file
 * format is in docs/cost-model.md; dyn_cost_table_write writes it. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost/cost_internal.h"
#include "dynapipe/model_config.h" /* defines: dyn_model_config_validate, dyn_machine_validate */
#include "util/util.h"             /* defines: dyn_calloc, DYN_RESERVE, dyn_file_read_all, dyn_atomic_* */

#define TABLE_MAGIC "dynapipe-cost-table"
#define TABLE_VERSION DYN_COST_TABLE_VERSION /* cost.h: which older ones load */
#define N_VALUES 8 /* fwd bwd bwd_input bwd_weight stored peak output kept (optional on read) */

/* The point line's value columns, in file order (the header's names). */
static const char *const value_names[N_VALUES] = {"fwd_ms", "bwd_ms", "bwd_input_ms", "bwd_weight_ms",
                                                  "stored_mb", "peak_mb", "output_mb", "kept_mb"};

int64_t dyn_cost_grid_size(const dyn_cost_grid *g)
{
    return (int64_t)g->n_rows * g->n_enc * g->n_dec;
}

int64_t dyn_cost_grid_index(const dyn_cost_grid *g, dyn_layer_kind kind, dyn_recompute rc,
                            int32_t i_rows, int32_t i_enc, int32_t i_dec)
{
    return ((((int64_t)kind * DYN_RECOMPUTE_COUNT + rc) * g->n_rows + i_rows) * g->n_enc + i_enc) *
               g->n_dec + i_dec;
}

static void cost_to_values(const dyn_layer_cost *c, double v[N_VALUES])
{
    v[0] = c->fwd_ms, v[1] = c->bwd_ms, v[2] = c->bwd_input_ms, v[3] = c->bwd_weight_ms;
    v[4] = c->stored_mb, v[5] = c->peak_mb, v[6] = c->output_mb, v[7] = c->kept_mb;
}

static void values_to_cost(const double v[N_VALUES], dyn_layer_cost *c)
{
    c->fwd_ms = v[0], c->bwd_ms = v[1], c->bwd_input_ms = v[2], c->bwd_weight_ms = v[3];
    c->stored_mb = v[4], c->peak_mb = v[5], c->output_mb = v[6], c->kept_mb = v[7];
}

/* ---- lookup ---------------------------------------------------------------- */

/* Interval [i0, i0+1] of axis ax (n points, increasing) holding x clamped
 * to the grid, the position t in [0, 1] of the clamped x in it, and the
 * extrapolation factor: x / (last value) past the grid, x / (first value)
 * before it, 1 inside. A single-point axis is constant (factor 1). */
static void axis_locate(const int32_t *ax, int32_t n, double x, int32_t *i0, double *t, double *factor)
{
    *factor = 1.0;
    if (n == 1) {
        *i0 = 0;
        *t = 0.0;
        return;
    }
    if (x > ax[n - 1]) {
        *factor = x / ax[n - 1];
        x = ax[n - 1];
    } else if (x < ax[0]) {
        *factor = x / ax[0];
        x = ax[0];
    }
    int32_t lo = 0, hi = n - 1;
    while (hi - lo > 1) {
        int32_t mid = lo + (hi - lo) / 2;
        if (ax[mid] <= x) lo = mid;
        else hi = mid;
    }
    *i0 = lo;
    *t = (x - ax[lo]) / (double)(ax[lo + 1] - ax[lo]);
}

void cost_table_layer(const struct dyn_cost_model *cm, dyn_layer_kind kind, const dyn_mb_shape *mb,
                     dyn_recompute rc, dyn_layer_cost *out)
{
    dyn_cost_grid g = {cm->n_rows, cm->n_enc, cm->n_dec, cm->rows, cm->enc_len, cm->dec_len};
    int32_t i[3];
    double t[3], f[3];
    axis_locate(cm->rows, cm->n_rows, mb->rows, &i[0], &t[0], &f[0]);
    axis_locate(cm->enc_len, cm->n_enc, mb->enc_len, &i[1], &t[1], &f[1]);
    axis_locate(cm->dec_len, cm->n_dec, cm->cfg.kind == DYN_MODEL_T5 ? mb->dec_len : 0, &i[2], &t[2], &f[2]);
    int32_t n_ax[3] = {cm->n_rows, cm->n_enc, cm->n_dec};
    double acc[N_VALUES] = {0};
    for (int corner = 0; corner < 8; corner++) {
        double w = 1.0;
        int32_t j[3];
        int skip = 0;
        for (int a = 0; a < 3; a++) {
            int hi = (corner >> a) & 1;
            if (n_ax[a] == 1 && hi) skip = 1; /* a constant axis has one corner */
            j[a] = i[a] + hi;
            w *= n_ax[a] == 1 ? 1.0 : (hi ? t[a] : 1.0 - t[a]);
        }
        if (skip || w == 0.0) continue;
        double v[N_VALUES];
        cost_to_values(&cm->points[dyn_cost_grid_index(&g, kind, rc, j[0], j[1], j[2])], v);
        for (int k = 0; k < N_VALUES; k++) acc[k] += w * v[k];
    }
    double scale = f[0] * f[1] * f[2];
    for (int k = 0; k < N_VALUES; k++) acc[k] *= scale;
    values_to_cost(acc, out);
}

/* ---- checks shared by reader and writer ------------------------------------ */

static dyn_status check_axis(const char *what, const int32_t *ax, int32_t n, int32_t min,
                             dyn_error *err)
{
    if (n < 1) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s axis is empty", what);
    for (int32_t i = 0; i < n; i++) {
        if (ax[i] < min)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s axis value %d is below %d", what, ax[i], min);
        if (i > 0 && ax[i] <= ax[i - 1])
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s axis is not strictly increasing (%d after %d)",
                                 what, ax[i], ax[i - 1]);
    }
    return DYN_OK;
}

/* Axis a of the grid (0 rows, 1 enc_len, 2 dec_len): rows and enc_len
 * values >= 1; decoder-only (GPT, Llama): dec_len exactly {0}; T5: values
 * >= 1. */
static dyn_status check_grid_axis(const dyn_model_config *cfg, const dyn_cost_grid *g, int a, dyn_error *err)
{
    if (a == 0) return check_axis("rows", g->rows, g->n_rows, 1, err);
    if (a == 1) return check_axis("enc_len", g->enc_len, g->n_enc, 1, err);
    if (dyn_model_kind_decoder_only(cfg->kind)) {
        if (g->n_dec != 1 || g->dec_len[0] != 0)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "dec_len axis of a %s table must be the single value 0",
                                 dyn_model_kind_name(cfg->kind));
        return DYN_OK;
    }
    return check_axis("dec_len", g->dec_len, g->n_dec, 1, err);
}

static dyn_status check_grid(const dyn_model_config *cfg, const dyn_cost_grid *g, dyn_error *err)
{
    dyn_status st = DYN_OK;
    for (int a = 0; a < 3 && st == DYN_OK; a++) st = check_grid_axis(cfg, g, a, err);
    return st;
}

/* ---- monotone points --------------------------------------------------------- */

/* Least-squares non-decreasing fit of y[0..n) in place (pool adjacent
 * violators): blocks of equal fitted value, merged while a block's mean is
 * below its left neighbour's. lvl/wt/len are scratch of n entries. */
static void isotonic_fit(double *y, int32_t n, double *lvl, double *wt, int32_t *len)
{
    int32_t nb = 0;
    for (int32_t i = 0; i < n; i++) {
        lvl[nb] = y[i], wt[nb] = 1.0, len[nb] = 1;
        nb++;
        while (nb > 1 && lvl[nb - 2] > lvl[nb - 1]) {
            double w = wt[nb - 2] + wt[nb - 1];
            lvl[nb - 2] = (lvl[nb - 2] * wt[nb - 2] + lvl[nb - 1] * wt[nb - 1]) / w;
            wt[nb - 2] = w;
            len[nb - 2] += len[nb - 1];
            nb--;
        }
    }
    for (int32_t b = 0, i = 0; b < nb; b++)
        for (int32_t k = 0; k < len[b]; k++) y[i++] = lvl[b];
}

/* One value (0..N_VALUES-1) of the points p[base + i*stride], i < n. */
static double value_get(const dyn_layer_cost *c, int v)
{
    double a[N_VALUES];
    cost_to_values(c, a);
    return a[v];
}

static void value_set(dyn_layer_cost *c, int v, double x)
{
    double a[N_VALUES];
    cost_to_values(c, a);
    a[v] = x;
    values_to_cost(a, c);
}

dyn_status dyn_cost_points_make_monotone(const dyn_model_config *cfg, const dyn_cost_grid *g,
                                         dyn_layer_cost *points, dyn_error *err)
{
    int32_t nmax = g->n_rows > g->n_enc ? g->n_rows : g->n_enc;
    if (g->n_dec > nmax) nmax = g->n_dec;
    double *y = dyn_calloc((size_t)nmax * 3, sizeof *y, "isotonic fit", err);
    int32_t *len = dyn_calloc((size_t)nmax, sizeof *len, "isotonic fit", err);
    if (y == NULL || len == NULL) {
        free(y);
        free(len);
        return DYN_ERR_NOMEM;
    }
    const int32_t n_ax[3] = {g->n_rows, g->n_enc, g->n_dec};
    const int64_t stride[3] = {(int64_t)g->n_enc * g->n_dec, g->n_dec, 1};
    int64_t gs = dyn_cost_grid_size(g);
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        if (!dyn_cost_kind_present(cfg, (dyn_layer_kind)k)) continue;
        for (int rc = 0; rc < DYN_RECOMPUTE_COUNT; rc++) {
            dyn_layer_cost *slice = points + dyn_cost_grid_index(g, (dyn_layer_kind)k, (dyn_recompute)rc, 0, 0, 0);
            for (int a = 0; a < 3; a++) {
                if (n_ax[a] < 2) continue;
                /* every line along axis a: the start points are those with index 0 on a */
                for (int64_t p0 = 0; p0 < gs; p0++) {
                    if ((p0 / stride[a]) % n_ax[a] != 0) continue;
                    for (int v = 0; v < N_VALUES; v++) {
                        for (int32_t i = 0; i < n_ax[a]; i++) y[i] = value_get(&slice[p0 + i * stride[a]], v);
                        isotonic_fit(y, n_ax[a], y + nmax, y + 2 * (size_t)nmax, len);
                        for (int32_t i = 0; i < n_ax[a]; i++) value_set(&slice[p0 + i * stride[a]], v, y[i]);
                    }
                }
            }
        }
    }
    free(y);
    free(len);
    return DYN_OK;
}

/* ---- writer ---------------------------------------------------------------- */

static void write_axis(FILE *fp, const char *name, const int32_t *ax, int32_t n)
{
    fprintf(fp, "%s", name);
    for (int32_t i = 0; i < n; i++) fprintf(fp, " %d", ax[i]);
    fprintf(fp, "\n");
}

/* A name for the profile line: blanks (a CPU model has them) become '_',
 * and an empty or over-long one is cut or marked, so the line reads back. */
static void meta_word(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    for (; src[n] && n + 1 < cap; n++) dst[n] = (src[n] == ' ' || src[n] == '\t' || src[n] == '=') ? '_' : src[n];
    dst[n] = '\0';
    if (n == 0) snprintf(dst, cap, "unknown");
}

dyn_status dyn_cost_table_write(const char *path, const dyn_model_config *cfg, const dyn_machine *m,
                                const double states_mb[DYN_LAYER_KIND_COUNT], const dyn_cost_grid *grid,
                                const dyn_layer_cost *points, dyn_error *err)
{
    return dyn_cost_table_write_profile(path, cfg, m, states_mb, grid, points, NULL, err);
}

/* What the writer refuses: a bad model, machine or grid, and any states or
 * point value the reader would not accept. */
static dyn_status table_check(const dyn_model_config *cfg, const dyn_machine *m,
                              const double states_mb[DYN_LAYER_KIND_COUNT], const dyn_cost_grid *grid,
                              const dyn_layer_cost *points, dyn_error *err)
{
    dyn_status st;
    if ((st = dyn_model_config_validate(cfg, err)) != DYN_OK) return st;
    if ((st = dyn_machine_validate(m, err)) != DYN_OK) return st;
    if ((st = check_grid(cfg, grid, err)) != DYN_OK) return st;
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++)
        if (!(states_mb[k] >= 0) || !(states_mb[k] <= DYN_COST_VALUE_MAX))
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "cost table: states_mb of %s is %g (need 0 .. %g)",
                                 dyn_layer_kind_name((dyn_layer_kind)k), states_mb[k], DYN_COST_VALUE_MAX);
    int64_t gs = dyn_cost_grid_size(grid);
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        if (!dyn_cost_kind_present(cfg, (dyn_layer_kind)k)) continue;
        for (int64_t p = (int64_t)k * DYN_RECOMPUTE_COUNT * gs; p < (int64_t)(k + 1) * DYN_RECOMPUTE_COUNT * gs; p++) {
            double v[N_VALUES];
            cost_to_values(&points[p], v);
            for (int j = 0; j < N_VALUES; j++)
                if (!(v[j] >= 0) || !(v[j] <= DYN_COST_VALUE_MAX)) /* what the reader accepts */
                    return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                         "cost table: point %lld of %s has %s %g (need 0 .. %g)", (long long)p,
                                         dyn_layer_kind_name((dyn_layer_kind)k), value_names[j], v[j],
                                         DYN_COST_VALUE_MAX);
        }
    }
    return DYN_OK;
}

/* The table's header lines: magic and version, model, machine, the
 * profile's provenance (meta may be NULL), states and the grid's axes. */
static void table_write_header(FILE *fp, const dyn_model_config *cfg, const dyn_machine *m,
                               const double states_mb[DYN_LAYER_KIND_COUNT], const dyn_cost_grid *grid,
                               const dyn_profile_meta *meta)
{
    fprintf(fp, "%s %d\n", TABLE_MAGIC, TABLE_VERSION);
    fprintf(fp, "# written by dynapipe; format: docs/cost-model.md\n");
    fprintf(fp, "model kind=%s n_layers=%d n_dec_layers=%d hidden=%d heads=%d head_dim=%d ffn=%d vocab=%d max_seqlen=%d",
            dyn_model_kind_name(cfg->kind), cfg->n_layers, cfg->n_dec_layers, cfg->hidden, cfg->heads,
            cfg->head_dim, cfg->ffn, cfg->vocab, cfg->max_seqlen);
    if (cfg->kind == DYN_MODEL_LLAMA) { /* the rest of a Llama shape */
        fprintf(fp, " kv_heads=%d tie_embeddings=%d qkv_bias=%d rope_theta=%.17g rms_eps=%.17g rope_scaling=%d",
                cfg->kv_heads, cfg->tie_embeddings, cfg->qkv_bias, cfg->rope_theta, cfg->rms_eps, cfg->rope_scaling);
        if (cfg->rope_scaling != DYN_ROPE_NONE)
            fprintf(fp, " rope_factor=%.17g rope_low_freq=%.17g rope_high_freq=%.17g rope_orig_ctx=%d",
                    cfg->rope_factor, cfg->rope_low_freq, cfg->rope_high_freq, cfg->rope_orig_ctx);
    }
    fprintf(fp, "\n");
    fprintf(fp, "machine name=%s matmul_gflops=%.17g attn_gflops=%.17g mem_gbps=%.17g bytes_per_elem=%d "
                "device_memory_mb=%.17g link_latency_ms=%.17g link_gbps=%.17g dp_link_gbps=%.17g "
                "gemm_n_half=%.17g layer_overhead_ms=%.17g optimizer_ms_per_mparam=%.17g\n",
            m->name, m->matmul_gflops, m->attn_gflops, m->mem_gbps, m->bytes_per_elem, m->device_memory_mb,
            m->link_latency_ms, m->link_gbps, m->dp_link_gbps, m->gemm_n_half, m->layer_overhead_ms,
            m->optimizer_ms_per_mparam);
    if (meta != NULL) {
        char host[64], cpu[64], dtype[64];
        meta_word(host, sizeof host, meta->host);
        meta_word(cpu, sizeof cpu, meta->cpu);
        meta_word(dtype, sizeof dtype, meta->dtype);
        fprintf(fp, "profile host=%s cpu=%s dtype=%s threads=%d repeats=%d", host, cpu, dtype, meta->threads,
                meta->repeats);
        if (meta->optimizer_ms_per_mparam > 0) fprintf(fp, " optimizer_ms_per_mparam=%.17g", meta->optimizer_ms_per_mparam);
        fprintf(fp, "\n");
    }
    fprintf(fp, "states_mb embed=%.17g encoder=%.17g decoder=%.17g lm_head=%.17g", states_mb[0], states_mb[1],
            states_mb[2], states_mb[3]);
    if (dyn_cost_kind_present(cfg, DYN_LAYER_BRIDGE)) fprintf(fp, " bridge=%.17g", states_mb[DYN_LAYER_BRIDGE]);
    fprintf(fp, "\n");
    write_axis(fp, "rows", grid->rows, grid->n_rows);
    write_axis(fp, "enc_len", grid->enc_len, grid->n_enc);
    write_axis(fp, "dec_len", grid->dec_len, grid->n_dec);
}

/* One line per point: every kind the model has, every recompute mode,
 * every grid shape. */
static void table_write_points(FILE *fp, const dyn_model_config *cfg, const dyn_cost_grid *grid,
                               const dyn_layer_cost *points)
{
    fprintf(fp, "# point kind recompute rows enc_len dec_len fwd_ms bwd_ms bwd_input_ms bwd_weight_ms "
                "stored_mb peak_mb output_mb kept_mb\n");
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        if (!dyn_cost_kind_present(cfg, (dyn_layer_kind)k)) continue;
        for (int rc = 0; rc < DYN_RECOMPUTE_COUNT; rc++)
            for (int32_t a = 0; a < grid->n_rows; a++)
                for (int32_t b = 0; b < grid->n_enc; b++)
                    for (int32_t c = 0; c < grid->n_dec; c++) {
                        double v[N_VALUES];
                        cost_to_values(&points[dyn_cost_grid_index(grid, (dyn_layer_kind)k, (dyn_recompute)rc, a, b, c)], v);
                        fprintf(fp, "point %s %s %d %d %d", dyn_layer_kind_name((dyn_layer_kind)k),
                                dyn_recompute_name((dyn_recompute)rc), grid->rows[a], grid->enc_len[b],
                                grid->dec_len[c]);
                        for (int j = 0; j < N_VALUES; j++) fprintf(fp, " %.17g", v[j]);
                        fprintf(fp, "\n");
                    }
    }
}

dyn_status dyn_cost_table_write_profile(const char *path, const dyn_model_config *cfg, const dyn_machine *m,
                                        const double states_mb[DYN_LAYER_KIND_COUNT], const dyn_cost_grid *grid,
                                        const dyn_layer_cost *points, const dyn_profile_meta *meta,
                                        dyn_error *err)
{
    dyn_status st = table_check(cfg, m, states_mb, grid, points, err);
    if (st != DYN_OK) return st;
    dyn_atomic_file af;
    if ((st = dyn_atomic_open(&af, path, err)) != DYN_OK) return st;
    table_write_header(af.fp, cfg, m, states_mb, grid, meta);
    table_write_points(af.fp, cfg, grid, points);
    if (ferror(af.fp)) {
        dyn_atomic_abort(&af);
        return dyn_error_set(err, DYN_ERR_IO, "%s: write error", path);
    }
    return dyn_atomic_commit(&af, err);
}

dyn_status dyn_cost_table_write_from_model(const char *path, const dyn_cost_model *cm,
                                           const dyn_cost_grid *grid, dyn_error *err)
{
    dyn_status st = check_grid(&cm->cfg, grid, err);
    if (st != DYN_OK) return st;
    int64_t gs = dyn_cost_grid_size(grid);
    dyn_layer_cost *pts = dyn_calloc((size_t)(gs * DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT), sizeof *pts,
                                     "cost table points", err);
    if (pts == NULL) return DYN_ERR_NOMEM;
    for (int k = 0; k < DYN_LAYER_KIND_COUNT && st == DYN_OK; k++) {
        if (!dyn_cost_kind_present(&cm->cfg, (dyn_layer_kind)k)) continue;
        for (int rc = 0; rc < DYN_RECOMPUTE_COUNT && st == DYN_OK; rc++)
            for (int32_t a = 0; a < grid->n_rows && st == DYN_OK; a++)
                for (int32_t b = 0; b < grid->n_enc && st == DYN_OK; b++)
                    for (int32_t c = 0; c < grid->n_dec && st == DYN_OK; c++) {
                        dyn_mb_shape mb = {.rows = grid->rows[a], .enc_len = grid->enc_len[b],
                                           .dec_len = grid->dec_len[c]};
                        st = dyn_cost_layer(cm, (dyn_layer_kind)k, &mb, (dyn_recompute)rc,
                                            &pts[dyn_cost_grid_index(grid, (dyn_layer_kind)k, (dyn_recompute)rc, a, b, c)],
                                            err);
                    }
    }
    if (st == DYN_OK) st = dyn_cost_table_write(path, &cm->cfg, &cm->machine, cm->states_mb, grid, pts, err);
    free(pts);
    return st;
}

/* ---- reader ---------------------------------------------------------------- */

typedef struct reader {
    const char *path;
    int line;
    dyn_error *err;
} reader;

static dyn_status rd_fail(reader *r, const char *what, const char *detail)
{
    return dyn_error_set(r->err, DYN_ERR_PARSE, "%s:%d: %s%s%s", r->path, r->line, what,
                         detail ? ": " : "", detail ? detail : "");
}

/* A time (ms) or size (MB) field: a finite number in [0, DYN_COST_VALUE_MAX],
 * so that sums over a plan stay finite. On failure one line names the line,
 * the field and the text as written. */
static dyn_status parse_cost_value(reader *r, const char *field, const char *text, double *out)
{
    double v;
    const char *why = NULL;
    if (dyn_parse_finite(text, &v) != 0) why = "is not a finite number";
    else if (v < 0) why = "is negative";
    else if (v > DYN_COST_VALUE_MAX) why = "is too large (at most " DYN_COST_VALUE_MAX_TEXT ")";
    if (why != NULL)
        return dyn_error_set(r->err, DYN_ERR_PARSE, "%s:%d: %s %s %s", r->path, r->line, field, text, why);
    *out = v;
    return DYN_OK;
}

static int parse_int(const char *s, int32_t *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE || v < INT32_MIN || v > INT32_MAX) return -1;
    *out = (int32_t)v;
    return 0;
}

/* Split a line in place into whitespace-separated tokens; returns count. */
static int tokenize(char *line, char **tok, int max)
{
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(line, " \t\r", &save); t; t = strtok_r(NULL, " \t\r", &save)) {
        if (n < max) tok[n] = t;
        n++;
    }
    return n;
}

/* One key=value field description for the model and machine lines. */
typedef struct kv_field {
    const char *key;
    char type; /* 'i' int32, 'd' double, 's' name (string into char[64]), 'k' model kind,
                * 'o' optional double, 'j' optional int32 (left as they are when absent) */
    void *dst;
} kv_field;

static dyn_status parse_kv(reader *r, char **tok, int ntok, kv_field *f, int nf, const char *line_name)
{
    int seen[32] = {0};
    if (nf > 32) return rd_fail(r, "internal: too many keys", line_name);
    for (int i = 0; i < ntok; i++) {
        char *eq = strchr(tok[i], '=');
        if (eq == NULL) return rd_fail(r, "expected key=value", tok[i]);
        *eq = '\0';
        const char *val = eq + 1;
        int j = 0;
        while (j < nf && strcmp(f[j].key, tok[i]) != 0) j++;
        if (j == nf) return rd_fail(r, "unknown key", tok[i]);
        if (seen[j]++) return rd_fail(r, "duplicate key", tok[i]);
        int bad = 0;
        switch (f[j].type) {
        case 'i':
        case 'j': bad = parse_int(val, f[j].dst) != 0; break;
        case 'd':
        case 'o': bad = dyn_parse_finite(val, f[j].dst) != 0; break;
        case 's':
            bad = strlen(val) == 0 || strlen(val) >= 64;
            if (!bad) snprintf(f[j].dst, 64, "%s", val);
            break;
        case 'k': bad = dyn_model_kind_parse(val, f[j].dst, NULL) != DYN_OK; break;
        }
        if (bad) return rd_fail(r, "bad value for key", f[j].key);
    }
    for (int j = 0; j < nf; j++)
        if (!seen[j] && f[j].type != 'o' && f[j].type != 'j') {
            char msg[128];
            snprintf(msg, sizeof msg, "%s line is missing key", line_name);
            return rd_fail(r, msg, f[j].key);
        }
    return DYN_OK;
}

static dyn_status parse_axis(reader *r, char **tok, int ntok, int32_t **ax, int32_t *n)
{
    if (*ax != NULL) return rd_fail(r, "axis given twice", NULL);
    if (ntok < 1) return rd_fail(r, "axis has no values", NULL);
    *ax = dyn_calloc((size_t)ntok, sizeof **ax, "cost table axis", r->err);
    if (*ax == NULL) return DYN_ERR_NOMEM;
    for (int i = 0; i < ntok; i++)
        if (parse_int(tok[i], &(*ax)[i]) != 0) return rd_fail(r, "axis value is not an integer", tok[i]);
    *n = ntok;
    return DYN_OK;
}

/* Index of v in axis ax (strictly increasing), or -1; binary search, so a
 * table with long axes loads in O(points log n). */
static int32_t axis_find(const int32_t *ax, int32_t n, int32_t v)
{
    int32_t lo = 0, hi = n - 1;
    while (lo <= hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (ax[mid] == v) return mid;
        if (ax[mid] < v) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* Fields of any line but an axis line (a point has 13, the machine line 12, a
 * Llama model line up to 20). */
#define MAX_TOKENS 24

/* The reader's state across the lines of one table. */
typedef struct table_parse {
    dyn_cost_model *cm;
    reader *r;
    int have_magic, have_model, have_machine, have_states;
    int32_t version;     /* the magic line's */
    int axis_line[3];    /* line of the rows, enc_len, dec_len axis: where its errors point */
    unsigned char *seen; /* [points] how often each point was given; NULL before the first */
    dyn_cost_grid g;     /* the grid, fixed at the first point */
} table_parse;

/* "dynapipe-cost-table 2" (or 1). */
static dyn_status parse_magic_line(table_parse *tp, char **tok, int ntok)
{
    int32_t ver;
    if (ntok != 2 || strcmp(tok[0], TABLE_MAGIC) != 0)
        return rd_fail(tp->r, "not a cost table (expected '" TABLE_MAGIC " 2')", NULL);
    if (parse_int(tok[1], &ver) != 0 || ver < 1 || ver > TABLE_VERSION)
        return rd_fail(tp->r, "unsupported cost table version", tok[1]);
    tp->version = ver;
    tp->have_magic = 1;
    return DYN_OK;
}

static dyn_status parse_model_line(table_parse *tp, char **tok, int ntok)
{
    dyn_model_config *cfg = &tp->cm->cfg;
    if (tp->have_model++) return rd_fail(tp->r, "model line given twice", NULL);
    kv_field f[] = {{"kind", 'k', &cfg->kind},         {"n_layers", 'i', &cfg->n_layers},
                    {"n_dec_layers", 'i', &cfg->n_dec_layers}, {"hidden", 'i', &cfg->hidden},
                    {"heads", 'i', &cfg->heads},       {"head_dim", 'i', &cfg->head_dim},
                    {"ffn", 'i', &cfg->ffn},           {"vocab", 'i', &cfg->vocab},
                    {"max_seqlen", 'i', &cfg->max_seqlen},
                    /* Llama only (written for Llama tables alone) */
                    {"kv_heads", 'j', &cfg->kv_heads}, {"tie_embeddings", 'j', &cfg->tie_embeddings},
                    {"qkv_bias", 'j', &cfg->qkv_bias}, {"rope_theta", 'o', &cfg->rope_theta},
                    {"rms_eps", 'o', &cfg->rms_eps},   {"rope_scaling", 'j', &cfg->rope_scaling},
                    {"rope_factor", 'o', &cfg->rope_factor}, {"rope_low_freq", 'o', &cfg->rope_low_freq},
                    {"rope_high_freq", 'o', &cfg->rope_high_freq}, {"rope_orig_ctx", 'j', &cfg->rope_orig_ctx}};
    dyn_status st = parse_kv(tp->r, tok + 1, ntok - 1, f, (int)(sizeof f / sizeof f[0]), "model");
    if (st != DYN_OK) return st;
    if (cfg->kind != DYN_MODEL_LLAMA &&
        (cfg->kv_heads || cfg->tie_embeddings || cfg->qkv_bias || cfg->rope_theta != 0 || cfg->rms_eps != 0 ||
         cfg->rope_scaling || cfg->rope_factor != 0 || cfg->rope_low_freq != 0 || cfg->rope_high_freq != 0 ||
         cfg->rope_orig_ctx))
        return rd_fail(tp->r, "Llama fields (kv_heads, rope_theta, ...) on a model line of another kind",
                       dyn_model_kind_name(cfg->kind));
    dyn_error e2;
    if (dyn_model_config_validate(cfg, &e2) != DYN_OK) return rd_fail(tp->r, e2.msg, NULL);
    return DYN_OK;
}

static dyn_status parse_machine_line(table_parse *tp, char **tok, int ntok)
{
    if (tp->have_machine++) return rd_fail(tp->r, "machine line given twice", NULL);
    dyn_machine *m = &tp->cm->machine;
    kv_field f[] = {{"name", 's', m->name},
                    {"matmul_gflops", 'd', &m->matmul_gflops},
                    {"attn_gflops", 'd', &m->attn_gflops},
                    {"mem_gbps", 'd', &m->mem_gbps},
                    {"bytes_per_elem", 'i', &m->bytes_per_elem},
                    {"device_memory_mb", 'd', &m->device_memory_mb},
                    {"link_latency_ms", 'd', &m->link_latency_ms},
                    {"link_gbps", 'd', &m->link_gbps},
                    {"dp_link_gbps", 'd', &m->dp_link_gbps},
                    /* optional: tables written before these existed
                     * load with 0 (a table's times are measured, so
                     * the table model never reads them) */
                    {"gemm_n_half", 'o', &m->gemm_n_half},
                    {"layer_overhead_ms", 'o', &m->layer_overhead_ms},
                    {"optimizer_ms_per_mparam", 'o', &m->optimizer_ms_per_mparam}};
    dyn_status st = parse_kv(tp->r, tok + 1, ntok - 1, f, 12, "machine");
    if (st != DYN_OK) return st;
    dyn_error e2;
    if (dyn_machine_validate(m, &e2) != DYN_OK) return rd_fail(tp->r, e2.msg, NULL);
    return DYN_OK;
}

static dyn_status parse_states_line(table_parse *tp, char **tok, int ntok)
{
    if (tp->have_states++) return rd_fail(tp->r, "states_mb line given twice", NULL);
    double *s = tp->cm->states_mb;
    /* bridge: T5 tables only (GPT has none: 0) */
    kv_field f[] = {{"embed", 'd', &s[0]},   {"encoder", 'd', &s[1]}, {"decoder", 'd', &s[2]},
                    {"lm_head", 'd', &s[3]}, {"bridge", 'o', &s[4]}};
    dyn_status st = parse_kv(tp->r, tok + 1, ntok - 1, f, 5, "states_mb");
    if (st != DYN_OK) return st;
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        char what[64];
        snprintf(what, sizeof what, "states_mb %s", f[k].key);
        if (s[k] < 0)
            return dyn_error_set(tp->r->err, DYN_ERR_PARSE, "%s:%d: %s %g is negative", tp->r->path, tp->r->line,
                                 what, s[k]);
        if (s[k] > DYN_COST_VALUE_MAX) /* summed over a stage's layers */
            return dyn_error_set(tp->r->err, DYN_ERR_PARSE, "%s:%d: %s %g is too large (at most " DYN_COST_VALUE_MAX_TEXT ")",
                                 tp->r->path, tp->r->line, what, s[k]);
    }
    return DYN_OK;
}

/* "profile host=.. cpu=.. dtype=.. threads=N repeats=N" (optional): what
 * the measurements were made on. */
static dyn_status parse_profile_line(table_parse *tp, char **tok, int ntok)
{
    dyn_profile_meta *pm = &tp->cm->meta;
    if (tp->cm->has_meta++) return rd_fail(tp->r, "profile line given twice", NULL);
    kv_field f[] = {{"host", 's', pm->host},
                    {"cpu", 's', pm->cpu},
                    {"dtype", 's', pm->dtype},
                    {"threads", 'i', &pm->threads},
                    {"repeats", 'i', &pm->repeats},
                    /* optional: profiles made before it load with 0 */
                    {"optimizer_ms_per_mparam", 'o', &pm->optimizer_ms_per_mparam}};
    dyn_status st = parse_kv(tp->r, tok + 1, ntok - 1, f, 6, "profile");
    if (st != DYN_OK) return st;
    if (pm->threads < 1 || pm->repeats < 1) return rd_fail(tp->r, "profile threads and repeats must be >= 1", NULL);
    if (!(pm->optimizer_ms_per_mparam >= 0) || !isfinite(pm->optimizer_ms_per_mparam))
        return rd_fail(tp->r, "profile optimizer_ms_per_mparam must be finite and >= 0", NULL);
    return DYN_OK;
}

/* "rows ...", "enc_len ...", "dec_len ...": only before the first point. */
static dyn_status parse_axis_line(table_parse *tp, char **tok, int ntok)
{
    dyn_cost_model *cm = tp->cm;
    if (tp->seen != NULL) return rd_fail(tp->r, "axis after the first point", NULL);
    int32_t **ax = tok[0][0] == 'r' ? &cm->rows : tok[0][0] == 'e' ? &cm->enc_len : &cm->dec_len;
    int32_t *n = tok[0][0] == 'r' ? &cm->n_rows : tok[0][0] == 'e' ? &cm->n_enc : &cm->n_dec;
    dyn_status st = parse_axis(tp->r, tok + 1, ntok - 1, ax, n);
    tp->axis_line[tok[0][0] == 'r' ? 0 : tok[0][0] == 'e' ? 1 : 2] = tp->r->line;
    return st;
}

/* At the first point: the header must be complete and the grid valid; the
 * point arrays are allocated. The grid is checked here because the dec_len
 * rule depends on the model line, which may come after the axes; an axis
 * error names the line that declared the axis, not this point. */
static dyn_status begin_points(table_parse *tp)
{
    dyn_cost_model *cm = tp->cm;
    if (!tp->have_model || !tp->have_machine || !tp->have_states || !cm->rows || !cm->enc_len || !cm->dec_len)
        return rd_fail(tp->r, "point before the model, machine, states_mb, rows, enc_len and dec_len lines", NULL);
    if (tp->version < 2 && cm->cfg.kind == DYN_MODEL_T5)
        return rd_fail(tp->r,
                       "a version 1 T5 table counts the encoder's final norm and the decoder embedding with the "
                       "embedding; profile the model again (dynapipe profile)",
                       NULL);
    tp->g = (dyn_cost_grid){cm->n_rows, cm->n_enc, cm->n_dec, cm->rows, cm->enc_len, cm->dec_len};
    for (int a = 0; a < 3; a++) {
        dyn_error e2;
        if (check_grid_axis(&cm->cfg, &tp->g, a, &e2) != DYN_OK)
            return dyn_error_set(tp->r->err, DYN_ERR_PARSE, "%s:%d: %s", tp->r->path, tp->axis_line[a], e2.msg);
    }
    size_t total = (size_t)(dyn_cost_grid_size(&tp->g) * DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT);
    tp->seen = dyn_calloc(total, 1, "cost table", tp->r->err);
    cm->points = dyn_calloc(total, sizeof *cm->points, "cost table points", tp->r->err);
    if (tp->seen == NULL || cm->points == NULL) return DYN_ERR_NOMEM;
    return DYN_OK;
}

/* "point kind recompute rows enc_len dec_len v1 .. v8" (v8, kept_mb, may be
 * left out: tables written before it load with 0). */
static dyn_status parse_point_line(table_parse *tp, char **tok, int ntok)
{
    dyn_cost_model *cm = tp->cm;
    reader *r = tp->r;
    dyn_status st;
    if (tp->seen == NULL && (st = begin_points(tp)) != DYN_OK) return st;
    if (ntok != 6 + N_VALUES && ntok != 5 + N_VALUES) {
        char msg[64];
        snprintf(msg, sizeof msg, "got %d fields", ntok);
        return rd_fail(r, "a point needs 14 fields: point kind recompute rows enc_len dec_len + 8 values (or 7)", msg);
    }
    dyn_layer_kind kind;
    dyn_recompute rc;
    if (dyn_layer_kind_parse(tok[1], &kind, NULL) != DYN_OK || !dyn_cost_kind_present(&cm->cfg, kind))
        return rd_fail(r, "unknown layer kind for this model", tok[1]);
    if (dyn_recompute_parse(tok[2], &rc, NULL) != DYN_OK) return rd_fail(r, "unknown recompute mode", tok[2]);
    int32_t c[3], idx[3];
    const int32_t *axes[3] = {cm->rows, cm->enc_len, cm->dec_len};
    int32_t ns[3] = {cm->n_rows, cm->n_enc, cm->n_dec};
    for (int a = 0; a < 3; a++) {
        if (parse_int(tok[3 + a], &c[a]) != 0) return rd_fail(r, "coordinate is not an integer", tok[3 + a]);
        idx[a] = axis_find(axes[a], ns[a], c[a]);
        if (idx[a] < 0) return rd_fail(r, "coordinate is not on the grid", tok[3 + a]);
    }
    double v[N_VALUES] = {0};
    for (int j = 0; j < ntok - 6; j++)
        if ((st = parse_cost_value(r, value_names[j], tok[6 + j], &v[j])) != DYN_OK) return st;
    int64_t p = dyn_cost_grid_index(&tp->g, kind, rc, idx[0], idx[1], idx[2]);
    if (tp->seen[p]++) return rd_fail(r, "duplicate point", NULL);
    values_to_cost(v, &cm->points[p]);
    return DYN_OK;
}

/* One non-empty, non-comment line. */
static dyn_status parse_line(table_parse *tp, char **tok, int ntok)
{
    int is_axis = strcmp(tok[0], "rows") == 0 || strcmp(tok[0], "enc_len") == 0 || strcmp(tok[0], "dec_len") == 0;
    if (ntok > MAX_TOKENS && !is_axis) return rd_fail(tp->r, "too many fields", NULL);
    if (!tp->have_magic) return parse_magic_line(tp, tok, ntok);
    if (strcmp(tok[0], "profile") == 0) return parse_profile_line(tp, tok, ntok);
    if (strcmp(tok[0], "model") == 0) return parse_model_line(tp, tok, ntok);
    if (strcmp(tok[0], "machine") == 0) return parse_machine_line(tp, tok, ntok);
    if (strcmp(tok[0], "states_mb") == 0) return parse_states_line(tp, tok, ntok);
    if (is_axis) return parse_axis_line(tp, tok, ntok);
    if (strcmp(tok[0], "point") == 0) return parse_point_line(tp, tok, ntok);
    return rd_fail(tp->r, "unknown line", tok[0]);
}

/* After the last line: every point of every kind the model has, under every
 * recompute mode, was given. */
static dyn_status check_complete(const table_parse *tp)
{
    const dyn_cost_grid *g = &tp->g;
    reader *r = tp->r;
    if (!tp->have_magic) return dyn_error_set(r->err, DYN_ERR_PARSE, "%s: empty cost table", r->path);
    if (tp->seen == NULL) return dyn_error_set(r->err, DYN_ERR_PARSE, "%s: cost table has no points", r->path);
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        if (!dyn_cost_kind_present(&tp->cm->cfg, (dyn_layer_kind)k)) continue;
        for (int rc = 0; rc < DYN_RECOMPUTE_COUNT; rc++)
            for (int32_t a = 0; a < g->n_rows; a++)
                for (int32_t b = 0; b < g->n_enc; b++)
                    for (int32_t c = 0; c < g->n_dec; c++)
                        if (!tp->seen[dyn_cost_grid_index(g, (dyn_layer_kind)k, (dyn_recompute)rc, a, b, c)])
                            return dyn_error_set(r->err, DYN_ERR_PARSE,
                                                 "%s: missing point %s %s rows=%d enc_len=%d dec_len=%d",
                                                 r->path, dyn_layer_kind_name((dyn_layer_kind)k),
                                                 dyn_recompute_name((dyn_recompute)rc), g->rows[a],
                                                 g->enc_len[b], g->dec_len[c]);
    }
    return DYN_OK;
}

/* Parse the whole text (modified in place) into cm, line by line. */
static dyn_status parse_table(dyn_cost_model *cm, char *text, reader *r)
{
    table_parse tp;
    memset(&tp, 0, sizeof tp);
    tp.cm = cm;
    tp.r = r;
    dyn_status st = DYN_OK;
    char *line = text;
    char **tok = NULL; /* grown to the line with the most fields (a long axis) */
    size_t cap = 0;
    while (*line && st == DYN_OK) {
        char *nl = strchr(line, '\n');
        char *next = nl ? nl + 1 : line + strlen(line);
        if (nl) *nl = '\0';
        r->line++;
        size_t need = (size_t)(next - line) / 2 + 2; /* fields are separated by blanks */
        if (DYN_RESERVE(tok, cap, need) != 0) {
            st = dyn_error_set(r->err, DYN_ERR_NOMEM, "%s:%d: out of memory for a line's fields", r->path, r->line);
            break;
        }
        int ntok = tokenize(line, tok, (int)cap);
        line = next;
        if (ntok == 0 || tok[0][0] == '#') continue;
        st = parse_line(&tp, tok, ntok);
    }
    free(tok);
    if (st == DYN_OK) st = check_complete(&tp);
    if (st == DYN_OK) st = dyn_cost_points_make_monotone(&cm->cfg, &tp.g, cm->points, r->err);
    free(tp.seen);
    return st;
}

dyn_cost_model *dyn_cost_model_load_table(const char *path, dyn_error *err)
{
    char *text = NULL;
    size_t len = 0;
    if (dyn_file_read_all(path, &text, &len, err) != DYN_OK) return NULL;
    if (memchr(text, '\0', len) != NULL) {
        free(text);
        dyn_error_set(err, DYN_ERR_PARSE, "%s: binary file (contains NUL bytes)", path);
        return NULL;
    }
    dyn_cost_model *cm = dyn_calloc(1, sizeof *cm, "cost model", err);
    if (cm == NULL) {
        free(text);
        return NULL;
    }
    cm->is_table = 1;
    reader r = {path, 0, err};
    dyn_status st = parse_table(cm, text, &r);
    free(text);
    if (st != DYN_OK) {
        dyn_cost_model_free(cm);
        return NULL;
    }
    return cm;
}

/* ---- what a table says about itself ------------------------------------------ */

int dyn_cost_model_profile_meta(const dyn_cost_model *cm, dyn_profile_meta *out)
{
    if (!cm->is_table || !cm->has_meta) return 0;
    *out = cm->meta;
    return 1;
}

int dyn_cost_model_grid_max(const dyn_cost_model *cm, int32_t *rows, int32_t *enc_len, int32_t *dec_len)
{
    if (!cm->is_table) return 0;
    *rows = cm->rows[cm->n_rows - 1];
    *enc_len = cm->enc_len[cm->n_enc - 1];
    *dec_len = cm->dec_len[cm->n_dec - 1];
    return 1;
}

dyn_status dyn_cost_model_check_shape(const dyn_cost_model *cm, const dyn_model_config *want, dyn_error *err)
{
    const dyn_model_config *h = &cm->cfg;
    if (h->kind == want->kind && h->n_layers == want->n_layers && h->n_dec_layers == want->n_dec_layers &&
        h->hidden == want->hidden && h->heads == want->heads && h->head_dim == want->head_dim &&
        h->ffn == want->ffn && h->vocab == want->vocab &&
        (h->kind != DYN_MODEL_LLAMA || (h->kv_heads == want->kv_heads && h->tie_embeddings == want->tie_embeddings &&
                                       h->qkv_bias == want->qkv_bias)))
        return DYN_OK;
    if (h->kind == DYN_MODEL_LLAMA && want->kind == DYN_MODEL_LLAMA && h->n_layers == want->n_layers &&
        h->hidden == want->hidden && h->heads == want->heads && h->head_dim == want->head_dim &&
        h->ffn == want->ffn && h->vocab == want->vocab)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "the cost model is for another shape: it has llama kv_heads=%d tie_embeddings=%d "
                             "qkv_bias=%d, the run wants kv_heads=%d tie_embeddings=%d qkv_bias=%d (profile this "
                             "shape with dynapipe profile)",
                             h->kv_heads, h->tie_embeddings, h->qkv_bias, want->kv_heads, want->tie_embeddings,
                             want->qkv_bias);
    return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                         "the cost model is for another shape: it has %s n_layers=%d n_dec_layers=%d hidden=%d "
                         "heads=%d head_dim=%d ffn=%d vocab=%d, the run wants %s n_layers=%d n_dec_layers=%d "
                         "hidden=%d heads=%d head_dim=%d ffn=%d vocab=%d (profile this shape with dynapipe profile)",
                         dyn_model_kind_name(h->kind), h->n_layers, h->n_dec_layers, h->hidden, h->heads,
                         h->head_dim, h->ffn, h->vocab, dyn_model_kind_name(want->kind), want->n_layers,
                         want->n_dec_layers, want->hidden, want->heads, want->head_dim, want->ffn, want->vocab);
}
