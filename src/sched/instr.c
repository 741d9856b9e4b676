/* instr.c — the instruction table and the send/receive matcher that the
 * validator, the simulator and the runtime share (instr.h).
 *
 * The matcher is linear: one pass pairs FINISHes with STARTs through their
 * slots and counts STARTs per bucket (kind, sender, receiver); a prefix sum
 * turns counts into offsets; a second pass lists each bucket's STARTs in
 * posting order (all sends of a bucket are on one rank, so program order is
 * posting order); the k-th send of a bucket then meets its k-th receive. */
#include "sched/instr.h"

#include <stdlib.h>
#include <string.h>

#include "util/util.h" /* defines: dyn_calloc, DYN_RESERVE */

/* Unsized on purpose: the assertion below fails to compile when an op is
 * added to dyn_op without a row here. */
const uint16_t sched_op_flags[] = {
    [DYN_OP_LOAD_INPUT] = SCHED_OP_WRITES,
    [DYN_OP_FORWARD] = SCHED_OP_COMPUTE | SCHED_OP_READS | SCHED_OP_WRITES,
    [DYN_OP_BACKWARD] = SCHED_OP_COMPUTE | SCHED_OP_READS | SCHED_OP_WRITES,
    [DYN_OP_BACKWARD_INPUT] = SCHED_OP_COMPUTE | SCHED_OP_READS | SCHED_OP_WRITES,
    [DYN_OP_BACKWARD_WEIGHT] = SCHED_OP_COMPUTE,
    [DYN_OP_SEND_ACT_START] = SCHED_OP_SEND | SCHED_OP_START | SCHED_OP_READS,
    [DYN_OP_SEND_ACT_FINISH] = SCHED_OP_SEND | SCHED_OP_FINISH,
    [DYN_OP_RECV_ACT_START] = SCHED_OP_RECV | SCHED_OP_START | SCHED_OP_WRITES,
    [DYN_OP_RECV_ACT_FINISH] = SCHED_OP_RECV | SCHED_OP_FINISH,
    [DYN_OP_SEND_GRAD_START] = SCHED_OP_SEND | SCHED_OP_START | SCHED_OP_READS | SCHED_OP_GRAD,
    [DYN_OP_SEND_GRAD_FINISH] = SCHED_OP_SEND | SCHED_OP_FINISH | SCHED_OP_GRAD,
    [DYN_OP_RECV_GRAD_START] = SCHED_OP_RECV | SCHED_OP_START | SCHED_OP_WRITES | SCHED_OP_GRAD,
    [DYN_OP_RECV_GRAD_FINISH] = SCHED_OP_RECV | SCHED_OP_FINISH | SCHED_OP_GRAD,
    [DYN_OP_FREE_BUFFER] = SCHED_OP_FREES | SCHED_OP_NO_MB,
    [DYN_OP_BARRIER] = SCHED_OP_BARRIER | SCHED_OP_NO_MB,
};
_Static_assert(sizeof sched_op_flags / sizeof sched_op_flags[0] == DYN_OP_COUNT,
               "sched_op_flags needs one row per dyn_op (DYN_OP_COUNT)");

/* Unsized for the same reason. */
static const char *const op_names[] = {
    [DYN_OP_LOAD_INPUT] = "LOAD_INPUT",
    [DYN_OP_FORWARD] = "FORWARD",
    [DYN_OP_BACKWARD] = "BACKWARD",
    [DYN_OP_BACKWARD_INPUT] = "BACKWARD_INPUT",
    [DYN_OP_BACKWARD_WEIGHT] = "BACKWARD_WEIGHT",
    [DYN_OP_SEND_ACT_START] = "SEND_ACT_START",
    [DYN_OP_SEND_ACT_FINISH] = "SEND_ACT_FINISH",
    [DYN_OP_RECV_ACT_START] = "RECV_ACT_START",
    [DYN_OP_RECV_ACT_FINISH] = "RECV_ACT_FINISH",
    [DYN_OP_SEND_GRAD_START] = "SEND_GRAD_START",
    [DYN_OP_SEND_GRAD_FINISH] = "SEND_GRAD_FINISH",
    [DYN_OP_RECV_GRAD_START] = "RECV_GRAD_START",
    [DYN_OP_RECV_GRAD_FINISH] = "RECV_GRAD_FINISH",
    [DYN_OP_FREE_BUFFER] = "FREE_BUFFER",
    [DYN_OP_BARRIER] = "BARRIER",
};
_Static_assert(sizeof op_names / sizeof op_names[0] == DYN_OP_COUNT, "op_names needs one name per dyn_op");

const char *dyn_op_name(dyn_op op)
{
    return (unsigned)op < DYN_OP_COUNT && op_names[op] ? op_names[op] : "?";
}

