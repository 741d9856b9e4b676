/*
 * sim.c — the event-driven simulator of an execution plan (see sim.h for the
 * semantics it models).
 *
 * How it runs. Before simulating, one linear pass checks the fields the
 * simulator indexes with, and src/sched's matcher (sched/instr.h, shared
 * with the validator) pairs every SEND_*_START with its RECV_*_START (per
 * (kind, sender, receiver), in posting order) and every FINISH with its
 * START (through the slot it names). Then ranks are
 * processes and a binary min-heap keyed by (time, rank) orders them: the
 * earliest rank executes instructions while its clock does not pass the next
 * rank's; a FINISH whose message is not yet in flight parks the rank on that
 * message, and posting the message's other side wakes it. Because ranks
 * advance in time order, messages start in time order, which is what lets
 * one directed link carry one transfer at a time (first come, first served).
 * An empty heap with unfinished ranks is a deadlock.
 *
 * Cost: O(N log R) for N instructions over R ranks, plus O(N + R*M) for the
 * matching pass (R^2 buckets). All arrays live in the dyn_sim workspace and grow only when
 * a bigger plan arrives, so repeated runs (the order search) do not allocate.
 *
 * Memory is a property of one rank's own instruction stream (every change
 * is made by the rank's own instructions), so it is tracked in program order
 * without reference to other ranks.
 */
#include "dynapipe/sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched/instr.h"       /* defines: sched_op, sched_match_plan, sched_mem_step */
#include "sim/sim_internal.h" /* defines: sim_last_result */
#include "util/util.h"         /* defines: dyn_calloc, DYN_RESERVE */

#define MB_BYTES 1048576.0

enum { RANK_READY = 0, RANK_BLOCKED = 1, RANK_DONE = 2 };

#define WAIT_BARRIER (-2) /* wait_msg value of a rank parked at a barrier */
enum { MSG_SEND_POSTED = 1, MSG_RECV_POSTED = 2, MSG_STARTED = 4 };

/* One message: a SEND_*_START on one rank and its RECV_*_START on another. */
typedef struct sim_msg {
    int32_t send_idx, recv_idx; /* flat instruction indices of the two STARTs */
    int32_t src, dst;           /* sending and receiving rank */
    int32_t send_waiter;        /* rank parked on SEND_FINISH, or -1 */
    int32_t recv_waiter;        /* rank parked on RECV_FINISH, or -1 */
    int32_t flags;
    double send_post, recv_post; /* ms */
    double arrive;               /* ms, valid once MSG_STARTED */
} sim_msg;

typedef struct heap_item {
    double t;
    int32_t rank;
} heap_item;

struct dyn_sim {
    /* capacities */
    int32_t cap_ranks, cap_instrs, cap_slots;
    /* per rank */
    int32_t *rank_off; /* [R + 1] */
    int32_t *slot_off; /* [R + 1] offsets into the per-slot arrays */
    int32_t *pc, *state, *wait_msg;
    double *clock, *busy, *mem, *peak, *states_mb;
    double *link_free; /* [R * R] sender * R + receiver */
    heap_item *heap;
    int32_t heap_n;
    /* per instruction */
    dyn_sim_event *ev; /* [instrs] per-instruction outputs */
    int record;        /* fill ev (off during searches) */
    /* messages: match.msg_of[k] of a SEND/RECV START or FINISH indexes msgs */
    sched_match match;
    sim_msg *msgs;
    /* per slot (all ranks), for memory */
    double *slot_mb;
    uint8_t *slot_live;
    /* the open barrier: ranks arrived and the latest arrival time */
    int32_t barrier_arrived;
    double barrier_time;
    /* result view */
    dyn_sim_result res;
};

void dyn_sim_options_from_machine(dyn_sim_options *opt, const dyn_machine *m, int64_t real_tokens)
{
    memset(opt, 0, sizeof *opt);
    if (m) {
        opt->link_latency_ms = m->link_latency_ms;
        opt->link_gbps = m->link_gbps;
    }
    opt->real_tokens = real_tokens;
}

dyn_sim *dyn_sim_create(dyn_error *err)
{
    return dyn_calloc(1, sizeof(dyn_sim), "simulator", err);
}

