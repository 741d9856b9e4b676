/* exec.c — the instruction interpreter (see exec.h). */
#include "runtime/exec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/alloc.h" /* defines: rt_arena_key, rt_arena_prefer */
#include "util/util.h"

enum { TAG_ACT = 1, TAG_GRAD = 2 }; /* one tag per message kind */

typedef struct rt_slot {
    float *data;
    size_t cap, n;     /* floats allocated / held */
    int live;
    MPI_Request req;   /* the pending send or receive on this slot, or MPI_REQUEST_NULL */
} rt_slot;

typedef struct rt_acts {
    int32_t mb, stage; /* owner while in use */
    int used;
    double key;        /* largest rt_arena_key held (alloc.h) */
    dyn_model_acts *acts;
} rt_acts;

struct rt_exec {
    rt_exec_env env;
    /* slots and activation arenas, kept across iterations */
    rt_slot *slots;
    int32_t n_slots;
    size_t cap_slots;  /* slots allocated (n_slots of them initialised) */
    rt_acts *acts;
    int32_t n_acts;
    size_t cap_acts;
    /* this iteration */
    const dyn_rt_work *w;
    const dyn_rank_plan *rp;
    dyn_model_microbatch **mbs; /* [n_mb], built on first use */
    int32_t cap_mbs;
    int32_t *tok;               /* token scratch for building micro-batches */
    size_t cap_tok;
    dyn_token_sample *ts;
    size_t cap_ts;
    int64_t *tok_at;            /* [n_samples + 1]: sample k's tokens in w->tokens start at tok_at[k] */
    size_t cap_tok_at;
    dyn_model_specials sp;      /* the data's pad and decoder start (rt_source_specials) */
    float dloss;                /* 1 / global target tokens */
    rt_exec_stats *st;
    double epoch_ms;
    /* events */
    rt_event *ev;
    int64_t n_ev, cap_ev;
    /* [n_stages]: index of the last instruction of this iteration adding
     * to stage s's weight gradients (BACKWARD or BACKWARD_WEIGHT), or -1 */
    int32_t *last_w;
    int32_t cap_last_w;
};

/* ---- waiting ---------------------------------------------------------------- */

dyn_status rt_wait(MPI_Request *req, double timeout_s, void (*poll)(void *), void *poll_ctx,
                   const char *what, dyn_error *err)
{
    double deadline = dyn_time_ms() + timeout_s * 1e3;
    for (long spins = 0;; spins++) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return dyn_rt_mpi_check(rc, what, err);
        if (done) return DYN_OK;
        if (poll) poll(poll_ctx);
        if (spins > 1000) {
            /* Past the first millisecond or so, stop burning a core the
             * peer rank may need (2 ranks on 2 cores). */
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
            if ((spins & 63) == 0 && dyn_time_ms() > deadline)
                return dyn_error_set(err, DYN_ERR_INTERNAL, "timeout after %.0f s waiting for %s", timeout_s,
                                     what);
        }
    }
}

/* ---- set-up ----------------------------------------------------------------- */

rt_exec *rt_exec_create(const rt_exec_env *env, dyn_error *err)
{
    rt_exec *x = dyn_calloc(1, sizeof *x, "interpreter", err);
    if (x == NULL) return NULL;
    x->env = *env;
    x->sp = rt_source_specials(env->src);
    return x;
}

static void free_mbs(rt_exec *x)
{
    for (int32_t j = 0; j < x->cap_mbs; j++) {
        dyn_model_microbatch_free(x->mbs[j]);
        x->mbs[j] = NULL;
    }
}

void rt_exec_free(rt_exec *x)
{
    if (x == NULL) return;
    for (int32_t i = 0; i < x->n_slots; i++) {
        if (x->slots[i].req != MPI_REQUEST_NULL) MPI_Request_free(&x->slots[i].req);
        free(x->slots[i].data);
    }
    free(x->slots);
    for (int32_t i = 0; i < x->n_acts; i++) dyn_model_acts_free(x->acts[i].acts);
    free(x->acts);
    free_mbs(x);
    free(x->mbs);
    free(x->tok);
    free(x->ts);
    free(x->tok_at);
    free(x->ev);
    free(x->last_w);
    free(x);
}

