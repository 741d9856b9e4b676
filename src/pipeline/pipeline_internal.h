/* pipeline_internal.h — what the files of src/pipeline share (not a public
 * API): the whole model's work on a micro-batch, and the sequence of size-knob values a baseline is tried at, one
 * sequence for the tuner (tune.c) and for dynapipe's candidates
 * (pipeline.c), so that the candidates always include the value the tuner
 * would choose.
 *
 * The sequence: powers of two from `first` upwards (1 for padding and the
 * packings; a quarter of one max_seqlen row for token, T5 counting both
 * sides), with the old default (the most that fit: `fit` rows of max_seqlen,
 * token: fit rows' tokens) in its place among them, no value twice. The
 * caller stops at the first value a batch cannot plan (larger ones need
 * more memory) or the first that makes a batch one micro-batch (larger ones
 * plan the same). */
#ifndef DYN_PIPELINE_INTERNAL_H
#define DYN_PIPELINE_INTERNAL_H

#include "dynapipe/pipeline.h"

typedef struct pipe_knob_seq {
    int64_t first;       /* the smallest value */
    int64_t pow;         /* the next power-of-two value */
    int64_t old_default; /* the most that fit */
    int pending_default; /* old_default not returned yet */
} pipe_knob_seq;

/* The sequence of method opt->method (a baseline) of cost model cm, whose
 * planner fits `fit` rows of max_seqlen in one micro-batch (< 1: taken as
 * 1, a row may still run alone). */
static inline void pipe_knob_seq_init(pipe_knob_seq *q, const dyn_cost_model *cm, const dyn_plan_options *opt,
                                      int32_t fit)
{
    if (fit < 1) fit = 1;
    q->first = 1;
    q->old_default = fit;
    if (opt->method == DYN_BATCH_TOKEN) {
        int32_t r = opt->round_to > 1 ? opt->round_to : 1;
        int64_t unit = (int64_t)((opt->max_seqlen + r - 1) / r * r) *
                       (dyn_cost_model_config(cm)->kind == DYN_MODEL_T5 ? 2 : 1);
        q->first = unit / 4 > 0 ? unit / 4 : 1; /* below one full row: long samples alone */
        q->old_default = (int64_t)fit * unit;
    }
    q->pow = q->first;
    q->pending_default = 1;
}

/* The next value; 0 once past 2^40 (no batch needs more). */
static inline int64_t pipe_knob_seq_next(pipe_knob_seq *q)
{
    if (q->pending_default && q->old_default <= q->pow) {
        q->pending_default = 0;
        if (q->old_default < q->pow) return q->old_default;
    }
    if (q->pow > (INT64_C(1) << 40)) return 0;
    int64_t v = q->pow;
    q->pow *= 2;
    return v;
}

/* The baselines dynapipe's candidates come from (dyn_pipeline_plan), and
 * whose own tuned splits dynapipe's split tuning also tries
 * (dyn_pipeline_tune_split). Plain packing is left out: it attends across
 * documents, so it computes a different model (and the document-masked
 * rows, the same rows with less attention, are never slower in the cost
 * model). i in [0, PIPE_N_CANDIDATE_BASELINES). */
#define PIPE_N_CANDIDATE_BASELINES 3
static inline dyn_batching pipe_candidate_baseline(int i)
{
    static const dyn_batching list[PIPE_N_CANDIDATE_BASELINES] = {DYN_BATCH_PACKING_DOCMASK, DYN_BATCH_PADDING,
                                                                   DYN_BATCH_TOKEN};
    return list[i];
}

/* fwd + bwd of every layer of the model (ms) on `rows` rows of shape sh
 * (sh.rows is ignored), no recompute: a micro-batch's work summed over all
 * pipeline stages, whatever the split (bound.c). */
dyn_status pipe_model_ms(const dyn_cost_model *cm, dyn_mb_shape sh, int32_t rows, double *ms, dyn_error *err);

#endif