static void free_arrays(dyn_sim *s)
{
    free(s->rank_off); free(s->slot_off); free(s->pc); free(s->state); free(s->wait_msg);
    free(s->clock); free(s->busy); free(s->mem); free(s->peak); free(s->states_mb);
    free(s->link_free); free(s->heap);
    free(s->ev); free(s->msgs);
    free(s->slot_mb); free(s->slot_live);
    sched_match_free(&s->match);
}

void dyn_sim_free(dyn_sim *sim)
{
    if (sim == NULL) return;
    free_arrays(sim);
    free(sim);
}

/* Make sure the workspace holds R ranks, N instructions and K slots (the
 * matcher grows its own). Each group of arrays shares one capacity and
 * grows geometrically (dyn_reserve, from a copy of the old capacity), so a
 * sequence of plans settles fast. Contents need not survive: dyn_sim_run
 * sets every entry it reads. */
static dyn_status reserve(dyn_sim *s, int32_t R, int32_t N, int32_t K, dyn_error *err)
{
    if (R > s->cap_ranks) {
        int32_t o = s->cap_ranks, c = R > 2 * o ? R : 2 * o;
        if (DYN_RESERVE(s->rank_off, (size_t){(size_t)o + 1}, (size_t)c + 1) != 0 ||
            DYN_RESERVE(s->slot_off, (size_t){(size_t)o + 1}, (size_t)c + 1) != 0 ||
            DYN_RESERVE(s->pc, (size_t){o}, c) != 0 ||
            DYN_RESERVE(s->state, (size_t){o}, c) != 0 ||
            DYN_RESERVE(s->wait_msg, (size_t){o}, c) != 0 ||
            DYN_RESERVE(s->clock, (size_t){o}, c) != 0 ||
            DYN_RESERVE(s->busy, (size_t){o}, c) != 0 ||
            DYN_RESERVE(s->mem, (size_t){o}, c) != 0 ||
            DYN_RESERVE(s->peak, (size_t){o}, c) != 0 ||
            DYN_RESERVE(s->states_mb, (size_t){o}, c) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the simulator ranks");
        if (DYN_RESERVE(s->link_free, (size_t){(size_t)o * o}, (size_t)c * c) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the simulator links");
        if (DYN_RESERVE(s->heap, (size_t){o}, c) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the simulator heap");
        s->cap_ranks = c;
    }
    if (N > s->cap_instrs) {
        int32_t o = s->cap_instrs, c = N > 2 * o ? N : 2 * o;
        if (DYN_RESERVE(s->ev, (size_t){o}, c) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the simulator instructions");
        if (DYN_RESERVE(s->msgs, (size_t){o}, c) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the simulator messages");
        s->cap_instrs = c;
    }
    if (K > s->cap_slots) {
        int32_t o = s->cap_slots, c = K > 2 * o ? K : 2 * o;
        if (DYN_RESERVE(s->slot_mb, (size_t){o}, c) != 0 ||
            DYN_RESERVE(s->slot_live, (size_t){o}, c) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the simulator slots");
        s->cap_slots = c;
    }
    return DYN_OK;
}

static const char *op_label(int op) { return dyn_op_name((dyn_op)op); }

/* Check every field the simulator indexes with, rank by rank in program
 * order, and feed each SEND/RECV to the matcher in the same pass (it
 * relies on ops, peers and slots in range, checked first). */
static dyn_status scan_plan(dyn_sim *s, const dyn_exec_plan *p, dyn_error *err)
{
    int32_t R = p->n_ranks, S = p->n_stages, M = p->n_microbatches;
    dyn_status st = sched_match_begin(&s->match, p, err);
    for (int32_t r = 0; st == DYN_OK && r < R; r++) {
        const dyn_rank_plan *rp = &p->ranks[r];
        int32_t nb = rp->n_buffers;
        sched_match_rank_begin(&s->match, p, r);
        for (int32_t i = 0; i < rp->n_instrs; i++) {
            const dyn_instr *in = &rp->instrs[i];
            if (in->op >= DYN_OP_COUNT)
                return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                     "plan rank %d instruction %d: unknown op %d", r, i, in->op);
            int op = in->op;
            unsigned fl = sched_op(op);
            if (!(fl & SCHED_OP_NO_MB) && (in->microbatch < 0 || in->microbatch >= M))
                return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                     "plan rank %d instruction %d (%s): micro-batch %d out of range 0..%d",
                                     r, i, op_label(op), in->microbatch, M - 1);
            if ((fl & SCHED_OP_COMPUTE) && (in->stage < 0 || in->stage >= S || p->stage_rank[in->stage] != r))
                return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                     "plan rank %d instruction %d (%s): stage %d is not on this rank",
                                     r, i, op_label(op), in->stage);
            if ((in->buf_in < -1 || in->buf_in >= nb) || (in->buf_out < -1 || in->buf_out >= nb))
                return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                     "plan rank %d instruction %d (%s): slot out of range 0..%d",
                                     r, i, op_label(op), nb - 1);
            if (in->bytes < 0)
                return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                     "plan rank %d instruction %d (%s): negative bytes", r, i,
                                     op_label(op));
            if (!(fl & SCHED_OP_COMM)) continue;
            if (in->peer < 0 || in->peer >= R || in->peer == r)
                return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                     "plan rank %d instruction %d (%s): bad peer rank %d", r, i,
                                     op_label(op), in->peer);
            if ((st = sched_match_instr(&s->match, r, i, in, err)) != DYN_OK) return st;
        }
        st = sched_match_rank_end(&s->match, p, r, err);
    }
    return st;
}