void sched_match_free(sched_match *m)
{
    if (m == NULL) return;
    free(m->rank_off); free(m->ins); free(m->msg_of); free(m->msg_send); free(m->msg_recv);
    free(m->msg_src); free(m->msg_dst); free(m->slot_off); free(m->pend_send); free(m->pend_recv);
    free(m->bucket_send); free(m->bucket_recv); free(m->order_send); free(m->order_recv);
    free(m->comm); free(m->comm_rank); free(m->comm_peer); free(m->comm_fl);
    memset(m, 0, sizeof *m);
}

/* Room for R ranks, N instructions, B buckets, K slots; each group of
 * arrays shares one capacity and grows geometrically (dyn_reserve, from a
 * copy of the old capacity). Contents need not survive growth, and every
 * entry is written before it is read (see sched_match_begin and
 * sched_match_instr), so nothing is zeroed: the validator makes a fresh
 * workspace per plan, and zeroing arrays of the instruction count it would
 * not use cost it more than the matching. */
static dyn_status reserve(sched_match *m, int32_t R, int32_t N, int32_t B, int32_t K, dyn_error *err)
{
    if (R > m->cap_ranks) {
        int32_t o = m->cap_ranks, c = R > 2 * o ? R : 2 * o;
        if (DYN_RESERVE(m->rank_off, (size_t){(size_t)o + 1}, (size_t)c + 1) != 0 ||
            DYN_RESERVE(m->slot_off, (size_t){(size_t)o + 1}, (size_t)c + 1) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the matcher");
        m->cap_ranks = c;
    }
    if (N > m->cap_instrs) {
        int32_t o = m->cap_instrs, c = N > 2 * o ? N : 2 * o;
        if (DYN_RESERVE(m->ins, (size_t){o}, c) != 0 ||
            DYN_RESERVE(m->msg_of, (size_t){o}, c) != 0 ||
            DYN_RESERVE(m->msg_send, (size_t){o}, c) != 0 ||
            DYN_RESERVE(m->msg_recv, (size_t){o}, c) != 0 ||
            DYN_RESERVE(m->msg_src, (size_t){o}, c) != 0 ||
            DYN_RESERVE(m->msg_dst, (size_t){o}, c) != 0 ||
            DYN_RESERVE(m->order_send, (size_t){o}, c) != 0 ||
            DYN_RESERVE(m->order_recv, (size_t){o}, c) != 0 ||
            DYN_RESERVE(m->comm, (size_t){o}, c) != 0 ||
            DYN_RESERVE(m->comm_rank, (size_t){o}, c) != 0 ||
            DYN_RESERVE(m->comm_peer, (size_t){o}, c) != 0 ||
            DYN_RESERVE(m->comm_fl, (size_t){o}, c) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the matcher");
        m->cap_instrs = c;
    }
    if (B > m->cap_buckets) {
        int32_t o = m->cap_buckets, c = B > 2 * o ? B : 2 * o;
        if (DYN_RESERVE(m->bucket_send, (size_t){(size_t)o + 1}, (size_t)c + 1) != 0 ||
            DYN_RESERVE(m->bucket_recv, (size_t){(size_t)o + 1}, (size_t)c + 1) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the matcher");
        m->cap_buckets = c;
    }
    if (K > m->cap_slots) {
        int32_t o = m->cap_slots, c = K > 2 * o ? K : 2 * o;
        if (DYN_RESERVE(m->pend_send, (size_t){o}, c) != 0 ||
            DYN_RESERVE(m->pend_recv, (size_t){o}, c) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the matcher");
        m->cap_slots = c;
    }
    return DYN_OK;
}

static int32_t bucket_of(int32_t R, int grad, int32_t src, int32_t dst)
{
    return (grad * R + src) * R + dst;
}

/* Rank of flat instruction k (binary search over rank_off). */
static int32_t rank_of(const sched_match *m, int32_t R, int32_t k)
{
    int32_t lo = 0, hi = R - 1;
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) / 2;
        if (m->rank_off[mid] <= k) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* ---- pass 1, instruction by instruction: FINISH -> START through slots
 * (msg_of holds the START's flat index for now), START counts per bucket,
 * the list of communication instructions. */

void sched_match_rank_begin(sched_match *m, const dyn_exec_plan *p, int32_t r)
{
    int32_t base = m->slot_off[r], nb = p->ranks[r].n_buffers;
    for (int32_t q = 0; q < nb; q++) m->pend_send[base + q] = m->pend_recv[base + q] = -1;
}

dyn_status sched_match_instr(sched_match *m, int32_t r, int32_t i, const dyn_instr *in, dyn_error *err)
{
    unsigned fl = sched_op(in->op);
    int32_t R = m->n_ranks, base = m->slot_off[r], k = m->rank_off[r] + i, nc = m->n_comm;
    m->ins[k] = in;
    m->comm_rank[nc] = r;
    m->comm_peer[nc] = in->peer;
    m->comm_fl[nc] = (uint16_t)fl;
    m->comm[nc] = k;
    m->n_comm = nc + 1;
    int send = (fl & SCHED_OP_SEND) != 0, grad = (fl & SCHED_OP_GRAD) != 0;
    int32_t slot = send ? in->buf_in : in->buf_out;
    int32_t *pend = send ? m->pend_send : m->pend_recv;
    if (slot < 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "plan invalid: rank %d instruction %d (%s): names no slot", r,
                             i, dyn_op_name((dyn_op)in->op));
    if (fl & SCHED_OP_START) {
        if (pend[base + slot] >= 0)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "plan invalid: rank %d instruction %d (%s): slot %d already has a transfer in flight",
                                 r, i, dyn_op_name((dyn_op)in->op), slot);
        pend[base + slot] = k;
        if (send) m->bucket_send[bucket_of(R, grad, r, in->peer) + 1]++;
        else m->bucket_recv[bucket_of(R, grad, in->peer, r) + 1]++;
        return DYN_OK;
    }
    int32_t ks = pend[base + slot];
    if (ks < 0 || sched_op_grad(m->ins[ks]->op) != grad)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "plan invalid: rank %d instruction %d (%s): no transfer started on slot %d", r, i,
                             dyn_op_name((dyn_op)in->op), slot);
    m->msg_of[k] = ks;
    pend[base + slot] = -1;
    return DYN_OK;
}

dyn_status sched_match_rank_end(sched_match *m, const dyn_exec_plan *p, int32_t r, dyn_error *err)
{
    int32_t base = m->slot_off[r], nb = p->ranks[r].n_buffers;
    for (int32_t q = 0; q < nb; q++)
        if (m->pend_send[base + q] >= 0 || m->pend_recv[base + q] >= 0)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "plan invalid: rank %d: transfer on slot %d is started but never finished", r, q);
    return DYN_OK;
}

/* The k-th send and k-th receive of a bucket must describe one tensor. */
static dyn_status check_pair(const sched_match *m, int32_t R, int32_t ks, int32_t kr, int check_stages,
                             dyn_error *err)
{
    const dyn_instr *s = m->ins[ks], *q = m->ins[kr];
    int32_t want_stage = sched_op_grad(s->op) ? s->stage - 1 : s->stage + 1;
    if (s->microbatch == q->microbatch && (!check_stages || q->stage == want_stage) && s->bytes == q->bytes)
        return DYN_OK;
    int32_t sr = rank_of(m, R, ks), rr = rank_of(m, R, kr);
    return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                         "plan invalid: rank %d instruction %d (%s micro-batch %d stage %d, %lld bytes) is "
                         "matched in posting order with rank %d instruction %d (%s micro-batch %d stage %d, "
                         "%lld bytes): %s",
                         sr, ks - m->rank_off[sr], dyn_op_name((dyn_op)s->op), s->microbatch, s->stage,
                         (long long)s->bytes, rr, kr - m->rank_off[rr], dyn_op_name((dyn_op)q->op),
                         q->microbatch, q->stage, (long long)q->bytes,
                         s->microbatch != q->microbatch ? "sends and receives out of order"
                         : s->bytes != q->bytes        ? "the two sides disagree on the bytes"
                                                       : "the receive names the wrong stage");
}

/* A bucket with more sends than receives (or the reverse): name the first
 * unmatched one. */
static dyn_status unmatched(const sched_match *m, int32_t k, int32_t rank, int32_t n_sends, int32_t n_recvs,
                            dyn_error *err)
{
    const dyn_instr *in = m->ins[k];
    int send = (sched_op(in->op) & SCHED_OP_SEND) != 0;
    return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                         "plan invalid: rank %d instruction %d (%s micro-batch %d %s rank %d): no matching %s "
                         "(%d %s messages posted as sends, %d as receives: a dropped send or receive)",
                         rank, k - m->rank_off[rank], dyn_op_name((dyn_op)in->op), in->microbatch,
                         send ? "to" : "from", in->peer, send ? "receive" : "send", n_sends,
                         sched_op_grad(in->op) ? "gradient" : "activation", n_recvs);
}

