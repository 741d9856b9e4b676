/* machine_auto.c — `--machine auto` (contract in machine_auto.h): the
 * measured shapes and products, the non-negative least-squares fit of the
 * analytic model's five machine terms, and the cache file. */
#include "model/machine_auto.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "dynapipe/model_config.h" /* defines: dyn_machine_parse, dyn_model_config_params */
#include "model/blas.h"            /* defines: dyn_blas_kernel */
#include "model/profile.h"         /* defines: dyn_profiler_*, dyn_profile_meta_fill */
#include "model/threads.h"         /* defines: dyn_sgemm */
#include "util/json.h"             /* defines: dyn_json_parse */
#include "util/util.h"             /* defines: dyn_file_*, dyn_time_ms, dyn_median */

#define N_TERMS 5 /* 1/mm, n_half/mm, 1/attn, 1/bw, overhead */
#define CACHE_FORMAT "dynapipe-machine-auto"
#define CACHE_VERSION 4 /* 4: the optimizer step's measured rate in the machine; 3: the joint fit by default again (2: the product rate from products alone) */
#define OFF_RATE 1e12
#define ROBUST_ITERATIONS 3 /* refits with far-off times weighted down */ /* a rate that makes its term vanish while the coefficients are taken */

/* ---- the fit -------------------------------------------------------------- */

/* Forward and backward time of obs under machine m (ms). */
static dyn_status obs_time(const dyn_model_config *cfg, const dyn_machine *m, const dyn_machine_obs *o,
                           double t[2], dyn_error *err)
{
    dyn_cost_model *cm = dyn_cost_model_create_analytic(cfg, m, err);
    if (cm == NULL) return err ? err->code : DYN_ERR_INVALID_ARG;
    dyn_layer_cost lc;
    dyn_status st = dyn_cost_layer(cm, o->kind, &o->mb, DYN_RECOMPUTE_NONE, &lc, err);
    dyn_cost_model_free(cm);
    if (st != DYN_OK) return st;
    t[0] = lc.fwd_ms;
    t[1] = lc.bwd_ms;
    return DYN_OK;
}

/* The machine whose terms are all off but `term`, which is 1 (a rate of 1
 * GFLOP/s or GB/s, n_half 1 row on a 1 GFLOP/s product, 1 ms overhead);
 * term < 0: all off. */
static dyn_machine unit_machine(const dyn_machine *base, int term)
{
    dyn_machine m = *base;
    m.matmul_gflops = term == 0 || term == 1 ? 1.0 : OFF_RATE;
    m.gemm_n_half = term == 1 ? 1.0 : 0.0;
    m.attn_gflops = term == 2 ? 1.0 : OFF_RATE;
    m.mem_gbps = term == 3 ? 1.0 : OFF_RATE;
    m.layer_overhead_ms = term == 4 ? 1.0 : 0.0;
    return m;
}

/* Solve the n x n system a x = b in place (Gaussian elimination, partial
 * pivoting); -1 when singular. */
static int solve(double a[N_TERMS][N_TERMS], double b[N_TERMS], int n, double x[N_TERMS])
{
    for (int c = 0; c < n; c++) {
        int p = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(a[r][c]) > fabs(a[p][c])) p = r;
        if (!(fabs(a[p][c]) > 1e-12)) return -1;
        for (int k = 0; k < n; k++) {
            double t = a[c][k];
            a[c][k] = a[p][k];
            a[p][k] = t;
        }
        double t = b[c];
        b[c] = b[p];
        b[p] = t;
        for (int r = c + 1; r < n; r++) {
            double f = a[r][c] / a[c][c];
            for (int k = c; k < n; k++) a[r][k] -= f * a[c][k];
            b[r] -= f * b[c];
        }
    }
    for (int c = n - 1; c >= 0; c--) {
        double s = b[c];
        for (int k = c + 1; k < n; k++) s -= a[c][k] * x[k];
        x[c] = s / a[c][c];
    }
    return 0;
}

/* Non-negative least squares of rows A (m x N_TERMS, already divided by
 * the measured time and weighted) against b, over the terms in `terms` (a
 * bit mask of the terms fitted; p's other entries are left as they are):
 * every subset of the fitted terms that holds term 0 when term 0 is fitted
 * is solved by the normal equations (columns scaled to unit norm), and the
 * feasible solution (all >= 0, term 0 > 0 when fitted) with the smallest
 * residual wins. At most 32 subsets of at most 5 unknowns: exact, and
 * cheap. -1 when none. */
static int nnls(const double *A, const double *b, int m, unsigned terms, double p[N_TERMS])
{
    double norm[N_TERMS] = {0};
    for (int j = 0; j < N_TERMS; j++) {
        for (int i = 0; i < m; i++) norm[j] += A[i * N_TERMS + j] * A[i * N_TERMS + j];
        norm[j] = sqrt(norm[j]);
    }
    int need0 = terms & 1u;
    if (need0 && !(norm[0] > 0)) return -1;
    double best = INFINITY;
    for (unsigned mask = 0; mask < (1u << N_TERMS); mask++) {
        if ((mask & ~terms) != 0 || (need0 && !(mask & 1u))) continue;
        int idx[N_TERMS], n = 0;
        for (int j = 0; j < N_TERMS; j++)
            if (mask & (1u << j)) {
                if (!(norm[j] > 0)) goto next;
                idx[n++] = j;
            }
        double ata[N_TERMS][N_TERMS] = {{0}}, atb[N_TERMS] = {0}, x[N_TERMS] = {0};
        for (int i = 0; i < m; i++) {
            const double *row = A + (size_t)i * N_TERMS;
            for (int r = 0; r < n; r++) {
                double ar = row[idx[r]] / norm[idx[r]];
                atb[r] += ar * b[i];
                for (int c = 0; c < n; c++) ata[r][c] += ar * row[idx[c]] / norm[idx[c]];
            }
        }
        if (n > 0 && solve(ata, atb, n, x) != 0) continue;
        double q[N_TERMS] = {0};
        for (int r = 0; r < n; r++) q[idx[r]] = x[r] / norm[idx[r]];
        if (need0 && !(q[0] > 0)) continue;
        for (int j = 0; j < N_TERMS; j++)
            if (q[j] < 0) goto next;
        double res = 0;
        for (int i = 0; i < m; i++) {
            double e = -b[i];
            for (int j = 0; j < N_TERMS; j++) e += A[(size_t)i * N_TERMS + j] * q[j];
            res += e * e;
        }
        if (res < best) {
            best = res;
            for (int j = 0; j < N_TERMS; j++)
                if (terms & (1u << j)) p[j] = q[j];
        }
    next:;
    }
    return isfinite(best) ? 0 : -1;
}

