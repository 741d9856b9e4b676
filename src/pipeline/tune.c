/*
 * tune.c — the baselines' size knob, tuned: padding's samples per
 * micro-batch, packing's rows per micro-batch, token-based batching's tokens
 * per micro-batch, chosen by simulated iteration time on the run's own
 * global batches (include/dynapipe/pipeline.h, dyn_pipeline_tune); and the
 * layers-to-stages split, balanced for the micro-batches those batches are
 * planned into (dyn_pipeline_tune_split, at the end of the file; for
 * dynapipe also the splits its candidate baselines' tuning would choose).
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

#include "pipeline/pipeline_internal.h" /* defines: pipe_knob_seq_*, pipe_candidate_baseline */

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
 * micro-batch, each under its replica's recompute mode. *single (if not
 * NULL): every batch was planned as one micro-batch. */
static dyn_status split_round(const dyn_cost_model *cm, const dyn_plan_options *o,
                              const dyn_pipeline_options *popt, const dyn_sample *const *batches,
                              const int32_t *batch_n, int32_t n_batches, double *ms, int *infeasible,
                              double weight[DYN_LAYER_KIND_COUNT], int *single, dyn_error *err)
{
    *ms = 0.0;
    *infeasible = 0;
    if (single) *single = 1;
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
        if (single && res.batch.n_microbatches > 1) *single = 0;
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

/* The splits already simulated for the method being tuned, so that each
 * distinct split is simulated once (beyond SPLIT_SEEN_MAX a split may be
 * simulated again: slower, never wrong). */
#define SPLIT_SEEN_MAX 64
typedef struct split_seen {
    int32_t n;
    double w[SPLIT_SEEN_MAX][DYN_LAYER_KIND_COUNT];
} split_seen;

/* Record w in seen (NULL: nothing recorded). */
static void seen_add(split_seen *seen, const double *w)
{
    if (seen == NULL || seen->n >= SPLIT_SEEN_MAX) return;
    memcpy(seen->w[seen->n++], w, sizeof seen->w[0]);
}

/* *has: w gives the same split as one in seen, for o's stages. */
static dyn_status seen_has(const dyn_cost_model *cm, const dyn_plan_options *o, const split_seen *seen,
                           const double *w, int *has, dyn_error *err)
{
    *has = 0;
    for (int32_t i = 0; i < seen->n && !*has; i++) {
        dyn_status st = same_split(cm, o, seen->w[i], w, has, err);
        if (st != DYN_OK) return st;
    }
    return DYN_OK;
}

/* opt's own rounds (the comment above split_round): out as the public
 * function's (source: opt's method); *single: every batch was one
 * micro-batch with opt's split; every split simulated goes into seen. */
static dyn_status own_rounds(const dyn_cost_model *cm, const dyn_plan_options *opt,
                             const dyn_pipeline_options *pipe_opt, const dyn_sample *const *batches,
                             const int32_t *batch_n, int32_t n_batches, dyn_split_tune_result *out,
                             split_seen *seen, int *single, dyn_error *err)
{
    memset(out, 0, sizeof *out);
    out->tuned_ms = INFINITY;
    out->source = opt->method;
    memcpy(out->weight, opt->split_weight, sizeof out->weight);
    double w[DYN_LAYER_KIND_COUNT], next[DYN_LAYER_KIND_COUNT];
    int infeasible;
    dyn_status st =
        split_round(cm, opt, pipe_opt, batches, batch_n, n_batches, &out->base_ms, &infeasible, w, single, err);
    if (st != DYN_OK) return st;
    if (infeasible) return DYN_ERR_INFEASIBLE; /* err: the batch and why */
    seen_add(seen, opt->split_weight);
    dyn_plan_options o = *opt;
    for (int32_t r = 0; r < DYN_SPLIT_TUNE_ROUNDS; r++) {
        int same;
        if ((st = same_split(cm, &o, o.split_weight, w, &same, err)) != DYN_OK) return st;
        if (same) break; /* the same split plans the same micro-batches */
        memcpy(o.split_weight, w, sizeof w);
        seen_add(seen, w);
        double ms;
        if ((st = split_round(cm, &o, pipe_opt, batches, batch_n, n_batches, &ms, &infeasible, next, NULL, err)) !=
            DYN_OK)
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

/* ---- dynapipe under its candidates' splits ------------------------------------
 * Why: dyn_pipeline_plan keeps dynapipe's plan no slower than each
 * candidate baseline's at every knob value, but under one split: the one
 * tuned for dynapipe's own micro-batches. A baseline's run tunes the split
 * for its own micro-batches, and e.g. document-masked rows of 4 under the
 * split balanced for them can beat dynapipe under dynapipe's split (gpt-6.7b
 * on 8 x 4 A100s at max length 512: 0.98x). Under a baseline's split,
 * dynapipe's candidates include that baseline at every knob value, so
 * dynapipe simulated under it is no slower than the baseline there.
 *
 * The splits a baseline's tuning can end with: its own rounds at each value
 * of the knob sequence (an explicit knob, as scripts/cluster_sim.sh sweeps
 * it), and the CLI's order (src/cli/plan_args.c): the tuned knob, its split,
 * the knob tuned again under that split. Each such split comes with the
 * baseline's mean iteration under it; those rounds are single-candidate
 * plans, cheap beside dynapipe's. dynapipe is then simulated under a split
 * only if the baseline beat dynapipe's best so far there (most promising
 * first), each distinct split once: that is what keeps it never behind, at
 * a few dynapipe rounds at most. */

/* A baseline's split and its mean iteration under it (ms). */
typedef struct split_cand {
    double w[DYN_LAYER_KIND_COUNT];
    double ms;
    dyn_batching src;
    int64_t knob;
} split_cand;

#define SPLIT_CAND_MAX (PIPE_N_CANDIDATE_BASELINES * DYN_TUNE_MAX_TRIED)

/* dynapipe (opt) under candidate c's split: simulated unless seen, kept in
 * out if fastest. */
static dyn_status try_split(const dyn_cost_model *cm, const dyn_plan_options *opt,
                            const dyn_pipeline_options *pipe_opt, const dyn_sample *const *batches,
                            const int32_t *batch_n, int32_t n_batches, const split_cand *c,
                            dyn_split_tune_result *out, split_seen *seen, dyn_error *err)
{
    int has, infeasible;
    dyn_status st = seen_has(cm, opt, seen, c->w, &has, err);
    if (st != DYN_OK || has) return st;
    seen_add(seen, c->w);
    dyn_plan_options o = *opt;
    memcpy(o.split_weight, c->w, sizeof o.split_weight);
    double ms, unused[DYN_LAYER_KIND_COUNT];
    st = split_round(cm, &o, pipe_opt, batches, batch_n, n_batches, &ms, &infeasible, unused, NULL, err);
    if (st != DYN_OK) return st;
    out->n_candidate_splits++;
    if (ms < out->tuned_ms) {
        out->tuned_ms = ms;
        if (ms < out->base_ms) {
            out->kept = 1;
            memcpy(out->weight, c->w, sizeof out->weight);
            out->source = c->src;
            out->source_knob = c->knob;
        }
    }
    return DYN_OK;
}

/* The CLI's tuning of baseline bo (knob 0): if the split tuned at its knob
 * (found among cand[0..n), made by the same rounds) moves, the knob tuned
 * again under it; that split's candidate gets the re-tuned mean if lower. */
static dyn_status cli_retune(const dyn_cost_model *cm, dyn_plan_options bo, const dyn_pipeline_options *pipe_opt,
                             const dyn_sample *const *batches, const int32_t *batch_n, int32_t n_batches,
                             split_cand *cand, int32_t n, dyn_error *err)
{
    dyn_tune_result tr;
    dyn_status st = dyn_pipeline_tune(cm, &bo, pipe_opt, batches, batch_n, n_batches, &tr, err);
    if (st != DYN_OK) return st == DYN_ERR_INFEASIBLE ? DYN_OK : st;
    split_cand *c = NULL;
    for (int32_t i = 0; i < n && c == NULL; i++)
        if (cand[i].src == bo.method && cand[i].knob == tr.value) c = &cand[i];
    if (c == NULL) return DYN_OK; /* its split is opt's own: already dynapipe's base */
    memcpy(bo.split_weight, c->w, sizeof bo.split_weight);
    if ((st = dyn_pipeline_tune(cm, &bo, pipe_opt, batches, batch_n, n_batches, &tr, err)) != DYN_OK)
        return st == DYN_ERR_INFEASIBLE ? DYN_OK : st;
    dyn_tune_knob_set(&bo, tr.value);
    double ms, unused[DYN_LAYER_KIND_COUNT];
    int infeasible;
    st = split_round(cm, &bo, pipe_opt, batches, batch_n, n_batches, &ms, &infeasible, unused, NULL, err);
    if (st == DYN_OK && ms < c->ms) c->ms = ms;
    return st;
}

/* cand[0..*n) += baseline bo's kept splits at each value of its knob
 * sequence (fit: the sequence's old default), with their means. */
static dyn_status baseline_cands(const dyn_cost_model *cm, dyn_plan_options bo, const dyn_pipeline_options *pipe_opt,
                                 const dyn_sample *const *batches, const int32_t *batch_n, int32_t n_batches,
                                 int32_t fit, split_cand *cand, int32_t *n, dyn_error *err)
{
    pipe_knob_seq seq;
    pipe_knob_seq_init(&seq, cm, &bo, fit);
    dyn_status st = DYN_OK;
    for (int64_t v; st == DYN_OK && *n < SPLIT_CAND_MAX && (v = pipe_knob_seq_next(&seq)) != 0;) {
        dyn_tune_knob_set(&bo, v);
        dyn_split_tune_result t;
        int single = 0;
        st = own_rounds(cm, &bo, pipe_opt, batches, batch_n, n_batches, &t, NULL, &single, err);
        if (st == DYN_ERR_INFEASIBLE) return DYN_OK; /* larger values only need more memory */
        if (st == DYN_OK && t.kept) {
            split_cand *c = &cand[(*n)++];
            memcpy(c->w, t.weight, sizeof c->w);
            c->ms = t.tuned_ms;
            c->src = bo.method;
            c->knob = v;
        }
        if (single) break; /* larger values plan the same */
    }
    return st;
}

/* The loop over the candidate baselines, then dynapipe under the splits
 * that beat it, fastest baseline first. */
static dyn_status candidate_splits(const dyn_cost_model *cm, const dyn_plan_options *opt,
                                   const dyn_pipeline_options *pipe_opt, const dyn_sample *const *batches,
                                   const int32_t *batch_n, int32_t n_batches, dyn_split_tune_result *out,
                                   split_seen *seen, dyn_error *err)
{
    dyn_planner *pl = dyn_planner_create(cm, opt, err); /* the knob sequences' old default, as the pipeline's */
    if (pl == NULL) return err->code;
    int32_t fit = 0, n = 0;
    dyn_status st = dyn_planner_fit_rows(pl, &fit, err);
    dyn_planner_free(pl);
    split_cand *cand = st == DYN_OK ? malloc(SPLIT_CAND_MAX * sizeof *cand) : NULL;
    if (st == DYN_OK && cand == NULL) st = dyn_error_set(err, DYN_ERR_NOMEM, "stage split: out of memory");
    for (int b = 0; b < PIPE_N_CANDIDATE_BASELINES && st == DYN_OK; b++) {
        dyn_plan_options bo = *opt;
        bo.method = pipe_candidate_baseline(b);
        int32_t first = n;
        st = baseline_cands(cm, bo, pipe_opt, batches, batch_n, n_batches, fit, cand, &n, err);
        dyn_tune_knob_set(&bo, 0);
        if (st == DYN_OK) st = cli_retune(cm, bo, pipe_opt, batches, batch_n, n_batches, cand + first, n - first, err);
    }
    for (int32_t i = 1; i < n; i++) /* insertion sort by ms, stable: deterministic */
        for (int32_t k = i; k > 0 && cand[k].ms < cand[k - 1].ms; k--) {
            split_cand x = cand[k];
            cand[k] = cand[k - 1];
            cand[k - 1] = x;
        }
    for (int32_t i = 0; i < n && st == DYN_OK; i++) {
        double best = out->tuned_ms < out->base_ms ? out->tuned_ms : out->base_ms;
        if (cand[i].ms < best) st = try_split(cm, opt, pipe_opt, batches, batch_n, n_batches, &cand[i], out, seen, err);
    }
    free(cand);
    return st;
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
    out->source = opt->method;
    memcpy(out->weight, opt->split_weight, sizeof out->weight);
    if (n_batches < 1) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "stage split: no global batches");
    split_seen *seen = malloc(sizeof *seen);
    if (seen == NULL) return dyn_error_set(err, DYN_ERR_NOMEM, "stage split: out of memory");
    seen->n = 0;
    int single;
    dyn_status st = own_rounds(cm, opt, pipe_opt, batches, batch_n, n_batches, out, seen, &single, err);
    if (st == DYN_OK && opt->method == DYN_BATCH_DYNAPIPE && opt->enable_packing)
        st = candidate_splits(cm, opt, pipe_opt, batches, batch_n, n_batches, out, seen, err);
    free(seen);
    return st;
}
