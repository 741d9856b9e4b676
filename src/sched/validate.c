/* validate.c — dyn_exec_plan_validate: proves a set of per-rank plans is
 * complete and cannot deadlock, before anything runs it.
 *
 * Three passes.
 *  1. Each rank alone, in program order: every field in range; every slot
 *     written (LOAD_INPUT, RECV_*_START, FORWARD/BACKWARD buf_out) while free,
 *     read only once it holds valid data (a received slot only after its
 *     RECV_*_FINISH), freed exactly once, never freed while a send reads it,
 *     nothing live at the end. Each slot carries a tag saying what it holds
 *     (input activation of (mb, s), output gradient of (mb, s), targets of mb)
 *     and every reader checks the tag, so a FORWARD of (mb, s) provably reads
 *     what FORWARD (mb, s-1) produced. Every (mb, stage) runs FORWARD once,
 *     then BACKWARD once or BACKWARD_INPUT then BACKWARD_WEIGHT.
 *  2. Matching (sched/instr.h, the matcher the simulator shares): messages
 *     between a pair of ranks are matched per direction and kind in posting
 *     order (MPI order with one tag per kind); the k-th send and k-th
 *     receive must agree on micro-batch, stages and bytes.
 *  3. Abstract execution with blocking semantics: START ops never block,
 *     SEND_*_FINISH waits until the peer executed the matching RECV_*_START,
 *     RECV_*_FINISH until the peer executed the matching SEND_*_START, the
 *     k-th BARRIER until every rank reached its k-th BARRIER. Ranks run as far
 *     as they can, round after round, until all finish (the plan is deadlock
 *     free) or none can move (deadlock). Why a greedy run decides it: an
 *     instruction that becomes runnable stays runnable (executing an
 *     instruction only ever enables others), so if any interleaving completes
 *     every maximal greedy run completes too; if the greedy run sticks, no
 *     execution order finishes. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/sched.h"
#include "sched/instr.h" /* defines: sched_op, sched_match_plan */
#include "util/util.h"   /* defines: dyn_calloc */

enum { SLOT_FREE = 0, SLOT_VALID = 1, SLOT_PENDING = 2 };
enum { TAG_ACT_IN = 0, TAG_GRAD_OUT = 1, TAG_TARGETS = 2 };

typedef struct vstate {
    const dyn_exec_plan *p;
    int32_t S, ns, M;
    uint8_t *fwd, *bwd, *bwi, *bww; /* [M*ns] whether each ran */
    int32_t *barriers;   /* [S] */
    void *block;         /* the five arrays above, one allocation */
    sched_match match;   /* pass 2: messages and the FINISH -> START map */
} vstate;