/* The fit's rows: for each measured time, each term's share of the
 * predicted time divided by the measured time. A holds room for 2 rows per
 * observation and one for the optimizer step. */
typedef struct fit_rows {
    double *A;    /* [rows][N_TERMS] */
    double *errs; /* [rows] |A p - 1| */
    int rows;
} fit_rows;

/* Add observation o's forward and backward rows (a time that is not
 * positive, e.g. an embedding's empty input gradient, adds none): each
 * term's share is the time under the machine with that term alone on,
 * less the time with all off. */
static dyn_status fit_add_obs(fit_rows *f, const dyn_model_config *cfg, const dyn_machine *base,
                              const dyn_machine_obs *o, dyn_error *err)
{
    double t0[2] = {0, 0}, tj[2] = {0, 0};
    dyn_machine off = unit_machine(base, -1);
    dyn_status st = obs_time(cfg, &off, o, t0, err);
    if (st != DYN_OK) return st;
    double meas[2] = {o->fwd_ms, o->bwd_ms};
    double c[N_TERMS][2];
    for (int j = 0; j < N_TERMS && st == DYN_OK; j++) {
        dyn_machine u = unit_machine(base, j);
        st = obs_time(cfg, &u, o, tj, err);
        c[j][0] = tj[0] - t0[0];
        c[j][1] = tj[1] - t0[1];
    }
    if (st != DYN_OK) return st;
    for (int d = 0; d < 2; d++) {
        if (!(meas[d] > 0) || !isfinite(meas[d])) continue; /* e.g. an embedding's empty input gradient */
        for (int j = 0; j < N_TERMS; j++) {
            /* the n_half term is measured on top of the rate term */
            double cj = j == 1 ? c[1][d] - c[0][d] : c[j][d];
            f->A[(size_t)f->rows * N_TERMS + j] = (cj > 0 ? cj : 0) / meas[d];
        }
        f->rows++;
    }
    return DYN_OK;
}

/* |A p - 1| of every row into f->errs. */
static void fit_errors(fit_rows *f, const double p[N_TERMS])
{
    for (int i = 0; i < f->rows; i++) {
        double e = -1;
        for (int j = 0; j < N_TERMS; j++) e += f->A[(size_t)i * N_TERMS + j] * p[j];
        f->errs[i] = fabs(e);
    }
}

/* 1 - the fixed terms' (those not in `terms`) share of each row, times w[i]
 * (w NULL: 1), into b; the rows times w into W. */
static void fit_target(const fit_rows *f, const double *w, unsigned terms, const double p[N_TERMS], double *b,
                       double *W)
{
    for (int i = 0; i < f->rows; i++) {
        double wi = w != NULL ? w[i] : 1.0, fixed = 0;
        for (int j = 0; j < N_TERMS; j++) {
            double a = f->A[(size_t)i * N_TERMS + j];
            if (!(terms & (1u << j))) fixed += a * p[j];
            W[(size_t)i * N_TERMS + j] = a * wi;
        }
        b[i] = wi * (1.0 - fixed);
    }
}

/* Robust refits of p's terms in `terms`: a time far off the others' fit (a
 * measurement that other work slowed, on a shared machine) is weighted
 * down in proportion to how far beyond twice the median error it lies
 * (Huber-like); exact times (every error 0) are left as they are. b, w
 * and W are rows, rows and rows x N_TERMS scratch. */
static void fit_robust(fit_rows *f, unsigned terms, double *b, double *w, double *W, double p[N_TERMS])
{
    int rows = f->rows;
    for (int it = 0; it < ROBUST_ITERATIONS; it++) {
        fit_errors(f, p);
        memcpy(w, f->errs, (size_t)rows * sizeof *f->errs);
        double med = dyn_median(w, rows);
        if (!(med > 1e-9)) break;
        for (int i = 0; i < rows; i++) w[i] = f->errs[i] > 2 * med ? 2 * med / f->errs[i] : 1.0;
        fit_target(f, w, terms, p, b, W);
        double q[N_TERMS];
        memcpy(q, p, sizeof q);
        if (nnls(W, b, rows, terms, q) != 0) break;
        memcpy(p, q, sizeof q);
    }
}

/* Fit p's terms in `terms` (the others held) to f's rows: non-negative least
 * squares, then the robust refits. */
