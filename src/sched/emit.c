/* emit.c — instruction generation: from per-rank compute orders to a full
 * execution plan (loads, sends, receives, slots, frees), and the timed
 * global order that non-cyclic schedules are emitted in.
 *
 * Placement rules (why they cannot deadlock: see sched_internal.h):
 *   - LOAD_INPUT just before the FORWARD that reads it;
 *   - RECV_*_START on the consumer at the global moment the producer's
 *     SEND_*_START is emitted (posted early, so the slot exists when data
 *     arrives), RECV_*_FINISH just before the consuming compute;
 *   - SEND_*_START right after the producing compute, SEND_*_FINISH and the
 *     FREE_BUFFER of the sent slot lazily, just before the sender's second
 *     compute unit after the producer (or at the end), so the transfer
 *     overlaps one full compute unit, and only while more than
 *     SCHED_SEND_SLACK sends are in flight; in the timed order also not before a
 *     unit that starts before the receiver posted the receive (else, with
 *     rendezvous sends, the sender would stall on a receiver still busy),
 *     so with zero link cost the plan runs exactly as timed;
 *   - input slots freed right after the compute that reads them.
 * Slots are taken from a per-rank LIFO free list, so a freed slot is reused
 * first and n_buffers stays small. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched/sched_internal.h" /* defines: sched_emitter, sched_orders, sched_unit_ms */
#include "util/util.h"            /* defines: dyn_calloc */

typedef struct pending_send {
    int32_t op; /* SEND_ACT_FINISH or SEND_GRAD_FINISH */
    int32_t mb, stage, peer, slot, due;
    int64_t bytes;
    double ready_at; /* timed emission: when the receive was posted (ms) */
} pending_send;

struct sched_emitter {
    dyn_exec_plan *plan;
    const dyn_stage_costs *c;
    int32_t S, ns;
    dyn_recompute rc;
    int32_t *cap;         /* [S] instruction capacity */
    int32_t **free_stack; /* [S][cap] free slots, LIFO */
    int32_t *n_free;      /* [S] */
    int32_t *act_slot;    /* [M*ns] slot on rank(s) holding the input activation of (mb, s) */
    int32_t *grad_slot;   /* [M*ns] slot on rank(s) holding the output gradient of (mb, s) */
    pending_send **pend;  /* [S][units] FIFO of sends not yet finished */
    int32_t *p_head, *p_tail;
    int32_t *n_compute;   /* [S] compute units emitted */
    const double *clock;  /* timed emission: [S] end (ms) of each rank's last emitted unit, else NULL */
    double now;           /* timed emission: start (ms) of the unit being emitted, else INFINITY */
    int32_t overflow_rank; /* first rank that ran past its capacity (a bug), or -1 */
    dyn_instr spill;      /* where put() writes once a rank is over capacity */
};

static int32_t rank_of(const sched_emitter *e, int32_t s) { return s % e->S; }

static int64_t mb_to_bytes(double mb) { return (int64_t)llround(mb * 1048576.0); }

static int64_t boundary_bytes(const sched_emitter *e, int32_t mb, int32_t s)
{
    return e->c->send_mb ? mb_to_bytes(e->c->send_mb[(size_t)mb * e->ns + s]) : 0;
}

void sched_emitter_free(sched_emitter *e)
{
    if (e == NULL) return;
    for (int32_t r = 0; r < e->S; r++) {
        if (e->free_stack) free(e->free_stack[r]);
        if (e->pend) free(e->pend[r]);
    }
    free(e->free_stack);
    free(e->pend);
    free(e->cap);
    free(e->n_free);
    free(e->act_slot);
    free(e->grad_slot);
    free(e->p_head);
    free(e->p_tail);
    free(e->n_compute);
    free(e);
}

/* The plan's header and its arrays (zeroed) for o's ranks, stages and
 * micro-batches; 0 when out of memory (err set). */
static int emitter_plan_init(dyn_exec_plan *plan, dyn_schedule kind, const sched_orders *o,
                             const dyn_sched_options *opt, dyn_error *err)
{
    int32_t S = o->n_ranks, ns = o->n_stages, M = o->n_mb;
    memset(plan, 0, sizeof *plan);
    plan->schedule = kind;
    plan->replica = opt->replica;
    plan->n_ranks = S;
    plan->n_stages = ns;
    plan->n_microbatches = M;
    plan->stage_rank = dyn_calloc((size_t)ns, sizeof(int32_t), "plan stages", err);
    plan->mb_shape = dyn_calloc((size_t)M, sizeof(dyn_mb_shape), "plan shapes", err);
    plan->ranks = dyn_calloc((size_t)S, sizeof(dyn_rank_plan), "plan ranks", err);
    return plan->stage_rank && plan->mb_shape && plan->ranks;
}

