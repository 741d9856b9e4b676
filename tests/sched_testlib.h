/* sched_testlib.h — helpers the schedule tests share: random stage costs, a
 * small reference simulator of an execution plan written independently of
 * src/sim (max-plus over each rank's instruction list), and extraction of a
 * rank's compute order as text (and a check of every rank's). Header-only
 * so each test stays one file. Include it after <cmocka.h>: tl_build_ok and
 * tl_expect_orders fail the running test. */
#ifndef DYN_SCHED_TESTLIB_H
#define DYN_SCHED_TESTLIB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/sched.h"
#include "util/rng.h" /* defines: dyn_rng_* */

/* Random costs for M micro-batches and n_stages stages: times 0.5..2 ms
 * forward, backward about twice that, split 50/50 (+-) into B and W. */
static inline void tl_random_costs(dyn_stage_costs *c, int32_t M, int32_t ns, dyn_rng *rng)
{
    if (dyn_stage_costs_alloc(c, M, ns, NULL) != DYN_OK) abort();
    for (int32_t m = 0; m < M; m++) {
        double size = 0.5 + 1.5 * dyn_rng_uniform(rng); /* micro-batches differ in size */
        for (int32_t s = 0; s < ns; s++) {
            size_t k = (size_t)m * ns + s;
            c->fwd_ms[k] = size * (0.8 + 0.4 * dyn_rng_uniform(rng));
            c->bwd_ms[k] = 2 * c->fwd_ms[k] * (0.8 + 0.4 * dyn_rng_uniform(rng));
            double frac = 0.3 + 0.4 * dyn_rng_uniform(rng);
            c->bwd_input_ms[k] = frac * c->bwd_ms[k];
            c->bwd_weight_ms[k] = c->bwd_ms[k] - c->bwd_input_ms[k];
            c->stored_mb[k] = 40 * size;
            c->peak_mb[k] = 5 * size;
            c->send_mb[k] = 2 * size;
        }
    }
    for (int32_t s = 0; s < ns; s++) c->states_mb[s] = 100;
}

static inline void tl_equal_costs(dyn_stage_costs *c, int32_t M, int32_t ns, double f, double b)
{
    if (dyn_stage_costs_alloc(c, M, ns, NULL) != DYN_OK) abort();
    for (size_t k = 0; k < (size_t)M * ns; k++) {
        c->fwd_ms[k] = f;
        c->bwd_ms[k] = b;
        c->bwd_input_ms[k] = b / 2;
        c->bwd_weight_ms[k] = b / 2;
        c->stored_mb[k] = 10;
        c->peak_mb[k] = 1;
        c->send_mb[k] = 1;
    }
}

/* Compute order of rank r as "F0 F1 B0 ..." (BI -> "b", BW -> "w"), stage
 * appended as ".s" when stages > ranks. */
static inline void tl_order(const dyn_exec_plan *p, int32_t r, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = 0;
    for (int32_t i = 0; i < p->ranks[r].n_instrs; i++) {
        const dyn_instr *in = &p->ranks[r].instrs[i];
        const char *k = in->op == DYN_OP_FORWARD ? "F" : in->op == DYN_OP_BACKWARD ? "B"
                      : in->op == DYN_OP_BACKWARD_INPUT ? "b" : in->op == DYN_OP_BACKWARD_WEIGHT ? "w" : NULL;
        if (k == NULL) continue;
        int w = p->n_stages > p->n_ranks
                    ? snprintf(out + n, cap - n, "%s%s%d.%d", n ? " " : "", k, in->microbatch, in->stage)
                    : snprintf(out + n, cap - n, "%s%s%d", n ? " " : "", k, in->microbatch);
        if (w < 0 || (size_t)w >= cap - n) abort();
        n += (size_t)w;
    }
}

/* Reference simulation: compute instructions take their cost; a message
 * arrives lat_ms after both its send and its receive were posted; a
 * RECV_FINISH waits for arrival, a SEND_FINISH too; the k-th BARRIER waits
 * for every rank's k-th BARRIER. Returns the makespan (ms), or -1 if the
 * plan gets stuck. Quadratic matching: fine for test sizes. */
