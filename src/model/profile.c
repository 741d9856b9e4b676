/* profile.c — the layer profiler (contract in profile.h): one stage-only
 * model per layer kind holding just that kind's layers, random boundary
 * activations in and gradients out, timed forward / backward / split
 * backward with a fresh activation arena per shape so that its size is the
 * shape's own, not the largest seen so far. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dynapipe/model_config.h" /* defines: dyn_model_kind_name */
#include "model/model.h"   /* defines: dyn_model_*, dyn_model_microbatch_* */
#include "model/profile.h" /* defines: dyn_profiler_*, dyn_profile_* */
#include "model/threads.h" /* defines: dyn_threads_set */
#include "util/rng.h"      /* defines: dyn_rng_* */
#include "util/util.h"     /* defines: dyn_calloc, DYN_RESERVE, dyn_time_ms, dyn_median */

#define MB_BYTES (1024.0 * 1024.0)
#define MIN_POINT_MS 30.0 /* timed passes a point's repeats add up to, at least */
#define MAX_REPEATS 41
#define PROBE_M 256 /* the reference kernel: (PROBE_M x PROBE_K) by (PROBE_K x PROBE_N) */
#define PROBE_K 256
#define PROBE_N 1024
#define PROBE_RUNS 3 /* its time is the fastest of this many back to back */

/* A contiguous layer range [first, last) held by its own stage model. */
typedef struct piece {
    dyn_model *m;
    int first, last;
} piece;

struct dyn_profiler {
    dyn_model_config cfg;
    int threads, repeats, warmup;
    int64_t max_tokens; /* grid points over it are scaled from fewer rows (0: none) */
    int L;
    piece kinds[DYN_LAYER_KIND_COUNT]; /* m NULL: the model has no such kind */
    double *times; /* [repeats] scratch */
    int sweeps;         /* dyn_profile_grid_run's passes over the grid (>= 1) */
    int64_t n_measured, n_unsettled; /* the last grid run's points */
    float *probe_a, *probe_b, *probe_c; /* the reference kernel's operands */
    double probe_last, probe_best;
    double *probes; /* every measurement's reference time, [n_probes] of [cap_probes] */
    int64_t n_probes, cap_probes;
    dyn_cost_grid coarse; /* dyn_profiler_set_coarse's axes; n_rows 0: none */
    int derive_full;      /* dyn_profiler_set_derive_full */
    int sum_planes;       /* dyn_profiler_set_sum_planes */
    dyn_rng rng;
};

/* The model layers [first, last) of kind k (profile.h); 0 when the model
 * has no such kind. */
static int kind_range(const dyn_model_config *c, int k, int *first, int *last)
{
    if (!dyn_cost_kind_present(c, (dyn_layer_kind)k)) return 0;
    int ne = c->n_layers, nd = c->n_dec_layers, gpt = dyn_model_kind_decoder_only(c->kind);
    switch (k) {
    case DYN_LAYER_EMBED: *first = 0, *last = 1; break;
    case DYN_LAYER_ENCODER: *first = 1, *last = 2; break;
    case DYN_LAYER_BRIDGE: *first = ne + 1, *last = ne + 3; break; /* final norm, decoder embedding */
    case DYN_LAYER_DECODER: *first = ne + 3, *last = ne + 4; break;
    default: *first = gpt ? ne + 1 : ne + nd + 3, *last = *first + 1; break; /* the head */
    }
    return 1;
}

dyn_profiler *dyn_profiler_create(const dyn_model_config *cfg, int threads, int repeats, int warmup,
                                  dyn_error *err)
{
    if (threads < 1 || repeats < 1 || warmup < 0) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "profile: threads and repeats must be >= 1, warm-up >= 0");
        return NULL;
    }
    dyn_profiler *p = dyn_calloc(1, sizeof *p, "profiler", err);
    if (p == NULL) return NULL;
    p->cfg = *cfg;
    p->threads = threads, p->repeats = repeats, p->warmup = warmup, p->sweeps = 1;
    p->L = dyn_model_config_num_layers(cfg);
    dyn_rng_seed(&p->rng, 20261201);
    p->times = dyn_calloc((size_t)repeats, sizeof *p->times, "profile times", err);
    p->probe_a = dyn_calloc((size_t)PROBE_M * PROBE_K, sizeof(float), "profile reference kernel", err);
    p->probe_b = dyn_calloc((size_t)PROBE_K * PROBE_N, sizeof(float), "profile reference kernel", err);
    p->probe_c = dyn_calloc((size_t)PROBE_M * PROBE_N, sizeof(float), "profile reference kernel", err);
    if (p->times == NULL || p->probe_a == NULL || p->probe_b == NULL || p->probe_c == NULL) goto fail;
    for (size_t i = 0; i < (size_t)PROBE_M * PROBE_K; i++) p->probe_a[i] = (float)(dyn_rng_uniform(&p->rng) - 0.5);
    for (size_t i = 0; i < (size_t)PROBE_K * PROBE_N; i++) p->probe_b[i] = (float)(dyn_rng_uniform(&p->rng) - 0.5);
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        piece *pc = &p->kinds[k];
        if (!kind_range(cfg, k, &pc->first, &pc->last)) continue;
        pc->m = dyn_model_create_stage(cfg, 1, pc->first, pc->last, err);
        if (pc->m == NULL) goto fail;
        dyn_model_set_threads(pc->m, threads);
    }
    dyn_threads_set(threads);
    return p;
fail:
    dyn_profiler_free(p);
    return NULL;
}

void dyn_profiler_set_max_tokens(dyn_profiler *p, int64_t max_tokens)
{
    p->max_tokens = max_tokens > 0 ? max_tokens : 0;
}

void dyn_profiler_set_sweeps(dyn_profiler *p, int sweeps) { p->sweeps = sweeps > 1 ? sweeps : 1; }

void dyn_profiler_set_derive_full(dyn_profiler *p, int on) { p->derive_full = on != 0; }

void dyn_profiler_set_sum_planes(dyn_profiler *p, int on) { p->sum_planes = on != 0; }

void dyn_profiler_grid_stats(const dyn_profiler *p, int64_t *measured, int64_t *unsettled)
{
    *measured = p->n_measured, *unsettled = p->n_unsettled;
}

void dyn_profiler_free(dyn_profiler *p)
{
    if (p == NULL) return;
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++)
        dyn_model_free(p->kinds[k].m);
    free(p->times);
    free(p->probe_a), free(p->probe_b), free(p->probe_c), free(p->probes);
    dyn_profile_grid_free(&p->coarse);
    free(p);
}