/* The emitter's per-rank and per-(micro-batch, stage) arrays, slots all
 * empty (-1); 0 when out of memory (err set). */
static int emitter_arrays_init(sched_emitter *e, int32_t M, dyn_error *err)
{
    int32_t S = e->S, ns = e->ns;
    e->cap = dyn_calloc((size_t)S, sizeof(int32_t), "emitter", err);
    e->free_stack = dyn_calloc((size_t)S, sizeof(int32_t *), "emitter", err);
    e->n_free = dyn_calloc((size_t)S, sizeof(int32_t), "emitter", err);
    e->pend = dyn_calloc((size_t)S, sizeof(pending_send *), "emitter", err);
    e->p_head = dyn_calloc((size_t)S, sizeof(int32_t), "emitter", err);
    e->p_tail = dyn_calloc((size_t)S, sizeof(int32_t), "emitter", err);
    e->n_compute = dyn_calloc((size_t)S, sizeof(int32_t), "emitter", err);
    e->act_slot = dyn_calloc((size_t)M * ns, sizeof(int32_t), "emitter", err);
    e->grad_slot = dyn_calloc((size_t)M * ns, sizeof(int32_t), "emitter", err);
    if (!e->cap || !e->free_stack || !e->n_free || !e->pend || !e->p_head || !e->p_tail ||
        !e->n_compute || !e->act_slot || !e->grad_slot)
        return 0;
    for (size_t i = 0; i < (size_t)M * ns; i++) e->act_slot[i] = e->grad_slot[i] = -1;
    return 1;
}

/* Exact instruction count per rank into e->cap, so each list is allocated
 * once at its final size (see sched_emit_unit for what each unit emits). */
static void emitter_count(sched_emitter *e, const sched_orders *o, int32_t n_barriers)
{
    int32_t S = e->S, last = e->ns - 1;
    for (int32_t r = 0; r < S; r++) e->cap[r] = n_barriers;
    for (int32_t r = 0; r < S; r++) {
        for (int32_t i = 0; i < o->n[r]; i++) {
            const sched_unit *u = &o->u[r][i];
            int32_t s = u->stage;
            int64_t n = 1; /* the compute itself */
            if (u->kind == UNIT_F) {
                n += 1;                                       /* free of the input slot */
                if (s == 0) n += 1;                           /* load tokens */
                else if ((s - 1) % S != r) n += 1;            /* receive finish */
                if (s == last) n += 2;                        /* load and free targets */
                if (s < last && (s + 1) % S != r) {
                    n += 3;                                   /* send start, finish, free */
                    e->cap[(s + 1) % S] += 1;                 /* receive start there */
                }
            } else if (u->kind != UNIT_BW) {
                if (s < last) n += 1 + ((s + 1) % S != r);    /* free input (+ receive finish) */
                if (s > 0 && (s - 1) % S != r) {
                    n += 3;
                    e->cap[(s - 1) % S] += 1;
                }
            }
            e->cap[r] += (int32_t)n;
        }
    }
}

/* Each rank's instruction list, free-slot stack and pending-send queue at
 * their counted sizes. */
static dyn_status emitter_rank_lists(sched_emitter *e, const sched_orders *o, dyn_error *err)
{
    dyn_exec_plan *plan = e->plan;
    for (int32_t r = 0; r < e->S; r++) {
        if (e->cap[r] < 0 || e->cap[r] > INT32_MAX / 2)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "schedule: rank %d would need %d instructions",
                                 r, e->cap[r]);
        /* every field of an instruction is set by put(): no need to zero */
        plan->ranks[r].instrs = malloc((size_t)(e->cap[r] > 0 ? e->cap[r] : 1) * sizeof(dyn_instr));
        e->free_stack[r] = malloc((size_t)(e->cap[r] > 0 ? e->cap[r] : 1) * sizeof(int32_t));
        e->pend[r] = malloc(((size_t)o->n[r] + 1) * sizeof(pending_send));
        if (!plan->ranks[r].instrs || !e->free_stack[r] || !e->pend[r]) {
            dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for rank %d's plan", r);
            return DYN_ERR_NOMEM;
        }
    }
    return DYN_OK;
}