static dyn_status fit_solve(fit_rows *f, unsigned terms, double p[N_TERMS], dyn_error *err)
{
    int rows = f->rows;
    dyn_status st = DYN_OK;
    size_t cap = (size_t)(rows > 0 ? rows : 1);
    double *b = calloc(cap, sizeof *b), *w = calloc(cap, sizeof *w);
    double *W = calloc(cap * N_TERMS, sizeof *W);
    if (b == NULL || w == NULL || W == NULL) st = dyn_error_set(err, DYN_ERR_NOMEM, "machine fit: out of memory");
    if (st == DYN_OK) {
        fit_target(f, NULL, terms, p, b, W);
        if (rows == 0 || nnls(W, b, rows, terms, p) != 0)
            st = dyn_error_set(err, DYN_ERR_INVALID_ARG,
                               "machine fit: the measurements have no matrix products a positive rate explains");
    }
    if (st == DYN_OK) fit_robust(f, terms, b, w, W, p);
    free(b);
    free(w);
    free(W);
    return st;
}

/* The machine of fitted terms p (base's other fields, named "auto"), each
 * rate capped at DYN_MACHINE_AUTO_RATE_CAP. */
static dyn_machine fit_machine(const dyn_machine *base, const double p[N_TERMS])
{
    dyn_machine m = *base;
    snprintf(m.name, sizeof m.name, "auto");
    m.matmul_gflops = 1.0 / p[0];
    m.gemm_n_half = p[1] / p[0];
    m.attn_gflops = p[2] > 1.0 / DYN_MACHINE_AUTO_RATE_CAP ? 1.0 / p[2] : DYN_MACHINE_AUTO_RATE_CAP;
    m.mem_gbps = p[3] > 1.0 / DYN_MACHINE_AUTO_RATE_CAP ? 1.0 / p[3] : DYN_MACHINE_AUTO_RATE_CAP;
    m.layer_overhead_ms = p[4];
    if (m.matmul_gflops > DYN_MACHINE_AUTO_RATE_CAP) m.matmul_gflops = DYN_MACHINE_AUTO_RATE_CAP;
    return m;
}

/* How well p fits f's rows: the count, the worst and the median |error|. */
static void fit_stats(fit_rows *f, const double p[N_TERMS], dyn_machine_fit_stats *stats)
{
    fit_errors(f, p);
    stats->n = f->rows;
    stats->worst_err = 0;
    for (int i = 0; i < f->rows; i++) stats->worst_err = f->errs[i] > stats->worst_err ? f->errs[i] : stats->worst_err;
    stats->median_err = dyn_median(f->errs, f->rows);
}

/* Add the rows of the products measured alone: [flops, row_flops, 0, 0,
 * 0] at 1 GFLOP/s, over the measured time. */
static void fit_add_gemm(fit_rows *f, const dyn_machine_gemm_obs *g, int n)
{
    for (int i = 0; i < n; i++) {
        if (!(g[i].ms > 0) || !isfinite(g[i].ms) || !(g[i].flops > 0)) continue;
        double *row = f->A + (size_t)f->rows * N_TERMS;
        row[0] = g[i].flops / 1e6 / g[i].ms;
        row[1] = (g[i].row_flops > 0 ? g[i].row_flops : 0) / 1e6 / g[i].ms;
        f->rows++;
    }
}

/* The fit's terms: with products measured alone, the first two from
 * them (f's first n_gemm rows), then the other three from the rest;
 * otherwise all five from every row. */
#define TERMS_ALL ((1u << N_TERMS) - 1)
#define TERMS_GEMM 3u /* 1/mm, n_half/mm */
static dyn_status fit_steps(fit_rows *f, int n_gemm, double p[N_TERMS], dyn_error *err)
{
    if (n_gemm == 0) return fit_solve(f, TERMS_ALL, p, err);
    fit_rows g = {f->A, f->errs, n_gemm};
    fit_rows l = {f->A + (size_t)n_gemm * N_TERMS, f->errs + n_gemm, f->rows - n_gemm};
    dyn_status st = fit_solve(&g, TERMS_GEMM, p, err);
    if (st == DYN_OK && l.rows > 0) st = fit_solve(&l, TERMS_ALL & ~TERMS_GEMM, p, err);
    return st;
}

dyn_status dyn_machine_fit(const dyn_model_config *cfg, const dyn_machine *base, const dyn_machine_obs *obs,
                           int n_obs, const dyn_machine_gemm_obs *gemm, int n_gemm, double opt_params,
                           double opt_ms, dyn_machine *out, dyn_machine_fit_stats *stats, dyn_error *err)
{
    if (cfg == NULL || base == NULL || out == NULL || (obs == NULL && n_obs > 0) || n_obs < 0 ||
        (gemm == NULL && n_gemm > 0) || n_gemm < 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "machine fit: no model, machine or measurements given");
    int with_opt = opt_params > 0 && opt_ms > 0 && isfinite(opt_ms);
    int m_rows = n_gemm + 2 * n_obs + with_opt;
    fit_rows f = {calloc((size_t)(m_rows > 0 ? m_rows : 1) * N_TERMS, sizeof(double)),
                  calloc((size_t)(m_rows > 0 ? m_rows : 1), sizeof(double)), 0};
    if (f.A == NULL || f.errs == NULL) {
        free(f.A);
        free(f.errs);
        return dyn_error_set(err, DYN_ERR_NOMEM, "machine fit: out of memory");
    }
    fit_add_gemm(&f, gemm, n_gemm);
    int g_rows = f.rows;
    dyn_status st = DYN_OK;
    for (int i = 0; i < n_obs && st == DYN_OK; i++) st = fit_add_obs(&f, cfg, base, &obs[i], err);
    if (st == DYN_OK && with_opt) {
        /* the step moves DYN_OPTIMIZER_BYTES_PER_PARAM bytes per parameter:
         * at 1 GB/s, bytes / 1e6 ms */
        f.A[(size_t)f.rows * N_TERMS + 3] = opt_params * DYN_OPTIMIZER_BYTES_PER_PARAM / 1e6 / opt_ms;
        f.rows++;
    }
    double p[N_TERMS] = {0};
    if (st == DYN_OK) st = fit_steps(&f, g_rows, p, err);
    if (st == DYN_OK) {
        dyn_machine m = fit_machine(base, p);
        /* the step itself is priced at its measured rate: its row above
         * only informs mem_gbps, which prices it 6-13x short (AdamW's
         * sqrt and divide per parameter, not just bytes) */
        if (with_opt) m.optimizer_ms_per_mparam = opt_ms / opt_params * 1e6;
        st = dyn_machine_validate(&m, err);
        if (st == DYN_OK) {
            *out = m;
            if (stats != NULL) fit_stats(&f, p, stats);
        }
    }
    free(f.A);
    free(f.errs);
    return st;
}

