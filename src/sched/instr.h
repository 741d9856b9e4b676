/* instr.h — what each instruction kind of an execution plan does, in one
 * place, for everything that reads plans: the validator (validate.c), the
 * static memory model (plan.c), the simulator (src/sim/sim.c) and the
 * runtime's interpreter.
 *
 *   sched_op_flags[op]   one table: kind -> reads / writes / frees a slot,
 *                        computes, sends or receives (start or finish, which
 *                        message kind), uses a micro-batch. Its length is
 *                        checked against DYN_OP_COUNT at compile time.
 *   sched_match_plan     the send/receive matcher: pairs every SEND_*_START
 *                        with its RECV_*_START per (kind, sender, receiver)
 *                        in posting order (MPI order with one tag per kind,
 *                        the contract of sched.h) and every FINISH with its
 *                        START through the slot it names.
 *   sched_mem_step       one step of the per-rank memory model of sched.h.
 *
 * Semantics of each kind: include/dynapipe/sched.h. Internal to the
 * library. */
#ifndef DYN_SCHED_INSTR_H
#define DYN_SCHED_INSTR_H

#include "dynapipe/sched.h"

/* Bits of sched_op_flags. */
enum {
    SCHED_OP_COMPUTE = 1 << 0,  /* FORWARD, BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT: takes rank
                                   time, costs (mb, stage) */
    SCHED_OP_READS = 1 << 1,    /* reads slot buf_in (FORWARD/BACKWARD*: -1 at the pipeline's
                                   ends, see sched.h) */
    SCHED_OP_WRITES = 1 << 2,   /* allocates slot buf_out (compute: -1 at the ends) */
    SCHED_OP_FREES = 1 << 3,    /* releases slot buf_in */
    SCHED_OP_SEND = 1 << 4,     /* the sending side of a message (slot buf_in) */
    SCHED_OP_RECV = 1 << 5,     /* the receiving side (slot buf_out) */
    SCHED_OP_START = 1 << 6,    /* posts its side of the message; never blocks */
    SCHED_OP_FINISH = 1 << 7,   /* waits for the message its START posted */
    SCHED_OP_GRAD = 1 << 8,     /* message kind: gradient (else activation) */
    SCHED_OP_NO_MB = 1 << 9,    /* micro-batch and stage unused (FREE_BUFFER, BARRIER) */
    SCHED_OP_BARRIER = 1 << 10  /* waits until every rank reached its k-th BARRIER */
};
#define SCHED_OP_COMM (SCHED_OP_SEND | SCHED_OP_RECV)

/* [DYN_OP_COUNT] flags per dyn_op (instr.c). Index only with op < DYN_OP_COUNT. */
extern const uint16_t sched_op_flags[];

/* Flags of op, 0 when op is out of range. */
static inline unsigned sched_op(int op)
{
    return (unsigned)op < DYN_OP_COUNT ? sched_op_flags[op] : 0u;
}

/* The message kind of a SEND/RECV: 0 activation, 1 gradient. */
static inline int sched_op_grad(int op)
{
    return (sched_op(op) & SCHED_OP_GRAD) != 0;
}

/* The stage a SEND/RECV of stage s talks to: s + 1 for activations sent
 * and gradients received, s - 1 for activations received and gradients
 * sent (sched.h "Conventions"); 0 for other ops. */
static inline int sched_op_peer_step(int op)
{
    unsigned fl = sched_op(op);
    if (!(fl & SCHED_OP_COMM)) return 0;
    return ((fl & SCHED_OP_SEND) != 0) != ((fl & SCHED_OP_GRAD) != 0) ? 1 : -1;
}

/* ---- the matcher ---------------------------------------------------------
 * Instructions are numbered flat: instruction i of rank r is rank_off[r] + i.
 * A message is one SEND_*_START (rank src) and its RECV_*_START (rank dst);
 * msg_of maps both STARTs and both FINISHes of a message to it. A workspace:
 * zero it, run it on any number of plans (it grows to the largest and then
 * does not allocate), free it. */