static int32_t *axis_copy(const int32_t *v, int32_t n, dyn_error *err)
{
    int32_t *c = dyn_calloc((size_t)n, sizeof *c, "profile coarse grid", err);
    if (c != NULL) memcpy(c, v, (size_t)n * sizeof *c);
    return c;
}

dyn_status dyn_profiler_set_coarse(dyn_profiler *p, const dyn_cost_grid *coarse, dyn_error *err)
{
    dyn_profile_grid_free(&p->coarse);
    if (coarse == NULL) return DYN_OK;
    int32_t *rows = axis_copy(coarse->rows, coarse->n_rows, err);
    int32_t *enc = axis_copy(coarse->enc_len, coarse->n_enc, err);
    int32_t *dec = axis_copy(coarse->dec_len, coarse->n_dec, err);
    if (rows == NULL || enc == NULL || dec == NULL) {
        free(rows), free(enc), free(dec);
        return DYN_ERR_NOMEM;
    }
    p->coarse = (dyn_cost_grid){coarse->n_rows, coarse->n_enc, coarse->n_dec, rows, enc, dec};
    return DYN_OK;
}

/* The reference kernel's time now: the fastest of PROBE_RUNS runs, so
 * that one preemption does not make a calm moment look slow. */
static double probe_run(dyn_profiler *p)
{
    double best = INFINITY;
    for (int i = 0; i < PROBE_RUNS; i++) {
        double t0 = dyn_time_ms();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, PROBE_M, PROBE_N, PROBE_K, 1.0f, p->probe_a, PROBE_K,
                    p->probe_b, PROBE_N, 0.0f, p->probe_c, PROBE_N);
        double t = dyn_time_ms() - t0;
        if (t < best) best = t;
    }
    return best;
}

/* Record the reference time around one measurement (the slower side). */
static dyn_status probe_record(dyn_profiler *p, double before, double after, dyn_error *err)
{
    size_t cap = (size_t)p->cap_probes; /* 1024, then doubling */
    if (DYN_RESERVE(p->probes, cap, p->n_probes ? (size_t)p->n_probes + 1 : 1024) != 0)
        return dyn_error_set(err, DYN_ERR_NOMEM, "profile: out of memory for reference times");
    p->cap_probes = (int64_t)cap;
    p->probe_last = fmax(before, after);
    p->probe_best = p->probe_best > 0 ? fmin(p->probe_best, fmin(before, after)) : fmin(before, after);
    p->probes[p->n_probes++] = p->probe_last;
    return DYN_OK;
}

double dyn_profiler_probe_last_ms(const dyn_profiler *p) { return p->probe_last; }
double dyn_profiler_probe_best_ms(const dyn_profiler *p) { return p->probe_best; }

void dyn_profiler_probe_stats(const dyn_profiler *p, int64_t *measurements, int64_t *calm)
{
    *measurements = p->n_probes, *calm = 0;
    for (int64_t i = 0; i < p->n_probes; i++) *calm += p->probes[i] <= p->probe_best * (1.0 + DYN_SWEEP_CALM);
}

/* The buffers one measurement of one piece owns. */
typedef struct run_bufs {
    float *in, *out, *dout, *din;
    size_t n_in, n_out;
} run_bufs;

static void run_bufs_free(run_bufs *b)
{
    free(b->in), free(b->out), free(b->dout), free(b->din);
}

static dyn_status run_bufs_make(run_bufs *b, dyn_profiler *p, const piece *pc, const dyn_model_microbatch *mb,
                                dyn_error *err)
{
    memset(b, 0, sizeof *b);
    b->n_in = dyn_model_boundary_floats(pc->m, pc->first, mb);
    b->n_out = dyn_model_boundary_floats(pc->m, pc->last, mb);
    b->in = dyn_calloc(b->n_in + 1, sizeof(float), "profile input", err);
    b->din = dyn_calloc(b->n_in + 1, sizeof(float), "profile input gradient", err);
    b->out = dyn_calloc(b->n_out + 1, sizeof(float), "profile output", err);
    b->dout = dyn_calloc(b->n_out + 1, sizeof(float), "profile output gradient", err);
    if (!b->in || !b->din || !b->out || !b->dout) {
        run_bufs_free(b);
        return DYN_ERR_NOMEM;
    }
    for (size_t i = 0; i < b->n_in; i++) b->in[i] = (float)(dyn_rng_uniform(&p->rng) * 2.0 - 1.0);
    for (size_t i = 0; i < b->n_out; i++) b->dout[i] = (float)(dyn_rng_uniform(&p->rng) * 2.0 - 1.0) * 1e-3f;
    return DYN_OK;
}

/* Timings of one piece: [0] fwd, [1] bwd, [2] bwd_input, [3] bwd_weight
 * (medians, ms); bytes stored after forward, and the arena's largest other
 * bytes (scratch, gradients, the split backward's kept buffer). */
typedef struct piece_result {
    double ms[4];
    double stored_bytes, work_bytes, output_bytes, input_bytes, kept_bytes;
} piece_result;

/* The arena's working region (scratch, gradient buffers) on top of the
 * stored bytes, and the boundaries. The split backward's kept buffer is a
 * second allocation held from B to W, not working memory of a pass: not
 * counted here (docs/performance.md, "Peak memory"). The arena is made
 * whole by the forward. */
static void piece_arena_fill(piece_result *res, const dyn_model_acts *a, const run_bufs *b)
{
    double cap = (double)dyn_model_acts_capacity_bytes(a);
    res->work_bytes = cap > res->stored_bytes ? cap - res->stored_bytes : 0.0;
    res->output_bytes = (double)b->n_out * sizeof(float);
    res->input_bytes = (double)b->n_in * sizeof(float);
}

/* One forward of the piece on a, from b's input into b's output (the
 * loss, when the piece ends the model, is not needed). */
static dyn_status piece_forward(const dyn_profiler *p, const piece *pc, dyn_model_acts *a,
                                const dyn_model_microbatch *mb, run_bufs *b, int recompute, dyn_error *err)
{
    int has_in = pc->first > 0, has_out = pc->last < p->L;
    double loss = 0;
    return dyn_model_stage_forward(pc->m, a, mb, pc->first, pc->last, has_in ? b->in : NULL, has_out ? b->out : NULL,
                                   recompute, has_out ? NULL : &loss, NULL, err);
}