const rt_event *rt_exec_events(const rt_exec *x, int64_t *n)
{
    *n = x->n_ev;
    return x->ev;
}

void rt_exec_clear_events(rt_exec *x) { x->n_ev = 0; }

/* ---- helpers ---------------------------------------------------------------- */

/* "instruction 12 (SEND_ACT_START, micro-batch 3, stage 1, peer 2)"; the
 * rank is named by the abort message's prefix. */
static const char *where(const rt_exec *x, int32_t i, char *buf, size_t n)
{
    const dyn_instr *in = &x->rp->instrs[i];
    snprintf(buf, n, "instruction %d (%s, micro-batch %d, stage %d, peer %d)", i, dyn_op_name((dyn_op)in->op),
             in->microbatch, in->stage, in->peer);
    return buf;
}

static void poll_all(rt_exec *x)
{
    /* MPI_Test on each pending request drives Open MPI's progress engine
     * (no progress thread): transfers above the eager limit move only
     * here and in the waits. */
    for (int32_t i = 0; i < x->n_slots; i++)
        if (x->slots[i].req != MPI_REQUEST_NULL) {
            int done = 0;
            MPI_Test(&x->slots[i].req, &done, MPI_STATUS_IGNORE);
        }
    if (x->env.poll) x->env.poll(x->env.poll_ctx);
}

static void poll_cb(void *ctx) { poll_all(ctx); }

void rt_exec_poll(void *x)
{
    /* Outside an iteration (between steps) there is nothing to test. */
    if (((rt_exec *)x)->rp != NULL) poll_all(x);
}

/* Slot k holding n floats (grown if needed). */
static dyn_status slot_take(rt_exec *x, int32_t k, size_t n, dyn_error *err)
{
    if (k < 0 || k >= x->n_slots) return dyn_error_set(err, DYN_ERR_INTERNAL, "buffer slot %d of %d", k, x->n_slots);
    rt_slot *s = &x->slots[k];
    if (s->live) return dyn_error_set(err, DYN_ERR_INTERNAL, "buffer slot %d written while in use", k);
    if (n > s->cap) {
        float *d = realloc(s->data, (n ? n : 1) * sizeof(float));
        if (d == NULL) return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for a %zu-float buffer", n);
        s->data = d;
        s->cap = n;
    }
    s->n = n;
    s->live = 1;
    return DYN_OK;
}

static dyn_status slot_read(rt_exec *x, int32_t k, rt_slot **out, dyn_error *err)
{
    if (k < 0 || k >= x->n_slots || !x->slots[k].live)
        return dyn_error_set(err, DYN_ERR_INTERNAL, "buffer slot %d read while empty", k);
    *out = &x->slots[k];
    return DYN_OK;
}

/* Activation arena of (mb, stage): a free one is reused (its memory grows
 * to the largest shape seen; the best fit for key, alloc.h), else a new
 * one. key: rt_arena_key of the micro-batch (read when create). */
