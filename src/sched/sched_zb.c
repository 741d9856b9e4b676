/* sched_zb.c — a zero-bubble schedule in the spirit of ZB-H1 (Qi et al.,
 * "Zero Bubble Pipeline Parallelism", ICLR 2024), for variable-size
 * micro-batches. One stage per rank (chunks = 1).
 *
 * Backward is split into BACKWARD_INPUT (B: the gradient the previous stage
 * waits for) and BACKWARD_WEIGHT (W: this stage's weight gradients, which
 * nobody waits for), so W can be deferred into time a rank would otherwise
 * sit idle. A micro-batch's stored activations live until its W.
 *
 * The generator builds four candidate orders and keeps the one with the
 * smallest makespan when timed on the actual per-micro-batch costs (zero
 * communication cost; ties go to the earlier candidate):
 *
 *  1. ZB-H1. Rank r runs 1F1B's forwards (before B j it has run
 *     min(M, j + S - r) forwards) but defers its W passes by r: right after
 *     B j it runs W j-r, and the r W passes left run at the end. Every rank
 *     then holds S micro-batches in flight (forwarded, W not yet run), which
 *     is 1F1B's first rank, so the peak over ranks is 1F1B's; ZB-H1 keeps the
 *     same count on every stage (the paper's Figure 3). The deferred W passes
 *     fill the cool-down: on equal micro-batches, zero communication, M >= S,
 *     the makespan is M (f + b + w) + (S - 1) max(f, b, f + b - w), against
 *     1F1B's (M + S - 1)(f + b + w). With an in-flight cap k < S the warm-up
 *     forwards become min(S - r, k) and the lag min(r, k - min(S - r, k)).
 *     Under a memory limit this candidate is dropped if its static peak
 *     exceeds the limit on some rank.
 *  2. Greedy list scheduling on the costs: a free rank runs the next B if its
 *     gradient has arrived, else the next F if its input has arrived and the
 *     in-flight cap and the memory limit allow, else the oldest pending W,
 *     else idles until the next arrival. It adapts W placement to uneven
 *     micro-batches, which a fixed pattern cannot.
 *  3. 1F1B with each backward split into B and W back to back (the order and
 *     the memory throttling of sched_1f1b.c). Timed on the same costs it is
 *     never later than 1F1B: every unit starts no later, since B alone ends
 *     before B + W and the gradient is sent after B. Having it among the
 *     candidates is what makes the chosen order never slower than 1F1B on the
 *     same micro-batch order, memory limit and cap (with zero communication
 *     cost: the choice does not see the link).
 *  4. Run ahead: the greedy of candidate 2 with the in-flight cap raised
 *     from S to max_in_flight (M when unset; the memory limit still
 *     applies), and W passes no more than S behind B (a W due runs before
 *     anything else). With uneven micro-batches, one long micro-batch holds
 *     rank r + 1 while rank r, capped at S, would idle; running ahead it
 *     forwards the next ones, and its W passes fill the cool-down. The lag
 *     bound is for real caches, not the model: W reads the activations and
 *     the kept gradients B left, and deferring every W to the end measured
 *     12-18 % slower compute (gpt-mini, 4096 tokens) against 0-2 % with the
 *     lag at S. Only built when max_in_flight allows more than S.
 *
 * Cost: each candidate is O(units) to build (the greedies O(units * S)) and
 * O(units) to time with a worklist evaluation of the per-rank orders. */
#include <math.h>
#include <stdlib.h>

#include "sched/sched_internal.h" /* defines: sched_orders_*, sched_emit_timed, sched_order_1f1b */
#include "util/util.h"            /* defines: dyn_calloc */

/* Scratch for timing orders: completion times of F and B per (mb, stage),
 * each rank's clock and position, a stack of ranks to advance. */
typedef struct zb_work {
    int32_t S, M;
    double *fdone, *bdone; /* [M*S], -1: not yet */
    double *t;             /* [S] */
    int32_t *pos, *stack;  /* [S] */
    uint8_t *blocked;      /* [S] */
} zb_work;

static void zb_work_free(zb_work *w)
{
    free(w->fdone);
    free(w->bdone);
    free(w->t);
    free(w->pos);
    free(w->stack);
    free(w->blocked);
}

