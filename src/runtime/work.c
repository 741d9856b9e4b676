/* work.c — the per-iteration work message (see work.h). */
#include "runtime/work.h"

#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#define WORK_MAGIC 0x574E5944u /* "DYNW" little-endian */
#define WORK_VERSION 3u /* 2: ideal_ms, ideal_compute_ms after predicted_ms; useful[n_mb] after peak_mb;
                        * 3: the samples' tokens after useful */

void dyn_rt_work_free(dyn_rt_work *w)
{
    if (w == NULL) return;
    free(w->mb_first);
    free(w->samples);
    free(w->fwd_ms);
    free(w->bwd_ms);
    free(w->peak_mb);
    free(w->useful);
    free(w->tokens);
    dyn_exec_plan_free(&w->plan);
    memset(w, 0, sizeof *w);
}

/* ---- writer --------------------------------------------------------------- */

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
    int failed;
} wbuf;

static void put(wbuf *b, const void *v, size_t n)
{
    if (b->failed || n == 0) return;
    if (b->len + n > b->cap) {
        if (DYN_RESERVE(b->p, b->cap, b->cap || b->len + n > 256 ? b->len + n : 256) != 0) {
            b->failed = 1;
            return;
        }
    }
    memcpy(b->p + b->len, v, n); /* x86-64 and aarch64 are little-endian: the wire order */
    b->len += n;
}
static void put_u32(wbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_i32(wbuf *b, int32_t v) { put(b, &v, 4); }
static void put_i64(wbuf *b, int64_t v) { put(b, &v, 8); }
static void put_f64(wbuf *b, double v) { put(b, &v, 8); }

dyn_status dyn_rt_work_pack(const dyn_rt_work *w, uint8_t **buf, size_t *len, dyn_error *err)
{
    uint8_t *plan = NULL;
    size_t plan_len = 0;
    int32_t S = w->n_mb > 0 ? w->plan.n_stages : 0, R = w->n_mb > 0 ? w->plan.n_ranks : 0;
    if (w->n_mb > 0) {
        dyn_status st = dyn_exec_plan_serialize(&w->plan, &plan, &plan_len, err);
        if (st != DYN_OK) return st;
    }
    wbuf b = {0};
    put_u32(&b, WORK_MAGIC);
    put_u32(&b, WORK_VERSION);
    put_i64(&b, w->iteration);
    put_i32(&b, w->replica);
    put_i32(&b, w->method);
    put_i64(&b, w->global_target_tokens);
    put_i64(&b, w->global_real_tokens);
    put_f64(&b, w->plan_ms);
    put_f64(&b, w->predicted_ms);
    put_f64(&b, w->ideal_ms);
    put_f64(&b, w->ideal_compute_ms);
    put_i32(&b, w->n_mb);
    put_i32(&b, w->n_samples);
    put_i32(&b, S);
    put_i32(&b, R);
    for (int32_t j = 0; j < w->n_mb; j++) put_i32(&b, w->mb_first[j + 1] - w->mb_first[j]);
    for (int32_t k = 0; k < w->n_samples; k++) {
        put_i32(&b, w->samples[k].id);
        put_i32(&b, w->samples[k].row);
        put_i32(&b, w->samples[k].offset);
        put_i32(&b, w->samples[k].dec_offset);
    }
    size_t nc = (size_t)w->n_mb * (size_t)S;
    for (size_t i = 0; i < nc; i++) {
        put_f64(&b, w->fwd_ms[i]);
        put_f64(&b, w->bwd_ms[i]);
    }
    for (int32_t r = 0; r < R; r++) put_f64(&b, w->peak_mb[r]);
    for (int32_t j = 0; j < w->n_mb; j++) put_f64(&b, w->useful ? w->useful[j] : 1.0);
    put_i64(&b, w->n_tokens);
    put(&b, w->tokens, (size_t)w->n_tokens * sizeof(int32_t));
    put_i64(&b, (int64_t)plan_len);
    put(&b, plan, plan_len);
    free(plan);
    if (b.failed) {
        free(b.p);
        return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the work message");
    }
    *buf = b.p;
    *len = b.len;
    return DYN_OK;
}

/* ---- reader --------------------------------------------------------------- */

typedef struct rbuf {
    const uint8_t *p;
    size_t len, at;
} rbuf;

/* Copy n bytes; -1 when fewer remain. */
static int get(rbuf *r, void *v, size_t n)
{
    if (r->len - r->at < n) return -1;
    memcpy(v, r->p + r->at, n);
    r->at += n;
    return 0;
}

static dyn_status truncated(const rbuf *r, dyn_error *err)
{
    return dyn_error_set(err, DYN_ERR_CORRUPT, "work message truncated at byte %zu of %zu", r->at, r->len);
}

static dyn_status read_header(rbuf *r, dyn_rt_work *out, dyn_error *err)
{
    uint32_t magic = 0, version = 0;
    if (get(r, &magic, 4) || get(r, &version, 4)) return truncated(r, err);
    if (magic != WORK_MAGIC) return dyn_error_set(err, DYN_ERR_CORRUPT, "work message: bad magic");
    if (version != WORK_VERSION)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "work message: version %u, expected %u", version,
                             WORK_VERSION);
    if (get(r, &out->iteration, 8) || get(r, &out->replica, 4) || get(r, &out->method, 4) ||
        get(r, &out->global_target_tokens, 8) || get(r, &out->global_real_tokens, 8) ||
        get(r, &out->plan_ms, 8) || get(r, &out->predicted_ms, 8) || get(r, &out->ideal_ms, 8) || get(r, &out->ideal_compute_ms, 8) || get(r, &out->n_mb, 4) ||
        get(r, &out->n_samples, 4) || get(r, &out->n_stages, 4) || get(r, &out->n_ranks, 4))
        return truncated(r, err);
    int empty = out->n_mb == 0;
    if (out->n_mb < 0 || out->n_samples < out->n_mb || (empty && out->n_samples != 0) ||
        (unsigned)out->method >= DYN_BATCHING_COUNT || out->global_target_tokens < 1 || !(out->ideal_compute_ms >= 0) || !(out->ideal_ms >= out->ideal_compute_ms) ||
        (empty ? out->n_stages != 0 || out->n_ranks != 0 : out->n_stages < 1 || out->n_ranks < 1))
        return dyn_error_set(err, DYN_ERR_CORRUPT,
                             "work message: %d micro-batches, %d samples, %d stages, %d ranks, method %d, "
                             "%lld target tokens, ideal bound %g ms",
                             out->n_mb, out->n_samples, out->n_stages, out->n_ranks, out->method,
                             (long long)out->global_target_tokens, out->ideal_ms);
    return DYN_OK;
}