/* The memory only (res->ms left 0): one forward, which makes
 * the arena whole, and the bytes the split backward's first half would
 * keep, counted as it counts them (dyn_model_split_kept_bytes). */
static dyn_status piece_memory(dyn_profiler *p, const piece *pc, const dyn_model_microbatch *mb, int recompute,
                               piece_result *res, dyn_error *err)
{
    run_bufs b;
    dyn_status st = run_bufs_make(&b, p, pc, mb, err);
    if (st != DYN_OK) return st;
    dyn_model_acts *a = dyn_model_acts_create(err);
    st = a == NULL ? DYN_ERR_NOMEM : piece_forward(p, pc, a, mb, &b, recompute, err);
    if (st == DYN_OK) {
        res->stored_bytes = (double)dyn_model_acts_stored_bytes(a);
        res->kept_bytes = (double)dyn_model_split_kept_bytes(pc->m, mb, pc->first, pc->last, recompute);
        piece_arena_fill(res, a, &b);
    }
    dyn_model_acts_free(a);
    run_bufs_free(&b);
    return st;
}

static dyn_status piece_measure(dyn_profiler *p, const piece *pc, const dyn_model_microbatch *mb, int recompute,
                                piece_result *res, dyn_error *err)
{
    run_bufs b;
    dyn_status st = run_bufs_make(&b, p, pc, mb, err);
    if (st != DYN_OK) return st;
    dyn_model_acts *a = dyn_model_acts_create(err);
    /* Small shapes take microseconds, where one preemption is a large
     * fraction: a point gets more repeats (up to MAX_REPEATS) until its
     * timed passes add up to MIN_POINT_MS, so its median is of many. */
    int cap = p->repeats > MAX_REPEATS ? p->repeats : MAX_REPEATS, n = 0;
    double *t4 = dyn_calloc((size_t)cap * 4, sizeof *t4, "profile times", err);
    if (a == NULL || t4 == NULL) {
        st = DYN_ERR_NOMEM;
        goto done;
    }
    int has_in = pc->first > 0, has_out = pc->last < p->L;
    float dloss = 1e-3f;
    double timed_ms = 0;
    for (int r = -p->warmup; st == DYN_OK && (r < p->repeats || (timed_ms < MIN_POINT_MS && r < cap)); r++) {
        dyn_model_zero_grad(pc->m);
        double t0 = dyn_time_ms();
        st = piece_forward(p, pc, a, mb, &b, recompute, err);
        double t1 = dyn_time_ms();
        if (st == DYN_OK)
            st = dyn_model_stage_backward(pc->m, a, mb, pc->first, pc->last, has_out ? b.dout : NULL,
                                          has_in ? b.din : NULL, dloss, err);
        double t2 = dyn_time_ms();
        if (st == DYN_OK) st = piece_forward(p, pc, a, mb, &b, recompute, err);
        if (r == 0 && st == DYN_OK) res->stored_bytes = (double)dyn_model_acts_stored_bytes(a);
        double t3 = dyn_time_ms();
        if (st == DYN_OK)
            st = dyn_model_stage_backward_input(pc->m, a, mb, pc->first, pc->last, has_out ? b.dout : NULL,
                                                has_in ? b.din : NULL, dloss, err);
        double t4t = dyn_time_ms();
        if (r == 0 && st == DYN_OK) res->kept_bytes = (double)dyn_model_acts_kept_bytes(a);
        if (st == DYN_OK) st = dyn_model_stage_backward_weight(pc->m, a, mb, pc->first, pc->last, err);
        double t5 = dyn_time_ms();
        if (r >= 0) {
            t4[r] = t1 - t0;
            t4[cap + r] = t2 - t1;
            t4[2 * cap + r] = t4t - t3;
            t4[3 * cap + r] = t5 - t4t;
            timed_ms += (t2 - t0) + (t5 - t3);
            n = r + 1;
        }
    }
    if (st == DYN_OK) {
        for (int j = 0; j < 4; j++) res->ms[j] = dyn_median(t4 + (size_t)j * cap, n);
        piece_arena_fill(res, a, &b);
    }
done:
    free(t4);
    dyn_model_acts_free(a);
    run_bufs_free(&b);
    return st;
}

/* A dense micro-batch: rows samples of enc_len tokens (GPT: half input,
 * half target) and, for T5, dec_len target tokens; ids are random bytes. */
static dyn_model_microbatch *mb_make(dyn_profiler *p, int32_t rows, int32_t enc_len, int32_t dec_len,
                                     dyn_error *err)
{
    int gpt = dyn_model_kind_decoder_only(p->cfg.kind);
    int32_t in_len = gpt ? (enc_len + 1) / 2 : enc_len, tg_len = gpt ? enc_len - in_len : dec_len;
    if (gpt && enc_len < 2) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "profile: a gpt length needs at least 2 tokens (got %d)", enc_len);
        return NULL;
    }
    int32_t *tok = dyn_calloc((size_t)in_len + (size_t)tg_len, sizeof *tok, "profile tokens", err);
    dyn_token_sample *s = dyn_calloc((size_t)rows, sizeof *s, "profile samples", err);
    dyn_model_microbatch *mb = NULL;
    if (tok != NULL && s != NULL) {
        for (int32_t i = 0; i < in_len + tg_len; i++) tok[i] = (int32_t)(dyn_rng_uniform(&p->rng) * 256.0) & 255;
        for (int32_t r = 0; r < rows; r++) s[r] = (dyn_token_sample){tok, in_len, tok + in_len, tg_len};
        mb = dyn_model_microbatch_create_padded(p->cfg.kind, s, rows, err);
    }
    free(tok);
    free(s);
    return mb;
}

/* Blocks, the only layers that recompute (model.h). */
static int kind_blocks(int k) { return k == DYN_LAYER_ENCODER || k == DYN_LAYER_DECODER; }

/* T5's kinds whose time is an input part plus a target part
 * (dyn_profiler_set_sum_planes): the bridge normalizes the encoder output
 * and embeds the targets in separate layers, the head reads the targets
 * and passes the encoder output through. Neither recomputes. */
static int kind_sums(const dyn_model_config *c, int k)
{
    return c->kind == DYN_MODEL_T5 && (k == DYN_LAYER_BRIDGE || k == DYN_LAYER_LM_HEAD);
}

/* dyn_profiler_measure, or with timed = 0 its memory only (one untimed
 * forward: piece_memory; no reference kernel, times 0). */