static dyn_status zb_work_init(zb_work *w, int32_t S, int32_t M, dyn_error *err)
{
    w->S = S;
    w->M = M;
    w->fdone = dyn_calloc((size_t)M * S, sizeof(double), "zb", err);
    w->bdone = dyn_calloc((size_t)M * S, sizeof(double), "zb", err);
    w->t = dyn_calloc((size_t)S, sizeof(double), "zb", err);
    w->pos = dyn_calloc((size_t)S, sizeof(int32_t), "zb", err);
    w->stack = dyn_calloc((size_t)S, sizeof(int32_t), "zb", err);
    w->blocked = dyn_calloc((size_t)S, sizeof(uint8_t), "zb", err);
    if (!w->fdone || !w->bdone || !w->t || !w->pos || !w->stack || !w->blocked) {
        zb_work_free(w);
        return DYN_ERR_NOMEM;
    }
    return DYN_OK;
}

/* Makespan (ms) of per-rank orders o (one stage per rank) when each unit
 * starts as soon as its rank is free and its input exists; INFINITY if the
 * orders cannot complete. The start times of fixed per-rank orders do not
 * depend on which rank is advanced first, so a worklist suffices: a rank
 * runs until it waits on an input, and is woken when that input is produced
 * (an F on rank r wakes r + 1, a B wakes r - 1). Each unit is timed once and
 * each wake-up follows a unit: O(units). */
static double orders_makespan(const sched_orders *o, const dyn_stage_costs *c, zb_work *w)
{
    int32_t S = w->S, last = S - 1, top = 0;
    for (size_t i = 0; i < (size_t)w->M * S; i++) w->fdone[i] = w->bdone[i] = -1;
    for (int32_t r = 0; r < S; r++) {
        w->t[r] = 0;
        w->pos[r] = 0;
        w->blocked[r] = 0;
        w->stack[top++] = r;
    }
    while (top > 0) {
        int32_t r = w->stack[--top];
        while (w->pos[r] < o->n[r]) {
            const sched_unit *u = &o->u[r][w->pos[r]];
            size_t k = (size_t)u->mb * S + r;
            double dep;
            if (u->kind == UNIT_F) dep = r == 0 ? 0 : w->fdone[k - 1];
            else if (u->kind == UNIT_BW) dep = w->bdone[k];
            else dep = r == last ? w->fdone[k] : w->bdone[k + 1];
            if (dep < 0) {
                w->blocked[r] = 1;
                break;
            }
            double end = (dep > w->t[r] ? dep : w->t[r]) + sched_unit_ms(c, u);
            w->t[r] = end;
            w->pos[r]++;
            int32_t wake = -1;
            if (u->kind == UNIT_F) {
                w->fdone[k] = end;
                wake = r + 1;
            } else if (u->kind != UNIT_BW) {
                w->bdone[k] = end;
                wake = r - 1;
            }
            if (wake >= 0 && wake < S && w->blocked[wake]) {
                w->blocked[wake] = 0;
                w->stack[top++] = wake;
            }
        }
    }
    double makespan = 0;
    for (int32_t r = 0; r < S; r++) {
        if (w->pos[r] < o->n[r]) return INFINITY;
        if (w->t[r] > makespan) makespan = w->t[r];
    }
    return makespan;
}

/* Static peak (MB) of rank r's order under the memory model of sched.h. */
static double order_peak(const sched_orders *o, const dyn_stage_costs *c, int32_t r)
{
    double base = sched_rank_states(c, r, o->n_ranks), held = 0, peak = base;
    for (int32_t i = 0; i < o->n[r]; i++) {
        const sched_unit *u = &o->u[r][i];
        double stored = sched_stored(c, u->mb, r);
        double now = base + held + sched_peak(c, u->mb, r) + (u->kind == UNIT_F ? stored : 0);
        if (now > peak) peak = now;
        if (u->kind == UNIT_F) held += stored;
        else if (u->kind == UNIT_BW) held -= stored;
    }
    return peak;
}