dyn_status sched_emitter_create(sched_emitter **out, dyn_exec_plan *plan, dyn_schedule kind,
                                const sched_orders *o, const dyn_stage_costs *c,
                                const dyn_mb_shape *shapes, const dyn_sched_options *opt,
                                int32_t n_barriers, dyn_error *err)
{
    *out = NULL;
    dyn_status st = DYN_ERR_NOMEM; /* what a failure below means, unless set otherwise */
    int plan_ok = emitter_plan_init(plan, kind, o, opt, err);
    sched_emitter *e = dyn_calloc(1, sizeof *e, "emitter", err);
    if (plan_ok && e) {
        for (int32_t s = 0; s < o->n_stages; s++) plan->stage_rank[s] = s % o->n_ranks;
        if (shapes) memcpy(plan->mb_shape, shapes, (size_t)o->n_mb * sizeof(dyn_mb_shape));
        e->plan = plan;
        e->c = c;
        e->S = o->n_ranks;
        e->ns = o->n_stages;
        e->rc = opt->recompute;
        e->clock = NULL;
        e->now = INFINITY;
        e->overflow_rank = -1;
        if (emitter_arrays_init(e, o->n_mb, err)) {
            emitter_count(e, o, n_barriers);
            if ((st = emitter_rank_lists(e, o, err)) == DYN_OK) {
                *out = e;
                return DYN_OK;
            }
        }
    }
    sched_emitter_free(e);
    dyn_exec_plan_free(plan);
    return st;
}

/* Append an instruction to rank r with defaults filled. Capacity is a proven
 * bound (see sched_emitter_create), so overflowing it is a bug: it is
 * recorded (sched_emitter_finish reports DYN_ERR_INTERNAL) and the
 * instruction goes to a spill record, so the emitter's callers need no
 * error path of their own. */
static dyn_instr *put(sched_emitter *e, int32_t r, int32_t op, int32_t mb, int32_t stage)
{
    dyn_rank_plan *rp = &e->plan->ranks[r];
    dyn_instr *in = &e->spill;
    if (rp->n_instrs < e->cap[r]) in = &rp->instrs[rp->n_instrs++];
    else if (e->overflow_rank < 0) e->overflow_rank = r;
    memset(in, 0, sizeof *in);
    in->op = (uint8_t)op;
    in->microbatch = mb;
    in->stage = stage;
    in->peer = -1;
    in->buf_in = -1;
    in->buf_out = -1;
    if (mb >= 0) in->shape = e->plan->mb_shape[mb];
    return in;
}

static int32_t slot_alloc(sched_emitter *e, int32_t r)
{
    if (e->n_free[r] > 0) return e->free_stack[r][--e->n_free[r]];
    return e->plan->ranks[r].n_buffers++;
}

static void slot_free(sched_emitter *e, int32_t r, int32_t slot, int32_t mb, int32_t stage)
{
    dyn_instr *in = put(e, r, DYN_OP_FREE_BUFFER, mb, stage);
    in->buf_in = slot;
    e->free_stack[r][e->n_free[r]++] = slot;
}

/* Finish sends on rank r whose due compute index has come, past the
 * SCHED_SEND_SLACK kept in flight (all if force). In a timed emission a send also
 * waits until its receive has been posted by the time the next unit starts:
 * the receiver posts it only after the unit it was running when the send
 * started, and finishing before that would stall the sender on the
 * rendezvous for time the costs do not show. */
static void flush_sends(sched_emitter *e, int32_t r, int force)
{
    while (e->p_head[r] < e->p_tail[r]) {
        pending_send *p = &e->pend[r][e->p_head[r]];
        int kept = e->p_tail[r] - e->p_head[r] <= SCHED_SEND_SLACK;
        if (!force && (kept || p->due > e->n_compute[r] || p->ready_at > e->now)) break;
        dyn_instr *in = put(e, r, p->op, p->mb, p->stage);
        in->peer = p->peer;
        in->buf_in = p->slot;
        in->bytes = p->bytes;
        slot_free(e, r, p->slot, p->mb, p->stage);
        e->p_head[r]++;
    }
}