dyn_status sched_match_begin(sched_match *m, const dyn_exec_plan *p, dyn_error *err)
{
    int32_t R = p->n_ranks;
    int64_t N = 0, K = 0;
    for (int32_t r = 0; r < R; r++) {
        N += p->ranks[r].n_instrs;
        K += p->ranks[r].n_buffers;
    }
    if (R < 1 || R > 4096 || N > INT32_MAX / 2 || K > INT32_MAX / 2)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "plan invalid: too large to match (%d ranks, %lld instructions)",
                             R, (long long)N);
    int32_t B = 2 * R * R;
    dyn_status st = reserve(m, R, (int32_t)N, B, (int32_t)K, err);
    if (st != DYN_OK) return st;
    m->n_ranks = R;
    m->rank_off[0] = m->slot_off[0] = 0;
    for (int32_t r = 0; r < R; r++) {
        m->rank_off[r + 1] = m->rank_off[r] + p->ranks[r].n_instrs;
        m->slot_off[r + 1] = m->slot_off[r] + p->ranks[r].n_buffers;
    }
    memset(m->bucket_send, 0, sizeof(int32_t) * (size_t)(B + 1));
    memset(m->bucket_recv, 0, sizeof(int32_t) * (size_t)(B + 1));
    m->n_msgs = 0;
    m->n_comm = 0;
    return DYN_OK;
}

