/*
 * tune.c — the baselines' size knob, tuned: padding's samples per
 * micro-batch, packing's rows per micro-batch, token-based batching's tokens
 * per micro-batch, chosen by simulated iteration time on the run's own
 * global batches (include/dynapipe/pipeline.h, dyn_pipeline_tune); and the
 * layers-to-stages split, balanced for the micro-batches those batches are
 * planned into (dyn_pipeline_tune_split, at the end of the file).
 *
 * Why: "as many as fit the memory limit" gives a baseline a few huge
 * micro-batches and a large pipeline bubble, so comparing dynapipe with it
 * overstates dynapipe's lead. A user would try a few values and keep the
 * fastest; this does that, under the same schedule choice as dynapipe (the
 * pipeline's schedule, normally auto: schedule x order x recompute) and the
 * same memory limit.
 *
 * Candidates are the powers of two from the smallest sensible value upwards
 * and the old default (the most that fit), stopping at the first value some
 * batch cannot plan (larger micro-batches only need more memory) or once
 * every batch is a single micro-batch (larger values plan the same). A value
 * that leaves a data-parallel replica without work is only chosen when no
 * value gives every replica work.
 */
#include "dynapipe/pipeline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline_internal.h" /* defines: pipe_knob_seq_* */

const char *dyn_tune_knob_name(dyn_batching m)
{
    switch (m) {
    case DYN_BATCH_PADDING: return "mb-samples";
    case DYN_BATCH_PACKING:
    case DYN_BATCH_PACKING_DOCMASK: return "pack-rows";
    case DYN_BATCH_TOKEN: return "mb-tokens";
    default: return NULL;
    }
}

int64_t dyn_tune_knob_get(const dyn_plan_options *opt)
{
    switch (opt->method) {
    case DYN_BATCH_PADDING: return opt->mb_samples;
    case DYN_BATCH_PACKING:
    case DYN_BATCH_PACKING_DOCMASK: return opt->pack_rows;
    case DYN_BATCH_TOKEN: return opt->mb_tokens;
    default: return 0;
    }
}

void dyn_tune_knob_set(dyn_plan_options *opt, int64_t value)
{
    switch (opt->method) {
    case DYN_BATCH_PADDING: opt->mb_samples = (int32_t)value; break;
    case DYN_BATCH_PACKING:
    case DYN_BATCH_PACKING_DOCMASK: opt->pack_rows = (int32_t)value; break;
    case DYN_BATCH_TOKEN: opt->mb_tokens = value; break;
    default: break;
    }
}

/* Score one knob value (err is not NULL here): mean over the batches of the slowest replica's
 * simulated makespan (ms); INFINITY when some batch cannot be planned under
 * the memory limit. *busy: every replica had work on every batch. *single:
 * every batch was one micro-batch. */
static dyn_status score_value(const dyn_cost_model *cm, const dyn_plan_options *base,
                              const dyn_pipeline_options *popt, int64_t value,
                              const dyn_sample *const *batches, const int32_t *batch_n,
                              int32_t n_batches, double *ms, int *busy, int *single, dyn_error *err)
{
    dyn_plan_options o = *base;
    dyn_tune_knob_set(&o, value);
    *ms = 0.0;
    *busy = 1;
    *single = 1;
    dyn_planner *pl = dyn_planner_create(cm, &o, err);
    if (pl == NULL) return err->code;
    dyn_pipeline *pp = dyn_pipeline_create(pl, popt, err);
    if (pp == NULL) {
        dyn_planner_free(pl);
        return err->code;
    }
    dyn_status st = DYN_OK;
    for (int32_t b = 0; b < n_batches; b++) {
        dyn_pipeline_result res;
        st = dyn_pipeline_plan(pp, batches[b], batch_n[b], &res, err);
        if (st == DYN_ERR_INFEASIBLE) {
            *ms = INFINITY;
            st = DYN_OK;
            break;
        }
        if (st != DYN_OK) break;
        double worst = 0.0;
        for (int32_t r = 0; r < res.n_replicas; r++) {
            if (res.replicas[r].n_microbatches == 0) *busy = 0;
            if (res.replicas[r].makespan_ms > worst) worst = res.replicas[r].makespan_ms;
        }
        if (res.batch.n_microbatches > 1) *single = 0;
        *ms += worst / n_batches;
        dyn_pipeline_result_free(&res);
    }
    dyn_pipeline_free(pp);
    dyn_planner_free(pl);
    return st;
}

