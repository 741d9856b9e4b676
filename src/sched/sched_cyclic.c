/* sched_cyclic.c — DynaPipe's cyclic schedule and its wait-free variant
 * (paper arXiv 2311.10418, section 5).
 *
 * The cyclic schedule runs in cycles. All micro-batches queue, in the given
 * order, at the first stage. In each cycle every stage runs at most one
 * forward (the head of its forward queue) and at most one backward (the head
 * of its backward queue); a rank holding several stages (chunks) orders the
 * cycle's work as backward, forward, backward, forward, ... each sorted by
 * (micro-batch, stage). What a stage finishes in cycle c enters the next
 * stage's queue for cycle c + 1, and no rank starts cycle c + 1 before every
 * rank finished cycle c (the cycle barrier): with micro-batch j entering in
 * cycle j, stage s runs forward j in cycle j + s and backward j in cycle
 * j + 2n - 1 - s (n stages) unless throttled.
 *
 * Throttling: a forward that starts a new micro-batch on a rank (its first
 * chunk) is skipped for this cycle when the rank would exceed the memory
 * limit (states + stored + this forward's stored + the rank's largest
 * transient peak, so the later backwards fit too) or the in-flight cap; the
 * micro-batch waits at the head of the queue. Forwards of later chunks of a
 * micro-batch already on the rank are never held back, since its backward
 * needs them.
 *
 * Representation: the per-rank instruction lists are emitted cycle by cycle
 * and, for the cyclic schedule, one BARRIER per rank between consecutive
 * cycles (sched.h). The wait-free cyclic plan is the same lists without the
 * BARRIERs: each rank keeps the cyclic order but starts an instruction as
 * soon as its inputs exist, which can only make things earlier. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched/sched_internal.h" /* defines: sched_orders_*, sched_emitter */
#include "util/util.h"            /* defines: dyn_calloc */

typedef struct cyc_op {
    int32_t fwd, mb, stage;
} cyc_op;

static int cyc_before(const cyc_op *a, const cyc_op *b)
{
    return a->mb != b->mb ? a->mb < b->mb : a->stage < b->stage;
}

/* Insertion sort of at most 2v candidates: v is small. */
static void cyc_sort(cyc_op *ops, int32_t n)
{
    for (int32_t i = 1; i < n; i++) {
        cyc_op x = ops[i];
        int32_t j = i - 1;
        while (j >= 0 && cyc_before(&x, &ops[j])) {
            ops[j + 1] = ops[j];
            j--;
        }
        ops[j + 1] = x;
    }
}

/* The cyclic generator's state: queues per stage, memory and in-flight
 * counts per rank, and the cycle of every unit pushed. One struct, one
 * free. */
typedef struct cyc_state {
    const dyn_stage_costs *c;
    const dyn_sched_options *opt;
    int32_t S, v, ns, M;
    double limit;
    sched_orders o;
    int32_t *favail, *bavail; /* [M * ns] first cycle the forward / backward may run, INT_MAX: not yet */
    int32_t *nf, *nb;         /* [ns] forwards / backwards the stage has run */
    int32_t **cycle_of;       /* [S][units] cycle of each pushed unit (into cycle_flat) */
    int32_t *cycle_flat;
    double *held, *base, *maxpeak; /* [S] MB: stored now, model states, largest transient peak */
    int32_t *open;            /* [S] micro-batches on the rank (first chunk forwarded, not backwarded) */
    cyc_op *cand;             /* [4v] this cycle's candidates of one rank */
    /* the first micro-batch that cannot run even alone, if no progress */
    int32_t blocked_stage, blocked_mb;
    double blocked_need;
} cyc_state;

static void cyc_free(cyc_state *cs)
{
    free(cs->favail); free(cs->bavail); free(cs->nf); free(cs->nb);
    free(cs->cycle_of); free(cs->cycle_flat);
    free(cs->held); free(cs->base); free(cs->maxpeak); free(cs->open); free(cs->cand);
    sched_orders_free(&cs->o);
}

