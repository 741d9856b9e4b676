/* sched_interleaved.c — interleaved 1F1B (Megatron-LM style): each rank
 * holds v model chunks, stage s = chunk * S + rank, so a micro-batch visits
 * every rank v times and the warm-up bubble shrinks by about v.
 *
 * Per rank, forwards run in groups of S micro-batches: for each group, chunk
 * 0 of the group's micro-batches, then chunk 1, ...; backwards in the same
 * groups with the chunks reversed. Rank r first runs (S - r - 1) * 2 +
 * (v - 1) * S warm-up forwards (all of them if fewer), then alternates one
 * forward and one backward, then drains the backwards. With v = 1 this is
 * exactly 1F1B.
 *
 * When S does not divide M, the order is built for M rounded up to whole
 * groups and the units of the missing micro-batches are then dropped. The
 * full schedule is deadlock free and every dependency of a kept unit is on a
 * kept unit (same micro-batch), so the filtered order is deadlock free too —
 * unlike the naive short last group, which can deadlock.
 *
 * Memory throttling as in 1F1B: fewer forwards before a backward while the
 * rank would exceed the limit (never holding back the backward's own
 * forward). The in-flight cap (max_in_flight) counts chunk-stage forwards not
 * yet backwarded. A throttled order that can no longer complete is reported
 * as infeasible rather than guessed around. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "sched/sched_internal.h" /* defines: sched_orders_*, sched_emit_timed */
#include "util/util.h"            /* defines: dyn_calloc */

/* The u-th forward (bwd = 0) or backward (bwd = 1) unit of rank r in the
 * full-group order (groups of exactly S micro-batches). */
static void unit_at(int32_t u, int bwd, int32_t r, int32_t S, int32_t v, int32_t *mb, int32_t *stage)
{
    int32_t g = u / (S * v);
    int32_t in_group = u - g * S * v;
    int32_t chunk = in_group / S;
    *mb = g * S + in_group % S;
    if (bwd) chunk = v - 1 - chunk;
    *stage = chunk * S + r;
}

/* One build: its inputs, sizes and per-rank scratch. */
typedef struct il_build {
    const dyn_stage_costs *c;
    const dyn_sched_options *opt;
    int32_t S, v, ns, M;     /* ranks, chunks, stages, micro-batches */
    int32_t U, Ufull;        /* units of each direction per rank: real, and with M rounded up to groups */
    double limit;            /* MB */
    sched_unit *fl, *bl;     /* [U] rank's real forwards, backwards in order */
    int32_t *target;         /* [U] real forwards before each real backward, unthrottled */
    int32_t *real_before;    /* [Ufull + 1] real forwards among the first u */
    int32_t *fpos;           /* [M * ns] a forward's place in fl */
    int throttled;           /* memory held a forward back somewhere */
} il_build;

/* Rank r's real units in order, and for each real backward how many real
 * forwards precede it in the full (unthrottled) schedule. */
static void il_rank_units(il_build *b, int32_t r)
{
    int32_t S = b->S, v = b->v, M = b->M, Ufull = b->Ufull;
    int64_t warm = (int64_t)(S - r - 1) * 2 + (int64_t)(v - 1) * S;
    if (b->opt->max_in_flight > 0 && warm > b->opt->max_in_flight - 1) warm = b->opt->max_in_flight - 1;
    int32_t nf = 0, nbk = 0;
    for (int32_t u = 0; u < Ufull; u++) {
        int32_t mb, stg;
        unit_at(u, 0, r, S, v, &mb, &stg);
        b->real_before[u + 1] = b->real_before[u] + (mb < M);
        if (mb < M) {
            b->fpos[(size_t)mb * b->ns + stg] = nf;
            b->fl[nf++] = (sched_unit){UNIT_F, mb, stg};
        }
    }
    for (int32_t u = 0; u < Ufull; u++) {
        int32_t mb, stg;
        unit_at(u, 1, r, S, v, &mb, &stg);
        if (mb >= M) continue;
        int64_t fw = warm + 1 + u;
        if (fw > Ufull) fw = Ufull;
        b->target[nbk] = b->real_before[fw];
        b->bl[nbk++] = (sched_unit){UNIT_B, mb, stg};
    }
}

/* Rank r's order into o: before each backward, forwards up to its target
 * while memory allows (its own forward whatever memory says, or the
 * infeasible error naming what it needs). */