/* Start sending slot (holding the boundary tensor of (mb, stage) on rank r)
 * to the rank of to_stage, and post the matching receive there now. */
static void send_and_post(sched_emitter *e, int32_t r, int grad, int32_t mb, int32_t stage,
                          int32_t to_stage, int32_t slot, int64_t bytes)
{
    int32_t peer = rank_of(e, to_stage);
    dyn_instr *in = put(e, r, grad ? DYN_OP_SEND_GRAD_START : DYN_OP_SEND_ACT_START, mb, stage);
    in->peer = peer;
    in->buf_in = slot;
    in->bytes = bytes;
    pending_send *p = &e->pend[r][e->p_tail[r]++];
    p->op = grad ? DYN_OP_SEND_GRAD_FINISH : DYN_OP_SEND_ACT_FINISH;
    p->mb = mb;
    p->stage = stage;
    p->peer = peer;
    p->slot = slot;
    p->bytes = bytes;
    p->due = e->n_compute[r] + 2; /* n_compute[r] already counts the producer */
    p->ready_at = e->clock ? e->clock[peer] : 0;

    int32_t rs = slot_alloc(e, peer);
    dyn_instr *rv = put(e, peer, grad ? DYN_OP_RECV_GRAD_START : DYN_OP_RECV_ACT_START, mb, to_stage);
    rv->peer = r;
    rv->buf_out = rs;
    rv->bytes = bytes;
    size_t k = (size_t)mb * e->ns + to_stage;
    if (grad) e->grad_slot[k] = rs;
    else e->act_slot[k] = rs;
}

/* Finish the receive feeding (mb, s) on rank r if it came from another rank. */
static void recv_finish(sched_emitter *e, int32_t r, int grad, int32_t mb, int32_t s, int32_t from,
                        int32_t slot)
{
    if (rank_of(e, from) == r) return;
    dyn_instr *in = put(e, r, grad ? DYN_OP_RECV_GRAD_FINISH : DYN_OP_RECV_ACT_FINISH, mb, s);
    in->peer = rank_of(e, from);
    in->buf_out = slot;
    in->bytes = grad ? boundary_bytes(e, mb, s) : boundary_bytes(e, mb, from);
}

/* A FORWARD of (mb, s) on rank r: its input (loaded tokens on stage 0,
 * else the received activation), the targets on the last stage, the
 * compute, the frees of what it read, and its output passed on. */
static void emit_forward(sched_emitter *e, int32_t r, int32_t mb, int32_t s)
{
    int32_t last = e->ns - 1;
    size_t k = (size_t)mb * e->ns + s;
    const dyn_mb_shape *sh = &e->plan->mb_shape[mb];
    int32_t in_slot, tgt = -1;
    if (s == 0) {
        in_slot = slot_alloc(e, r);
        dyn_instr *ld = put(e, r, DYN_OP_LOAD_INPUT, mb, s);
        ld->buf_out = in_slot;
        ld->bytes = 4 * (int64_t)sh->rows * ((int64_t)sh->enc_len + sh->dec_len);
    } else {
        in_slot = e->act_slot[k];
        recv_finish(e, r, 0, mb, s, s - 1, in_slot);
    }
    if (s == last) {
        tgt = slot_alloc(e, r);
        dyn_instr *ld = put(e, r, DYN_OP_LOAD_INPUT, mb, s);
        ld->flags = DYN_INSTR_FLAG_TARGETS;
        ld->buf_out = tgt;
        ld->bytes = 4 * (int64_t)sh->rows * (sh->dec_len > 0 ? sh->dec_len : sh->enc_len);
    }
    int32_t out_slot = s < last ? slot_alloc(e, r) : -1;
    dyn_instr *f = put(e, r, DYN_OP_FORWARD, mb, s);
    f->recompute = (uint8_t)e->rc;
    f->buf_in = in_slot;
    f->buf_out = out_slot;
    f->bytes = out_slot >= 0 ? boundary_bytes(e, mb, s) : 0;
    e->n_compute[r]++;
    slot_free(e, r, in_slot, mb, s);
    if (tgt >= 0) slot_free(e, r, tgt, mb, s);
    if (out_slot >= 0) {
        if (rank_of(e, s + 1) == r) e->act_slot[k + 1] = out_slot;
        else send_and_post(e, r, 0, mb, s, s + 1, out_slot, boundary_bytes(e, mb, s));
    }
}