/* Check the plan and pair its messages (sched/instr.h: the k-th
 * SEND_ACT_START from a to b meets the k-th RECV_ACT_START from a on b,
 * and they must agree on micro-batch and bytes), then set up one sim_msg
 * per message. */
static dyn_status prepare(dyn_sim *s, const dyn_exec_plan *p, dyn_error *err)
{
    dyn_status st = scan_plan(s, p, err);
    if (st == DYN_OK) st = sched_match_end(&s->match, 0, err);
    if (st != DYN_OK) return st;
    for (int32_t x = 0; x < s->match.n_msgs; x++) {
        sim_msg *m = &s->msgs[x];
        m->send_idx = s->match.msg_send[x];
        m->recv_idx = s->match.msg_recv[x];
        m->src = s->match.msg_src[x];
        m->dst = s->match.msg_dst[x];
        m->send_waiter = m->recv_waiter = -1;
        m->flags = 0;
        m->send_post = m->recv_post = m->arrive = 0.0;
    }
    return DYN_OK;
}

/* ---- the (time, rank) min-heap ---- */

static int heap_less(const heap_item *a, const heap_item *b)
{
    return a->t < b->t || (a->t == b->t && a->rank < b->rank);
}

static void heap_push(dyn_sim *s, double t, int32_t rank)
{
    int32_t i = s->heap_n++;
    heap_item it = {t, rank};
    while (i > 0) {
        int32_t parent = (i - 1) / 2;
        if (!heap_less(&it, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = it;
}

static heap_item heap_pop(dyn_sim *s)
{
    heap_item top = s->heap[0];
    heap_item last = s->heap[--s->heap_n];
    int32_t i = 0, n = s->heap_n;
    for (;;) {
        int32_t l = 2 * i + 1, best = i;
        const heap_item *bi = &last;
        if (l < n && heap_less(&s->heap[l], bi)) { best = l; bi = &s->heap[l]; }
        if (l + 1 < n && heap_less(&s->heap[l + 1], bi)) { best = l + 1; bi = &s->heap[l + 1]; }
        if (best == i) break;
        s->heap[i] = s->heap[best];
        i = best;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

/* Both sides of message m are posted at time now: start the transfer on its
 * link and wake any rank parked on it. */
static void start_transfer(dyn_sim *s, const dyn_exec_plan *p, const dyn_sim_options *opt,
                           sim_msg *m, double now)
{
    int32_t R = p->n_ranks;
    double *link = &s->link_free[(size_t)m->src * R + m->dst];
    double t0 = now > *link ? now : *link;
    double bytes = (double)s->match.ins[m->send_idx]->bytes;
    double xfer = opt->link_gbps > 0 ? bytes / (opt->link_gbps * 1e9) * 1e3 : 0.0;
    *link = t0 + xfer;
    m->arrive = t0 + xfer + opt->link_latency_ms;
    m->flags |= MSG_STARTED;
    int32_t waiters[2] = {m->send_waiter, m->recv_waiter};
    for (int w = 0; w < 2; w++) {
        int32_t r = waiters[w];
        if (r < 0) continue;
        /* The parked FINISH completes at arrival; the rank resumes after it. */
        int32_t k = s->rank_off[r] + s->pc[r];
        double t0 = s->clock[r];
        if (m->arrive > s->clock[r]) s->clock[r] = m->arrive;
        if (s->record) s->ev[k] = (dyn_sim_event){t0, s->clock[r], s->mem[r], s->mem[r]};
        s->pc[r]++;
        s->state[r] = RANK_READY;
        heap_push(s, s->clock[r], r);
    }
    m->send_waiter = m->recv_waiter = -1;
}

static double cost_at(const double *a, int32_t i) { return a ? a[i] : 0.0; }

/* Rank r reaches a BARRIER. Returns 0 when it must park (others still to
 * come); 1 when it is the last: every parked rank is released at the latest
 * arrival time (which is r's clock, as ranks advance in time order) and r
 * goes on. */
static int barrier_arrive(dyn_sim *s, const dyn_exec_plan *p, int32_t r)
{
    if (s->barrier_arrived == 0 || s->clock[r] > s->barrier_time) s->barrier_time = s->clock[r];
    if (++s->barrier_arrived < p->n_ranks) {
        s->state[r] = RANK_BLOCKED;
        s->wait_msg[r] = WAIT_BARRIER;
        return 0;
    }
    for (int32_t q = 0; q < p->n_ranks; q++) {
        if (q == r || s->state[q] != RANK_BLOCKED || s->wait_msg[q] != WAIT_BARRIER) continue;
        int32_t k = s->rank_off[q] + s->pc[q];
        if (s->record) s->ev[k] = (dyn_sim_event){s->clock[q], s->barrier_time, s->mem[q], s->mem[q]};
        s->clock[q] = s->barrier_time;
        s->pc[q]++;
        s->state[q] = RANK_READY;
        s->wait_msg[q] = -1;
        heap_push(s, s->clock[q], q);
    }
    return 1;
}

/* One rank while it runs: what it reads, and its state, held here rather
 * than in the dyn_sim arrays while it runs (the compiler cannot keep
 * s->clock[r] etc. in registers across the stores to other double arrays)
 * and written back by rank_save whenever control leaves run_rank. The
 * helpers below are inlined into run_rank's loop, so the state stays in
 * registers. */
typedef struct rank_run {
    dyn_sim *s;
    const dyn_exec_plan *p;
    const dyn_stage_costs *c;
    const dyn_sim_options *opt;
    int32_t r, base, off, S; /* rank, first slot, first flat instruction, stages */
    int record, slot_memory;
    int32_t pc;
    double clock, mem, peak, busy;
} rank_run;

static inline void rank_save(rank_run *x)
{
    dyn_sim *s = x->s;
    s->pc[x->r] = x->pc;
    s->clock[x->r] = x->clock;
    s->mem[x->r] = x->mem;
    s->peak[x->r] = x->peak;
    s->busy[x->r] = x->busy;
}

/* A slot becomes live holding bytes (counted only with slot_memory); a
 * slot written while live is overwritten: its old size leaves first. */
static inline void rank_slot_write(rank_run *x, int32_t slot, int64_t nbytes)
{
    dyn_sim *s = x->s;
    int32_t q = x->base + slot;
    if (s->slot_live[q]) x->mem -= s->slot_mb[q];
    s->slot_mb[q] = x->slot_memory ? (double)(nbytes) / MB_BYTES : 0.0;
    s->slot_live[q] = 1;
    x->mem += s->slot_mb[q];
}

/* A FORWARD or backward part: its duration; *extra the transient memory on
 * top, *release what leaves when it ends. */
static inline double rank_compute(rank_run *x, const dyn_instr *in, double *extra, double *release)
{
    const dyn_stage_costs *c = x->c;
    const int op = in->op;
    const int32_t ci = in->microbatch * x->S + in->stage;
    const double *t = op == DYN_OP_FORWARD          ? c->fwd_ms
                      : op == DYN_OP_BACKWARD       ? c->bwd_ms
                      : op == DYN_OP_BACKWARD_INPUT ? c->bwd_input_ms
                                                    : c->bwd_weight_ms;
    double dur = cost_at(t, ci);
    /* The memory model's step: stored activations come with the
     * FORWARD and leave when the last backward part ends. */
    const sched_mem_delta d = sched_mem_step(c, in);
    x->mem += d.acquire;
    *release = d.release;
    if (in->buf_out >= 0) rank_slot_write(x, in->buf_out, in->bytes);
    *extra = d.transient;
    x->busy += dur;
    return dur;
}

/* A SEND/RECV START at flat index k: post its side of the message (it
 * takes no time) and start the transfer when both sides are posted. */
static inline void rank_post(rank_run *x, const dyn_instr *in, int32_t k)
{
    dyn_sim *s = x->s;
    const double now = x->clock;
    sim_msg *m = &s->msgs[s->match.msg_of[k]];
    if (sched_op(in->op) & SCHED_OP_SEND) {
        m->flags |= MSG_SEND_POSTED;
        m->send_post = now;
    } else {
        m->flags |= MSG_RECV_POSTED;
        m->recv_post = now;
        rank_slot_write(x, in->buf_out, in->bytes);
    }
    if (x->record) s->ev[k] = (dyn_sim_event){now, now, x->mem, x->mem};
    x->pc++;
    if ((m->flags & (MSG_SEND_POSTED | MSG_RECV_POSTED)) == (MSG_SEND_POSTED | MSG_RECV_POSTED)) {
        rank_save(x); /* start_transfer may wake and push other ranks */
        start_transfer(s, x->p, x->opt, m, now);
    }
}

/* A SEND/RECV FINISH at flat index k: 0 with its duration in *dur when the
 * message is in flight; else parks the rank on it (start_transfer resumes
 * it) and returns 1. */
static inline int rank_finish(rank_run *x, const dyn_instr *in, int32_t k, double *dur)
{
    dyn_sim *s = x->s;
    sim_msg *m = &s->msgs[s->match.msg_of[k]];
    if (!(m->flags & MSG_STARTED)) {
        if (sched_op(in->op) & SCHED_OP_SEND)
            m->send_waiter = x->r;
        else
            m->recv_waiter = x->r;
        rank_save(x);
        s->state[x->r] = RANK_BLOCKED;
        s->wait_msg[x->r] = s->match.msg_of[k];
        return 1;
    }
    *dur = m->arrive > x->clock ? m->arrive - x->clock : 0.0;
    return 0;
}

/* FREE_BUFFER: a live slot's bytes leave. */
static inline void rank_free_slot(rank_run *x, int32_t slot)
{
    dyn_sim *s = x->s;
    if (slot >= 0 && s->slot_live[x->base + slot]) {
        x->mem -= s->slot_mb[x->base + slot];
        s->slot_live[x->base + slot] = 0;
    }
}

/* The instruction at flat index k ends: it ran from now for dur ms with
 * extra MB transient on top and release MB leaving at its end. Returns 1
 * when the rank's clock has passed the earliest other rank's time (the
 * heap top): it is pushed back on the heap to keep global time order. */
static inline int rank_retire(rank_run *x, int32_t k, double now, double dur, double extra, double release)
{
    dyn_sim *s = x->s;
    const double top = x->mem + extra;
    x->mem -= release;
    if (x->record) s->ev[k] = (dyn_sim_event){now, now + dur, x->mem, top};
    if (top > x->peak) x->peak = top;
    x->clock = now + dur;
    x->pc++;
    if (s->heap_n > 0 && x->clock > s->heap[0].t) {
        rank_save(x);
        heap_push(s, x->clock, x->r);
        return 1;
    }
    return 0;
}

/* Execute instructions of rank r until it blocks, finishes, or its clock
 * passes the earliest other rank's time (the heap top), keeping global time
 * order; the heap top is re-read because waking a rank can lower it. */
static void run_rank(dyn_sim *s, const dyn_exec_plan *p, const dyn_stage_costs *c,
                     const dyn_sim_options *opt, int32_t r)
{
    const dyn_rank_plan *rp = &p->ranks[r];
    const int32_t n = rp->n_instrs;
    rank_run x = {s, p, c, opt, r, s->slot_off[r], s->rank_off[r], p->n_stages, s->record, opt->slot_memory,
                  s->pc[r], s->clock[r], s->mem[r], s->peak[r], s->busy[r]};
    while (x.pc < n) {
        const int32_t k = x.off + x.pc;
        const dyn_instr *in = &rp->instrs[x.pc];
        const double now = x.clock;
        double dur = 0.0, extra = 0.0, release = 0.0;
        switch (in->op) {
        case DYN_OP_LOAD_INPUT:
            if (in->buf_out >= 0) rank_slot_write(&x, in->buf_out, in->bytes);
            break;
        case DYN_OP_FORWARD:
        case DYN_OP_BACKWARD:
        case DYN_OP_BACKWARD_INPUT:
        case DYN_OP_BACKWARD_WEIGHT:
            dur = rank_compute(&x, in, &extra, &release);
            break;
        case DYN_OP_SEND_ACT_START:
        case DYN_OP_SEND_GRAD_START:
        case DYN_OP_RECV_ACT_START:
        case DYN_OP_RECV_GRAD_START:
            rank_post(&x, in, k);
            continue;
        case DYN_OP_SEND_ACT_FINISH:
        case DYN_OP_SEND_GRAD_FINISH:
        case DYN_OP_RECV_ACT_FINISH:
        case DYN_OP_RECV_GRAD_FINISH:
            if (rank_finish(&x, in, k, &dur)) return; /* parked until the other side posts */
            break;
        case DYN_OP_FREE_BUFFER:
            rank_free_slot(&x, in->buf_in);
            break;
        case DYN_OP_BARRIER:
            rank_save(&x);
            if (!barrier_arrive(s, p, r)) return; /* parked until the last rank arrives */
            dur = s->barrier_time - now;
            s->barrier_arrived = 0;
            break;
        default:
            break;
        }
        if (rank_retire(&x, k, now, dur, extra, release)) return; /* another rank's turn */
    }
    rank_save(&x);
    s->state[r] = RANK_DONE;
}

static dyn_status report_deadlock(dyn_sim *s, const dyn_exec_plan *p, dyn_error *err)
{
    char msg[DYN_ERROR_MSG_MAX];
    size_t n = (size_t)snprintf(msg, sizeof msg, "deadlock:");
    int shown = 0;
    for (int32_t r = 0; r < p->n_ranks && n < sizeof msg; r++) {
        if (s->state[r] != RANK_BLOCKED) continue;
        const dyn_instr *in = &p->ranks[r].instrs[s->pc[r]];
        if (shown == 4) {
            n += (size_t)snprintf(msg + n, sizeof msg - n, " ...");
            break;
        }
        n += (size_t)snprintf(msg + n, sizeof msg - n,
                              "%s rank %d blocked at instruction %d (%s micro-batch %d, peer rank %d)",
                              shown ? ";" : "", r, s->pc[r], op_label(in->op), in->microbatch,
                              in->peer);
        shown++;
    }
    return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s", msg);
}

/* Check the plan's sizes and arrays against the costs and the options;
 * the plan's instruction and slot counts in *N and *K. */
static dyn_status sim_check(const dyn_exec_plan *plan, const dyn_stage_costs *costs, const dyn_sim_options *opt,
                            int64_t *N, int64_t *K, dyn_error *err)
{
    int32_t R = plan->n_ranks, S = plan->n_stages, M = plan->n_microbatches;
    if (R <= 0 || S < R || M < 0 || plan->ranks == NULL || plan->stage_rank == NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "simulate: plan has %d ranks, %d stages, %d micro-batches", R, S, M);
    if (costs->n_microbatches != M || costs->n_stages != S)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "simulate: costs are for %d micro-batches x %d stages, the plan has %d x %d",
                             costs->n_microbatches, costs->n_stages, M, S);
    if (!(opt->link_latency_ms >= 0) || !isfinite(opt->link_latency_ms))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "simulate: bad link latency %g ms",
                             opt->link_latency_ms);
    for (int32_t st = 0; st < S; st++)
        if (plan->stage_rank[st] < 0 || plan->stage_rank[st] >= R)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "simulate: stage %d is on rank %d, outside 0..%d", st,
                                 plan->stage_rank[st], R - 1);
    *N = *K = 0;
    for (int32_t r = 0; r < R; r++) {
        if (plan->ranks[r].n_instrs < 0 || plan->ranks[r].n_buffers < 0 ||
            (plan->ranks[r].n_instrs > 0 && plan->ranks[r].instrs == NULL))
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "simulate: rank %d has a bad instruction list", r);
        *N += plan->ranks[r].n_instrs;
        *K += plan->ranks[r].n_buffers;
    }
    if (*N > INT32_MAX / 2 || *K > INT32_MAX / 2 || R > 1024)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "simulate: plan too large (%d ranks, %lld instructions)",
                             R, (long long)*N);
    return DYN_OK;
}