dyn_status dyn_pipeline_tune(const dyn_cost_model *cm, const dyn_plan_options *opt,
                             const dyn_pipeline_options *pipe_opt, const dyn_sample *const *batches,
                             const int32_t *batch_n, int32_t n_batches, dyn_tune_result *out,
                             dyn_error *err)
{
    /* err may be NULL (common.h), but the failure code of a call below is
     * read back from it: keep a record of our own then. */
    dyn_error local;
    if (err == NULL) err = &local;
    memset(out, 0, sizeof *out);
    out->iter_ms = INFINITY;
    if (dyn_tune_knob_name(opt->method) == NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "tune: %s has no size knob",
                             dyn_batching_name(opt->method));
    if (n_batches < 1) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "tune: no global batches");
    /* Old default, the most rows of max_seqlen that fit (0: not one). */
    dyn_plan_options o = *opt;
    dyn_tune_knob_set(&o, 0);
    dyn_planner *pl = dyn_planner_create(cm, &o, err);
    if (pl == NULL) return err->code;
    int32_t fit = 0;
    dyn_status st = dyn_planner_fit_rows(pl, &fit, err);
    dyn_planner_free(pl);
    if (st != DYN_OK) return st;
    pipe_knob_seq seq;
    pipe_knob_seq_init(&seq, cm, opt, fit);
    int best = -1, best_busy = -1;
    while (out->n_tried < DYN_TUNE_MAX_TRIED) {
        int64_t cand = pipe_knob_seq_next(&seq);
        if (cand == 0) break;
        double ms;
        int busy, single;
        st = score_value(cm, opt, pipe_opt, cand, batches, batch_n, n_batches, &ms, &busy, &single, err);
        if (st != DYN_OK) return st;
        int32_t k = out->n_tried++;
        out->tried[k] = cand;
        out->tried_ms[k] = ms;
        if (isfinite(ms)) {
            /* Prefer values that give every replica work, then the fastest;
             * on ties the smaller value (tried first). */
            if (best < 0 || (busy && !best_busy) || (busy == best_busy && ms < out->tried_ms[best])) {
                best = k;
                best_busy = busy;
            }
        }
        if (!isfinite(ms) || single) break;
    }
    if (best < 0)
        return dyn_error_set(err, DYN_ERR_INFEASIBLE,
                             "%s: no --%s value plans every batch within the memory limit "
                             "(tried down to %lld)",
                             dyn_batching_name(opt->method), dyn_tune_knob_name(opt->method),
                             (long long)seq.first);
    out->value = out->tried[best];
    out->iter_ms = out->tried_ms[best];
    out->all_replicas_busy = best_busy;
    return DYN_OK;
}

/* ---- the layer split (dyn_pipeline_tune_split) ------------------------------
 * Why the micro-batches' own weights: a split balanced for one max_seqlen
 * row weighs T5's decoder blocks as if every target were max_seqlen long;
 * with the short targets of real data the decoder stages then idle. The
 * pipeline's steady state is paced by the stage with the most work summed
 * over the micro-batches it runs, so each layer kind is weighed by its
 * fwd + bwd time summed over the micro-batches a method really plans
 * (methods differ: packing's decoder rows are longer than the DP's). The
 * weights depend on the split only through the micro-batches planned
 * under it, so one more round from the new split's micro-batches settles
 * it; the simulation decides whether it is kept. */

/* One round (err is not NULL): every batch planned with o's split. *ms:
 * mean simulated iteration time, ms; *infeasible: some batch could not be
 * planned under the memory limit (err says which; *ms is INFINITY).
 * weight: the layer kinds' fwd + bwd summed over every planned
 * micro-batch, each under its replica's recompute mode. */