static dyn_status bad(dyn_error *err, int32_t r, int32_t i, const dyn_instr *in, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Fill err with "plan invalid: rank R instr I (OP mb M stage S): <detail>". */
static dyn_status bad(dyn_error *err, int32_t r, int32_t i, const dyn_instr *in, const char *fmt, ...)
{
    char detail[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return dyn_error_set(err, DYN_ERR_INVALID_ARG, "plan invalid: rank %d instr %d (%s mb %d stage %d): %s",
                         r, i, dyn_op_name((dyn_op)in->op), in->microbatch, in->stage, detail);
}

static int64_t tag_of(const vstate *v, int kind, int32_t mb, int32_t s)
{
    return ((int64_t)kind * v->M + mb) * v->ns + s;
}

/* Pass 1's state for one rank: every slot's state, tag, writer and open
 * transfer, and where each micro-batch's targets were loaded. One
 * allocation, one free. */
typedef struct rank_walk {
    const vstate *v;
    const dyn_rank_plan *rp;
    int32_t r, nb, last;
    uint8_t *state;     /* [nb] SLOT_* */
    int32_t *sending;   /* [nb] a send from the slot is in flight */
    int32_t *writer;    /* [nb] instruction that last wrote it */
    int32_t *open_send; /* [nb] the START a FINISH on the slot pairs with */
    int64_t *tag;       /* [nb] what it holds (tag_of) */
    int32_t *tgt;       /* [M] slot holding the micro-batch's targets, or -1 */
    void *block;
} rank_walk;

static dyn_status walk_init(rank_walk *w, const vstate *v, int32_t r, dyn_error *err)
{
    memset(w, 0, sizeof *w);
    w->v = v;
    w->r = r;
    w->rp = &v->p->ranks[r];
    w->nb = w->rp->n_buffers;
    w->last = v->ns - 1;
    size_t nb = (size_t)w->nb, M = (size_t)v->M;
    /* int64 first, then the int32 arrays, then the bytes: all aligned. */
    size_t bytes = nb * sizeof(int64_t) + (3 * nb + M) * sizeof(int32_t) + nb;
    w->block = dyn_calloc(1, bytes > 0 ? bytes : 1, "validator", err);
    if (w->block == NULL) return DYN_ERR_NOMEM;
    w->tag = w->block;
    w->sending = (int32_t *)(w->tag + nb);
    w->writer = w->sending + nb;
    w->open_send = w->writer + nb;
    w->tgt = w->open_send + nb;
    w->state = (uint8_t *)(w->tgt + M);
    for (size_t m = 0; m < M; m++) w->tgt[m] = -1;
    return DYN_OK;
}

/* Fields in range, the stage on this rank, the peer the neighbouring
 * stage's rank. */
static dyn_status walk_fields(const rank_walk *w, int32_t i, const dyn_instr *in, dyn_error *err)
{
    const vstate *v = w->v;
    int32_t r = w->r, mb = in->microbatch, s = in->stage, nb = w->nb;
    if (mb < 0 || mb >= v->M || s < 0 || s >= v->ns)
        return bad(err, r, i, in, "micro-batch or stage out of range (M=%d, stages=%d)", v->M, v->ns);
    if (v->p->stage_rank[s] != r) return bad(err, r, i, in, "stage runs on rank %d, not here", v->p->stage_rank[s]);
    if (in->buf_in < -1 || in->buf_in >= nb || in->buf_out < -1 || in->buf_out >= nb)
        return bad(err, r, i, in, "slot out of range (n_buffers=%d)", nb);
    int32_t want_peer = -1, step = sched_op_peer_step(in->op);
    if (step > 0) want_peer = s < w->last ? v->p->stage_rank[s + 1] : -2;
    if (step < 0) want_peer = s > 0 ? v->p->stage_rank[s - 1] : -2;
    if (want_peer == -2 || (want_peer >= 0 && (want_peer != in->peer || want_peer == r)))
        return bad(err, r, i, in, "peer %d is not the rank of the neighbouring stage (%d)", in->peer, want_peer);
    return DYN_OK;
}

/* What the instruction reads must be live, received and the right tensor. */
static dyn_status walk_reads(const rank_walk *w, int32_t i, const dyn_instr *in, dyn_error *err)
{
    const vstate *v = w->v;
    int32_t r = w->r, mb = in->microbatch, s = in->stage, bi = in->buf_in;
    int64_t want_tag = -1;
    int reads = 0;
    switch (in->op) {
    case DYN_OP_FORWARD: reads = 1; want_tag = tag_of(v, TAG_ACT_IN, mb, s); break;
    case DYN_OP_BACKWARD:
    case DYN_OP_BACKWARD_INPUT:
        reads = s < w->last;
        want_tag = tag_of(v, TAG_GRAD_OUT, mb, s);
        if (s == w->last && bi != -1) return bad(err, r, i, in, "last stage backward reads slot %d (must be -1)", bi);
        break;
    case DYN_OP_SEND_ACT_START: reads = 1; want_tag = tag_of(v, TAG_ACT_IN, mb, s + 1); break;
    case DYN_OP_SEND_GRAD_START: reads = 1; want_tag = tag_of(v, TAG_GRAD_OUT, mb, s - 1); break;
    default: break;
    }
    if (!reads) return DYN_OK;
    if (bi < 0) return bad(err, r, i, in, "no input slot");
    if (w->state[bi] == SLOT_FREE) return bad(err, r, i, in, "read before write: slot %d is not live", bi);
    if (w->state[bi] == SLOT_PENDING) return bad(err, r, i, in, "read before receive finished: slot %d", bi);
    if (w->tag[bi] != want_tag)
        return bad(err, r, i, in, "slot %d holds another tensor (written by instr %d)", bi, w->writer[bi]);
    return DYN_OK;
}

/* FORWARD once (the last stage's with its targets), then BACKWARD once or
 * B then W; loads on the stage they belong to. */
static dyn_status walk_compute_order(const rank_walk *w, int32_t i, const dyn_instr *in, dyn_error *err)
{
    const vstate *v = w->v;
    int32_t r = w->r, mb = in->microbatch, s = in->stage, bo = in->buf_out, last = w->last;
    size_t k = (size_t)mb * v->ns + s;
    switch (in->op) {
    case DYN_OP_FORWARD:
        if (v->fwd[k]) return bad(err, r, i, in, "second forward");
        if (s == last && (w->tgt[mb] < 0 || w->state[w->tgt[mb]] != SLOT_VALID ||
                          w->tag[w->tgt[mb]] != tag_of(v, TAG_TARGETS, mb, s)))
            return bad(err, r, i, in, "last stage forward without loaded targets");
        if ((s == last) != (bo == -1))
            return bad(err, r, i, in, "output slot %d wrong for stage (last stage writes none)", bo);
        v->fwd[k] = 1;
        break;
    case DYN_OP_BACKWARD:
    case DYN_OP_BACKWARD_INPUT:
        if (!v->fwd[k]) return bad(err, r, i, in, "backward before forward");
        if (v->bwd[k] || v->bwi[k]) return bad(err, r, i, in, "second backward");
        if ((s == 0) != (bo == -1))
            return bad(err, r, i, in, "output slot %d wrong for stage (first stage writes none)", bo);
        if (in->op == DYN_OP_BACKWARD) v->bwd[k] = 1;
        else v->bwi[k] = 1;
        break;
    case DYN_OP_BACKWARD_WEIGHT:
        if (!v->bwi[k]) return bad(err, r, i, in, "weight gradient before input gradient");
        if (v->bww[k]) return bad(err, r, i, in, "second weight gradient");
        v->bww[k] = 1;
        break;
    case DYN_OP_LOAD_INPUT:
        if ((in->flags & DYN_INSTR_FLAG_TARGETS) ? s != last : s != 0)
            return bad(err, r, i, in, "loads %s on the wrong stage",
                       (in->flags & DYN_INSTR_FLAG_TARGETS) ? "targets" : "tokens");
        break;
    default: break;
    }
    return DYN_OK;
}

/* A write needs a free slot; it then holds the tensor's tag (pending until
 * its RECV_*_FINISH for a receive). */
static dyn_status walk_writes(rank_walk *w, int32_t i, const dyn_instr *in, dyn_error *err)
{
    const vstate *v = w->v;
    int32_t r = w->r, mb = in->microbatch, s = in->stage, bo = in->buf_out, last = w->last;
    int64_t new_tag = -1;
    int pending = 0;
    switch (in->op) {
    case DYN_OP_LOAD_INPUT:
        new_tag = (in->flags & DYN_INSTR_FLAG_TARGETS) ? tag_of(v, TAG_TARGETS, mb, s) : tag_of(v, TAG_ACT_IN, mb, 0);
        break;
    case DYN_OP_FORWARD: if (s < last) new_tag = tag_of(v, TAG_ACT_IN, mb, s + 1); break;
    case DYN_OP_BACKWARD:
    case DYN_OP_BACKWARD_INPUT: if (s > 0) new_tag = tag_of(v, TAG_GRAD_OUT, mb, s - 1); break;
    case DYN_OP_RECV_ACT_START: new_tag = tag_of(v, TAG_ACT_IN, mb, s); pending = 1; break;
    case DYN_OP_RECV_GRAD_START: new_tag = tag_of(v, TAG_GRAD_OUT, mb, s); pending = 1; break;
    default: break;
    }
    if (new_tag < 0) return DYN_OK;
    if (bo < 0) return bad(err, r, i, in, "no output slot");
    if (w->state[bo] != SLOT_FREE)
        return bad(err, r, i, in, "writes slot %d still live since instr %d (leaked or overwritten)", bo,
                   w->writer[bo]);
    w->state[bo] = pending ? SLOT_PENDING : SLOT_VALID;
    w->tag[bo] = new_tag;
    w->writer[bo] = i;
    if (in->op == DYN_OP_LOAD_INPUT && (in->flags & DYN_INSTR_FLAG_TARGETS)) w->tgt[mb] = bo;
    if (pending) w->open_send[bo] = i; /* the RECV_START a FINISH pairs with */
    return DYN_OK;
}

/* A FINISH must close a START of its kind on the same slot and describe the
 * same transfer: (mb, stage), peer and bytes. */
static int finishes_its_start(const rank_walk *w, int32_t slot, int start_op, const dyn_instr *in)
{
    const dyn_instr *st = &w->rp->instrs[w->open_send[slot]];
    return st->op == start_op && st->microbatch == in->microbatch && st->stage == in->stage &&
           st->peer == in->peer && st->bytes == in->bytes;
}

/* Sends in flight, receives finished, frees of live slots only. */
static dyn_status walk_transfers_and_frees(rank_walk *w, int32_t i, const dyn_instr *in, dyn_error *err)
{
    int32_t r = w->r, bi = in->buf_in, bo = in->buf_out;
    switch (in->op) {
    case DYN_OP_SEND_ACT_START:
    case DYN_OP_SEND_GRAD_START:
        if (w->sending[bi]) return bad(err, r, i, in, "slot %d already being sent", bi);
        w->sending[bi] = 1;
        w->open_send[bi] = i;
        break;
    case DYN_OP_SEND_ACT_FINISH:
    case DYN_OP_SEND_GRAD_FINISH: {
        int start_op = in->op == DYN_OP_SEND_ACT_FINISH ? DYN_OP_SEND_ACT_START : DYN_OP_SEND_GRAD_START;
        if (bi < 0 || !w->sending[bi] || !finishes_its_start(w, bi, start_op, in))
            return bad(err, r, i, in,
                       "finishes a send of slot %d that was not started (or whose START names another "
                       "micro-batch, stage, peer or byte count)",
                       bi);
        w->sending[bi] = 0;
        break;
    }
    case DYN_OP_RECV_ACT_FINISH:
    case DYN_OP_RECV_GRAD_FINISH: {
        int start_op = in->op == DYN_OP_RECV_ACT_FINISH ? DYN_OP_RECV_ACT_START : DYN_OP_RECV_GRAD_START;
        if (bo < 0 || w->state[bo] != SLOT_PENDING || !finishes_its_start(w, bo, start_op, in))
            return bad(err, r, i, in,
                       "finishes a receive into slot %d that was not started (or whose START names another "
                       "micro-batch, stage, peer or byte count)",
                       bo);
        w->state[bo] = SLOT_VALID;
        break;
    }
    case DYN_OP_FREE_BUFFER:
        if (bi < 0 || w->state[bi] == SLOT_FREE)
            return bad(err, r, i, in, "double free (or free of a never-written slot %d)", bi);
        if (w->state[bi] == SLOT_PENDING)
            return bad(err, r, i, in, "frees slot %d while a receive into it is in flight", bi);
        if (w->sending[bi]) return bad(err, r, i, in, "frees slot %d while a send from it is in flight", bi);
        w->state[bi] = SLOT_FREE;
        break;
    default: break;
    }
    return DYN_OK;
}

/* Pass 1 for rank r: each instruction through the phases above, in
 * program order; nothing may be live at the end. */
static dyn_status check_rank(vstate *v, int32_t r, dyn_error *err)
{
    const dyn_rank_plan *rp = &v->p->ranks[r];
    if (rp->n_instrs < 0 || rp->n_buffers < 0 || (rp->n_instrs > 0 && rp->instrs == NULL))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "plan invalid: rank %d has %d instructions, %d slots",
                             r, rp->n_instrs, rp->n_buffers);
    if (rp->n_buffers > rp->n_instrs)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "plan invalid: rank %d declares %d slots but has only %d instructions",
                             r, rp->n_buffers, rp->n_instrs);
    rank_walk w;
    dyn_status st = walk_init(&w, v, r, err);
    for (int32_t i = 0; i < rp->n_instrs && st == DYN_OK; i++) {
        const dyn_instr *in = &rp->instrs[i];
        if (in->op >= DYN_OP_COUNT) {
            st = bad(err, r, i, in, "unknown op %d", in->op);
        } else if (in->op == DYN_OP_BARRIER) {
            v->barriers[r]++;
        } else if ((st = walk_fields(&w, i, in, err)) == DYN_OK && (st = walk_reads(&w, i, in, err)) == DYN_OK &&
                   (st = walk_compute_order(&w, i, in, err)) == DYN_OK &&
                   (st = walk_writes(&w, i, in, err)) == DYN_OK) {
            st = walk_transfers_and_frees(&w, i, in, err);
        }
    }
    for (int32_t b = 0; st == DYN_OK && b < w.nb; b++)
        if (w.state[b] != SLOT_FREE)
            st = bad(err, r, w.writer[b], &rp->instrs[w.writer[b]], "leaked buffer: slot %d is never freed", b);
    free(w.block);
    return st;
}