static dyn_status acts_get(rt_exec *x, int32_t mb, int32_t stage, int create, double key, dyn_model_acts **out,
                           dyn_error *err)
{
    for (int32_t i = 0; i < x->n_acts; i++)
        if (x->acts[i].used && x->acts[i].mb == mb && x->acts[i].stage == stage) {
            *out = x->acts[i].acts;
            return DYN_OK;
        }
    if (!create)
        return dyn_error_set(err, DYN_ERR_INTERNAL, "no activations of micro-batch %d stage %d", mb, stage);
    int32_t f = -1;
    for (int32_t i = 0; i < x->n_acts; i++)
        if (!x->acts[i].used && (f < 0 || rt_arena_prefer(key, x->acts[i].key, x->acts[f].key))) f = i;
    if (f < 0) {
        if (DYN_RESERVE(x->acts, x->cap_acts, (size_t)x->n_acts + 1) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for activation arenas");
        rt_acts *a = x->acts;
        f = x->n_acts;
        memset(&a[f], 0, sizeof a[f]);
        if ((a[f].acts = dyn_model_acts_create(err)) == NULL) return DYN_ERR_NOMEM;
        x->n_acts++;
    }
    x->acts[f].used = 1;
    if (key > x->acts[f].key) x->acts[f].key = key;
    x->acts[f].mb = mb;
    x->acts[f].stage = stage;
    *out = x->acts[f].acts;
    return DYN_OK;
}

static void acts_put(rt_exec *x, int32_t mb, int32_t stage)
{
    for (int32_t i = 0; i < x->n_acts; i++)
        if (x->acts[i].used && x->acts[i].mb == mb && x->acts[i].stage == stage) x->acts[i].used = 0;
}

/* The model micro-batch of plan micro-batch j, built from its samples on
 * first use: tokens from the source, placed as the method places them and
 * padded to the plan's shape, so boundary sizes are the plan's. */
/* The tokens of micro-batch j's n samples (from k0) into x->tok, and
 * x->ts[0..n) pointing into them. */
static dyn_status mb_tokens(rt_exec *x, int32_t k0, int32_t n, dyn_error *err)
{
    const dyn_rt_work *w = x->w;
    const dyn_dataset *ds = rt_source_lengths(x->env.src);
    size_t tokens = 0;
    for (int32_t k = 0; k < n; k++) {
        const dyn_sample *s = &ds->samples[w->samples[k0 + k].id];
        tokens += (size_t)s->input_len + (size_t)s->target_len;
    }
    if (DYN_RESERVE(x->tok, x->cap_tok, tokens) != 0) return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for tokens");
    if (DYN_RESERVE(x->ts, x->cap_ts, n) != 0) return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for samples");
    size_t at = 0;
    for (int32_t k = 0; k < n; k++) {
        const dyn_sample *s = &ds->samples[w->samples[k0 + k].id];
        int32_t *in = x->tok + at, *tg = in + s->input_len;
        size_t len = (size_t)s->input_len + (size_t)s->target_len;
        dyn_status st = DYN_OK;
        if (w->n_tokens > 0) /* the planner thread read them */
            memcpy(in, w->tokens + x->tok_at[k0 + k], len * sizeof(int32_t));
        else
            st = rt_source_tokens(x->env.src, s->id, in, tg, err);
        if (st != DYN_OK) return st;
        x->ts[k] = (dyn_token_sample){in, s->input_len, tg, s->target_len};
        at += (size_t)s->input_len + (size_t)s->target_len;
    }
    return DYN_OK;
}

/* Micro-batch j (samples [k0, k0 + n), tokens in x->ts) in packed rows:
 * its samples' row counts from the work's sample table. */
static dyn_model_microbatch *mb_packed(rt_exec *x, int32_t j, int32_t k0, int32_t n, int docmask, dyn_error *err)
{
    const dyn_rt_work *w = x->w;
    const dyn_mb_shape *sh = &w->plan.mb_shape[j];
    int32_t *rows = dyn_calloc((size_t)sh->rows, sizeof(int32_t), "row counts", err);
    if (rows == NULL) return NULL;
    for (int32_t k = 0; k < n; k++) {
        int32_t r = w->samples[k0 + k].row;
        if (k > 0 && r < w->samples[k0 + k - 1].row) {
            free(rows);
            dyn_error_set(err, DYN_ERR_INTERNAL, "micro-batch %d: samples not in row order", j);
            return NULL;
        }
        rows[r]++;
    }
    dyn_model_microbatch *mb = dyn_model_microbatch_create_ex(&x->sp, x->env.kind, x->ts, n, rows, sh->rows,
                                                              sh->enc_len, sh->dec_len, docmask, err);
    free(rows);
    return mb;
}

/* Micro-batch j (samples [k0, k0 + n), tokens in x->ts) padded: one
 * sample per row, as the work's sample table must say. */
static dyn_model_microbatch *mb_padded(rt_exec *x, int32_t j, int32_t k0, int32_t n, dyn_error *err)
{
    const dyn_rt_work *w = x->w;
    const dyn_mb_shape *sh = &w->plan.mb_shape[j];
    for (int32_t k = 0; k < n; k++)
        if (w->samples[k0 + k].row != k || w->samples[k0 + k].offset != 0) {
            dyn_error_set(err, DYN_ERR_INTERNAL, "micro-batch %d: padded sample %d not alone in row %d", j, k, k);
            return NULL;
        }
    if (sh->rows != n) {
        dyn_error_set(err, DYN_ERR_INTERNAL, "micro-batch %d: %d rows for %d samples", j, sh->rows, n);
        return NULL;
    }
    return dyn_model_microbatch_create_ex(&x->sp, x->env.kind, x->ts, n, NULL, 0, sh->enc_len, sh->dec_len, 0, err);
}

static dyn_status mb_get(rt_exec *x, int32_t j, dyn_model_microbatch **out, dyn_error *err)
{
    const dyn_rt_work *w = x->w;
    if (j < 0 || j >= w->n_mb) return dyn_error_set(err, DYN_ERR_INTERNAL, "micro-batch %d of %d", j, w->n_mb);
    if (x->mbs[j] != NULL) {
        *out = x->mbs[j];
        return DYN_OK;
    }
    int32_t k0 = w->mb_first[j], n = w->mb_first[j + 1] - k0;
    dyn_status st = mb_tokens(x, k0, n, err);
    if (st != DYN_OK) return st;
    /* Packed rows: the packing baselines, and dynapipe's plans that chose
     * document-masked packing (enable_packing; their shapes carry the
     * per-sample attention counts). */
    int docmask = w->method == DYN_BATCH_PACKING_DOCMASK ||
                  (w->method == DYN_BATCH_DYNAPIPE && w->plan.mb_shape[j].enc_attn > 0);
    dyn_model_microbatch *mb = w->method == DYN_BATCH_PACKING || docmask ? mb_packed(x, j, k0, n, docmask, err)
                                                                          : mb_padded(x, j, k0, n, err);
    if (mb == NULL) return err->code ? err->code : DYN_ERR_NOMEM;
    x->mbs[j] = mb;
    *out = mb;
    return DYN_OK;
}

/* Floats of the boundary entering plan stage s's first layer (in) or
 * leaving its last (out) for micro-batch j. */
static dyn_status boundary(rt_exec *x, const dyn_instr *in, int out_side, size_t *n, dyn_error *err)
{
    dyn_model_microbatch *mb;
    dyn_status st = mb_get(x, in->microbatch, &mb, err);
    if (st != DYN_OK) return st;
    int32_t l = out_side ? x->env.lay_first[in->stage + 1] : x->env.lay_first[in->stage];
    *n = dyn_model_boundary_floats(x->env.model_of(x->env.model_ctx, in->stage), l, mb);
    return DYN_OK;
}

/* ---- handlers --------------------------------------------------------------- */

typedef dyn_status (*rt_handler)(rt_exec *x, int32_t i, dyn_error *err);

static dyn_status h_load_input(rt_exec *x, int32_t i, dyn_error *err)
{
    /* The tokens (first stage) or targets (last stage) live in the model
     * micro-batch, which every stage builds; the slot marks the load. */
    const dyn_instr *in = &x->rp->instrs[i];
    dyn_model_microbatch *mb;
    dyn_status st = mb_get(x, in->microbatch, &mb, err);
    if (st == DYN_OK) st = slot_take(x, in->buf_out, 0, err);
    return st;
}

static int model_recompute(uint8_t rc)
{
    /* The model's attention never stores its probabilities (it recomputes
     * them from the saved log-sum-exp), which is what selective recompute
     * saves; full recompute re-runs each block's forward. */
    return rc == DYN_RECOMPUTE_FULL;
}

static void busy_add(rt_exec *x, double t0) { x->st->busy_ms += dyn_time_ms() - t0; }

/* The plan's predicted time of compute instruction `in`: the forward at
 * FORWARD, the whole backward at BACKWARD or at its input half
 * (BACKWARD_INPUT); 0 at the weight half and for other instructions, so
 * split and fused backward add up alike. */
static double instr_pred_ms(const dyn_rt_work *w, const dyn_instr *in)
{
    if (in->microbatch < 0 || in->microbatch >= w->n_mb || in->stage < 0 || in->stage >= w->n_stages) return 0;
    size_t k = (size_t)in->microbatch * (size_t)w->n_stages + (size_t)in->stage;
    if (in->op == DYN_OP_FORWARD) return w->fwd_ms[k];
    if (in->op == DYN_OP_BACKWARD || in->op == DYN_OP_BACKWARD_INPUT) return w->bwd_ms[k];
    return 0;
}

/* Measured vs predicted compute for the online calibration (calibrate.h):
 * dir 0 forward, 1 backward (the weight half adds only its measured time). */
static void calib_add(rt_exec *x, const dyn_instr *in, int dir, double t0)
{
    x->st->meas_ms[dir] += dyn_time_ms() - t0;
    x->st->pred_ms[dir] += instr_pred_ms(x->w, in);
}

static dyn_status h_forward(rt_exec *x, int32_t i, dyn_error *err)
{
    const dyn_instr *in = &x->rp->instrs[i];
    int32_t lf = x->env.lay_first[in->stage], ll = x->env.lay_first[in->stage + 1];
    dyn_model *m = x->env.model_of(x->env.model_ctx, in->stage);
    dyn_model_microbatch *mb;
    dyn_model_acts *a = NULL;
    rt_slot *src = NULL;
    dyn_status st = mb_get(x, in->microbatch, &mb, err);
    if (st == DYN_OK && lf > 0) st = slot_read(x, in->buf_in, &src, err);
    size_t nout = 0;
    if (st == DYN_OK && ll < x->env.n_layers) {
        nout = dyn_model_boundary_floats(m, ll, mb);
        st = slot_take(x, in->buf_out, nout, err);
    }
    if (st == DYN_OK) st = acts_get(x, in->microbatch, in->stage, 1, rt_arena_key(&in->shape), &a, err);
    if (st != DYN_OK) return st;
    double t0 = dyn_time_ms(), loss = 0;
    st = dyn_model_stage_forward(m, a, mb, lf, ll, src ? src->data : NULL,
                                 ll < x->env.n_layers ? x->slots[in->buf_out].data : NULL,
                                 model_recompute(in->recompute), ll == x->env.n_layers ? &loss : NULL, NULL, err);
    busy_add(x, t0);
    calib_add(x, in, 0, t0);
    if (st == DYN_OK && ll == x->env.n_layers) {
        x->st->loss_sum += loss;
        x->st->target_tokens += mb->n_target_tokens;
    }
    return st;
}

/* Whole backward (BACKWARD, whole = 1) or its input half (BACKWARD_INPUT). */
static dyn_status backward(rt_exec *x, int32_t i, int whole, dyn_error *err)
{
    const dyn_instr *in = &x->rp->instrs[i];
    int32_t lf = x->env.lay_first[in->stage], ll = x->env.lay_first[in->stage + 1];
    dyn_model *m = x->env.model_of(x->env.model_ctx, in->stage);
    dyn_model_microbatch *mb;
    dyn_model_acts *a = NULL;
    rt_slot *dout = NULL;
    dyn_status st = mb_get(x, in->microbatch, &mb, err);
    if (st == DYN_OK && ll < x->env.n_layers) st = slot_read(x, in->buf_in, &dout, err);
    if (st == DYN_OK && lf > 0) st = slot_take(x, in->buf_out, dyn_model_boundary_floats(m, lf, mb), err);
    if (st == DYN_OK) st = acts_get(x, in->microbatch, in->stage, 0, 0, &a, err);
    if (st != DYN_OK) return st;
    double t0 = dyn_time_ms();
    const float *g = dout ? dout->data : NULL;
    float *din = lf > 0 ? x->slots[in->buf_out].data : NULL;
    st = whole ? dyn_model_stage_backward(m, a, mb, lf, ll, g, din, x->dloss, err)
               : dyn_model_stage_backward_input(m, a, mb, lf, ll, g, din, x->dloss, err);
    busy_add(x, t0);
    calib_add(x, in, 1, t0);
    if (whole) acts_put(x, in->microbatch, in->stage);
    return st;
}

static dyn_status h_backward(rt_exec *x, int32_t i, dyn_error *err) { return backward(x, i, 1, err); }

/* Zero bubble's B: the input gradient only; the activations stay for W. */
static dyn_status h_backward_input(rt_exec *x, int32_t i, dyn_error *err) { return backward(x, i, 0, err); }

/* Zero bubble's W: the weight gradients, later; then the activations go. */
static dyn_status h_backward_weight(rt_exec *x, int32_t i, dyn_error *err)
{
    const dyn_instr *in = &x->rp->instrs[i];
    int32_t lf = x->env.lay_first[in->stage], ll = x->env.lay_first[in->stage + 1];
    dyn_model_microbatch *mb;
    dyn_model_acts *a = NULL;
    dyn_status st = mb_get(x, in->microbatch, &mb, err);
    if (st == DYN_OK) st = acts_get(x, in->microbatch, in->stage, 0, 0, &a, err);
    if (st != DYN_OK) return st;
    double t0 = dyn_time_ms();
    st = dyn_model_stage_backward_weight(x->env.model_of(x->env.model_ctx, in->stage), a, mb, lf, ll, err);
    busy_add(x, t0);
    calib_add(x, in, 1, t0);
    acts_put(x, in->microbatch, in->stage);
    return st;
}

static dyn_status send_start(rt_exec *x, int32_t i, int tag, int out_side, dyn_error *err)
{
    const dyn_instr *in = &x->rp->instrs[i];
    rt_slot *s = NULL;
    size_t n = 0;
    dyn_status st = slot_read(x, in->buf_in, &s, err);
    if (st == DYN_OK) st = boundary(x, in, out_side, &n, err);
    if (st != DYN_OK) return st;
    if (s->n != n || (int64_t)n * 4 != in->bytes) {
        char b[160];
        return dyn_error_set(err, DYN_ERR_INTERNAL, "%s: sends %zu floats, the model's boundary is %zu and the plan says %lld bytes",
                             where(x, i, b, sizeof b), s->n, n, (long long)in->bytes);
    }
    x->st->comm_bytes += in->bytes;
    return dyn_rt_mpi_check(MPI_Isend(s->data, (int)n, MPI_FLOAT, in->peer, tag, x->env.g->pipe, &s->req),
                            "MPI_Isend", err);
}

static dyn_status recv_start(rt_exec *x, int32_t i, int tag, int out_side, dyn_error *err)
{
    const dyn_instr *in = &x->rp->instrs[i];
    size_t n = 0;
    dyn_status st = boundary(x, in, out_side, &n, err);
    if (st != DYN_OK) return st;
    if ((int64_t)n * 4 != in->bytes) {
        char b[160];
        return dyn_error_set(err, DYN_ERR_INTERNAL, "%s: the model's boundary is %zu floats, the plan says %lld bytes",
                             where(x, i, b, sizeof b), n, (long long)in->bytes);
    }
    if ((st = slot_take(x, in->buf_out, n, err)) != DYN_OK) return st;
    rt_slot *s = &x->slots[in->buf_out];
    return dyn_rt_mpi_check(MPI_Irecv(s->data, (int)n, MPI_FLOAT, in->peer, tag, x->env.g->pipe, &s->req),
                            "MPI_Irecv", err);
}

/* A send carries the output of FORWARD (act: the stage's out side) or the
 * input gradient of BACKWARD (grad: its in side); a receive of an
 * activation fills the stage's in side, of a gradient its out side. */
static dyn_status h_send_act(rt_exec *x, int32_t i, dyn_error *err) { return send_start(x, i, TAG_ACT, 1, err); }
static dyn_status h_recv_act(rt_exec *x, int32_t i, dyn_error *err) { return recv_start(x, i, TAG_ACT, 0, err); }
static dyn_status h_send_grad(rt_exec *x, int32_t i, dyn_error *err) { return send_start(x, i, TAG_GRAD, 0, err); }
static dyn_status h_recv_grad(rt_exec *x, int32_t i, dyn_error *err) { return recv_start(x, i, TAG_GRAD, 1, err); }

static dyn_status finish(rt_exec *x, int32_t i, int32_t slot, dyn_error *err)
{
    rt_slot *s = NULL;
    dyn_status st = slot_read(x, slot, &s, err);
    if (st != DYN_OK) return st;
    char b[160];
    double t0 = dyn_time_ms();
    st = rt_wait(&s->req, x->env.timeout_s, poll_cb, x, where(x, i, b, sizeof b), err);
    x->st->comm_wait_ms += dyn_time_ms() - t0;
    return st;
}

static dyn_status h_send_finish(rt_exec *x, int32_t i, dyn_error *err)
{
    return finish(x, i, x->rp->instrs[i].buf_in, err);
}

static dyn_status h_recv_finish(rt_exec *x, int32_t i, dyn_error *err)
{
    return finish(x, i, x->rp->instrs[i].buf_out, err);
}

static dyn_status h_free(rt_exec *x, int32_t i, dyn_error *err)
{
    rt_slot *s = NULL;
    dyn_status st = slot_read(x, x->rp->instrs[i].buf_in, &s, err);
    if (st != DYN_OK) return st;
    if (s->req != MPI_REQUEST_NULL) {
        char b[160];
        return dyn_error_set(err, DYN_ERR_INTERNAL, "%s: frees a buffer still in flight", where(x, i, b, sizeof b));
    }
    s->live = 0;
    return DYN_OK;
}

static dyn_status h_barrier(rt_exec *x, int32_t i, dyn_error *err)
{
    MPI_Request req;
    dyn_status st = dyn_rt_mpi_check(MPI_Ibarrier(x->env.g->pipe, &req), "MPI_Ibarrier", err);
    if (st != DYN_OK) return st;
    char b[160];
    double t0 = dyn_time_ms();
    st = rt_wait(&req, x->env.timeout_s, poll_cb, x, where(x, i, b, sizeof b), err);
    x->st->comm_wait_ms += dyn_time_ms() - t0;
    return st;
}

/* One handler per kind, indexed by dyn_op. */
static const rt_handler handlers[] = {
    [DYN_OP_LOAD_INPUT] = h_load_input,
    [DYN_OP_FORWARD] = h_forward,
    [DYN_OP_BACKWARD] = h_backward,
    [DYN_OP_BACKWARD_INPUT] = h_backward_input,
    [DYN_OP_BACKWARD_WEIGHT] = h_backward_weight,
    [DYN_OP_SEND_ACT_START] = h_send_act,
    [DYN_OP_SEND_ACT_FINISH] = h_send_finish,
    [DYN_OP_RECV_ACT_START] = h_recv_act,
    [DYN_OP_RECV_ACT_FINISH] = h_recv_finish,
    [DYN_OP_SEND_GRAD_START] = h_send_grad,
    [DYN_OP_SEND_GRAD_FINISH] = h_send_finish,
    [DYN_OP_RECV_GRAD_START] = h_recv_grad,
    [DYN_OP_RECV_GRAD_FINISH] = h_recv_finish,
    [DYN_OP_FREE_BUFFER] = h_free,
    [DYN_OP_BARRIER] = h_barrier,
};
_Static_assert(sizeof handlers / sizeof handlers[0] == DYN_OP_COUNT, "one handler per instruction kind");

/* ---- the loop --------------------------------------------------------------- */

static dyn_status prepare(rt_exec *x, const dyn_rt_work *w, dyn_error *err)
{
    x->w = w;
    x->rp = &w->plan.ranks[x->env.g->stage_rank];
    x->dloss = (float)(1.0 / (double)w->global_target_tokens);
    if (w->n_mb > x->cap_mbs) {
        size_t c = (size_t)x->cap_mbs;
        if (DYN_RESERVE(x->mbs, c, w->n_mb) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for micro-batches");
        for (size_t j = (size_t)x->cap_mbs; j < c; j++) x->mbs[j] = NULL;
        x->cap_mbs = (int32_t)c;
    }
    if (x->rp->n_buffers > x->n_slots) {
        if (DYN_RESERVE(x->slots, x->cap_slots, x->rp->n_buffers) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for buffer slots");
        rt_slot *s = x->slots;
        for (int32_t k = x->n_slots; k < x->rp->n_buffers; k++) {
            memset(&s[k], 0, sizeof s[k]);
            s[k].req = MPI_REQUEST_NULL;
        }
        x->n_slots = x->rp->n_buffers;
    }
    for (int32_t k = 0; k < x->n_slots; k++) x->slots[k].live = 0;
    for (int32_t k = 0; k < x->n_acts; k++) x->acts[k].used = 0;
    if (w->n_tokens > 0) { /* where each sample's tokens start, checked against the lengths */
        if (DYN_RESERVE(x->tok_at, x->cap_tok_at, (size_t)w->n_samples + 1) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the token table");
        const dyn_dataset *ds = rt_source_lengths(x->env.src);
        x->tok_at[0] = 0;
        for (int32_t k = 0; k < w->n_samples; k++) {
            const dyn_sample *s = &ds->samples[w->samples[k].id];
            x->tok_at[k + 1] = x->tok_at[k] + s->input_len + s->target_len;
        }
        if (x->tok_at[w->n_samples] != w->n_tokens)
            return dyn_error_set(err, DYN_ERR_INTERNAL, "work message: %lld tokens for samples of %lld",
                                 (long long)w->n_tokens, (long long)x->tok_at[w->n_samples]);
    }
    /* where each stage's weight gradients are complete (the stage_done hook) */
    int32_t ns = w->plan.n_stages;
    if (ns > x->cap_last_w) {
        size_t c = (size_t)x->cap_last_w;
        if (DYN_RESERVE(x->last_w, c, ns) != 0) return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the stage table");
        x->cap_last_w = (int32_t)c;
    }
    for (int32_t k = 0; k < ns; k++) x->last_w[k] = -1;
    for (int32_t i = 0; i < x->rp->n_instrs; i++) {
        const dyn_instr *in = &x->rp->instrs[i];
        if ((in->op == DYN_OP_BACKWARD || in->op == DYN_OP_BACKWARD_WEIGHT) && in->stage >= 0 && in->stage < ns)
            x->last_w[in->stage] = i;
    }
    return DYN_OK;
}

static dyn_status record(rt_exec *x, int32_t i, double t0, double t1, dyn_error *err)
{
    if (x->n_ev == x->cap_ev) {
        size_t c = (size_t)x->cap_ev;
        if (DYN_RESERVE(x->ev, c, c ? c + 1 : 1024) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for trace events");
        x->cap_ev = (int64_t)c;
    }
    const dyn_instr *in = &x->rp->instrs[i];
    const dyn_rt_work *w = x->w;
    rt_event e = {in->op, in->microbatch, in->stage, i, t0 - x->epoch_ms, t1 - x->epoch_ms, 1.0,
                  instr_pred_ms(w, in), 0, 0};
    if (in->microbatch >= 0 && in->microbatch < w->n_mb) {
        if (w->useful) e.useful = w->useful[in->microbatch];
        e.rows = w->plan.mb_shape[in->microbatch].rows;
        e.len = w->plan.mb_shape[in->microbatch].enc_len;
    }
    x->ev[x->n_ev++] = e;
    return DYN_OK;
}

dyn_status rt_exec_run(rt_exec *x, const dyn_rt_work *w, double epoch_ms, rt_exec_stats *st, dyn_error *err)
{
    memset(st, 0, sizeof *st);
    x->st = st;
    x->epoch_ms = epoch_ms;
    if (w->n_mb == 0) return DYN_OK;
    dyn_status s = prepare(x, w, err);
    double start = dyn_time_ms();
    for (int32_t i = 0; s == DYN_OK && i < x->rp->n_instrs; i++) {
        double t0 = dyn_time_ms();
        s = handlers[x->rp->instrs[i].op](x, i, err);
        if (s == DYN_OK && x->env.record) s = record(x, i, t0, dyn_time_ms(), err);
        int32_t stage = x->rp->instrs[i].stage; /* -1 for barriers */
        if (s == DYN_OK && x->env.stage_done && stage >= 0 && x->last_w[stage] == i)
            x->env.stage_done(x->env.poll_ctx, stage);
        if (s == DYN_OK) poll_all(x);
    }
    st->wall_ms = dyn_time_ms() - start;
    free_mbs(x);
    for (int32_t k = 0; k < x->n_acts; k++)
        st->alloc_bytes += dyn_model_acts_capacity_bytes(x->acts[k].acts) +
                           dyn_model_acts_keep_capacity_bytes(x->acts[k].acts); /* the split backward's kept buffer */
    for (int32_t k = 0; k < x->n_slots; k++) st->alloc_bytes += x->slots[k].cap * sizeof(float);
    return s;
}