/* Every rank at time 0, ready, holding its stages' training states; links
 * free, slots empty, no barrier open, every rank on the heap. */
static void sim_reset(dyn_sim *sim, const dyn_exec_plan *plan, const dyn_stage_costs *costs,
                      const dyn_sim_options *opt, int64_t K)
{
    int32_t R = plan->n_ranks, S = plan->n_stages;
    for (int32_t r = 0; r < R; r++) {
        sim->pc[r] = 0;
        sim->state[r] = RANK_READY;
        sim->wait_msg[r] = -1;
        sim->clock[r] = sim->busy[r] = 0.0;
        sim->states_mb[r] = 0.0;
    }
    for (int32_t stg = 0; stg < S; stg++)
        sim->states_mb[plan->stage_rank[stg]] += cost_at(costs->states_mb, stg);
    for (int32_t r = 0; r < R; r++) sim->mem[r] = sim->peak[r] = sim->states_mb[r];
    memset(sim->link_free, 0, sizeof(double) * (size_t)R * R);
    if (K > 0) memset(sim->slot_live, 0, (size_t)K);
    sim->record = !opt->skip_events;
    sim->heap_n = 0;
    sim->barrier_arrived = 0;
    sim->barrier_time = 0.0;
    for (int32_t r = 0; r < R; r++) heap_push(sim, 0.0, r);
}