/* Where the START that FINISH (r, i) waits for on the peer is: *pr, *pi. */
static void finish_partner(const vstate *v, int32_t r, int32_t i, int32_t *pr, int32_t *pi)
{
    const sched_match *m = &v->match;
    int32_t x = m->msg_of[m->rank_off[r] + i];
    int send = (sched_op(v->p->ranks[r].instrs[i].op) & SCHED_OP_SEND) != 0;
    *pr = send ? m->msg_dst[x] : m->msg_src[x];
    *pi = (send ? m->msg_recv[x] : m->msg_send[x]) - m->rank_off[*pr];
}

/* Run every rank as far as it can go: a BARRIER waits for every rank to
 * arrive at it, a FINISH for its partner START to have run; other
 * instructions always proceed. pc, arrived and passed are [S]. */
static void execute_run(const vstate *v, int32_t *pc, int32_t *arrived, int32_t *passed)
{
    int32_t S = v->S;
    for (;;) {
        int progress = 0;
        for (int32_t r = 0; r < S; r++) {
            const dyn_rank_plan *rp = &v->p->ranks[r];
            while (pc[r] < rp->n_instrs) {
                const dyn_instr *in = &rp->instrs[pc[r]];
                if (in->op == DYN_OP_BARRIER) {
                    if (arrived[r] == passed[r]) { arrived[r]++; progress = 1; }
                    int ok = 1;
                    for (int32_t q = 0; q < S; q++) if (arrived[q] < arrived[r]) { ok = 0; break; }
                    if (!ok) break;
                    passed[r]++;
                } else if (sched_op(in->op) & SCHED_OP_FINISH) {
                    int32_t pr, pi;
                    finish_partner(v, r, pc[r], &pr, &pi);
                    if (pc[pr] <= pi) break;
                }
                pc[r]++;
                progress = 1;
            }
        }
        if (!progress) break;
    }
}