/* ---- what is measured ------------------------------------------------------- */

static double fwd_cpu(const dyn_cost_model *cm, dyn_layer_kind kind, int32_t rows, int32_t e, int32_t d)
{
    dyn_mb_shape mb = {.rows = rows, .enc_len = e, .dec_len = d};
    dyn_layer_cost lc;
    return dyn_cost_layer(cm, kind, &mb, DYN_RECOMPUTE_NONE, &lc, NULL) == DYN_OK ? lc.fwd_ms : 0.0;
}

/* Shapes, dense, for the kinds of cfg; at most cap of them into o. Lengths
 * 64, 256, 1024 and the longest (each at most max_seqlen), each at one row
 * and at as many rows as fit MANY_TOKENS tokens and a forward of MANY_MS on
 * the built-in "cpu" machine: the same tokens at several lengths separate
 * attention from the products, one row against many the small-size term,
 * and the budget keeps a large model's measurement short (gpt2-124m gets
 * short lengths and few rows). A length whose one row alone would take over
 * ONE_MS is left out (but the shortest). T5 decoders see targets a quarter
 * of the input (and equal at the shortest); the embedding, the bridge and
 * the head a short and a long batch at length 256. TINY: the shortest
 * length only, at one row and (within budget) four. */
#define MANY_TOKENS 4096
#define MANY_MS 25.0
#define ONE_MS 100.0
static int shapes_make(const dyn_model_config *cfg, dyn_machine_measure_level level, dyn_machine_obs *o, int cap)
{
    int t5 = cfg->kind == DYN_MODEL_T5, tiny = level == DYN_MACHINE_MEASURE_TINY;
    dyn_cost_model *cm = dyn_cost_model_create_analytic(cfg, dyn_machine_builtin("cpu"), NULL);
    if (cm == NULL) return 0;
    int32_t L = cfg->max_seqlen;
    int32_t lens[4] = {64, 256, 1024, L};
    int n = 0, n_len = tiny ? 1 : 4;
    /* forward ms of kind at (rows, e, d) on the built-in cpu */
#define FWD(k, r, e, d) fwd_cpu(cm, (k), (r), (e), t5 ? (d) : 0)
#define ADD(k, r, e, d)                                                                                        \
    do {                                                                                                       \
        if (n < cap) o[n++] = (dyn_machine_obs){(k), {.rows = (r), .enc_len = (e), .dec_len = t5 ? (d) : 0}, 0, 0}; \
    } while (0)
    for (int i = 0; i < n_len; i++) {
        int32_t len = lens[i] < L ? lens[i] : L;
        if (i > 0 && len <= (lens[i - 1] < L ? lens[i - 1] : L)) continue; /* capped to one already there */
        int32_t dec = i == 0 ? len : (len / 4 >= 8 ? len / 4 : 8);
        dyn_layer_kind kinds[2] = {DYN_LAYER_ENCODER, DYN_LAYER_DECODER};
        for (int k = 0; k < (t5 ? 2 : 1); k++) {
            if (i > 0 && FWD(kinds[k], 1, len, dec) > ONE_MS) continue;
            ADD(kinds[k], 1, len, dec);
            int32_t many = tiny ? 4 : (MANY_TOKENS / len > 2 ? MANY_TOKENS / len : 2);
            while (many > 1 && FWD(kinds[k], many, len, dec) > MANY_MS) many /= 2;
            if (many > 1) ADD(kinds[k], many, len, dec);
        }
    }
    int32_t s = L < (tiny ? 64 : 256) ? L : (tiny ? 64 : 256), d = t5 ? (s / 4 >= 8 ? s / 4 : 8) : 0;
    dyn_layer_kind small[3] = {DYN_LAYER_EMBED, DYN_LAYER_LM_HEAD, DYN_LAYER_BRIDGE};
    for (int k = 0; k < (t5 ? 3 : 2); k++) {
        ADD(small[k], 1, s, d);
        int32_t rows = tiny ? 4 : MANY_TOKENS / s;
        while (rows > 1 && FWD(small[k], rows, s, d) > MANY_MS) rows /= 2;
        if (rows > 1) ADD(small[k], rows, s, d);
    }
#undef ADD
#undef FWD
    dyn_cost_model_free(cm);
    return n;
}

/* The block's matrix products measured alone: (K, N) of the four a GPT
 * block has (QKV, attention out, FFN in, FFN out), the same for every
 * model kind (a rate as a function of size, not a model of each kind's
 * products), at GEMM_TOKENS token rows each, those whose forward set takes
 * at most GEMM_MS on the built-in cpu machine (the two smallest always):
 * the rate at hidden 128 and 16 rows is a fraction of that at 4096. Each
 * token count runs the forward, input-gradient and weight-gradient product
 * of every (K, N), GEMM_LOOP_MS at least per timed sample, GEMM_SAMPLES
 * samples (1 for TINY) taken round the token counts, their median kept. */