/* The run's result view (arrays owned by sim) from the ranks' final state. */
static dyn_sim_result *sim_collect(dyn_sim *sim, const dyn_exec_plan *plan, const dyn_sim_options *opt, int64_t N)
{
    int32_t R = plan->n_ranks;
    dyn_sim_result *o = &sim->res;
    memset(o, 0, sizeof *o);
    o->n_ranks = R;
    o->n_instrs = (int32_t)N;
    double busy = 0.0;
    for (int32_t r = 0; r < R; r++) {
        if (sim->clock[r] > o->makespan_ms) o->makespan_ms = sim->clock[r];
        busy += sim->busy[r];
        if (sim->peak[r] > o->max_peak_mb) o->max_peak_mb = sim->peak[r];
    }
    o->bubble_fraction = o->makespan_ms > 0 ? 1.0 - busy / ((double)R * o->makespan_ms) : 0.0;
    o->tokens_per_s = o->makespan_ms > 0 ? (double)opt->real_tokens / (o->makespan_ms * 1e-3) : 0.0;
    o->busy_ms = sim->busy;
    o->peak_mb = sim->peak;
    o->rank_offset = sim->rank_off;
    o->events = opt->skip_events ? NULL : sim->ev;
    return o;
}

dyn_status dyn_sim_run(dyn_sim *sim, const dyn_exec_plan *plan, const dyn_stage_costs *costs,
                       const dyn_sim_options *opt, const dyn_sim_result **res, dyn_error *err)
{
    if (sim == NULL || plan == NULL || costs == NULL || opt == NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "simulate: missing plan, costs or options");
    sim->res.n_ranks = 0; /* no stale results if this run fails */
    int64_t N = 0, K = 0;
    dyn_status st = sim_check(plan, costs, opt, &N, &K, err);
    if (st != DYN_OK) return st;
    int32_t R = plan->n_ranks;
    if ((st = reserve(sim, R, (int32_t)N, (int32_t)K, err)) != DYN_OK) return st;
    sim->rank_off[0] = sim->slot_off[0] = 0;
    for (int32_t r = 0; r < R; r++) {
        sim->rank_off[r + 1] = sim->rank_off[r] + plan->ranks[r].n_instrs;
        sim->slot_off[r + 1] = sim->slot_off[r] + plan->ranks[r].n_buffers;
    }
    if ((st = prepare(sim, plan, err)) != DYN_OK) return st;
    sim_reset(sim, plan, costs, opt, K);
    while (sim->heap_n > 0) {
        heap_item it = heap_pop(sim);
        run_rank(sim, plan, costs, opt, it.rank);
    }
    for (int32_t r = 0; r < R; r++)
        if (sim->state[r] != RANK_DONE) return report_deadlock(sim, plan, err);
    dyn_sim_result *o = sim_collect(sim, plan, opt, N);
    if (res) *res = o;
    return DYN_OK;
}

const dyn_sim_result *sim_last_result(const dyn_sim *sim)
{
    return sim->res.n_ranks > 0 ? &sim->res : NULL;
}