/* The deadlock error for the first rank left unfinished (DYN_OK if none). */
static dyn_status execute_report(const vstate *v, const int32_t *pc, const int32_t *arrived, dyn_error *err)
{
    int32_t S = v->S;
    for (int32_t r = 0; r < S; r++) {
        const dyn_rank_plan *rp = &v->p->ranks[r];
        if (pc[r] >= rp->n_instrs) continue;
        const dyn_instr *in = &rp->instrs[pc[r]];
        int blocked = 0;
        for (int32_t q = 0; q < S; q++) blocked += pc[q] < v->p->ranks[q].n_instrs;
        if (in->op == DYN_OP_BARRIER)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "plan invalid: deadlock: rank %d instr %d (BARRIER %d) waits for ranks "
                                 "that never reach it; %d ranks blocked",
                                 r, pc[r], arrived[r], blocked);
        int32_t pr, pi;
        finish_partner(v, r, pc[r], &pr, &pi);
        const dyn_instr *pin = &v->p->ranks[pr].instrs[pi];
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "plan invalid: deadlock: rank %d instr %d (%s mb %d stage %d) waits for "
                             "rank %d instr %d (%s mb %d stage %d), which rank %d never reaches "
                             "(it is stuck at instr %d); %d ranks blocked",
                             r, pc[r], dyn_op_name((dyn_op)in->op), in->microbatch, in->stage, pr,
                             pi, dyn_op_name((dyn_op)pin->op), pin->microbatch, pin->stage, pr,
                             pc[pr], blocked);
    }
    return DYN_OK;
}