static inline double tl_simulate(const dyn_exec_plan *p, const dyn_stage_costs *c, double lat_ms)
{
    int32_t S = p->n_ranks, ns = p->n_stages;
    int32_t *pc = calloc((size_t)S, sizeof(int32_t));
    double *t = calloc((size_t)S, sizeof(double));
    double **posted = calloc((size_t)S, sizeof(double *));
    int32_t nbar = 0;
    for (int32_t i = 0; i < p->ranks[0].n_instrs; i++) nbar += p->ranks[0].instrs[i].op == DYN_OP_BARRIER;
    int32_t *arrived = calloc((size_t)S, sizeof(int32_t)), *passed = calloc((size_t)S, sizeof(int32_t));
    int32_t *bar_cnt = calloc((size_t)nbar + 1, sizeof(int32_t));
    double *bar_max = calloc((size_t)nbar + 1, sizeof(double));
    for (int32_t r = 0; r < S; r++) {
        posted[r] = calloc((size_t)p->ranks[r].n_instrs + 1, sizeof(double));
        for (int32_t i = 0; i < p->ranks[r].n_instrs; i++) posted[r][i] = -1;
    }
    int progress = 1;
    while (progress) {
        progress = 0;
        for (int32_t r = 0; r < S; r++) {
            while (pc[r] < p->ranks[r].n_instrs) {
                const dyn_instr *in = &p->ranks[r].instrs[pc[r]];
                size_t k = (size_t)in->microbatch * ns + in->stage;
                int op = in->op;
                if (op == DYN_OP_FORWARD) t[r] += c->fwd_ms[k];
                else if (op == DYN_OP_BACKWARD) t[r] += c->bwd_ms[k];
                else if (op == DYN_OP_BACKWARD_INPUT) t[r] += c->bwd_input_ms[k];
                else if (op == DYN_OP_BACKWARD_WEIGHT) t[r] += c->bwd_weight_ms[k];
                else if (op == DYN_OP_SEND_ACT_START || op == DYN_OP_SEND_GRAD_START ||
                         op == DYN_OP_RECV_ACT_START || op == DYN_OP_RECV_GRAD_START)
                    posted[r][pc[r]] = t[r];
                else if (op == DYN_OP_SEND_ACT_FINISH || op == DYN_OP_SEND_GRAD_FINISH ||
                         op == DYN_OP_RECV_ACT_FINISH || op == DYN_OP_RECV_GRAD_FINISH) {
                    /* find both ends: my START (latest before, same mb/stage) and the peer's */
                    int is_send = op == DYN_OP_SEND_ACT_FINISH || op == DYN_OP_SEND_GRAD_FINISH;
                    int is_act = op == DYN_OP_SEND_ACT_FINISH || op == DYN_OP_RECV_ACT_FINISH;
                    int my_start = op - 1, peer_start;
                    int32_t peer_stage;
                    if (is_act) {
                        peer_start = is_send ? DYN_OP_RECV_ACT_START : DYN_OP_SEND_ACT_START;
                        peer_stage = is_send ? in->stage + 1 : in->stage - 1;
                    } else {
                        peer_start = is_send ? DYN_OP_RECV_GRAD_START : DYN_OP_SEND_GRAD_START;
                        peer_stage = is_send ? in->stage - 1 : in->stage + 1;
                    }
                    double mine = -1, theirs = -1;
                    for (int32_t i = pc[r] - 1; i >= 0; i--) {
                        const dyn_instr *x = &p->ranks[r].instrs[i];
                        if (x->op == my_start && x->microbatch == in->microbatch && x->stage == in->stage) {
                            mine = posted[r][i];
                            break;
                        }
                    }
                    int32_t q = in->peer;
                    for (int32_t i = 0; i < p->ranks[q].n_instrs; i++) {
                        const dyn_instr *x = &p->ranks[q].instrs[i];
                        if (x->op == peer_start && x->microbatch == in->microbatch && x->stage == peer_stage) {
                            theirs = posted[q][i];
                            break;
                        }
                    }
                    if (mine < 0 || theirs < 0) break; /* peer has not posted yet */
                    double arrive = (mine > theirs ? mine : theirs) + lat_ms;
                    if (arrive > t[r]) t[r] = arrive;
                } else if (op == DYN_OP_BARRIER) {
                    int32_t k = passed[r];
                    if (arrived[r] == k) { /* arrive at barrier k */
                        arrived[r]++;
                        if (t[r] > bar_max[k]) bar_max[k] = t[r];
                        bar_cnt[k]++;
                        progress = 1;
                    }
                    if (bar_cnt[k] < S) break;
                    t[r] = bar_max[k];
                    passed[r]++;
                }
                pc[r]++;
                progress = 1;
            }
        }
    }
    double makespan = 0;
    for (int32_t r = 0; r < S; r++) {
        if (pc[r] < p->ranks[r].n_instrs) makespan = -1;
        if (makespan >= 0 && t[r] > makespan) makespan = t[r];
    }
    for (int32_t r = 0; r < S; r++) free(posted[r]);
    free(posted);
    free(pc);
    free(t);
    free(arrived);
    free(passed);
    free(bar_cnt);
    free(bar_max);
    return makespan;
}

/* Build schedule `kind` from costs c (no shapes) and options o into p, and
 * check it with the plan validator; fails the running test, naming the
 * schedule and the error, if either step does not return DYN_OK. */
static inline void tl_build_ok(dyn_schedule kind, const dyn_stage_costs *c, const dyn_sched_options *o,
                               dyn_exec_plan *p)
{
    dyn_error err;
    dyn_error_clear(&err);
    if (dyn_schedule_build(kind, c, NULL, o, p, &err) != DYN_OK)
        fail_msg("%s: %s", dyn_schedule_name(kind), err.msg);
    if (dyn_exec_plan_validate(p, &err) != DYN_OK)
        fail_msg("%s: %s", dyn_schedule_name(kind), err.msg);
}

/* Every rank r's compute order (tl_order) is want[r]; fails the running
 * test naming the rank and both orders otherwise. */
static inline void tl_expect_orders(const dyn_exec_plan *p, const char *const *want)
{
    char buf[1024];
    for (int32_t r = 0; r < p->n_ranks; r++) {
        tl_order(p, r, buf, sizeof buf);
        if (strcmp(buf, want[r]) != 0) fail_msg("rank %d: '%s', want '%s'", r, buf, want[r]);
    }
}

#endif