static dyn_status read_samples(rbuf *r, int64_t n_dataset, dyn_rt_work *out, dyn_error *err)
{
    if ((size_t)out->n_samples * 16u + (size_t)out->n_mb * 4u > r->len - r->at) return truncated(r, err);
    out->mb_first = dyn_calloc((size_t)out->n_mb + 1, sizeof(int32_t), "work message", err);
    out->samples = dyn_calloc((size_t)out->n_samples + 1, sizeof(dyn_rt_sample), "work message", err);
    if (out->mb_first == NULL || out->samples == NULL) return DYN_ERR_NOMEM;
    for (int32_t j = 0; j < out->n_mb; j++) {
        int32_t c = 0;
        get(r, &c, 4);
        if (c < 1 || c > out->n_samples - out->mb_first[j])
            return dyn_error_set(err, DYN_ERR_CORRUPT, "work message: micro-batch %d has %d samples", j, c);
        out->mb_first[j + 1] = out->mb_first[j] + c;
    }
    if (out->mb_first[out->n_mb] != out->n_samples)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "work message: micro-batches hold %d of %d samples",
                             out->mb_first[out->n_mb], out->n_samples);
    for (int32_t k = 0; k < out->n_samples; k++) {
        dyn_rt_sample *s = &out->samples[k];
        get(r, &s->id, 4);
        get(r, &s->row, 4);
        get(r, &s->offset, 4);
        get(r, &s->dec_offset, 4);
        if (s->id < 0 || s->id >= n_dataset || s->row < 0 || s->offset < 0 || s->dec_offset < 0)
            return dyn_error_set(err, DYN_ERR_CORRUPT,
                                 "work message: sample %d (id %d, row %d, offset %d) out of range", k, s->id,
                                 s->row, s->offset);
    }
    return DYN_OK;
}