/* Pass 3: abstract execution with blocking FINISH and BARRIER. */
static dyn_status execute(vstate *v, dyn_error *err)
{
    int32_t S = v->S;
    dyn_status st = DYN_ERR_NOMEM;
    int32_t *pc = dyn_calloc((size_t)S, sizeof(int32_t), "validator", err);
    int32_t *arrived = dyn_calloc((size_t)S, sizeof(int32_t), "validator", err);
    int32_t *passed = dyn_calloc((size_t)S, sizeof(int32_t), "validator", err);
    if (pc && arrived && passed) {
        execute_run(v, pc, arrived, passed);
        st = execute_report(v, pc, arrived, err);
    }
    free(pc);
    free(arrived);
    free(passed);
    return st;
}

/* The plan's header: counts, the stage map, and enough instructions for a
 * forward and a backward of every (micro-batch, stage), a cheap bound that
 * also keeps a corrupt header from sizing huge tables. */
static dyn_status validate_header(const dyn_exec_plan *plan, dyn_error *err)
{
    if (plan == NULL || plan->n_ranks < 1 || plan->n_stages < 1 || plan->n_microbatches < 1 ||
        plan->stage_rank == NULL || plan->ranks == NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "plan invalid: needs >= 1 rank, stage and micro-batch and its arrays");
    if (plan->n_ranks > 4096)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "plan invalid: %d ranks is more than supported (4096)",
                             plan->n_ranks);
    for (int32_t s = 0; s < plan->n_stages; s++)
        if (plan->stage_rank[s] < 0 || plan->stage_rank[s] >= plan->n_ranks)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "plan invalid: stage %d mapped to rank %d of %d",
                                 s, plan->stage_rank[s], plan->n_ranks);
    int64_t total = 0;
    for (int32_t r = 0; r < plan->n_ranks; r++) total += plan->ranks[r].n_instrs > 0 ? plan->ranks[r].n_instrs : 0;
    if ((int64_t)plan->n_microbatches * plan->n_stages * 2 > total)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "plan invalid: %d micro-batches x %d stages need at least %lld compute "
                             "instructions, the plan has %lld instructions in all",
                             plan->n_microbatches, plan->n_stages,
                             (long long)plan->n_microbatches * plan->n_stages * 2, (long long)total);
    return DYN_OK;
}