/* Candidate 1: the ZB-H1 order (see the top of the file). */
static dyn_status order_h1(const dyn_stage_costs *c, int32_t S, int32_t cap, sched_orders *o,
                           dyn_error *err)
{
    int32_t M = c->n_microbatches;
    dyn_status st = sched_orders_init(o, S, S, M, 3, err);
    if (st != DYN_OK) return st;
    for (int32_t r = 0; r < S && st == DYN_OK; r++) {
        int32_t warm = S - r < cap ? S - r : cap; /* non-increasing in r: no deadlock */
        int32_t lag = cap - warm < r ? cap - warm : r;
        int32_t nf = 0, nw = 0;
        for (int32_t j = 0; j < M && st == DYN_OK; j++) {
            int32_t target = M - j < warm ? M : j + warm;
            while (nf < target && st == DYN_OK) st = sched_orders_push(o, r, UNIT_F, nf++, r, err);
            if (st == DYN_OK) st = sched_orders_push(o, r, UNIT_BI, j, r, err);
            if (st == DYN_OK && j >= lag) st = sched_orders_push(o, r, UNIT_BW, nw++, r, err);
        }
        while (nw < M && st == DYN_OK) st = sched_orders_push(o, r, UNIT_BW, nw++, r, err);
    }
    if (st != DYN_OK) sched_orders_free(o);
    return st;
}

typedef struct zb_rank {
    double t;           /* time the rank is free */
    int32_t nf, nb, nw; /* next F, B, W micro-batch (in order) */
    double held, base, maxpeak;
    /* the rank's next decision (see greedy_decide) */
    double when;     /* when it can act; INFINITY: waits on a rank that has not produced yet */
    int32_t kind;    /* what it would run then */
    double mem_need; /* > 0: the next F alone (nothing held) exceeds the limit by this need */
} zb_rank;

/* Decide what rank r of the greedy runs next and when (see the top of the
 * file): cap bounds the micro-batches in flight (forwarded, W not run),
 * lag the W passes pending after their B. It reads only r's own state and
 * what ranks r - 1 (activations) and r + 1 (gradients) produced, so after
 * a step only those three change. */
static void greedy_decide(const dyn_stage_costs *c, zb_rank *rk, int32_t r, int32_t S, int32_t M,
                          int32_t cap, int32_t lag, double limit, const double *fdone, const double *bdone)
{
    zb_rank *x = &rk[r];
    double b_ready = INFINITY, f_ready = INFINITY;
    x->mem_need = 0;
    if (x->nb - x->nw >= lag) { /* a W due: deferred no further than lag */
        x->when = x->t;
        x->kind = UNIT_BW;
        return;
    }
    if (x->nb < x->nf) {
        size_t k = (size_t)x->nb * S + r;
        double d = r == S - 1 ? fdone[k] : bdone[k + 1];
        if (d >= 0) b_ready = d;
    }
    int f_ok = x->nf < M && x->nf - x->nw < cap;
    if (f_ok) {
        double stored = sched_stored(c, x->nf, r), p = sched_peak(c, x->nf, r);
        double need = x->base + x->held + stored + (p > x->maxpeak ? p : x->maxpeak);
        if (need > limit) {
            f_ok = 0;
            if (x->nf == x->nw) x->mem_need = need;
        }
    }
    if (f_ok) {
        double d = r == 0 ? 0 : fdone[(size_t)x->nf * S + r - 1];
        if (d >= 0) f_ready = d;
    }
    if (b_ready <= x->t) { x->when = x->t; x->kind = UNIT_BI; }
    else if (f_ready <= x->t) { x->when = x->t; x->kind = UNIT_F; }
    else if (x->nw < x->nb) { x->when = x->t; x->kind = UNIT_BW; }
    else if (b_ready <= f_ready) { x->when = b_ready; x->kind = UNIT_BI; }
    else { x->when = f_ready; x->kind = UNIT_F; }
}

/* No rank can act: the next forward of some rank does not fit the limit
 * even alone (infeasible, naming it), or a bug. */
static dyn_status greedy_stuck(const zb_rank *rk, int32_t S, double limit, dyn_error *err)
{
    int32_t mb = -1;
    for (int32_t r = 0; r < S && mb < 0; r++)
        if (rk[r].mem_need > 0) mb = r;
    if (mb >= 0)
        return dyn_error_set(err, DYN_ERR_INFEASIBLE,
                             "zb: stage %d (rank %d) cannot run micro-batch %d even alone: "
                             "needs %.1f MB (states %.1f, largest peak %.1f) over the %.1f "
                             "MB limit",
                             mb, mb, rk[mb].nf, rk[mb].mem_need, rk[mb].base, rk[mb].maxpeak, limit);
    return dyn_error_set(err, DYN_ERR_INTERNAL, "zb: no rank can progress");
}