static dyn_status read_costs(rbuf *r, dyn_rt_work *out, dyn_error *err)
{
    size_t nc = (size_t)out->n_mb * (size_t)out->n_stages;
    if (nc * 16u + (size_t)out->n_ranks * 8u + (size_t)out->n_mb * 8u + 8u > r->len - r->at) return truncated(r, err);
    out->fwd_ms = dyn_calloc(nc + 1, sizeof(double), "work message", err);
    out->bwd_ms = dyn_calloc(nc + 1, sizeof(double), "work message", err);
    out->peak_mb = dyn_calloc((size_t)out->n_ranks + 1, sizeof(double), "work message", err);
    out->useful = dyn_calloc((size_t)out->n_mb + 1, sizeof(double), "work message", err);
    if (out->fwd_ms == NULL || out->bwd_ms == NULL || out->peak_mb == NULL || out->useful == NULL)
        return DYN_ERR_NOMEM;
    for (size_t i = 0; i < nc; i++) {
        get(r, &out->fwd_ms[i], 8);
        get(r, &out->bwd_ms[i], 8);
    }
    for (int32_t k = 0; k < out->n_ranks; k++) get(r, &out->peak_mb[k], 8);
    for (int32_t j = 0; j < out->n_mb; j++) {
        get(r, &out->useful[j], 8);
        if (!(out->useful[j] >= 0 && out->useful[j] <= 1))
            return dyn_error_set(err, DYN_ERR_CORRUPT, "work message: micro-batch %d useful fraction %g", j,
                                 out->useful[j]);
    }
    return DYN_OK;
}

/* The samples' tokens, when the planner sent them: at most what the bytes
 * left hold (their agreement with the samples' lengths is the
 * interpreter's check, which knows the lengths). */
static dyn_status read_tokens(rbuf *r, dyn_rt_work *out, dyn_error *err)
{
    if (get(r, &out->n_tokens, 8)) return truncated(r, err);
    if (out->n_tokens < 0 || (uint64_t)out->n_tokens > (r->len - r->at) / sizeof(int32_t) ||
        (out->n_mb == 0 && out->n_tokens != 0))
        return dyn_error_set(err, DYN_ERR_CORRUPT, "work message: %lld tokens where %zu bytes remain",
                             (long long)out->n_tokens, r->len - r->at);
    if (out->n_tokens == 0) return DYN_OK;
    out->tokens = dyn_calloc((size_t)out->n_tokens, sizeof(int32_t), "work message tokens", err);
    if (out->tokens == NULL) return DYN_ERR_NOMEM;
    get(r, out->tokens, (size_t)out->n_tokens * sizeof(int32_t));
    return DYN_OK;
}

/* The plan, its validation, and its agreement with the header and samples. */
static dyn_status read_plan(rbuf *r, dyn_rt_work *out, dyn_error *err)
{
    int64_t plan_len = 0;
    if (get(r, &plan_len, 8)) return truncated(r, err);
    if (plan_len < 0 || (size_t)plan_len != r->len - r->at)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "work message: plan of %lld bytes where %zu remain",
                             (long long)plan_len, r->len - r->at);
    if (out->n_mb == 0) {
        if (plan_len != 0) return dyn_error_set(err, DYN_ERR_CORRUPT, "work message: a plan without micro-batches");
        return DYN_OK;
    }
    dyn_status st = dyn_exec_plan_deserialize(r->p + r->at, (size_t)plan_len, &out->plan, err);
    if (st != DYN_OK) return st;
    if ((st = dyn_exec_plan_validate(&out->plan, err)) != DYN_OK) return st;
    if (out->plan.n_stages != out->n_stages || out->plan.n_ranks != out->n_ranks ||
        out->plan.n_microbatches != out->n_mb || out->plan.replica != out->replica)
        return dyn_error_set(err, DYN_ERR_CORRUPT,
                             "work message: plan of %d stages, %d ranks, %d micro-batches, replica %d does "
                             "not match its header (%d, %d, %d, replica %d)",
                             out->plan.n_stages, out->plan.n_ranks, out->plan.n_microbatches, out->plan.replica,
                             out->n_stages, out->n_ranks, out->n_mb, out->replica);
    for (int32_t j = 0; j < out->n_mb; j++)
        for (int32_t k = out->mb_first[j]; k < out->mb_first[j + 1]; k++)
            if (out->samples[k].row >= out->plan.mb_shape[j].rows)
                return dyn_error_set(err, DYN_ERR_CORRUPT, "work message: sample %d of micro-batch %d in row %d of %d",
                                     k, j, out->samples[k].row, out->plan.mb_shape[j].rows);
    return DYN_OK;
}

dyn_status dyn_rt_work_unpack(const uint8_t *buf, size_t len, int64_t n_dataset, dyn_rt_work *out,
                              dyn_error *err)
{
    memset(out, 0, sizeof *out);
    rbuf r = {buf, len, 0};
    dyn_status st = read_header(&r, out, err);
    if (st == DYN_OK) st = read_samples(&r, n_dataset, out, err);
    if (st == DYN_OK) st = read_costs(&r, out, err);
    if (st == DYN_OK) st = read_tokens(&r, out, err);
    if (st == DYN_OK) st = read_plan(&r, out, err);
    return st;
}