static dyn_status cyc_init(cyc_state *cs, const dyn_stage_costs *c, const dyn_sched_options *opt, dyn_error *err)
{
    memset(cs, 0, sizeof *cs);
    cs->c = c;
    cs->opt = opt;
    int32_t S = cs->S = opt->n_ranks, v = cs->v = opt->chunks, ns = cs->ns = S * v, M = cs->M = c->n_microbatches;
    cs->limit = opt->memory_limit_mb > 0 ? opt->memory_limit_mb : INFINITY;
    dyn_status st = sched_orders_init(&cs->o, S, ns, M, 2, err);
    if (st != DYN_OK) return st;
    size_t units = 0;
    for (int32_t r = 0; r < S; r++) units += (size_t)cs->o.cap[r] + 1;
    cs->favail = dyn_calloc((size_t)M * ns, sizeof(int32_t), "cyclic", err);
    cs->bavail = dyn_calloc((size_t)M * ns, sizeof(int32_t), "cyclic", err);
    cs->nf = dyn_calloc((size_t)ns, sizeof(int32_t), "cyclic", err);
    cs->nb = dyn_calloc((size_t)ns, sizeof(int32_t), "cyclic", err);
    cs->cycle_of = dyn_calloc((size_t)S, sizeof(int32_t *), "cyclic", err);
    cs->cycle_flat = dyn_calloc(units, sizeof(int32_t), "cyclic", err);
    cs->held = dyn_calloc((size_t)S, sizeof(double), "cyclic", err);
    cs->base = dyn_calloc((size_t)S, sizeof(double), "cyclic", err);
    cs->maxpeak = dyn_calloc((size_t)S, sizeof(double), "cyclic", err);
    cs->open = dyn_calloc((size_t)S, sizeof(int32_t), "cyclic", err);
    cs->cand = dyn_calloc((size_t)4 * v, sizeof(cyc_op), "cyclic", err);
    if (!cs->favail || !cs->bavail || !cs->nf || !cs->nb || !cs->cycle_of || !cs->cycle_flat || !cs->held ||
        !cs->base || !cs->maxpeak || !cs->open || !cs->cand) {
        cyc_free(cs);
        return DYN_ERR_NOMEM;
    }
    size_t at = 0;
    for (int32_t r = 0; r < S; r++) {
        cs->cycle_of[r] = cs->cycle_flat + at;
        at += (size_t)cs->o.cap[r] + 1;
        cs->base[r] = sched_rank_states(c, r, S);
    }
    for (size_t i = 0; i < (size_t)M * ns; i++) {
        cs->favail[i] = cs->bavail[i] = INT_MAX;
        int32_t s = (int32_t)(i % ns), mb = (int32_t)(i / ns);
        if (s == 0) cs->favail[i] = 0;
        double p = sched_peak(c, mb, s);
        if (p > cs->maxpeak[s % S]) cs->maxpeak[s % S] = p;
    }
    cs->blocked_stage = cs->blocked_mb = -1;
    return DYN_OK;
}

/* Forward op on rank r in this cycle, unless throttled (*ran = 0): a new
 * micro-batch on the rank must fit the limit with the rank's largest
 * transient, and the in-flight cap. */
static dyn_status cyc_forward(cyc_state *cs, int32_t r, const cyc_op *op, int32_t cycle, int *ran, dyn_error *err)
{
    const dyn_stage_costs *c = cs->c;
    int32_t mb = op->mb, s = op->stage;
    size_t k = (size_t)mb * cs->ns + s;
    double stored = sched_stored(c, mb, s);
    *ran = 0;
    if (s == r) { /* first chunk: a new micro-batch on this rank */
        double need = cs->base[r] + cs->held[r] + stored +
                      (sched_peak(c, mb, s) > cs->maxpeak[r] ? sched_peak(c, mb, s) : cs->maxpeak[r]);
        int capped = cs->opt->max_in_flight > 0 && cs->open[r] >= cs->opt->max_in_flight;
        if (need > cs->limit || capped) {
            if (need > cs->limit && cs->open[r] == 0 && cs->blocked_stage < 0) {
                cs->blocked_stage = s;
                cs->blocked_mb = mb;
                cs->blocked_need = need;
            }
            return DYN_OK; /* throttled: retry next cycle */
        }
        cs->open[r]++;
    }
    cs->held[r] += stored;
    cs->nf[s]++;
    if (s < cs->ns - 1) cs->favail[k + 1] = cycle + 1;
    else cs->bavail[k] = cycle + 1;
    *ran = 1;
    return sched_orders_push(&cs->o, r, UNIT_F, mb, s, err);
}

static dyn_status cyc_backward(cyc_state *cs, int32_t r, const cyc_op *op, int32_t cycle, dyn_error *err)
{
    int32_t mb = op->mb, s = op->stage;
    size_t k = (size_t)mb * cs->ns + s;
    cs->held[r] -= sched_stored(cs->c, mb, s);
    if (s == r) cs->open[r]--;
    cs->nb[s]++;
    if (s > 0) cs->bavail[k - 1] = cycle + 1;
    return sched_orders_push(&cs->o, r, UNIT_B, mb, s, err);
}

/* Rank r's work in one cycle: the heads of its stages' queues that are
 * available, backward then forward, each sorted by (micro-batch, stage).
 * *ran counts the units pushed. */