static dyn_status il_rank_order(il_build *b, sched_orders *o, int32_t r, dyn_error *err)
{
    const dyn_stage_costs *c = b->c;
    const int32_t U = b->U, ns = b->ns;
    double base = sched_rank_states(c, r, b->S), held = 0, limit = b->limit;
    int32_t f = 0; /* forward units done */
    dyn_status st = DYN_OK;
    for (int32_t j = 0; j < U && st == DYN_OK; j++) {
        const sched_unit *bk = &b->bl[j];
        while (f < U) {
            /* the backward's own forward runs first, whatever memory says */
            int needed = b->fpos[(size_t)bk->mb * ns + bk->stage] >= f;
            if (!needed && f >= b->target[j]) break;
            const sched_unit *x = &b->fl[f];
            double stored = sched_stored(c, x->mb, x->stage);
            double need_f = base + held + stored + sched_peak(c, x->mb, x->stage);
            double need_b = base + held + stored + sched_peak(c, bk->mb, bk->stage);
            double need = need_f > need_b ? need_f : need_b;
            if (need > limit) {
                if (!needed) {
                    b->throttled = 1;
                    break;
                }
                return dyn_error_set(err, DYN_ERR_INFEASIBLE,
                                     "interleaved: stage %d (rank %d) cannot run micro-batch %d: "
                                     "needs %.1f MB (states %.1f + stored %.1f + peak %.1f) over "
                                     "the %.1f MB limit",
                                     x->stage, r, x->mb, need, base, held + stored,
                                     need - base - held - stored, limit);
            }
            if ((st = sched_orders_push(o, r, UNIT_F, x->mb, x->stage, err)) != DYN_OK) return st;
            held += stored;
            f++;
        }
        st = sched_orders_push(o, r, UNIT_B, bk->mb, bk->stage, err);
        held -= sched_stored(c, bk->mb, bk->stage);
    }
    return st;
}

dyn_status sched_build_interleaved(const dyn_stage_costs *c, const dyn_mb_shape *shapes,
                                   const dyn_sched_options *opt, dyn_exec_plan *out,
                                   dyn_error *err)
{
    dyn_status st = sched_check_inputs(c, opt, 0, err);
    if (st != DYN_OK) return st;
    il_build b = {.c = c, .opt = opt, .S = opt->n_ranks, .v = opt->chunks, .M = c->n_microbatches};
    b.ns = b.S * b.v;
    int32_t Mfull = (b.M + b.S - 1) / b.S * b.S;
    b.U = b.M * b.v;
    b.Ufull = Mfull * b.v;
    b.limit = opt->memory_limit_mb > 0 ? opt->memory_limit_mb : INFINITY;
    sched_orders o;
    st = sched_orders_init(&o, b.S, b.ns, b.M, 2, err);
    if (st != DYN_OK) return st;
    b.fl = dyn_calloc((size_t)b.U, sizeof(sched_unit), "interleaved", err);
    b.bl = dyn_calloc((size_t)b.U, sizeof(sched_unit), "interleaved", err);
    b.target = dyn_calloc((size_t)b.U, sizeof(int32_t), "interleaved", err);
    b.real_before = dyn_calloc((size_t)b.Ufull + 1, sizeof(int32_t), "interleaved", err);
    b.fpos = dyn_calloc((size_t)b.M * b.ns, sizeof(int32_t), "interleaved", err);
    if (!b.fl || !b.bl || !b.target || !b.real_before || !b.fpos) st = DYN_ERR_NOMEM;
    for (int32_t r = 0; r < b.S && st == DYN_OK; r++) {
        il_rank_units(&b, r);
        st = il_rank_order(&b, &o, r, err);
    }
    if (st == DYN_OK) {
        st = sched_emit_timed(&o, c, shapes, opt, DYN_SCHEDULE_INTERLEAVED, out, err);
        if (st == DYN_ERR_INTERNAL && b.throttled) {
            char why[DYN_ERROR_MSG_MAX];
            snprintf(why, sizeof why, "%s", err ? err->msg : "");
            st = dyn_error_set(err, DYN_ERR_INFEASIBLE,
                               "interleaved: no deadlock-free order fits the %.1f MB limit (%s)",
                               b.limit, why);
        }
    }
    free(b.fl);
    free(b.bl);
    free(b.target);
    free(b.real_before);
    free(b.fpos);
    sched_orders_free(&o);
    return st;
}