/* A BACKWARD or BACKWARD_INPUT (op) of (mb, s) on rank r: the received
 * gradient (but on the last stage), the compute, the free of the gradient
 * and the input gradient passed on (but on stage 0). */
static void emit_backward(sched_emitter *e, int32_t r, int32_t op, int32_t mb, int32_t s)
{
    size_t k = (size_t)mb * e->ns + s;
    int32_t in_slot = -1;
    if (s < e->ns - 1) {
        in_slot = e->grad_slot[k];
        recv_finish(e, r, 1, mb, s, s + 1, in_slot);
    }
    int32_t out_slot = s > 0 ? slot_alloc(e, r) : -1;
    dyn_instr *b = put(e, r, op, mb, s);
    b->recompute = (uint8_t)e->rc;
    b->buf_in = in_slot;
    b->buf_out = out_slot;
    b->bytes = out_slot >= 0 ? boundary_bytes(e, mb, s - 1) : 0;
    e->n_compute[r]++;
    if (in_slot >= 0) slot_free(e, r, in_slot, mb, s);
    if (out_slot >= 0) {
        if (rank_of(e, s - 1) == r) e->grad_slot[k - 1] = out_slot;
        else send_and_post(e, r, 1, mb, s, s - 1, out_slot, boundary_bytes(e, mb, s - 1));
    }
}

void sched_emit_unit(sched_emitter *e, int32_t r, const sched_unit *u)
{
    flush_sends(e, r, 0);
    if (u->kind == UNIT_F) {
        emit_forward(e, r, u->mb, u->stage);
    } else if (u->kind == UNIT_BW) {
        dyn_instr *w = put(e, r, DYN_OP_BACKWARD_WEIGHT, u->mb, u->stage);
        w->recompute = (uint8_t)e->rc;
        e->n_compute[r]++;
    } else {
        emit_backward(e, r, u->kind == UNIT_B ? DYN_OP_BACKWARD : DYN_OP_BACKWARD_INPUT, u->mb, u->stage);
    }
}

void sched_emit_barrier(sched_emitter *e)
{
    for (int32_t r = 0; r < e->S; r++) {
        dyn_instr *in = put(e, r, DYN_OP_BARRIER, -1, -1);
        (void)in;
    }
}

dyn_status sched_emitter_finish(sched_emitter *e, dyn_error *err)
{
    for (int32_t r = 0; r < e->S; r++) flush_sends(e, r, 1);
    int32_t bad = e->overflow_rank;
    int32_t cap = bad >= 0 ? e->cap[bad] : 0;
    sched_emitter_free(e);
    if (bad >= 0)
        return dyn_error_set(err, DYN_ERR_INTERNAL,
                             "schedule emitter: rank %d needs more than the %d instructions counted for it "
                             "(a bug in the instruction count)",
                             bad, cap);
    return DYN_OK;
}

/* ---- timed global order -------------------------------------------------- */

/* When rank r's next unit can start in the timed order: INFINITY if it has
 * none left or its input does not exist yet. */
static double next_start(const sched_orders *o, int32_t r, const int32_t *pos, const double *fdone,
                         const double *bdone, const double *free_at, int32_t ns)
{
    if (pos[r] >= o->n[r]) return INFINITY;
    const sched_unit *u = &o->u[r][pos[r]];
    size_t k = (size_t)u->mb * ns + u->stage;
    double dep;
    if (u->kind == UNIT_F) dep = u->stage == 0 ? 0 : fdone[k - 1];
    else if (u->kind == UNIT_BW) dep = bdone[k];
    else dep = u->stage == ns - 1 ? fdone[k] : bdone[k + 1];
    if (dep < 0) return INFINITY;
    return dep > free_at[r] ? dep : free_at[r];
}

/* The timed order's state: fdone, bdone [M * ns] (end of each forward /
 * backward, ms; -1 not yet), free_at, start [S] (ms), pos [S] (next unit),
 * all in one block. */
typedef struct timed_order {
    const sched_orders *o;
    int32_t S, ns;
    double *block;
    double *fdone, *bdone, *free_at, *start;
    int32_t *pos;
} timed_order;