static dyn_status split_round(const dyn_cost_model *cm, const dyn_plan_options *o,
                              const dyn_pipeline_options *popt, const dyn_sample *const *batches,
                              const int32_t *batch_n, int32_t n_batches, double *ms, int *infeasible,
                              double weight[DYN_LAYER_KIND_COUNT], dyn_error *err)
{
    *ms = 0.0;
    *infeasible = 0;
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) weight[k] = 0.0;
    dyn_planner *pl = dyn_planner_create(cm, o, err);
    if (pl == NULL) return err->code;
    dyn_pipeline *pp = dyn_pipeline_create(pl, popt, err);
    if (pp == NULL) {
        dyn_planner_free(pl);
        return err->code;
    }
    dyn_status st = DYN_OK;
    for (int32_t b = 0; b < n_batches && st == DYN_OK; b++) {
        dyn_pipeline_result res;
        st = dyn_pipeline_plan(pp, batches[b], batch_n[b], &res, err);
        if (st == DYN_ERR_INFEASIBLE) {
            *ms = INFINITY;
            *infeasible = 1;
            st = DYN_OK;
            break;
        }
        if (st != DYN_OK) break;
        *ms += res.iteration_ms / n_batches;
        for (int32_t i = 0; i < res.batch.n_microbatches && st == DYN_OK; i++) {
            const dyn_plan_microbatch *mb = &res.batch.mbs[i];
            double w[DYN_LAYER_KIND_COUNT];
            st = dyn_stage_weights_of_shapes(cm, &mb->shape, 1, res.replicas[mb->replica].recompute, w, err);
            for (int k = 0; k < DYN_LAYER_KIND_COUNT && st == DYN_OK; k++) weight[k] += w[k];
        }
        dyn_pipeline_result_free(&res);
    }
    dyn_pipeline_free(pp);
    dyn_planner_free(pl);
    return st;
}

/* *same: weights a and b give the same layers per stage for S stages (and
 * S * v, when the model has that many layers). */
static dyn_status same_split(const dyn_cost_model *cm, const dyn_plan_options *o, const double *a, const double *b,
                             int *same, dyn_error *err)
{
    *same = 1;
    int32_t counts[2] = {o->stages, o->stages * o->chunks};
    for (int c = 0; c < (o->chunks > 1 ? 2 : 1) && *same; c++) {
        dyn_stage_assignment x, y;
        dyn_status st = dyn_stage_assign_run(cm, counts[c], a, &x, err);
        if (st != DYN_OK) return c == 0 ? st : DYN_OK; /* too many stages for chunks: that split is unused */
        if ((st = dyn_stage_assign_run(cm, counts[c], b, &y, err)) != DYN_OK) {
            dyn_stage_assignment_free(&x);
            return st;
        }
        *same = memcmp(x.stage_first, y.stage_first, ((size_t)counts[c] + 1) * sizeof(int32_t)) == 0;
        dyn_stage_assignment_free(&x);
        dyn_stage_assignment_free(&y);
    }
    return DYN_OK;
}

dyn_status dyn_pipeline_tune_split(const dyn_cost_model *cm, const dyn_plan_options *opt,
                                   const dyn_pipeline_options *pipe_opt, const dyn_sample *const *batches,
                                   const int32_t *batch_n, int32_t n_batches, dyn_split_tune_result *out,
                                   dyn_error *err)
{
    dyn_error local; /* as dyn_pipeline_tune: failure codes are read back from err */
    if (err == NULL) err = &local;
    memset(out, 0, sizeof *out);
    out->tuned_ms = INFINITY;
    memcpy(out->weight, opt->split_weight, sizeof out->weight);
    if (n_batches < 1) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "stage split: no global batches");
    double w[DYN_LAYER_KIND_COUNT], next[DYN_LAYER_KIND_COUNT];
    int infeasible;
    dyn_status st = split_round(cm, opt, pipe_opt, batches, batch_n, n_batches, &out->base_ms, &infeasible, w, err);
    if (st != DYN_OK) return st;
    if (infeasible) return DYN_ERR_INFEASIBLE; /* err: the batch and why */
    dyn_plan_options o = *opt;
    for (int32_t r = 0; r < DYN_SPLIT_TUNE_ROUNDS; r++) {
        int same;
        if ((st = same_split(cm, &o, o.split_weight, w, &same, err)) != DYN_OK) return st;
        if (same) break; /* the same split plans the same micro-batches */
        memcpy(o.split_weight, w, sizeof w);
        double ms;
        if ((st = split_round(cm, &o, pipe_opt, batches, batch_n, n_batches, &ms, &infeasible, next, err)) != DYN_OK)
            return st;
        out->n_rounds++;
        if (ms < out->tuned_ms) {
            out->tuned_ms = ms;
            if (ms < out->base_ms) {
                out->kept = 1;
                memcpy(out->weight, w, sizeof w);
            }
        }
        if (infeasible) break; /* heavier stages than memory allows: no round from here */
        memcpy(w, next, sizeof w);
    }
    return DYN_OK;
}
