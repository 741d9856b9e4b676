/* sched_1f1b.c — 1F1B (PipeDream-flush): rank r runs S-1-r warm-up
 * forwards, then alternates one forward and one backward, then drains the
 * remaining backwards. One stage per rank (chunks = 1).
 *
 * Written as "before BACKWARD j, rank r has run f_r(j) forwards": plain 1F1B
 * is f_r(j) = min(M, j + S - r). Memory throttling lowers f_r(j) (fewer
 * micro-batches in flight) while a forward would push the rank over the
 * limit; f_r(j) >= j + 1 always (forward j precedes backward j), and if even
 * that does not fit the schedule is infeasible. Deadlock freedom needs
 * f_r(j) <= f_{r-1}(j): rank r must never wait for a forward its upstream
 * rank only runs after waiting for rank r's backward. Plain 1F1B has it
 * (S - r decreases with r); throttling keeps it by capping each rank at its
 * upstream rank's counts.
 *
 * sched_order_1f1b also serves the zero-bubble generator (sched_zb.c), which
 * uses the 1F1B order with each BACKWARD split into B and W back to back as
 * one of its candidates. */
#include <math.h>
#include <stdlib.h>

#include "sched/sched_internal.h" /* defines: sched_orders_*, sched_emit_timed */
#include "util/util.h"            /* defines: dyn_calloc */

/* One sched_order_1f1b call: its inputs and the forward counts of the
 * rank above (fprev[j] = f_{r-1}(j)) and of this rank (fcur). */
typedef struct f1b_build {
    const dyn_stage_costs *c;
    const dyn_sched_options *opt;
    int split;
    const char *who;
    double limit; /* MB */
    int32_t *fprev, *fcur;
} f1b_build;

/* f_r(j): plain 1F1B's count, capped by the in-flight cap and the rank
 * above's count, within [j + 1, M]. */
static int64_t f1b_target(const f1b_build *b, int32_t r, int32_t j)
{
    int32_t S = b->opt->n_ranks, M = b->c->n_microbatches;
    int64_t target = (int64_t)j + S - r;
    if (b->opt->max_in_flight > 0 && target > (int64_t)j + b->opt->max_in_flight)
        target = (int64_t)j + b->opt->max_in_flight;
    if (r > 0 && target > b->fprev[j]) target = b->fprev[j];
    if (target > M) target = M;
    if (target < j + 1) target = j + 1;
    return target;
}

/* Rank r's order into o: before each backward j, forwards up to
 * f1b_target while memory allows (forward j itself, or the infeasible
 * error). */
static dyn_status f1b_rank(f1b_build *b, sched_orders *o, int32_t r, dyn_error *err)
{
    const dyn_stage_costs *c = b->c;
    int32_t S = b->opt->n_ranks, M = c->n_microbatches;
    double base = sched_rank_states(c, r, S), held = 0;
    int32_t f = 0;
    dyn_status st = DYN_OK;
    for (int32_t j = 0; j < M && st == DYN_OK; j++) {
        int64_t target = f1b_target(b, r, j);
        while (f < target) {
            double stored = sched_stored(c, f, r);
            double need_f = base + held + stored + sched_peak(c, f, r);
            double need_b = base + held + stored + sched_peak(c, j, r);
            double need = need_f > need_b ? need_f : need_b;
            if (need > b->limit) {
                if (f > j) break; /* throttle: backward j first */
                return dyn_error_set(err, DYN_ERR_INFEASIBLE,
                                     "%s: stage %d (rank %d) cannot run micro-batch %d even "
                                     "alone: needs %.1f MB (states %.1f + stored %.1f + peak "
                                     "%.1f) over the %.1f MB limit",
                                     b->who, r, r, j, need, base, stored, need - base - stored, b->limit);
            }
            if ((st = sched_orders_push(o, r, UNIT_F, f, r, err)) != DYN_OK) return st;
            held += stored;
            f++;
        }
        b->fcur[j] = f;
        if (b->split) {
            /* B then W at once: the stored activations go exactly when
             * 1F1B's BACKWARD would free them, so memory is the same. */
            st = sched_orders_push(o, r, UNIT_BI, j, r, err);
            if (st == DYN_OK) st = sched_orders_push(o, r, UNIT_BW, j, r, err);
        } else {
            st = sched_orders_push(o, r, UNIT_B, j, r, err);
        }
        held -= sched_stored(c, j, r);
    }
    return st;
}

dyn_status sched_order_1f1b(const dyn_stage_costs *c, const dyn_sched_options *opt, int split,
                            const char *who, sched_orders *o, dyn_error *err)
{
    int32_t S = opt->n_ranks, M = c->n_microbatches;
    f1b_build b = {c, opt, split, who, opt->memory_limit_mb > 0 ? opt->memory_limit_mb : INFINITY, NULL, NULL};
    dyn_status st = sched_orders_init(o, S, S, M, split ? 3 : 2, err);
    if (st != DYN_OK) return st;
    b.fprev = dyn_calloc((size_t)M, sizeof(int32_t), "1f1b counts", err);
    b.fcur = dyn_calloc((size_t)M, sizeof(int32_t), "1f1b counts", err);
    if (b.fprev == NULL || b.fcur == NULL) st = DYN_ERR_NOMEM;
    for (int32_t r = 0; r < S && st == DYN_OK; r++) {
        st = f1b_rank(&b, o, r, err);
        int32_t *t = b.fprev;
        b.fprev = b.fcur;
        b.fcur = t;
    }
    free(b.fprev);
    free(b.fcur);
    if (st != DYN_OK) sched_orders_free(o);
    return st;
}

dyn_status sched_build_1f1b(const dyn_stage_costs *c, const dyn_mb_shape *shapes,
                            const dyn_sched_options *opt, dyn_exec_plan *out, dyn_error *err)
{
    dyn_status st = sched_check_inputs(c, opt, 0, err);
    if (st != DYN_OK) return st;
    if (opt->chunks != 1)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "1f1b runs one stage per rank (chunks = 1, got %d); use interleaved",
                             opt->chunks);
    sched_orders o;
    st = sched_order_1f1b(c, opt, 0, "1f1b", &o, err);
    if (st != DYN_OK) return st;
    st = sched_emit_timed(&o, c, shapes, opt, DYN_SCHEDULE_1F1B, out, err);
    sched_orders_free(&o);
    return st;
}