static dyn_status measure(dyn_profiler *p, dyn_layer_kind kind, dyn_recompute rc, int32_t rows, int32_t enc_len,
                          int32_t dec_len, int timed, dyn_layer_cost *out, dyn_error *err)
{
    if ((int)kind < 0 || kind >= DYN_LAYER_KIND_COUNT || p->kinds[kind].m == NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "profile: the %s model has no %s layer",
                             dyn_model_kind_name(p->cfg.kind), dyn_layer_kind_name(kind));
    if (rows < 1 || enc_len < 1 || (p->cfg.kind == DYN_MODEL_T5 && dec_len < 1))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "profile: rows and lengths must be >= 1");
    dyn_model_microbatch *mb = mb_make(p, rows, enc_len, dec_len, err);
    if (mb == NULL) return err ? err->code : DYN_ERR_NOMEM;
    memset(out, 0, sizeof *out);
    dyn_status st = DYN_OK;
    double before = timed ? probe_run(p) : 0;
    piece_result r = {{0}, 0, 0, 0, 0, 0};
    const piece *pc = &p->kinds[kind];
    int full = rc == DYN_RECOMPUTE_FULL;
    st = timed ? piece_measure(p, pc, mb, full, &r, err) : piece_memory(p, pc, mb, full, &r, err);
    if (st == DYN_OK) {
        if (full && kind_blocks(kind) && r.stored_bytes > r.input_bytes) {
            /* With full recompute a stage's blocks share one activation
             * region, refilled by each block's re-run forward: per block
             * only its input stays from forward to backward, and the
             * region is working memory (model.h, "activations"). */
            r.work_bytes += r.stored_bytes - r.input_bytes;
            r.stored_bytes = r.input_bytes;
        }
        *out = (dyn_layer_cost){r.ms[0], r.ms[1], r.ms[2], r.ms[3], r.stored_bytes / MB_BYTES,
                                r.work_bytes / MB_BYTES, r.output_bytes / MB_BYTES, r.kept_bytes / MB_BYTES};
    }
    if (st == DYN_OK && timed) st = probe_record(p, before, probe_run(p), err);
    dyn_model_microbatch_free(mb);
    return st;
}

dyn_status dyn_profiler_measure(dyn_profiler *p, dyn_layer_kind kind, dyn_recompute rc, int32_t rows,
                                int32_t enc_len, int32_t dec_len, dyn_layer_cost *out, dyn_error *err)
{
    return measure(p, kind, rc, rows, enc_len, dec_len, 1, out, err);
}

dyn_status dyn_profiler_measure_optimizer(dyn_profiler *p, double *ms_per_mparam, dyn_error *err)
{
    *ms_per_mparam = 0;
    dyn_model *whole = dyn_model_create_stage(&p->cfg, 1, 0, p->L, err);
    if (whole == NULL) return err ? err->code : DYN_ERR_NOMEM;
    dyn_model *m = whole;
    if (dyn_model_num_params(whole) > ((size_t)1 << 25)) {
        dyn_model_free(whole);
        whole = NULL;
        m = p->kinds[DYN_LAYER_ENCODER].m;
    }
    dyn_model_set_threads(m, p->threads);
    dyn_adamw_config cfg = dyn_adamw_default();
    for (int r = -p->warmup; r < p->repeats; r++) {
        double t0 = dyn_time_ms();
        double norm = sqrt(dyn_model_grad_sqnorm_owned(m));
        dyn_model_adamw_step_norm(m, 1e-4f, &cfg, norm, 1.0);
        dyn_model_zero_grad(m);
        if (r >= 0) p->times[r] = dyn_time_ms() - t0;
    }
    *ms_per_mparam = dyn_median(p->times, p->repeats) / ((double)dyn_model_num_params(m) * 1e-6);
    dyn_model_free(whole);
    return DYN_OK;
}

/* ---- grids -------------------------------------------------------------- */

/* Lengths: every 8 up to 64, then steps growing ~1.25x (rounded to 8) up to
 * max; quick keeps about every third point and the last, but not a kept
 * point within 1.25x of the last: next to the longest length, the most
 * expensive to measure, it would add a cell narrower than one step of the
 * full axis (gpt-mini at 512: 440, a third of the quick blocks' time). */
static int32_t *lengths_make(int32_t lo, int32_t max, int quick, int stride, int32_t *n, dyn_error *err)
{
    int32_t *v = dyn_calloc((size_t)max / 8 + 4, sizeof *v, "profile grid", err);
    if (v == NULL) return NULL;
    int32_t k = 0;
    for (int32_t x = lo; x < max;) {
        v[k++] = x;
        int32_t step = x < 64 ? 8 : ((x / 4 + 7) / 8) * 8;
        x += step;
    }
    v[k++] = max;
    int keep = (quick ? 3 : 1) * stride;
    int32_t m = 0;
    for (int32_t i = 0; i < k; i++)
        if (i % keep == 0 || i == k - 1) v[m++] = v[i];
    if (quick && m >= 3 && (double)v[m - 1] < 1.25 * (double)v[m - 2]) v[m - 2] = v[m - 1], m--;
    *n = m;
    return v;
}

dyn_status dyn_profile_grid_default(const dyn_model_config *cfg, int quick, int32_t max_rows, dyn_cost_grid *g,
                                    dyn_error *err)
{
    memset(g, 0, sizeof *g);
    if (max_rows < 1 || cfg->max_seqlen < 8)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "profile: need max rows >= 1 and max_seqlen >= 8");
    static const int32_t R[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256};
    static const int32_t RQ[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    const int32_t *src = quick ? RQ : R;
    int32_t ns = quick ? 9 : 16, nr = 0;
    int32_t *rows = dyn_calloc((size_t)ns + 1, sizeof *rows, "profile grid", err);
    if (rows == NULL) return DYN_ERR_NOMEM;
    for (int32_t i = 0; i < ns && src[i] < max_rows; i++) rows[nr++] = src[i];
    rows[nr++] = max_rows;
    int32_t n_enc = 0, n_dec = 1;
    int gpt = dyn_model_kind_decoder_only(cfg->kind);
    int32_t *enc = lengths_make(8, cfg->max_seqlen, quick, 1, &n_enc, err);
    int32_t *dec = gpt ? dyn_calloc(1, sizeof *dec, "profile grid", err)
                       : lengths_make(8, cfg->max_seqlen, quick, 2, &n_dec, err);
    if (enc == NULL || dec == NULL) {
        free(rows), free(enc), free(dec);
        return DYN_ERR_NOMEM;
    }
    *g = (dyn_cost_grid){nr, n_enc, n_dec, rows, enc, dec};
    return DYN_OK;
}