static dyn_status cyc_rank_cycle(cyc_state *cs, int32_t r, int32_t cycle, int64_t *ran, dyn_error *err)
{
    int32_t ns = cs->ns, M = cs->M, nbw = 0, nfw = 0;
    cyc_op *bw = cs->cand, *fw = cs->cand + 2 * cs->v;
    for (int32_t s = r; s < ns; s += cs->S) {
        if (cs->nb[s] < M && cs->bavail[(size_t)cs->nb[s] * ns + s] <= cycle) bw[nbw++] = (cyc_op){0, cs->nb[s], s};
        if (cs->nf[s] < M && cs->favail[(size_t)cs->nf[s] * ns + s] <= cycle) fw[nfw++] = (cyc_op){1, cs->nf[s], s};
    }
    cyc_sort(bw, nbw);
    cyc_sort(fw, nfw);
    for (int32_t i = 0; i < nbw || i < nfw; i++) {
        for (int32_t pass = 0; pass < 2; pass++) {
            const cyc_op *op = pass == 0 ? (i < nbw ? &bw[i] : NULL) : (i < nfw ? &fw[i] : NULL);
            if (op == NULL) continue;
            int did = 1;
            dyn_status st = op->fwd ? cyc_forward(cs, r, op, cycle, &did, err) : cyc_backward(cs, r, op, cycle, err);
            if (st != DYN_OK) return st;
            if (!did) continue;
            cs->cycle_of[r][cs->o.n[r] - 1] = cycle;
            (*ran)++;
        }
    }
    return DYN_OK;
}

/* Cycle after cycle until every unit ran; *n_cycles receives the count. */
static dyn_status cyc_plan(cyc_state *cs, dyn_schedule kind, int32_t *n_cycles, dyn_error *err)
{
    int64_t remaining = 2 * (int64_t)cs->M * cs->ns;
    int32_t cycle = 0;
    while (remaining > 0) {
        int64_t ran = 0;
        cs->blocked_stage = cs->blocked_mb = -1;
        cs->blocked_need = 0;
        for (int32_t r = 0; r < cs->S; r++) {
            dyn_status st = cyc_rank_cycle(cs, r, cycle, &ran, err);
            if (st != DYN_OK) return st;
        }
        if (ran == 0) {
            int32_t b = cs->blocked_stage;
            if (b >= 0)
                return dyn_error_set(err, DYN_ERR_INFEASIBLE,
                                     "%s: stage %d (rank %d) cannot run micro-batch %d even alone: "
                                     "needs %.1f MB (states %.1f, largest peak %.1f) over the %.1f MB "
                                     "limit",
                                     dyn_schedule_name(kind), b, b % cs->S, cs->blocked_mb, cs->blocked_need,
                                     cs->base[b % cs->S], cs->maxpeak[b % cs->S], cs->limit);
            return dyn_error_set(err, DYN_ERR_INTERNAL, "%s: no progress in cycle %d", dyn_schedule_name(kind),
                                 cycle);
        }
        remaining -= ran;
        cycle++;
    }
    *n_cycles = cycle;
    return DYN_OK;
}

dyn_status sched_build_cyclic(const dyn_stage_costs *c, const dyn_mb_shape *shapes,
                              const dyn_sched_options *opt, int32_t wait_free, dyn_exec_plan *out,
                              dyn_error *err)
{
    dyn_status st = sched_check_inputs(c, opt, 0, err);
    if (st != DYN_OK) return st;
    dyn_schedule kind = wait_free ? DYN_SCHEDULE_WAIT_FREE_CYCLIC : DYN_SCHEDULE_CYCLIC;
    cyc_state cs;
    if ((st = cyc_init(&cs, c, opt, err)) != DYN_OK) return st;
    int32_t cycle = 0;
    sched_emitter *e = NULL;
    if ((st = cyc_plan(&cs, kind, &cycle, err)) != DYN_OK) goto out;
    /* Emit cycle by cycle: within a cycle no unit depends on another, so this
     * order respects every dependency. */
    st = sched_emitter_create(&e, out, kind, &cs.o, c, shapes, opt, wait_free ? 0 : cycle - 1, err);
    if (st != DYN_OK) goto out;
    int32_t *pos = cs.open; /* reused as each rank's emission cursor */
    for (int32_t r = 0; r < cs.S; r++) pos[r] = 0;
    for (int32_t cy = 0; cy < cycle; cy++) {
        for (int32_t r = 0; r < cs.S; r++)
            while (pos[r] < cs.o.n[r] && cs.cycle_of[r][pos[r]] == cy) {
                sched_emit_unit(e, r, &cs.o.u[r][pos[r]]);
                pos[r]++;
            }
        if (!wait_free && cy + 1 < cycle) sched_emit_barrier(e);
    }
    if ((st = sched_emitter_finish(e, err)) != DYN_OK) dyn_exec_plan_free(out);
out:
    cyc_free(&cs);
    return st;
}
