/* sim_testlib.h — hand-built execution plans for the simulator tests: a
 * plain 1F1B generator written independently of src/sched (so the simulator
 * can be tested against the closed-form makespan before, and apart from, the
 * real schedules), a plan builder for tiny hand-worked cases, and uniform
 * stage costs. Header-only: included by tests/test_sim*.c. */
#ifndef DYN_SIM_TESTLIB_H
#define DYN_SIM_TESTLIB_H

#include <stdlib.h>
#include <string.h>

#include "dynapipe/sched.h"
#include "dynapipe/sim.h"

/* A plan under construction: R ranks, capacity per rank. */
typedef struct tplan {
    dyn_exec_plan p;
    int32_t cap;
} tplan;

static inline void tplan_init(tplan *t, int32_t R, int32_t S, int32_t M, int32_t cap)
{
    memset(t, 0, sizeof *t);
    t->cap = cap;
    t->p.schedule = DYN_SCHEDULE_1F1B;
    t->p.n_ranks = R;
    t->p.n_stages = S;
    t->p.n_microbatches = M;
    t->p.stage_rank = calloc((size_t)S, sizeof(int32_t));
    t->p.mb_shape = calloc((size_t)(M ? M : 1), sizeof(dyn_mb_shape));
    t->p.ranks = calloc((size_t)R, sizeof(dyn_rank_plan));
    for (int32_t s = 0; s < S; s++) t->p.stage_rank[s] = s % R;
    for (int32_t r = 0; r < R; r++) t->p.ranks[r].instrs = calloc((size_t)cap, sizeof(dyn_instr));
}

static inline void tplan_free(tplan *t)
{
    for (int32_t r = 0; r < t->p.n_ranks; r++) free(t->p.ranks[r].instrs);
    free(t->p.ranks);
    free(t->p.stage_rank);
    free(t->p.mb_shape);
    memset(t, 0, sizeof *t);
}

/* Append one instruction to rank r; slots grow n_buffers as used. */
static inline void tplan_add(tplan *t, int32_t r, int op, int32_t mb, int32_t stage, int32_t peer,
                             int32_t buf_in, int32_t buf_out, int64_t bytes)
{
    dyn_rank_plan *rp = &t->p.ranks[r];
    if (rp->n_instrs >= t->cap) abort();
    dyn_instr *in = &rp->instrs[rp->n_instrs++];
    memset(in, 0, sizeof *in);
    in->op = (uint8_t)op;
    in->microbatch = mb;
    in->stage = stage;
    in->peer = peer;
    in->buf_in = buf_in;
    in->buf_out = buf_out;
    in->bytes = bytes;
    if (buf_in + 1 > rp->n_buffers) rp->n_buffers = buf_in + 1;
    if (buf_out + 1 > rp->n_buffers) rp->n_buffers = buf_out + 1;
}

/* 1F1B (PipeDream-flush) over S ranks, one stage per rank: rank r runs
 * min(S-1-r, M) warm-up forwards, then alternates forward/backward, then the
 * remaining backwards. Receives are posted at the start of the program, sends
 * finished and slots freed at its end, so no transfer ever waits for a post
 * and the makespan depends only on compute and the link. Slots per
 * micro-batch: 5mb+0 input/received activation, +1 output activation,
 * +2 received gradient, +3 output gradient, +4 loaded targets. */
static inline void tplan_1f1b(tplan *t, int32_t S, int32_t M, int64_t bytes)
{
    tplan_init(t, S, S, M, 16 * M + 8);
    for (int32_t r = 0; r < S; r++) {
        int first = r == 0, last = r == S - 1;
        for (int32_t mb = 0; mb < M; mb++) {
            if (!first) tplan_add(t, r, DYN_OP_RECV_ACT_START, mb, r, r - 1, -1, 5 * mb, bytes);
            if (!last) tplan_add(t, r, DYN_OP_RECV_GRAD_START, mb, r, r + 1, -1, 5 * mb + 2, bytes);
        }
        int32_t warm = S - 1 - r < M ? S - 1 - r : M;
        int32_t nf = 0, nb = 0;
        /* Sequence: warm forwards, then (F, B) pairs, then Bs. */
        while (nb < M) {
            int do_fwd = nf < M && (nf < warm || nf - nb <= warm);
            if (nf - nb > warm) do_fwd = 0;
            if (do_fwd) {
                int32_t mb = nf++;
                if (first) tplan_add(t, r, DYN_OP_LOAD_INPUT, mb, r, -1, -1, 5 * mb, bytes);
                else tplan_add(t, r, DYN_OP_RECV_ACT_FINISH, mb, r, r - 1, -1, 5 * mb, bytes);
                if (last) tplan_add(t, r, DYN_OP_LOAD_INPUT, mb, r, -1, -1, 5 * mb + 4, 0);
                tplan_add(t, r, DYN_OP_FORWARD, mb, r, -1, 5 * mb, last ? -1 : 5 * mb + 1,
                          last ? 0 : bytes);
                if (!last) tplan_add(t, r, DYN_OP_SEND_ACT_START, mb, r, r + 1, 5 * mb + 1, -1, bytes);
            } else {
                int32_t mb = nb++;
                if (!last) tplan_add(t, r, DYN_OP_RECV_GRAD_FINISH, mb, r, r + 1, -1, 5 * mb + 2, bytes);
                tplan_add(t, r, DYN_OP_BACKWARD, mb, r, -1, last ? -1 : 5 * mb + 2,
                          first ? -1 : 5 * mb + 3, first ? 0 : bytes);
                if (!first) tplan_add(t, r, DYN_OP_SEND_GRAD_START, mb, r, r - 1, 5 * mb + 3, -1, bytes);
            }
        }
        for (int32_t mb = 0; mb < M; mb++) {
            if (!last) tplan_add(t, r, DYN_OP_SEND_ACT_FINISH, mb, r, r + 1, 5 * mb + 1, -1, bytes);
            if (!first) tplan_add(t, r, DYN_OP_SEND_GRAD_FINISH, mb, r, r - 1, 5 * mb + 3, -1, bytes);
            tplan_add(t, r, DYN_OP_FREE_BUFFER, mb, r, -1, 5 * mb, -1, 0);
            if (!last) tplan_add(t, r, DYN_OP_FREE_BUFFER, mb, r, -1, 5 * mb + 1, -1, 0);
            if (!last) tplan_add(t, r, DYN_OP_FREE_BUFFER, mb, r, -1, 5 * mb + 2, -1, 0);
            if (!first) tplan_add(t, r, DYN_OP_FREE_BUFFER, mb, r, -1, 5 * mb + 3, -1, 0);
            if (last) tplan_add(t, r, DYN_OP_FREE_BUFFER, mb, r, -1, 5 * mb + 4, -1, 0);
        }
    }
}

/* Costs with the same fwd f and bwd b for every (mb, stage); B/W halves. */
static inline void tcosts_uniform(dyn_stage_costs *c, int32_t M, int32_t S, double f, double b)
{
    dyn_stage_costs_alloc(c, M, S, NULL);
    for (int32_t i = 0; i < M * S; i++) {
        c->fwd_ms[i] = f;
        c->bwd_ms[i] = b;
        c->bwd_input_ms[i] = b / 2;
        c->bwd_weight_ms[i] = b / 2;
    }
}

#endif