void dyn_profile_grid_free(dyn_cost_grid *g)
{
    free((void *)g->rows), free((void *)g->enc_len), free((void *)g->dec_len);
    memset(g, 0, sizeof *g);
}

/* Does kind depend on the dec_len axis? T5's embedding and encoder do
 * not, and every kind depends on enc_len: T5's head reads targets only,
 * but its input, the decoder boundary, carries the encoder output, which
 * it stores and writes a (zero) gradient back for (model.h). */
static int uses_dec(const dyn_model_config *c, int kind)
{
    return c->kind == DYN_MODEL_T5 && kind != DYN_LAYER_ENCODER && kind != DYN_LAYER_EMBED;
}

/* Rows x tokens is what a measurement costs: the progress total counts
 * that, so the time left is estimated from the work done, not the points. */
static double point_work(const dyn_model_config *c, int kind, int32_t r, int32_t e, int32_t d)
{
    return (double)r * (e + (uses_dec(c, kind) ? d : 0)) + 64.0;
}

/* Store lc at grid point (a, b, d) of (k, mode mi), copied along dec_len
 * if the kind ignores it and, for NONE, to SELECTIVE (which runs the
 * same). */
static void point_store(const dyn_model_config *c, const dyn_cost_grid *g, dyn_layer_cost *points, int k,
                        dyn_recompute mode, int32_t a, int32_t b, int32_t d, const dyn_layer_cost *lc)
{
    for (int32_t d2 = 0; d2 < g->n_dec; d2++) {
        if (uses_dec(c, k) && d2 != d) continue;
        points[dyn_cost_grid_index(g, (dyn_layer_kind)k, mode, a, b, d2)] = *lc;
        if (mode == DYN_RECOMPUTE_NONE)
            points[dyn_cost_grid_index(g, (dyn_layer_kind)k, DYN_RECOMPUTE_SELECTIVE, a, b, d2)] = *lc;
    }
}

static double cost_total_ms(const dyn_layer_cost *lc)
{
    return lc->fwd_ms + lc->bwd_ms + lc->bwd_input_ms + lc->bwd_weight_ms;
}

void dyn_sweep_point_add(dyn_sweep_point *sp, const dyn_layer_cost *lc, double probe_ms)
{
    double t = cost_total_ms(lc);
    if (sp->n == 0) {
        sp->kept = *lc;
        sp->fastest = t;
    } else {
        dyn_layer_cost *k = &sp->kept;
        k->fwd_ms = fmin(k->fwd_ms, lc->fwd_ms);
        k->bwd_ms = fmin(k->bwd_ms, lc->bwd_ms);
        k->bwd_input_ms = fmin(k->bwd_input_ms, lc->bwd_input_ms);
        k->bwd_weight_ms = fmin(k->bwd_weight_ms, lc->bwd_weight_ms);
        sp->fastest = fmin(sp->fastest, t);
    }
    sp->n++;
    int slot = sp->n_kept;
    if (slot == DYN_SWEEP_KEEP) { /* full: replace the slowest reference, if slower than this one's */
        slot = 0;
        for (int i = 1; i < DYN_SWEEP_KEEP; i++)
            if (sp->probe[i] > sp->probe[slot]) slot = i;
        if (sp->probe[slot] <= probe_ms) return;
    } else {
        sp->n_kept++;
    }
    sp->total[slot] = t, sp->probe[slot] = probe_ms;
}

/* Within DYN_SWEEP_AGREE or DYN_SWEEP_AGREE_MS of fast: the same speed. */
static int same_speed(double fast, double slow)
{
    return slow <= fast * (1.0 + DYN_SWEEP_AGREE) || slow - fast <= DYN_SWEEP_AGREE_MS;
}

int dyn_sweep_point_settled(const dyn_sweep_point *sp, double probe_best_ms)
{
    double first = INFINITY, second = INFINITY;
    for (int i = 0; i < sp->n_kept; i++) {
        if (probe_best_ms > 0 && sp->probe[i] > probe_best_ms * (1.0 + DYN_SWEEP_CALM)) continue;
        double t = sp->total[i];
        if (t < first) second = first, first = t;
        else if (t < second) second = t;
    }
    return second < INFINITY && same_speed(first, second) && same_speed(sp->fastest, first);
}

/* Past the tokens a run's micro-batch can hold (--max-tokens): the point
 * with fewer rows (row a_from) at the same lengths, in proportion to the
 * rows (time and memory are linear in rows at a fixed length), not
 * measured. */
/* out = u x + t y, every time and memory figure (out may be x or y). */
static void cost_blend(const dyn_layer_cost *x, double u, const dyn_layer_cost *y, double t, dyn_layer_cost *out)
{
    *out = (dyn_layer_cost){u * x->fwd_ms + t * y->fwd_ms,       u * x->bwd_ms + t * y->bwd_ms,
                            u * x->bwd_input_ms + t * y->bwd_input_ms, u * x->bwd_weight_ms + t * y->bwd_weight_ms,
                            u * x->stored_mb + t * y->stored_mb, u * x->peak_mb + t * y->peak_mb,
                            u * x->output_mb + t * y->output_mb, u * x->kept_mb + t * y->kept_mb};
}

static void point_scale(const dyn_model_config *c, const dyn_cost_grid *g, dyn_layer_cost *points, int k,
                        dyn_recompute mode, int32_t a_from, int32_t a, int32_t b, int32_t d)
{
    const dyn_layer_cost *q = &points[dyn_cost_grid_index(g, (dyn_layer_kind)k, mode, a_from, b, d)];
    dyn_layer_cost lc;
    cost_blend(q, (double)g->rows[a] / (double)g->rows[a_from], q, 0.0, &lc);
    point_store(c, g, points, k, mode, a, b, d, &lc);
}

/* What one pass over the grid does at each point it visits. */
typedef enum {
    PASS_COUNT_ALL,
    PASS_COUNT_UNSETTLED,
    PASS_COUNT_DERIVE,
    PASS_MEASURE_ALL,
    PASS_MEASURE_UNSETTLED,
    PASS_DERIVE,
    PASS_SCALE
} pass_kind;

/* A memory-only pass (one untimed forward: piece_memory) against a timed
 * measurement (a warm-up and 3 repeats of two forwards and two backwards
 * each, a backward about twice a forward), for the progress bar. */
#define DERIVE_WORK 0.04