static dyn_status timed_init(timed_order *t, const sched_orders *o, dyn_error *err)
{
    int32_t S = o->n_ranks, ns = o->n_stages, M = o->n_mb;
    t->o = o;
    t->S = S;
    t->ns = ns;
    t->block = dyn_calloc(2 * (size_t)M * ns + 3 * (size_t)S, sizeof(double), "timed order", err);
    if (t->block == NULL) return DYN_ERR_NOMEM;
    t->fdone = t->block;
    t->bdone = t->fdone + (size_t)M * ns;
    t->free_at = t->bdone + (size_t)M * ns;
    t->start = t->free_at + S;
    t->pos = (int32_t *)(t->start + S); /* S int32s fit in S doubles */
    for (size_t i = 0; i < (size_t)M * ns; i++) t->fdone[i] = t->bdone[i] = -1;
    for (int32_t r = 0; r < S; r++) t->start[r] = next_start(o, r, t->pos, t->fdone, t->bdone, t->free_at, ns);
    return DYN_OK;
}

/* The rank whose next unit starts earliest (ties to the lower rank), its
 * start in *at; -1 when no unit can start. */
static int32_t timed_earliest(const timed_order *t, double *at)
{
    int32_t best = -1;
    *at = INFINITY;
    for (int32_t r = 0; r < t->S; r++) {
        if (t->start[r] < *at) {
            best = r;
            *at = t->start[r];
        }
    }
    return best;
}

/* No unit can start but some are left: the order cannot complete. */
static dyn_status timed_stuck(const timed_order *t, dyn_schedule kind, dyn_error *err)
{
    const sched_orders *o = t->o;
    int32_t r0 = 0;
    while (t->pos[r0] >= o->n[r0]) r0++;
    const sched_unit *u = &o->u[r0][t->pos[r0]];
    return dyn_error_set(err, DYN_ERR_INTERNAL,
                         "schedule %s: order cannot complete: rank %d waits forever at "
                         "unit %d (kind %d, micro-batch %d, stage %d)",
                         dyn_schedule_name(kind), r0, t->pos[r0], u->kind, u->mb, u->stage);
}

/* Emit rank r's next unit at time at and update the times it changes. */
static void timed_emit(timed_order *t, sched_emitter *e, const dyn_stage_costs *c, int32_t r, double at)
{
    const sched_orders *o = t->o;
    int32_t S = t->S, ns = t->ns;
    const sched_unit *u = &o->u[r][t->pos[r]++];
    size_t k = (size_t)u->mb * ns + u->stage;
    double end = at + sched_unit_ms(c, u);
    if (u->kind == UNIT_F) t->fdone[k] = end;
    else if (u->kind != UNIT_BW) t->bdone[k] = end;
    e->now = at;
    sched_emit_unit(e, r, u);
    t->free_at[r] = end; /* after emitting: a receive posted by it goes after this unit */
    /* only this rank and the ranks of the neighbouring stages (r +- 1
     * mod S) read what this unit changed */
    t->start[r] = next_start(o, r, t->pos, t->fdone, t->bdone, t->free_at, ns);
    if (S > 1) {
        int32_t up = (r + S - 1) % S, down = (r + 1) % S;
        t->start[up] = next_start(o, up, t->pos, t->fdone, t->bdone, t->free_at, ns);
        t->start[down] = next_start(o, down, t->pos, t->fdone, t->bdone, t->free_at, ns);
    }
}

dyn_status sched_emit_timed(const sched_orders *o, const dyn_stage_costs *c,
                            const dyn_mb_shape *shapes, const dyn_sched_options *opt,
                            dyn_schedule kind, dyn_exec_plan *plan, dyn_error *err)
{
    sched_emitter *e = NULL;
    dyn_status st = sched_emitter_create(&e, plan, kind, o, c, shapes, opt, 0, err);
    if (st != DYN_OK) return st;
    timed_order t;
    if ((st = timed_init(&t, o, err)) == DYN_OK) {
        e->clock = t.free_at;
        int64_t total = 0;
        for (int32_t r = 0; r < o->n_ranks; r++) total += o->n[r];
        for (int64_t step = 0; step < total && st == DYN_OK; step++) {
            double at;
            int32_t best = timed_earliest(&t, &at);
            if (best < 0) st = timed_stuck(&t, kind, err);
            else timed_emit(&t, e, c, best, at);
        }
        free(t.block);
    }
    if (st != DYN_OK) {
        sched_emitter_free(e);
        dyn_exec_plan_free(plan);
        return st;
    }
    if ((st = sched_emitter_finish(e, err)) != DYN_OK) dyn_exec_plan_free(plan);
    return st;
}