#define GEMM_PRODUCTS 4
#define GEMM_MS 10.0
#define GEMM_LOOP_MS 2.0
#define GEMM_SAMPLES 5
static const int32_t GEMM_TOKENS[] = {16, 64, 256, 1024, 4096};
#define GEMM_N_TOKENS ((int)(sizeof GEMM_TOKENS / sizeof GEMM_TOKENS[0]))

static void gemm_products(const dyn_model_config *cfg, int32_t kn[GEMM_PRODUCTS][2])
{
    int32_t h = cfg->hidden, a = cfg->heads * cfg->head_dim, f = cfg->ffn;
    int32_t v[GEMM_PRODUCTS][2] = {{h, 3 * a}, {a, h}, {h, f}, {f, h}};
    memcpy(kn, v, sizeof v);
}

/* One set at t rows: every product's three passes (ms). */
static double gemm_set(const int32_t kn[GEMM_PRODUCTS][2], int32_t t, const float *x, const float *w, float *y,
                       float *dx, float *dw)
{
    double t0 = dyn_time_ms();
    for (int i = 0; i < GEMM_PRODUCTS; i++) {
        int K = kn[i][0], N = kn[i][1];
        dyn_sgemm(0, 0, t, N, K, 1.0f, x, K, w, N, 0.0f, y, N);    /* Y = X W */
        dyn_sgemm(0, 1, t, K, N, 1.0f, y, N, w, N, 0.0f, dx, K);   /* dX = dY W^T */
        dyn_sgemm(1, 0, K, N, t, 1.0f, x, K, y, N, 1.0f, dw, N);   /* dW += X^T dY */
    }
    return dyn_time_ms() - t0;
}

/* Measure the products at each token count kept into g (at most
 * GEMM_N_TOKENS); returns how many, or -1 (err set) when out of memory. */
static int gemm_measure(const dyn_model_config *cfg, dyn_machine_measure_level level, dyn_machine_gemm_obs *g,
                        dyn_error *err)
{
    int32_t kn[GEMM_PRODUCTS][2];
    gemm_products(cfg, kn);
    double row_flops = 0;
    int32_t kmax = 1;
    for (int i = 0; i < GEMM_PRODUCTS; i++) {
        row_flops += 3.0 * 2.0 * kn[i][0] * kn[i][1];
        for (int j = 0; j < 2; j++) kmax = kn[i][j] > kmax ? kn[i][j] : kmax;
    }
    double cpu_per_ms = dyn_machine_builtin("cpu")->matmul_gflops * 1e6;
    int n = 0, tiny = level == DYN_MACHINE_MEASURE_TINY;
    int32_t tmax = 0;
    for (int i = 0; i < (tiny ? 2 : GEMM_N_TOKENS); i++)
        if (i < 2 || row_flops / 3.0 * GEMM_TOKENS[i] / cpu_per_ms <= GEMM_MS) tmax = GEMM_TOKENS[i];
    size_t big = (size_t)tmax * (size_t)kmax;
    float *x = calloc(big, sizeof *x), *y = calloc(big, sizeof *y), *dx = calloc(big, sizeof *dx);
    float *w = calloc((size_t)kmax * kmax, sizeof *w), *dw = calloc((size_t)kmax * kmax, sizeof *dw);
    if (x == NULL || y == NULL || dx == NULL || w == NULL || dw == NULL) {
        n = -1;
        dyn_error_set(err, DYN_ERR_NOMEM, "machine measurement: out of memory for the products");
    }
    for (size_t i = 0; n >= 0 && i < (size_t)kmax * kmax; i++) w[i] = (float)((int)(i % 7) - 3) * 0.01f;
    for (size_t i = 0; n >= 0 && i < big; i++) x[i] = (float)((int)(i % 5) - 2) * 0.01f;
    /* a warm-up set per token count sizes its loops; then the samples go
     * round the token counts, so that other work slowing the machine for
     * a while slows one sample of each, and the median of each is kept:
     * as the layers' times are (a median of repeats), so that the products
     * and the layers they are taken from were measured alike */
    int loops[GEMM_N_TOKENS], nt = 0, ns = tiny ? 1 : GEMM_SAMPLES;
    double samples[GEMM_N_TOKENS][GEMM_SAMPLES];
    for (int i = 0; n >= 0 && i < GEMM_N_TOKENS && GEMM_TOKENS[i] <= tmax; i++, nt++) {
        double one = gemm_set(kn, GEMM_TOKENS[i], x, w, y, dx, dw);
        loops[i] = one > 0 && one < GEMM_LOOP_MS ? (int)ceil(GEMM_LOOP_MS / one) : 1;
    }
    for (int r = 0; n >= 0 && r < ns; r++)
        for (int i = 0; i < nt; i++) {
            double sum = 0;
            for (int l = 0; l < loops[i]; l++) sum += gemm_set(kn, GEMM_TOKENS[i], x, w, y, dx, dw);
            samples[i][r] = sum / loops[i];
        }
    for (int i = 0; n >= 0 && i < nt; i++)
        g[i] = (dyn_machine_gemm_obs){GEMM_TOKENS[i], row_flops * GEMM_TOKENS[i], row_flops,
                                      dyn_median(samples[i], ns)};
    if (n >= 0) n = nt;
    free(x);
    free(y);
    free(dx);
    free(w);
    free(dw);
    return n;
}

/* The five terms are fitted together from the layers (the default), or,
 * with DYN_MACHINE_FIT=products, in two steps from the block's products
 * measured alone and then the layers; part of the key. The joint fit is
 * the default because it predicted better: quiet auto_check runs on the
 * Xeon put 6 of 8 runs within 10 % with it and 3 of 8 with the two-step
 * fit (docs/machine-auto.md). */