/* on[axis][i]: is value i of the run grid's axis on the coarse grid
 * (dyn_profiler_set_coarse)? Not made without one (no kind_coarse). */
typedef struct coarse_marks {
    uint8_t *on[3];
} coarse_marks;

/* A grid run: the points, each measured point's sweeps (seen, indexed as
 * points), and the progress bar's rows x tokens of work. */
typedef struct grid_run {
    dyn_profiler *p;
    const dyn_cost_grid *g;
    dyn_layer_cost *points;
    dyn_sweep_point *seen;
    dyn_profile_progress_fn fn;
    void *ctx;
    double total, done;
    double probe_best; /* the reference time a settling pass judges by, fixed at its start */
    coarse_marks cm;
} grid_run;

/* Is kind k measured on the coarse grid's points only? Not the embedding
 * and T5's bridge: memory-bound and cheap, they take the whole grid. */
static int kind_coarse(const grid_run *r, int k)
{
    return r->p->coarse.n_rows > 0 && k != DYN_LAYER_EMBED && k != DYN_LAYER_BRIDGE;
}

static int point_on_coarse(const grid_run *r, int32_t a, int32_t b, int32_t d)
{
    return r->cm.on[0][a] && r->cm.on[1][b] && r->cm.on[2][d];
}

/* Off the two planes of a summed kind (dyn_profiler_set_sum_planes): not
 * timed; its memory from one untimed pass, its times from the planes
 * (dyn_profile_points_sum_planes). */
static int point_off_planes(const grid_run *r, int k, int32_t b, int32_t d)
{
    return r->p->sum_planes && kind_sums(&r->p->cfg, k) && b > 0 && d > 0;
}

/* Does a point that is not timed get an untimed pass for its memory? A
 * block under derived full recompute and a summed kind's plain point off
 * the planes do; the others copy the plain point (the embedding, the
 * bridge and the head run the same under full recompute: only blocks
 * recompute). */
static int derive_runs(int k, dyn_recompute mode, int off)
{
    return off ? mode != DYN_RECOMPUTE_FULL : kind_blocks(k);
}

/* A point that is not timed (dyn_profiler_set_derive_full's full
 * recompute, or off the planes of a summed kind): its memory now, either
 * from one untimed pass (runs: derive_runs) or with the rest of the plain
 * point; its times later, from the plain point after the monotone fit
 * (derive_full_times) or from the planes (dyn_profile_points_sum_planes). */
static dyn_status point_derive(grid_run *r, int k, dyn_recompute mode, int runs, int32_t a, int32_t b, int32_t d,
                               dyn_error *err)
{
    dyn_profiler *p = r->p;
    const dyn_cost_grid *g = r->g;
    dyn_layer_cost lc = r->points[dyn_cost_grid_index(g, (dyn_layer_kind)k, DYN_RECOMPUTE_NONE, a, b, d)];
    if (runs) {
        dyn_layer_cost mem = {0}; /* measure sets it; zeroed for the compiler, which cannot tell */
        dyn_status st = measure(p, (dyn_layer_kind)k, mode, g->rows[a], g->enc_len[b], g->dec_len[d], 0, &mem, err);
        if (st != DYN_OK) return st;
        lc.stored_mb = mem.stored_mb, lc.peak_mb = mem.peak_mb, lc.output_mb = mem.output_mb, lc.kept_mb = mem.kept_mb;
    }
    point_store(&p->cfg, g, r->points, k, mode, a, b, d, &lc);
    return DYN_OK;
}

/* After the monotone fit (which fits each mode on its own), the derived
 * full-recompute times at every point from the fitted plain ones: a
 * block's forward and weight half are the same, its backward and input
 * half run the forward again first; the other kinds' are the same. Sums
 * of times monotone in rows and lengths stay monotone, so the table stays
 * fitted; the memory (point_derive) is kept. */
static void derive_full_times(const dyn_cost_grid *g, dyn_layer_cost *points)
{
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++)
        for (int32_t a = 0; a < g->n_rows; a++)
            for (int32_t b = 0; b < g->n_enc; b++)
                for (int32_t d = 0; d < g->n_dec; d++) {
                    dyn_layer_kind kind = (dyn_layer_kind)k;
                    const dyn_layer_cost *n = &points[dyn_cost_grid_index(g, kind, DYN_RECOMPUTE_NONE, a, b, d)];
                    dyn_layer_cost *f = &points[dyn_cost_grid_index(g, kind, DYN_RECOMPUTE_FULL, a, b, d)];
                    double again = kind_blocks(k) ? n->fwd_ms : 0; /* the forward run again */
                    f->fwd_ms = n->fwd_ms, f->bwd_weight_ms = n->bwd_weight_ms;
                    f->bwd_ms = n->bwd_ms + again, f->bwd_input_ms = n->bwd_input_ms + again;
                }
}

/* x + y - o, but never below the larger plane point: the point off the
 * planes does at least the work of each of them. On a loaded machine the
 * corner o can be measured slower than x or y, and the plain sum could then
 * fall to zero or below. */
static double plane_sum(double x, double y, double o)
{
    double s = x + y - o, m = x > y ? x : y;
    return s > m ? s : m;
}

void dyn_profile_points_sum_planes(const dyn_model_config *cfg, const dyn_cost_grid *g, dyn_layer_cost *points)
{
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        if (!kind_sums(cfg, k)) continue;
        dyn_layer_kind kind = (dyn_layer_kind)k;
        for (int m = 0; m < DYN_RECOMPUTE_COUNT; m++)
            for (int32_t a = 0; a < g->n_rows; a++)
                for (int32_t b = 1; b < g->n_enc; b++)
                    for (int32_t d = 1; d < g->n_dec; d++) {
                        dyn_recompute mode = (dyn_recompute)m;
                        const dyn_layer_cost *x = &points[dyn_cost_grid_index(g, kind, mode, a, b, 0)];
                        const dyn_layer_cost *y = &points[dyn_cost_grid_index(g, kind, mode, a, 0, d)];
                        const dyn_layer_cost *o = &points[dyn_cost_grid_index(g, kind, mode, a, 0, 0)];
                        dyn_layer_cost *t = &points[dyn_cost_grid_index(g, kind, mode, a, b, d)];
                        t->fwd_ms = plane_sum(x->fwd_ms, y->fwd_ms, o->fwd_ms);
                        t->bwd_ms = plane_sum(x->bwd_ms, y->bwd_ms, o->bwd_ms);
                        t->bwd_input_ms = plane_sum(x->bwd_input_ms, y->bwd_input_ms, o->bwd_input_ms);
                        t->bwd_weight_ms = plane_sum(x->bwd_weight_ms, y->bwd_weight_ms, o->bwd_weight_ms);
                    }
    }
}

