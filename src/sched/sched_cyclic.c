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

dyn_status sched_build_cyclic(const dyn_stage_costs *c, const dyn_mb_shape *shapes,
                              const dyn_sched_options *opt, int32_t wait_free, dyn_exec_plan *out,
                              dyn_error *err)
{
    dyn_status st = sched_check_inputs(c, opt, 0, err);
    if (st != DYN_OK) return st;
    int32_t S = opt->n_ranks, v = opt->chunks, ns = S * v, M = c->n_microbatches, last = ns - 1;
    double limit = opt->memory_limit_mb > 0 ? opt->memory_limit_mb : INFINITY;
    dyn_schedule kind = wait_free ? DYN_SCHED_WAIT_FREE_CYCLIC : DYN_SCHED_CYCLIC;
    sched_orders o;
    st = sched_orders_init(&o, S, ns, M, 2, err);
    if (st != DYN_OK) return st;
    sched_emitter *e = NULL;
    int32_t *favail = dyn_calloc((size_t)M * ns, sizeof(int32_t), "cyclic", err);
    int32_t *bavail = dyn_calloc((size_t)M * ns, sizeof(int32_t), "cyclic", err);
    int32_t *nf = dyn_calloc((size_t)ns, sizeof(int32_t), "cyclic", err);
    int32_t *nb = dyn_calloc((size_t)ns, sizeof(int32_t), "cyclic", err);
    int32_t **cycle_of = dyn_calloc((size_t)S, sizeof(int32_t *), "cyclic", err);
    double *held = dyn_calloc((size_t)S, sizeof(double), "cyclic", err);
    double *base = dyn_calloc((size_t)S, sizeof(double), "cyclic", err);
    double *maxpeak = dyn_calloc((size_t)S, sizeof(double), "cyclic", err);
    int32_t *open = dyn_calloc((size_t)S, sizeof(int32_t), "cyclic", err);
    int32_t *pos = dyn_calloc((size_t)S, sizeof(int32_t), "cyclic", err);
    cyc_op *cand = dyn_calloc((size_t)4 * v, sizeof(cyc_op), "cyclic", err);
    if (!favail || !bavail || !nf || !nb || !cycle_of || !held || !base || !maxpeak || !open ||
        !pos || !cand) {
        st = DYN_ERR_NOMEM;
        goto out;
    }
    for (int32_t r = 0; r < S; r++) {
        cycle_of[r] = dyn_calloc((size_t)o.cap[r] + 1, sizeof(int32_t), "cyclic", err);
        if (cycle_of[r] == NULL) {
            st = DYN_ERR_NOMEM;
            goto out;
        }
        base[r] = sched_rank_states(c, r, S);
    }
    for (size_t i = 0; i < (size_t)M * ns; i++) {
        favail[i] = bavail[i] = INT_MAX;
        int32_t s = (int32_t)(i % ns), mb = (int32_t)(i / ns);
        if (s == 0) favail[i] = 0;
        double p = sched_peak(c, mb, s);
        if (p > maxpeak[s % S]) maxpeak[s % S] = p;
    }
    int64_t remaining = 2 * (int64_t)M * ns;
    int32_t cycle = 0;
    while (remaining > 0) {
        int any = 0, blocked_stage = -1, blocked_mb = -1;
        double blocked_need = 0;
        for (int32_t r = 0; r < S; r++) {
            int32_t nbw = 0, nfw = 0;
            cyc_op *bw = cand, *fw = cand + 2 * v;
            for (int32_t s = r; s < ns; s += S) {
                if (nb[s] < M && bavail[(size_t)nb[s] * ns + s] <= cycle)
                    bw[nbw++] = (cyc_op){0, nb[s], s};
                if (nf[s] < M && favail[(size_t)nf[s] * ns + s] <= cycle)
                    fw[nfw++] = (cyc_op){1, nf[s], s};
            }
            cyc_sort(bw, nbw);
            cyc_sort(fw, nfw);
            for (int32_t i = 0; i < nbw || i < nfw; i++) {
                for (int32_t pass = 0; pass < 2; pass++) {
                    const cyc_op *op = pass == 0 ? (i < nbw ? &bw[i] : NULL) : (i < nfw ? &fw[i] : NULL);
                    if (op == NULL) continue;
                    int32_t mb = op->mb, s = op->stage;
                    size_t k = (size_t)mb * ns + s;
                    if (op->fwd) {
                        double stored = sched_stored(c, mb, s);
                        if (s == r) { /* first chunk: a new micro-batch on this rank */
                            double need = base[r] + held[r] + stored +
                                          (sched_peak(c, mb, s) > maxpeak[r] ? sched_peak(c, mb, s) : maxpeak[r]);
                            int capped = opt->max_in_flight > 0 && open[r] >= opt->max_in_flight;
                            if (need > limit || capped) {
                                if (need > limit && open[r] == 0 && blocked_stage < 0) {
                                    blocked_stage = s;
                                    blocked_mb = mb;
                                    blocked_need = need;
                                }
                                continue; /* throttled: retry next cycle */
                            }
                            open[r]++;
                        }
                        held[r] += stored;
                        nf[s]++;
                        if (s < last) favail[k + 1] = cycle + 1;
                        else bavail[k] = cycle + 1;
                        st = sched_orders_push(&o, r, UNIT_F, mb, s, err);
                    } else {
                        held[r] -= sched_stored(c, mb, s);
                        if (s == r) open[r]--;
                        nb[s]++;
                        if (s > 0) bavail[k - 1] = cycle + 1;
                        st = sched_orders_push(&o, r, UNIT_B, mb, s, err);
                    }
                    if (st != DYN_OK) goto out;
                    cycle_of[r][o.n[r] - 1] = cycle;
                    remaining--;
                    any = 1;
                }
            }
        }
        if (!any) {
            if (blocked_stage >= 0)
                st = dyn_error_set(err, DYN_ERR_INFEASIBLE,
                                   "%s: stage %d (rank %d) cannot run micro-batch %d even alone: "
                                   "needs %.1f MB (states %.1f, largest peak %.1f) over the %.1f MB "
                                   "limit",
                                   dyn_schedule_name(kind), blocked_stage, blocked_stage % S,
                                   blocked_mb, blocked_need, base[blocked_stage % S],
                                   maxpeak[blocked_stage % S], limit);
            else
                st = dyn_error_set(err, DYN_ERR_INTERNAL, "%s: no progress in cycle %d",
                                   dyn_schedule_name(kind), cycle);
            goto out;
        }
        cycle++;
    }
    /* Emit cycle by cycle: within a cycle no unit depends on another, so this
     * order respects every dependency. */
    st = sched_emitter_create(&e, out, kind, &o, c, shapes, opt, wait_free ? 0 : cycle - 1, err);
    if (st != DYN_OK) goto out;
    for (int32_t cy = 0; cy < cycle; cy++) {
        for (int32_t r = 0; r < S; r++)
            while (pos[r] < o.n[r] && cycle_of[r][pos[r]] == cy) {
                sched_emit_unit(e, r, &o.u[r][pos[r]]);
                pos[r]++;
            }
        if (!wait_free && cy + 1 < cycle) sched_emit_barrier(e);
    }
    if ((st = sched_emitter_finish(e, err)) != DYN_OK) dyn_exec_plan_free(out);
out:
    if (cycle_of)
        for (int32_t r = 0; r < S; r++) free(cycle_of[r]);
    free(cycle_of);
    free(favail);
    free(bavail);
    free(nf);
    free(nb);
    free(held);
    free(base);
    free(maxpeak);
    free(open);
    free(pos);
    free(cand);
    sched_orders_free(&o);
    return st;
}