static int fit_joint(void)
{
    const char *v = getenv("DYN_MACHINE_FIT");
    return v == NULL || strcmp(v, "products") != 0;
}

void dyn_machine_auto_key(const dyn_model_config *cfg, int threads, int ranks, dyn_machine_measure_level level,
                          char *key, size_t cap, char cpu[64], char blas[32])
{
    dyn_profile_meta meta;
    dyn_profile_meta_fill(&meta, threads, 1);
    const char *kernel = dyn_blas_kernel();
    if (kernel == NULL || kernel[0] == '\0') kernel = "unknown";
    snprintf(key, cap, "v%d|cpu=%s|blas=%s|threads=%d|ranks=%d|%s=%d.%d.%d.%d.%d.%d.%d|seqlen=%d|measure=%s",
             CACHE_VERSION, meta.cpu, kernel, threads, ranks < 1 ? 1 : ranks, dyn_model_kind_name(cfg->kind), cfg->hidden, cfg->heads, cfg->head_dim,
             cfg->ffn, cfg->vocab, cfg->n_layers, cfg->n_dec_layers, cfg->max_seqlen,
             level == DYN_MACHINE_MEASURE_TINY ? "tiny" : "full");
    size_t at = strlen(key);
    if (cfg->kind == DYN_MODEL_LLAMA && at < cap) /* what else changes a Llama's layer costs */
        snprintf(key + at, cap - at, "|kv=%d.%d.%d", cfg->kv_heads, cfg->tie_embeddings, cfg->qkv_bias);
    at = strlen(key);
    if (!fit_joint() && at < cap) snprintf(key + at, cap - at, "|fit=products");
    if (cpu != NULL) snprintf(cpu, 64, "%s", meta.cpu);
    if (blas != NULL) snprintf(blas, 32, "%s", kernel);
}

/* FNV-1a, 64 bits: a file name per key (the key itself is checked inside). */
static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    return h;
}

dyn_status dyn_machine_auto_path(const char *dir, const char *key, char *path, size_t cap, dyn_error *err)
{
    int w = snprintf(path, cap, "%s/machine-%016llx.json", dir, (unsigned long long)fnv1a(key));
    if (w < 0 || (size_t)w >= cap) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "machine cache: path too long");
    return DYN_OK;
}

/* ---- the cache file ------------------------------------------------------------ */

dyn_status dyn_machine_auto_write(const char *path, const dyn_machine *m, const dyn_machine_auto_info *info,
                                  dyn_error *err)
{
    char text[4096];
    int w = snprintf(text, sizeof text,
                     "{\n  \"format\": \"%s\",\n  \"version\": %d,\n  \"key\": \"%s\",\n"
                     "  \"measure_s\": %.6g,\n  \"optimizer_ms_per_mparam\": %.17g,\n"
                     "  \"fit_points\": %d,\n  \"fit_median_err\": %.17g,\n  \"fit_worst_err\": %.17g,\n"
                     "  \"machine\": {\"name\": \"%s\", \"matmul_gflops\": %.17g, \"attn_gflops\": %.17g, "
                     "\"mem_gbps\": %.17g, \"bytes_per_elem\": %d, \"device_memory_mb\": %.17g, "
                     "\"link_latency_ms\": %.17g, \"link_gbps\": %.17g, \"dp_link_gbps\": %.17g, "
                     "\"gemm_n_half\": %.17g, \"layer_overhead_ms\": %.17g, \"optimizer_ms_per_mparam\": %.17g}\n}\n",
                     CACHE_FORMAT, CACHE_VERSION, info->key, info->measure_s, info->optimizer_ms_per_mparam,
                     info->fit.n, info->fit.median_err, info->fit.worst_err, m->name, m->matmul_gflops,
                     m->attn_gflops, m->mem_gbps, m->bytes_per_elem, m->device_memory_mb, m->link_latency_ms,
                     m->link_gbps, m->dp_link_gbps, m->gemm_n_half, m->layer_overhead_ms, m->optimizer_ms_per_mparam);
    if (w < 0 || (size_t)w >= sizeof text)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "machine cache: entry too long");
    /* the key is written inside quotes: it must not hold any */
    if (strchr(info->key, '"') != NULL || strchr(info->key, '\\') != NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "machine cache: key holds a quote or backslash");
    return dyn_file_write_atomic(path, text, (size_t)w, err);
}

static double num_or(const cJSON *root, const char *name, double dflt)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, name);
    return cJSON_IsNumber(it) ? it->valuedouble : dflt;
}