/* One point of a pass: the COUNT passes add its work to the total, the
 * MEASURE passes measure it (UNSETTLED: unless settled) and store what its
 * sweeps keep, DERIVE gives the points not timed their memory
 * (point_derive), SCALE fills the points past --max-tokens. */
static dyn_status grid_point(grid_run *r, pass_kind what, int k, dyn_recompute mode, int32_t a, int32_t b,
                             int32_t d, dyn_error *err)
{
    dyn_profiler *p = r->p;
    const dyn_cost_grid *g = r->g;
    if (kind_coarse(r, k) && !point_on_coarse(r, a, b, d)) return DYN_OK; /* filled: grid_fill */
    double w = point_work(&p->cfg, k, g->rows[a], g->enc_len[b], g->dec_len[d]);
    int scaled = a > 0 && p->max_tokens > 0 && w - 64.0 > (double)p->max_tokens;
    if (what == PASS_SCALE) {
        int32_t a_from = a - 1;
        while (a_from > 0 && kind_coarse(r, k) && !r->cm.on[0][a_from]) a_from--;
        if (scaled) point_scale(&p->cfg, g, r->points, k, mode, a_from, a, b, d);
        return DYN_OK;
    }
    int off = point_off_planes(r, k, b, d);
    int derived = (p->derive_full && mode == DYN_RECOMPUTE_FULL) || off;
    if (derived != (what == PASS_COUNT_DERIVE || what == PASS_DERIVE) || scaled) return DYN_OK;
    int runs = derive_runs(k, mode, off);
    double dw = runs ? w * DERIVE_WORK : 0;
    if (what == PASS_COUNT_DERIVE) {
        r->total += dw;
        return DYN_OK;
    }
    if (what == PASS_DERIVE) {
        dyn_status st = point_derive(r, k, mode, runs, a, b, d, err);
        r->done += dw;
        if (st == DYN_OK && r->fn) r->fn(r->ctx, (int64_t)r->done, (int64_t)r->total, 0);
        return st;
    }
    dyn_sweep_point *sp = &r->seen[dyn_cost_grid_index(g, (dyn_layer_kind)k, mode, a, b, d)];
    if ((what == PASS_COUNT_UNSETTLED || what == PASS_MEASURE_UNSETTLED) && dyn_sweep_point_settled(sp, r->probe_best))
        return DYN_OK;
    if (what == PASS_COUNT_ALL || what == PASS_COUNT_UNSETTLED) {
        r->total += w;
        return DYN_OK;
    }
    dyn_layer_cost lc;
    dyn_status st =
        dyn_profiler_measure(p, (dyn_layer_kind)k, mode, g->rows[a], g->enc_len[b], g->dec_len[d], &lc, err);
    if (st != DYN_OK) return st;
    dyn_sweep_point_add(sp, &lc, p->probe_last);
    point_store(&p->cfg, g, r->points, k, mode, a, b, d, &sp->kept);
    r->done += w;
    if (r->fn) r->fn(r->ctx, (int64_t)r->done, (int64_t)r->total, 0);
    return DYN_OK;
}

/* Visit every grid point each kind depends on, per recompute mode. */
static dyn_status grid_pass(grid_run *r, pass_kind what, dyn_error *err)
{
    const dyn_model_config *c = &r->p->cfg;
    const dyn_cost_grid *g = r->g;
    /* NONE and SELECTIVE run the same (profile.h): measured once. */
    const dyn_recompute modes[2] = {DYN_RECOMPUTE_NONE, DYN_RECOMPUTE_FULL};
    dyn_status st = DYN_OK;
    for (int k = 0; k < DYN_LAYER_KIND_COUNT && st == DYN_OK; k++) {
        if (r->p->kinds[k].m == NULL) continue;
        for (int mi = 0; mi < 2 && st == DYN_OK; mi++)
            for (int32_t a = 0; a < g->n_rows && st == DYN_OK; a++)
                for (int32_t b = 0; b < g->n_enc && st == DYN_OK; b++)
                    for (int32_t d = 0; d < (uses_dec(c, k) ? g->n_dec : 1) && st == DYN_OK; d++)
                        st = grid_point(r, what, k, modes[mi], a, b, d, err);
    }
    return st;
}

/* Fill, along axis ax of the run grid, the points off the coarse axis from
 * the nearest coarse values either side, on the lines whose later axes
 * are coarse (axis by axis, rows first: then every point is a multilinear
 * blend of its coarse cell's corners, as the table reader would blend). */
static void grid_fill_axis(grid_run *r, int k, dyn_recompute mode, int ax)
{
    const dyn_cost_grid *g = r->g;
    const int32_t n[3] = {g->n_rows, g->n_enc, g->n_dec};
    const int32_t *vals[3] = {g->rows, g->enc_len, g->dec_len};
    int32_t i[3];
    for (i[0] = 0; i[0] < n[0]; i[0]++)
        for (i[1] = 0; i[1] < n[1]; i[1]++)
            for (i[2] = 0; i[2] < n[2]; i[2]++) {
                int later_coarse = 1;
                for (int a = ax + 1; a < 3; a++) later_coarse &= r->cm.on[a][i[a]];
                if (!later_coarse || r->cm.on[ax][i[ax]]) continue;
                int32_t j0[3] = {i[0], i[1], i[2]}, j1[3] = {i[0], i[1], i[2]};
                while (!r->cm.on[ax][j0[ax]]) j0[ax]--; /* the first and last values are coarse */
                while (!r->cm.on[ax][j1[ax]]) j1[ax]++;
                const int32_t *v = vals[ax];
                double t = (double)(v[i[ax]] - v[j0[ax]]) / (double)(v[j1[ax]] - v[j0[ax]]);
                dyn_layer_cost *pt = r->points;
                cost_blend(&pt[dyn_cost_grid_index(g, (dyn_layer_kind)k, mode, j0[0], j0[1], j0[2])], 1.0 - t,
                           &pt[dyn_cost_grid_index(g, (dyn_layer_kind)k, mode, j1[0], j1[1], j1[2])], t,
                           &pt[dyn_cost_grid_index(g, (dyn_layer_kind)k, mode, i[0], i[1], i[2])]);
            }
}