dyn_status sched_match_end(sched_match *m, int check_stages, dyn_error *err)
{
    int32_t R = m->n_ranks, B = 2 * R * R, n_comm = m->n_comm;
    dyn_status st;
    for (int32_t b = 0; b < B; b++) {
        m->bucket_send[b + 1] += m->bucket_send[b];
        m->bucket_recv[b + 1] += m->bucket_recv[b];
    }
    /* Fill the buckets; the bucket_* entries serve as cursors and end up
     * one bucket later: afterwards bucket b spans [bucket[b-1], bucket[b])
     * with bucket[-1] = 0. */
    for (int32_t c = 0; c < n_comm; c++) {
        unsigned fl = m->comm_fl[c];
        if (!(fl & SCHED_OP_START)) continue;
        int32_t k = m->comm[c], r = m->comm_rank[c], peer = m->comm_peer[c];
        int grad = (fl & SCHED_OP_GRAD) != 0;
        if (fl & SCHED_OP_SEND) m->order_send[m->bucket_send[bucket_of(R, grad, r, peer)]++] = k;
        else m->order_recv[m->bucket_recv[bucket_of(R, grad, peer, r)]++] = k;
    }
    for (int32_t b = 0; b < B; b++) {
        int32_t s0 = b ? m->bucket_send[b - 1] : 0, s1 = m->bucket_send[b];
        int32_t r0 = b ? m->bucket_recv[b - 1] : 0, r1 = m->bucket_recv[b];
        int32_t n = s1 - s0 < r1 - r0 ? s1 - s0 : r1 - r0;
        int32_t src = (b / R) % R, dst = b % R;
        for (int32_t a = 0; a < n; a++) {
            int32_t ks = m->order_send[s0 + a], kr = m->order_recv[r0 + a];
            if ((st = check_pair(m, R, ks, kr, check_stages, err)) != DYN_OK) return st;
            int32_t x = m->n_msgs++;
            m->msg_send[x] = ks;
            m->msg_recv[x] = kr;
            m->msg_src[x] = src;
            m->msg_dst[x] = dst;
            m->msg_of[ks] = m->msg_of[kr] = x;
        }
        if (s1 - s0 > n) return unmatched(m, m->order_send[s0 + n], src, s1 - s0, r1 - r0, err);
        if (r1 - r0 > n) return unmatched(m, m->order_recv[r0 + n], dst, s1 - s0, r1 - r0, err);
    }
    /* FINISHes: from their START's index to its message. */
    for (int32_t c = 0; c < n_comm; c++) {
        int32_t k = m->comm[c];
        if (m->comm_fl[c] & SCHED_OP_FINISH) m->msg_of[k] = m->msg_of[m->msg_of[k]];
    }
    return DYN_OK;
}

dyn_status sched_match_plan(sched_match *m, const dyn_exec_plan *p, int check_stages, dyn_error *err)
{
    dyn_status st = sched_match_begin(m, p, err);
    for (int32_t r = 0; st == DYN_OK && r < p->n_ranks; r++) {
        const dyn_rank_plan *rp = &p->ranks[r];
        sched_match_rank_begin(m, p, r);
        for (int32_t i = 0; st == DYN_OK && i < rp->n_instrs; i++)
            if (sched_op(rp->instrs[i].op) & SCHED_OP_COMM) st = sched_match_instr(m, r, i, &rp->instrs[i], err);
        if (st == DYN_OK) st = sched_match_rank_end(m, p, r, err);
    }
    if (st == DYN_OK) st = sched_match_end(m, check_stages, err);
    return st;
}