dyn_status dyn_machine_auto_read(const char *path, const char *key, dyn_machine *m, dyn_machine_auto_info *info,
                                 dyn_error *err)
{
    char *text = NULL;
    size_t len = 0;
    dyn_status st = dyn_file_read_all(path, &text, &len, err);
    if (st != DYN_OK) return DYN_ERR_IO;
    cJSON *root = NULL;
    st = dyn_json_parse(text, len, path, &root, err);
    free(text);
    if (st != DYN_OK) return dyn_error_prefix(err, DYN_ERR_PARSE, "machine cache");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(root, "key");
    const cJSON *mach = cJSON_GetObjectItemCaseSensitive(root, "machine");
    char *mtext = NULL;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, CACHE_FORMAT) != 0 ||
        num_or(root, "version", -1) != CACHE_VERSION) {
        st = dyn_error_set(err, DYN_ERR_PARSE, "machine cache %s: not a version %d cache file", path, CACHE_VERSION);
    } else if (!cJSON_IsString(k) || strcmp(k->valuestring, key) != 0) {
        st = dyn_error_set(err, DYN_ERR_PARSE, "machine cache %s: written for another machine or model", path);
    } else if (!cJSON_IsObject(mach) || (mtext = cJSON_PrintUnformatted(mach)) == NULL) {
        st = dyn_error_set(err, DYN_ERR_PARSE, "machine cache %s: no \"machine\" object", path);
    } else {
        dyn_machine got;
        st = dyn_machine_parse(mtext, path, &got, err);
        if (st == DYN_OK) {
            /* the numbers as written (%.17g), not as cJSON printed them
             * for the parser (15 digits when that is within an epsilon):
             * a cached machine must be the measured one to the bit */
            struct { const char *key; double *dst; } f[] = {
                {"matmul_gflops", &got.matmul_gflops}, {"attn_gflops", &got.attn_gflops},
                {"mem_gbps", &got.mem_gbps},           {"device_memory_mb", &got.device_memory_mb},
                {"link_latency_ms", &got.link_latency_ms}, {"link_gbps", &got.link_gbps},
                {"dp_link_gbps", &got.dp_link_gbps},   {"gemm_n_half", &got.gemm_n_half},
                {"layer_overhead_ms", &got.layer_overhead_ms},
                {"optimizer_ms_per_mparam", &got.optimizer_ms_per_mparam},
            };
            for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) *f[i].dst = num_or(mach, f[i].key, *f[i].dst);
            *m = got;
            memset(info, 0, sizeof *info);
            snprintf(info->key, sizeof info->key, "%s", key);
            info->measure_s = num_or(root, "measure_s", 0);
            info->optimizer_ms_per_mparam = num_or(root, "optimizer_ms_per_mparam", 0);
            info->fit.n = (int32_t)num_or(root, "fit_points", 0);
            info->fit.median_err = num_or(root, "fit_median_err", 0);
            info->fit.worst_err = num_or(root, "fit_worst_err", 0);
            info->cached = 1;
        } else {
            st = dyn_error_prefix(err, DYN_ERR_PARSE, "machine cache");
        }
    }
    cJSON_free(mtext);
    cJSON_Delete(root);
    return st;
}

/* ---- measuring ------------------------------------------------------------------ */

#define MAX_SHAPES 32
#define REMEASURE_UNTIL_MS 20000.0 /* no second measurements after this long */
/* Measure one shape's forward and backward (ms) into *lc. */
static dyn_status measure_obs(dyn_profiler *p, const dyn_machine_obs *o, dyn_layer_cost *lc, dyn_error *err)
{
    return dyn_profiler_measure(p, o->kind, DYN_RECOMPUTE_NONE, o->mb.rows, o->mb.enc_len,
                                o->mb.dec_len > 0 ? o->mb.dec_len : 1, lc, err);
}

/* On a shared machine a measurement may be slowed by others: one whose
 * reference kernel (probe[i]) ran over DYN_SWEEP_CALM slower than the
 * fastest seen is measured once more, while the budget from t0 lasts,
 * keeping the faster (others only ever slow a kernel down; profile.h,
 * "reference kernel"). */
static dyn_status remeasure_slowed(dyn_profiler *p, dyn_machine_obs *obs, int n, const double *probe, double t0,
                                   dyn_machine_auto_info *info, dyn_error *err)
{
    double best = dyn_profiler_probe_best_ms(p);
    dyn_status st = DYN_OK;
    for (int i = 0; i < n && st == DYN_OK; i++) {
        if (!(probe[i] > best * (1 + DYN_SWEEP_CALM)) || dyn_time_ms() - t0 > REMEASURE_UNTIL_MS) continue;
        dyn_layer_cost lc;
        st = measure_obs(p, &obs[i], &lc, err);
        if (lc.fwd_ms < obs[i].fwd_ms) obs[i].fwd_ms = lc.fwd_ms;
        if (lc.bwd_ms < obs[i].bwd_ms) obs[i].bwd_ms = lc.bwd_ms;
        info->remeasured++;
    }
    return st;
}

/* DYN_MACHINE_MEASURE_SHOW: each measured shape against the fitted
 * machine's prediction, to log. */
static void show_fit(const dyn_model_config *cfg, const dyn_machine *m, const dyn_machine_obs *obs, int n,
                     const dyn_machine_gemm_obs *g, int n_gemm, FILE *log, dyn_error *err)
{
    for (int i = 0; i < n_gemm; i++)
        fprintf(log, "  products %4d rows  %9.3f ms (fit %9.3f): %.1f GFLOP/s\n", g[i].tokens, g[i].ms,
                (g[i].flops + g[i].row_flops * m->gemm_n_half) / (m->matmul_gflops * 1e6), g[i].flops / g[i].ms / 1e6);
    for (int i = 0; i < n; i++) {
        double t[2] = {0, 0};
        if (obs_time(cfg, m, &obs[i], t, err) != DYN_OK) break;
        fprintf(log, "  %-8s %3d x %4d (%4d)  fwd %9.3f ms (fit %9.3f)  bwd %9.3f ms (fit %9.3f)\n",
                dyn_layer_kind_name(obs[i].kind), obs[i].mb.rows, obs[i].mb.enc_len, obs[i].mb.dec_len,
                obs[i].fwd_ms, t[0], obs[i].bwd_ms, t[1]);
    }
}