typedef struct sched_match {
    int32_t n_ranks, n_comm;
    int32_t n_msgs;
    int32_t *rank_off;     /* [R + 1] */
    const dyn_instr **ins; /* [N] flat view, set for communication instructions only */
    int32_t *msg_of;       /* [N] message of a SEND/RECV START or FINISH (others unset) */
    int32_t *msg_send;     /* [n_msgs] flat index of the SEND_*_START */
    int32_t *msg_recv;     /* [n_msgs] flat index of the RECV_*_START */
    int32_t *msg_src;      /* [n_msgs] sending rank */
    int32_t *msg_dst;      /* [n_msgs] receiving rank */
    /* scratch */
    int32_t *slot_off, *pend_send, *pend_recv;
    int32_t *bucket_send, *bucket_recv, *order_send, *order_recv;
    int32_t *comm, *comm_rank, *comm_peer; /* [N] SEND/RECV instructions (flat), their ranks, peers */
    uint16_t *comm_fl;                     /* [N] and their flags */
    int32_t cap_ranks, cap_instrs, cap_buckets, cap_slots;
} sched_match;

/* Match plan's messages into m. The plan's ops, peers (0..R-1, not the
 * rank itself) and slots (-1..n_buffers-1) must already be checked in range
 * (the callers check fields first). The k-th send and the k-th receive of a
 * (kind, sender, receiver) must agree on micro-batch and bytes and, with
 * check_stages, on stages (a receive names the stage after, for gradients
 * before, the sender's: the validator's rule; the simulator models a
 * transport, which matches by kind and rank only).
 * Errors (DYN_ERR_INVALID_ARG, "plan invalid: rank R instruction I (...):
 * ..."): a FINISH whose slot has no START of its kind in flight, a START on
 * a slot with a transfer in flight, a transfer never finished, a send
 * without its receive or the reverse, a pair that disagrees. */
dyn_status sched_match_plan(sched_match *m, const dyn_exec_plan *plan, int check_stages, dyn_error *err);
void sched_match_free(sched_match *m);

/* The same in steps, for a caller that checks its own fields in the same
 * pass over the plan (the simulator): begin; per rank, rank_begin, then
 * sched_match_instr for each SEND/RECV instruction in program order, then
 * rank_end; finally end. sched_match_plan is exactly this. */
dyn_status sched_match_begin(sched_match *m, const dyn_exec_plan *plan, dyn_error *err);
void sched_match_rank_begin(sched_match *m, const dyn_exec_plan *plan, int32_t r);
dyn_status sched_match_instr(sched_match *m, int32_t r, int32_t i, const dyn_instr *in, dyn_error *err);
dyn_status sched_match_rank_end(sched_match *m, const dyn_exec_plan *plan, int32_t r, dyn_error *err);
dyn_status sched_match_end(sched_match *m, int check_stages, dyn_error *err);

/* ---- the memory model (sched.h "Memory model") ---------------------------
 * What one instruction does to its rank's memory, MB: before it runs the
 * rank acquires `acquire` (FORWARD: the pair's stored activations), while it
 * runs it uses `transient` more (compute: the pair's peak_mb), after it
 * releases `release` (BACKWARD or BACKWARD_WEIGHT: the stored activations).
 * Zero for everything else. NULL cost arrays count as 0. mb and stage
 * must be in range for compute instructions. */
typedef struct sched_mem_delta {
    double acquire, transient, release;
} sched_mem_delta;

static inline sched_mem_delta sched_mem_step(const dyn_stage_costs *c, const dyn_instr *in)
{
    sched_mem_delta d = {0.0, 0.0, 0.0};
    if (!(sched_op(in->op) & SCHED_OP_COMPUTE)) return d;
    size_t k = (size_t)in->microbatch * (size_t)c->n_stages + (size_t)in->stage;
    double stored = c->stored_mb ? c->stored_mb[k] : 0.0;
    if (in->op == DYN_OP_FORWARD) d.acquire = stored;
    if (in->op == DYN_OP_BACKWARD || in->op == DYN_OP_BACKWARD_WEIGHT) d.release = stored;
    d.transient = c->peak_mb ? c->peak_mb[k] : 0.0;
    return d;
}

#endif