/* The points of the kinds measured on the coarse grid only, every mode. */
static void grid_fill(grid_run *r)
{
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        if (r->p->kinds[k].m == NULL || !kind_coarse(r, k)) continue;
        for (int m = 0; m < DYN_RECOMPUTE_COUNT; m++)
            for (int ax = 0; ax < 3; ax++) grid_fill_axis(r, k, (dyn_recompute)m, ax);
    }
}

/* Mark which values of each run-grid axis are on the coarse grid; each
 * coarse axis must be a subset with the same first and last values. */
static dyn_status coarse_marks_make(coarse_marks *cm, const dyn_cost_grid *g, const dyn_cost_grid *coarse,
                                    dyn_error *err)
{
    const int32_t n[3] = {g->n_rows, g->n_enc, g->n_dec}, nc[3] = {coarse->n_rows, coarse->n_enc, coarse->n_dec};
    const int32_t *v[3] = {g->rows, g->enc_len, g->dec_len}, *vc[3] = {coarse->rows, coarse->enc_len, coarse->dec_len};
    memset(cm, 0, sizeof *cm);
    if (coarse->n_rows == 0) return DYN_OK;
    for (int ax = 0; ax < 3; ax++) {
        cm->on[ax] = dyn_calloc((size_t)n[ax], 1, "profile coarse marks", err);
        if (cm->on[ax] == NULL) return DYN_ERR_NOMEM;
        int32_t found = 0;
        for (int32_t i = 0; i < n[ax]; i++)
            for (int32_t j = 0; j < nc[ax]; j++)
                if (v[ax][i] == vc[ax][j]) cm->on[ax][i] = 1, found++;
        if (found != nc[ax] || !cm->on[ax][0] || !cm->on[ax][n[ax] - 1])
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "profile: the coarse grid's %s axis is not a subset of the grid's with its ends",
                                 ax == 0 ? "rows" : ax == 1 ? "enc_len" : "dec_len");
    }
    return DYN_OK;
}

static void coarse_marks_free(coarse_marks *cm)
{
    for (int ax = 0; ax < 3; ax++) free(cm->on[ax]);
}

/* Sweeps over the whole grid, then (with two or more) as many again at
 * most over the points not settled (dyn_sweep_point_settled): minutes
 * later a disturbance of seconds has passed. Each settling pass adds its
 * work to the progress total as it starts. */
static dyn_status grid_sweeps(grid_run *r, dyn_error *err)
{
    int sweeps = r->p->sweeps;
    (void)grid_pass(r, PASS_COUNT_ALL, err); /* one sweep's work; counting never fails */
    r->total *= sweeps;
    (void)grid_pass(r, PASS_COUNT_DERIVE, err);
    dyn_status st = DYN_OK;
    for (int s = 0; s < sweeps && st == DYN_OK; s++) st = grid_pass(r, PASS_MEASURE_ALL, err);
    for (int s = 0; sweeps >= 2 && s < sweeps && st == DYN_OK; s++) {
        double before = r->total;
        r->probe_best = r->p->probe_best; /* counted and measured by the same rule */
        (void)grid_pass(r, PASS_COUNT_UNSETTLED, err);
        if (r->total == before) break; /* all settled */
        st = grid_pass(r, PASS_MEASURE_UNSETTLED, err);
    }
    if (st == DYN_OK) st = grid_pass(r, PASS_DERIVE, err); /* the points not timed: their memory */
    if (st == DYN_OK) st = grid_pass(r, PASS_SCALE, err);
    if (st == DYN_OK) grid_fill(r);
    if (st == DYN_OK && r->p->sum_planes) dyn_profile_points_sum_planes(&r->p->cfg, r->g, r->points);
    return st;
}

dyn_status dyn_profile_grid_run(dyn_profiler *p, const dyn_cost_grid *g, dyn_layer_cost *points,
                                double states_mb[DYN_LAYER_KIND_COUNT], dyn_profile_progress_fn fn, void *ctx,
                                dyn_error *err)
{
    const dyn_model_config *c = &p->cfg;
    int64_t n = (int64_t)DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT * dyn_cost_grid_size(g);
    grid_run r = {p, g, points, dyn_calloc((size_t)n, sizeof(dyn_sweep_point), "profile sweeps", err), fn, ctx,
                  0, 0, 0, {{NULL, NULL, NULL}}};
    if (r.seen == NULL) return DYN_ERR_NOMEM;
    dyn_status st = coarse_marks_make(&r.cm, g, &p->coarse, err);
    if (st == DYN_OK) st = grid_sweeps(&r, err);
    coarse_marks_free(&r.cm);
    p->n_measured = p->n_unsettled = 0;
    for (int64_t i = 0; i < n; i++) {
        p->n_measured += r.seen[i].n > 0;
        p->n_unsettled += r.seen[i].n > 0 && !dyn_sweep_point_settled(&r.seen[i], p->probe_best);
    }
    free(r.seen);
    if (st != DYN_OK) return st;
    /* Model states are counted, not measured: the analytic model's count
     * (16 bytes per parameter, the head with its own vocabulary matrix) is
     * what the runtime allocates per layer. */
    dyn_cost_model *am = dyn_cost_model_create_analytic(c, dyn_machine_builtin("cpu"), err);
    if (am == NULL) return err ? err->code : DYN_ERR_INVALID_ARG;
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) states_mb[k] = dyn_cost_layer_states_mb(am, (dyn_layer_kind)k);
    dyn_cost_model_free(am);
    st = dyn_cost_points_make_monotone(c, g, points, err);
    if (st == DYN_OK && p->derive_full) derive_full_times(g, points);
    return st;
}


void dyn_profile_meta_fill(dyn_profile_meta *m, int threads, int repeats)
{
    memset(m, 0, sizeof *m);
    if (gethostname(m->host, sizeof m->host - 1) != 0 || m->host[0] == '\0') snprintf(m->host, sizeof m->host, "unknown");
    snprintf(m->cpu, sizeof m->cpu, "unknown");
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (fp != NULL) {
        char line[256];
        while (fgets(line, sizeof line, fp)) {
            if (strncmp(line, "model name", 10) != 0) continue;
            char *colon = strchr(line, ':');
            if (colon == NULL) break;
            colon++;
            while (*colon == ' ') colon++;
            colon[strcspn(colon, "\n")] = '\0';
            snprintf(m->cpu, sizeof m->cpu, "%s", colon);
            break;
        }
        fclose(fp);
    }
    snprintf(m->dtype, sizeof m->dtype, "fp32");
    m->threads = threads;
    m->repeats = repeats;
}