/* Rank r runs its decided unit from time at: its end time, the memory it
 * holds and its counters; the unit in *u. */
static void greedy_run_unit(const dyn_stage_costs *c, zb_rank *x, int32_t r, int32_t S, double at,
                            double *fdone, double *bdone, sched_unit *u)
{
    u->kind = x->kind;
    u->stage = r;
    u->mb = u->kind == UNIT_F ? x->nf : u->kind == UNIT_BI ? x->nb : x->nw;
    size_t k = (size_t)u->mb * S + r;
    double end = at + sched_unit_ms(c, u);
    x->t = end;
    if (u->kind == UNIT_F) {
        fdone[k] = end;
        x->held += sched_stored(c, u->mb, r);
        x->nf++;
    } else if (u->kind == UNIT_BI) {
        bdone[k] = end;
        x->nb++;
    } else {
        x->held -= sched_stored(c, u->mb, r);
        x->nw++;
    }
}

/* Candidates 2 and 4: greedy list scheduling (see the top of the file). Ranks
 * decide in time order (the earliest decision first, ties to the lower
 * rank), so a decision at time t sees every arrival up to t. Each step
 * re-decides three ranks and scans S cached times: O(units * S) with a
 * small constant. */
static dyn_status order_greedy(const dyn_stage_costs *c, int32_t S, int32_t cap, int32_t lag, double limit,
                               zb_work *w, sched_orders *o, double *makespan, dyn_error *err)
{
    int32_t M = c->n_microbatches;
    dyn_status st = sched_orders_init(o, S, S, M, 3, err);
    if (st != DYN_OK) return st;
    double *fdone = w->fdone, *bdone = w->bdone;
    zb_rank *rk = dyn_calloc((size_t)S, sizeof(zb_rank), "zb", err);
    if (!rk) {
        sched_orders_free(o);
        return DYN_ERR_NOMEM;
    }
    for (size_t i = 0; i < (size_t)M * S; i++) fdone[i] = bdone[i] = -1;
    for (int32_t r = 0; r < S; r++) {
        rk[r].base = sched_rank_states(c, r, S);
        for (int32_t m = 0; m < M; m++)
            if (sched_peak(c, m, r) > rk[r].maxpeak) rk[r].maxpeak = sched_peak(c, m, r);
    }
    for (int32_t r = 0; r < S; r++) greedy_decide(c, rk, r, S, M, cap, lag, limit, fdone, bdone);
    for (int64_t remaining = 3 * (int64_t)M * S; remaining > 0; remaining--) {
        int32_t best = -1;
        double best_time = INFINITY;
        for (int32_t r = 0; r < S; r++) {
            if (rk[r].when < best_time) {
                best_time = rk[r].when;
                best = r;
            }
        }
        if (best < 0) {
            st = greedy_stuck(rk, S, limit, err);
            break;
        }
        sched_unit u;
        greedy_run_unit(c, &rk[best], best, S, best_time, fdone, bdone, &u);
        if ((st = sched_orders_push(o, best, u.kind, u.mb, u.stage, err)) != DYN_OK) break;
        for (int32_t r = best - 1; r <= best + 1; r++)
            if (r >= 0 && r < S) greedy_decide(c, rk, r, S, M, cap, lag, limit, fdone, bdone);
    }
    /* each unit started as early as its order allowed: these are the
     * order's timed completion times, no need to time it again */
    *makespan = 0;
    for (int32_t r = 0; r < S; r++)
        if (rk[r].t > *makespan) *makespan = rk[r].t;
    free(rk);
    if (st != DYN_OK) sched_orders_free(o);
    return st;
}

enum { CAND_H1 = 0, CAND_GREEDY = 1, CAND_SPLIT_1F1B = 2, CAND_AHEAD = 3, N_CAND = 4 };

/* The candidate orders: have[k] when candidate k was built (and fits);
 * built_ms[k] its makespan when timed as it was built (the greedies), else
 * NAN; the first infeasible one's status and error, kept for when none does. */
typedef struct zb_cands {
    sched_orders cand[N_CAND];
    int have[N_CAND];
    double built_ms[N_CAND];
    dyn_status first_fail;
    dyn_error fail_err;
} zb_cands;