/* After every rank's walk: equal barrier counts, and every (micro-batch,
 * stage) with its forward and one kind of backward, whole or split. */
static dyn_status validate_coverage(const vstate *v, dyn_error *err)
{
    for (int32_t r = 1; r < v->S; r++)
        if (v->barriers[r] != v->barriers[0])
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "plan invalid: rank %d has %d barriers but rank 0 has %d",
                                 r, v->barriers[r], v->barriers[0]);
    size_t n = (size_t)v->M * v->ns;
    for (size_t k = 0; k < n; k++) {
        int32_t mb = (int32_t)(k / v->ns), s = (int32_t)(k % v->ns);
        const char *miss = NULL;
        if (!v->fwd[k]) miss = "forward";
        else if (v->bwd[k] && (v->bwi[k] || v->bww[k])) miss = "single backward (has both whole and split)";
        else if (!v->bwd[k] && !v->bwi[k]) miss = "backward";
        else if (v->bwi[k] && !v->bww[k]) miss = "weight-gradient backward";
        if (miss)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "plan invalid: rank %d: micro-batch %d stage %d is missing its %s",
                                 v->p->stage_rank[s], mb, s, miss);
    }
    return DYN_OK;
}

dyn_status dyn_exec_plan_validate(const dyn_exec_plan *plan, dyn_error *err)
{
    dyn_status st = validate_header(plan, err);
    if (st != DYN_OK) return st;
    vstate v;
    memset(&v, 0, sizeof v);
    v.p = plan;
    v.S = plan->n_ranks;
    v.ns = plan->n_stages;
    v.M = plan->n_microbatches;
    size_t n = (size_t)v.M * v.ns;
    /* barriers first (aligned), then the four byte arrays */
    v.block = dyn_calloc(1, (size_t)v.S * sizeof(int32_t) + 4 * n, "validator", err);
    if (v.block == NULL) return DYN_ERR_NOMEM;
    v.barriers = v.block;
    v.fwd = (uint8_t *)(v.barriers + v.S);
    v.bwd = v.fwd + n;
    v.bwi = v.bwd + n;
    v.bww = v.bwi + n;
    for (int32_t r = 0; r < v.S && st == DYN_OK; r++) st = check_rank(&v, r, err);
    if (st == DYN_OK) st = validate_coverage(&v, err);
    if (st == DYN_OK) st = sched_match_plan(&v.match, plan, 1, err);
    if (st == DYN_OK) st = execute(&v, err);
    sched_match_free(&v.match);
    free(v.block);
    return st;
}
