/* sched_zb.c — a zero-bubble schedule in the spirit of ZB-H1 (Qi et al.,
 * "Zero Bubble Pipeline Parallelism"), for variable-size micro-batches.
 *
 * Backward is split into BACKWARD_INPUT (B: the gradient the previous stage
 * waits for) and BACKWARD_WEIGHT (W: this stage's weight gradients, which
 * nobody waits for). B runs as early as possible; W is deferred into the
 * time a rank would otherwise sit idle waiting for an activation or a
 * gradient. Memory is bounded like ZB-H1: every rank keeps at most S
 * micro-batches in flight (forwarded, W not yet run; a micro-batch's stored
 * activations live until its W), which is what 1F1B's first stage holds, so
 * the peak over ranks matches 1F1B's; the memory limit throttles further.
 *
 * Because micro-batch sizes vary, the W placement is decided on the actual
 * per-micro-batch costs by a list-scheduling simulation: each rank, whenever
 * free, runs by priority (1) the next B if its gradient has arrived, (2) the
 * next F if its input has arrived and the in-flight cap and memory allow, (3)
 * the oldest pending W; otherwise it idles until the next input arrives.
 * Ranks decide in time order, so a decision at time t sees every arrival up
 * to t. One stage per rank (chunks = 1). */
#include <math.h>
#include <stdlib.h>

#include "sched/sched_internal.h" /* defines: sched_orders_*, sched_emit_timed */
#include "util/util.h"            /* defines: dyn_calloc */

typedef struct zb_rank {
    double t;                 /* time the rank is free */
    int32_t nf, nb, nw;       /* next F, B, W micro-batch (in order) */
    double held, base, maxpeak;
} zb_rank;

dyn_status sched_build_zb(const dyn_stage_costs *c, const dyn_mb_shape *shapes,
                          const dyn_sched_options *opt, dyn_exec_plan *out, dyn_error *err)
{
    dyn_status st = sched_check_inputs(c, opt, 1, err);
    if (st != DYN_OK) return st;
    if (opt->chunks != 1)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "zb runs one stage per rank (chunks = 1, got %d)", opt->chunks);
    int32_t S = opt->n_ranks, M = c->n_microbatches, last = S - 1;
    double limit = opt->memory_limit_mb > 0 ? opt->memory_limit_mb : INFINITY;
    int32_t cap = S;
    if (opt->max_in_flight > 0 && opt->max_in_flight < cap) cap = opt->max_in_flight;
    sched_orders o;
    st = sched_orders_init(&o, S, S, M, 3, err);
    if (st != DYN_OK) return st;
    double *fdone = dyn_calloc((size_t)M * S, sizeof(double), "zb", err);
    double *bdone = dyn_calloc((size_t)M * S, sizeof(double), "zb", err);
    zb_rank *rk = dyn_calloc((size_t)S, sizeof(zb_rank), "zb", err);
    if (!fdone || !bdone || !rk) {
        st = DYN_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < (size_t)M * S; i++) fdone[i] = bdone[i] = -1;
    for (int32_t r = 0; r < S; r++) {
        rk[r].base = sched_rank_states(c, r, S);
        for (int32_t m = 0; m < M; m++)
            if (sched_peak(c, m, r) > rk[r].maxpeak) rk[r].maxpeak = sched_peak(c, m, r);
    }
    int64_t remaining = 3 * (int64_t)M * S;
    while (remaining > 0) {
        /* For each rank: when it can next act (INFINITY: waits on a rank that
         * has not produced the input yet) and what it would run. */
        int32_t best = -1, best_kind = -1;
        double best_time = INFINITY;
        int mem_blocked = -1;
        double mem_need = 0;
        for (int32_t r = 0; r < S; r++) {
            zb_rank *x = &rk[r];
            double b_ready = INFINITY, f_ready = INFINITY;
            if (x->nb < x->nf) {
                size_t k = (size_t)x->nb * S + r;
                double d = r == last ? fdone[k] : bdone[k + 1];
                if (d >= 0) b_ready = d;
            }
            int f_ok = x->nf < M && x->nf - x->nw < cap;
            if (f_ok) {
                double stored = sched_stored(c, x->nf, r), p = sched_peak(c, x->nf, r);
                double need = x->base + x->held + stored + (p > x->maxpeak ? p : x->maxpeak);
                if (need > limit) {
                    f_ok = 0;
                    if (x->nf == x->nw && mem_blocked < 0) {
                        mem_blocked = r;
                        mem_need = need;
                    }
                }
            }
            if (f_ok) {
                double d = r == 0 ? 0 : fdone[(size_t)x->nf * S + r - 1];
                if (d >= 0) f_ready = d;
            }
            int w_ok = x->nw < x->nb;
            double when;
            int kind;
            if (b_ready <= x->t) { when = x->t; kind = UNIT_BI; }
            else if (f_ready <= x->t) { when = x->t; kind = UNIT_F; }
            else if (w_ok) { when = x->t; kind = UNIT_BW; }
            else if (b_ready <= f_ready) { when = b_ready; kind = UNIT_BI; }
            else { when = f_ready; kind = UNIT_F; }
            if (when < best_time) {
                best_time = when;
                best = r;
                best_kind = kind;
            }
        }
        if (best < 0) {
            if (mem_blocked >= 0)
                st = dyn_error_set(err, DYN_ERR_INFEASIBLE,
                                   "zb: stage %d (rank %d) cannot run micro-batch %d even alone: "
                                   "needs %.1f MB (states %.1f, largest peak %.1f) over the %.1f "
                                   "MB limit",
                                   mem_blocked, mem_blocked, rk[mem_blocked].nf, mem_need,
                                   rk[mem_blocked].base, rk[mem_blocked].maxpeak, limit);
            else
                st = dyn_error_set(err, DYN_ERR_INTERNAL, "zb: no rank can progress");
            goto out;
        }
        zb_rank *x = &rk[best];
        sched_unit u;
        u.kind = best_kind;
        u.stage = best;
        u.mb = best_kind == UNIT_F ? x->nf : best_kind == UNIT_BI ? x->nb : x->nw;
        size_t k = (size_t)u.mb * S + best;
        double end = best_time + sched_unit_ms(c, &u);
        x->t = end;
        if (best_kind == UNIT_F) {
            fdone[k] = end;
            x->held += sched_stored(c, u.mb, best);
            x->nf++;
        } else if (best_kind == UNIT_BI) {
            bdone[k] = end;
            x->nb++;
        } else {
            x->held -= sched_stored(c, u.mb, best);
            x->nw++;
        }
        st = sched_orders_push(&o, best, u.kind, u.mb, u.stage, err);
        if (st != DYN_OK) goto out;
        remaining--;
    }
    st = sched_emit_timed(&o, c, shapes, opt, DYN_SCHED_ZB, out, err);
out:
    free(fdone);
    free(bdone);
    free(rk);
    sched_orders_free(&o);
    return st;
}