/* Build every candidate; an infeasible one is skipped, not fatal. */
static dyn_status zb_build_candidates(zb_cands *z, const dyn_stage_costs *c, const dyn_sched_options *opt,
                                      int32_t cap, double limit, zb_work *w, dyn_error *err)
{
    int32_t S = opt->n_ranks, M = c->n_microbatches;
    int32_t ahead = opt->max_in_flight > 0 && opt->max_in_flight < M ? opt->max_in_flight : M;
    for (int k = 0; k < N_CAND; k++) {
        dyn_error e;
        dyn_error_clear(&e);
        dyn_status st;
        if (k == CAND_AHEAD && ahead <= cap) continue; /* no further ahead than candidate 2 */
        if (k == CAND_H1) st = order_h1(c, S, cap, &z->cand[k], &e);
        else if (k == CAND_GREEDY) st = order_greedy(c, S, cap, INT32_MAX, limit, w, &z->cand[k], &z->built_ms[k], &e);
        else if (k == CAND_AHEAD) st = order_greedy(c, S, ahead, S, limit, w, &z->cand[k], &z->built_ms[k], &e);
        else st = sched_order_1f1b(c, opt, 1, "zb", &z->cand[k], &e);
        if (st == DYN_ERR_INFEASIBLE) {
            if (z->first_fail == DYN_OK) {
                z->first_fail = st;
                z->fail_err = e;
            }
            continue;
        }
        if (st != DYN_OK) {
            if (err) *err = e;
            return st;
        }
        z->have[k] = 1;
        if (k == CAND_H1 && limit < INFINITY) {
            for (int32_t r = 0; r < S && z->have[k]; r++)
                if (order_peak(&z->cand[k], c, r) > limit) z->have[k] = 0;
            if (!z->have[k]) sched_orders_free(&z->cand[k]);
        }
    }
    return DYN_OK;
}

/* The candidate with the smallest timed makespan (ties: the earlier), or -1. */
static int zb_best_candidate(zb_cands *z, const dyn_stage_costs *c, zb_work *w)
{
    int best = -1;
    double best_ms = INFINITY;
    for (int k = 0; k < N_CAND; k++) {
        if (!z->have[k]) continue;
        double ms = isnan(z->built_ms[k]) ? orders_makespan(&z->cand[k], c, w) : z->built_ms[k];
        if (best < 0 || ms < best_ms) {
            best = k;
            best_ms = ms;
        }
    }
    return best;
}

dyn_status sched_build_zb(const dyn_stage_costs *c, const dyn_mb_shape *shapes,
                          const dyn_sched_options *opt, dyn_exec_plan *out, dyn_error *err)
{
    dyn_status st = sched_check_inputs(c, opt, 1, err);
    if (st != DYN_OK) return st;
    if (opt->chunks != 1)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "zb runs one stage per rank (chunks = 1, got %d)", opt->chunks);
    int32_t S = opt->n_ranks, M = c->n_microbatches;
    double limit = opt->memory_limit_mb > 0 ? opt->memory_limit_mb : INFINITY;
    int32_t cap = S;
    if (opt->max_in_flight > 0 && opt->max_in_flight < cap) cap = opt->max_in_flight;
    zb_work w;
    st = zb_work_init(&w, S, M, err);
    if (st != DYN_OK) return st;
    zb_cands z = {.first_fail = DYN_OK};
    for (int k = 0; k < N_CAND; k++) z.built_ms[k] = NAN;
    dyn_error_clear(&z.fail_err);
    if ((st = zb_build_candidates(&z, c, opt, cap, limit, &w, err)) == DYN_OK) {
        int best = zb_best_candidate(&z, c, &w);
        if (best >= 0) {
            st = sched_emit_timed(&z.cand[best], c, shapes, opt, DYN_SCHEDULE_ZB, out, err);
        } else {
            st = z.first_fail != DYN_OK ? z.first_fail : DYN_ERR_INTERNAL;
            if (err) *err = z.fail_err;
            if (z.first_fail == DYN_OK) st = dyn_error_set(err, st, "zb: no candidate order");
        }
    }
    for (int k = 0; k < N_CAND; k++)
        if (z.have[k]) sched_orders_free(&z.cand[k]);
    zb_work_free(&w);
    return st;
}