dyn_status dyn_machine_measure(const dyn_model_config *cfg, int threads, int ranks, dyn_machine_measure_level level,
                               FILE *log, dyn_machine *m, dyn_machine_auto_info *info, dyn_error *err)
{
    double t0 = dyn_time_ms();
    memset(info, 0, sizeof *info);
    dyn_machine_auto_key(cfg, threads, ranks, level, info->key, sizeof info->key, info->cpu, info->blas);
    info->threads = threads;
    info->ranks = ranks < 1 ? 1 : ranks;
    dyn_machine_obs obs[MAX_SHAPES];
    int n = shapes_make(cfg, level, obs, MAX_SHAPES);
    if (log != NULL) {
        fprintf(log, "measuring this machine for the cost model (%d layer shapes and the optimizer step, %d "
                     "thread%s; up to ~30 s, cached afterwards) ...\n",
                n, threads, threads == 1 ? "" : "s");
        fflush(log);
    }
    int tiny = level == DYN_MACHINE_MEASURE_TINY;
    dyn_profiler *p = dyn_profiler_create(cfg, threads, tiny ? 1 : 3, 1, err);
    if (p == NULL) return err ? err->code : DYN_ERR_NOMEM;
    dyn_status st = DYN_OK;
    double probe[MAX_SHAPES];
    for (int i = 0; i < n && st == DYN_OK; i++) {
        dyn_layer_cost lc;
        st = measure_obs(p, &obs[i], &lc, err);
        obs[i].fwd_ms = lc.fwd_ms;
        obs[i].bwd_ms = lc.bwd_ms;
        probe[i] = dyn_profiler_probe_last_ms(p);
    }
    if (st == DYN_OK && !tiny) st = remeasure_slowed(p, obs, n, probe, t0, info, err);
    dyn_machine_gemm_obs gemm[GEMM_N_TOKENS];
    int n_gemm = st == DYN_OK && !fit_joint() ? gemm_measure(cfg, level, gemm, err) : 0;
    if (n_gemm < 0) st = err ? err->code : DYN_ERR_NOMEM;
    double opt = 0;
    if (st == DYN_OK) st = dyn_profiler_measure_optimizer(p, &opt, err);
    dyn_profiler_free(p);
    if (st != DYN_OK) return st;
    info->optimizer_ms_per_mparam = opt;
    /* one million parameters at the measured rate per million */
    st = dyn_machine_fit(cfg, dyn_machine_builtin("cpu"), obs, n, gemm, n_gemm, 1e6, opt, m, &info->fit, err);
    info->measure_s = (dyn_time_ms() - t0) / 1000.0;
    if (st == DYN_OK && log != NULL && getenv("DYN_MACHINE_MEASURE_SHOW") != NULL)
        show_fit(cfg, m, obs, n, gemm, n_gemm, log, err);
    return st;
}

/* mkdir -p dir. */
static int mkdirs(const char *dir)
{
    char buf[1024];
    if (snprintf(buf, sizeof buf, "%s/", dir) >= (int)sizeof buf) return -1;
    for (char *s = buf + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        int bad = mkdir(buf, 0755) != 0 && errno != EEXIST;
        *s = '/';
        if (bad) return -1;
    }
    return 0;
}

dyn_status dyn_machine_auto_get(const char *dir, const dyn_model_config *cfg, int threads, int ranks,
                                dyn_machine_measure_level level, int make, FILE *log, dyn_machine *m,
                                dyn_machine_auto_info *info, char *path, size_t cap, dyn_error *err)
{
    char key[512], cpu[64], blas[32];
    dyn_machine_auto_key(cfg, threads, ranks, level, key, sizeof key, cpu, blas);
    dyn_status st = dyn_machine_auto_path(dir, key, path, cap, err);
    if (st != DYN_OK) return st;
    dyn_error rerr;
    st = dyn_machine_auto_read(path, key, m, info, &rerr);
    if (st == DYN_OK) {
        snprintf(info->cpu, sizeof info->cpu, "%s", cpu);
        snprintf(info->blas, sizeof info->blas, "%s", blas);
        info->threads = threads;
        info->ranks = ranks < 1 ? 1 : ranks;
        return DYN_OK;
    }
    if (st == DYN_ERR_PARSE && log != NULL) fprintf(log, "%s; measuring again\n", rerr.msg);
    if (!make)
        return dyn_error_set(err, DYN_ERR_IO, "no measured machine for this CPU, kernel, threads and model in %s",
                             dir);
    if (mkdirs(dir) != 0)
        return dyn_error_set(err, DYN_ERR_IO, "machine cache: cannot create %s: %s", dir, strerror(errno));
    if ((st = dyn_machine_measure(cfg, threads, ranks, level, log, m, info, err)) != DYN_OK) return st;
    return dyn_machine_auto_write(path, m, info, err);
}

void dyn_machine_auto_describe(const dyn_machine *m, const dyn_machine_auto_info *info, char *buf, size_t cap)
{
    char beside[64] = "";
    if (info->ranks > 1)
        snprintf(beside, sizeof beside, " beside %d other rank%s", info->ranks - 1, info->ranks == 2 ? "" : "s");
    snprintf(buf, cap,
             "%s on %s, OpenBLAS %s, %d thread%s%s: matmul %.1f GFLOP/s (n_half %.1f rows), attention %.1f GFLOP/s, "
             "memory %.1f GB/s, layer overhead %.4f ms, optimizer %.2f ms per million parameters; fit within "
             "%.1f %% median, %.1f %% worst on %d times",
             info->cached ? "measured earlier (cached)" : "measured now", info->cpu, info->blas, info->threads,
             info->threads == 1 ? "" : "s", beside, m->matmul_gflops, m->gemm_n_half, m->attn_gflops, m->mem_gbps,
             m->layer_overhead_ms, info->optimizer_ms_per_mparam, 100 * info->fit.median_err,
             100 * info->fit.worst_err, info->fit.n);
    if (!info->cached) {
        size_t len = strlen(buf);
        if (len < cap)
            snprintf(buf + len, cap - len, " in %.1f s (%d shape%s measured again: slowed by other work)",
                     info->measure_s, info->remeasured, info->remeasured == 1 ? "" : "s");
    }
}
