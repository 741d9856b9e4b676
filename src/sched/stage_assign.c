/* stage_assign.c — which layers each pipeline stage holds, balanced by the
 * cost model, and the per-micro-batch per-stage costs schedules consume.
 *
 * The model is a chain of layers: GPT [EMBED, ENCODER x L, LM_HEAD]; T5
 * [EMBED, ENCODER x Le, BRIDGE, DECODER x Ld, LM_HEAD]. Stages are
 * contiguous runs of it; the embedding always sits on stage 0 and the LM
 * head on the last stage (they own the token and label I/O), T5's bridge
 * (the encoder's final norm and the decoder embedding) on the stage of the
 * last encoder block, as the runtime's model ranges place it, and every
 * stage gets at least one transformer block. Balance: minimise the slowest
 * stage's weight, exactly, by dynamic programming over contiguous splits
 * (S * n^2 for n blocks: a few thousand steps for real models). A layer's
 * weight is that of its kind: the fwd + bwd ms of one layer of the kind
 * summed over some micro-batch shapes -- one reference row of max_seqlen
 * tokens by default (dyn_stage_assign_run), or the micro-batches a run's
 * sample of global batches was planned into (dyn_pipeline_tune_split), so
 * that the split balances the lengths the run really trains on. For T5
 * the encoder and decoder blocks have different costs, so the optimal split
 * places the encoder/decoder boundary wherever the times balance, not at the
 * middle stage; with short targets the decoder blocks weigh less and a
 * stage takes more of them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/sched.h"
#include "util/util.h" /* defines: dyn_calloc */

/* The stage-split DP: prefix sums of the block times and the table
 * g[s * (n + 1) + i], the best slowest stage for blocks i..n-1 on stages
 * s..S-1. */
typedef struct split_dp {
    const double *pre; /* [n + 1] */
    double *g;         /* [(S + 1) * (n + 1)] */
    int32_t n, S;
    double first_extra_ms, last_extra_ms;
} split_dp;

static inline double *split_g(const split_dp *d, int32_t s, int32_t i)
{
    return &d->g[(size_t)s * (size_t)(d->n + 1) + (size_t)i];
}

/* One stage's cost, blocks i..e-1 on stage s, written once so the DP and
 * the reconstruction agree bit for bit. */
static inline double split_stage_ms(const split_dp *d, int32_t s, int32_t i, int32_t e)
{
    return d->pre[e] - d->pre[i] + (s == 0 ? d->first_extra_ms : 0.0) + (s == d->S - 1 ? d->last_extra_ms : 0.0);
}

static void split_fill(split_dp *d)
{
    int32_t n = d->n, S = d->S;
    for (int32_t s = S - 1; s >= 0; s--) {
        /* stage s starts at i; stages s..S-1 need one block each */
        for (int32_t i = s; i <= n - (S - s); i++) {
            if (s == S - 1) {
                *split_g(d, s, i) = split_stage_ms(d, s, i, n);
                continue;
            }
            double best = INFINITY;
            for (int32_t e = i + 1; e <= n - (S - s - 1); e++) {
                double here = split_stage_ms(d, s, i, e), rest = *split_g(d, s + 1, e);
                double v = here > rest ? here : rest;
                if (v < best) best = v;
            }
            *split_g(d, s, i) = best;
        }
    }
}

/* Reconstruct: stage by stage, the earliest end that keeps the rest within
 * the global optimum gives the lexicographically smallest optimal
 * boundaries (a later stage need not be optimal for its own subproblem). */
static void split_boundaries(const split_dp *d, int32_t *first)
{
    int32_t n = d->n, S = d->S;
    double target = *split_g(d, 0, 0);
    first[0] = 0;
    int32_t i = 0;
    for (int32_t s = 0; s < S - 1; s++) {
        int32_t e = i + 1;
        for (; e <= n - (S - s - 1); e++) {
            double here = split_stage_ms(d, s, i, e), rest = *split_g(d, s + 1, e);
            if ((here > rest ? here : rest) <= target) break;
        }
        first[s + 1] = e;
        i = e;
    }
    first[S] = n;
}

dyn_status dyn_stage_split(const double *block_ms, int32_t n, int32_t n_stages, double first_extra_ms,
                           double last_extra_ms, int32_t *first, double *max_stage_ms,
                           dyn_error *err)
{
    if (n_stages < 1)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "stage split: %d stages", n_stages);
    if (n_stages > n)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "stage split: %d stages but only %d transformer layers: stages more "
                             "than layers",
                             n_stages, n);
    double *pre = dyn_calloc((size_t)n + 1, sizeof(double), "stage split", err);
    double *g = dyn_calloc((size_t)(n_stages + 1) * (size_t)(n + 1), sizeof(double), "stage split", err);
    if (pre == NULL || g == NULL) {
        free(pre);
        free(g);
        return DYN_ERR_NOMEM;
    }
    for (int32_t i = 0; i < n; i++) pre[i + 1] = pre[i] + block_ms[i];
    split_dp d = {pre, g, n, n_stages, first_extra_ms, last_extra_ms};
    split_fill(&d);
    split_boundaries(&d, first);
    if (max_stage_ms) *max_stage_ms = *split_g(&d, 0, 0);
    free(pre);
    free(g);
    return DYN_OK;
}

/* All zero (or NULL): no weights given, the run's default split. */
static int weights_given(const double *weight)
{
    if (weight == NULL) return 0;
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++)
        if (weight[k] != 0.0) return 1;
    return 0;
}

dyn_status dyn_stage_assign_run(const dyn_cost_model *cm, int32_t n_stages, const double *weight,
                                dyn_stage_assignment *out, dyn_error *err)
{
    if (weights_given(weight)) return dyn_stage_assign_weights(cm, n_stages, weight, out, err);
    const dyn_model_config *cfg = dyn_cost_model_config(cm);
    dyn_mb_shape ref;
    memset(&ref, 0, sizeof ref);
    ref.rows = 1;
    ref.enc_len = cfg->max_seqlen;
    ref.dec_len = cfg->kind == DYN_MODEL_T5 ? cfg->max_seqlen : 0;
    return dyn_stage_assign(cm, n_stages, &ref, DYN_RECOMPUTE_NONE, out, err);
}

void dyn_stage_assignment_free(dyn_stage_assignment *a)
{
    if (a == NULL) return;
    free(a->layer_kind);
    free(a->stage_first);
    memset(a, 0, sizeof *a);
}

dyn_status dyn_stage_weights_of_shapes(const dyn_cost_model *cm, const dyn_mb_shape *shapes, int32_t n,
                                       dyn_recompute rc, double weight[DYN_LAYER_KIND_COUNT], dyn_error *err)
{
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) weight[k] = 0.0;
    if (n < 1 || shapes == NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "stage weights: %d micro-batch shapes", n);
    const dyn_model_config *cfg = dyn_cost_model_config(cm);
    for (int32_t m = 0; m < n; m++)
        for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
            if (!dyn_cost_kind_present(cfg, (dyn_layer_kind)k)) continue;
            dyn_layer_cost lc;
            dyn_status st = dyn_cost_layer(cm, (dyn_layer_kind)k, &shapes[m], rc, &lc, err);
            if (st != DYN_OK) {
                for (int j = 0; j < DYN_LAYER_KIND_COUNT; j++) weight[j] = 0.0;
                return st;
            }
            weight[k] += lc.fwd_ms + lc.bwd_ms;
        }
    return DYN_OK;
}

dyn_status dyn_stage_assign(const dyn_cost_model *cm, int32_t n_stages, const dyn_mb_shape *ref,
                            dyn_recompute rc, dyn_stage_assignment *out, dyn_error *err)
{
    memset(out, 0, sizeof *out);
    double w[DYN_LAYER_KIND_COUNT];
    dyn_status st = dyn_stage_weights_of_shapes(cm, ref, 1, rc, w, err);
    if (st != DYN_OK) return st;
    return dyn_stage_assign_weights(cm, n_stages, w, out, err);
}

dyn_status dyn_stage_assign_weights(const dyn_cost_model *cm, int32_t n_stages,
                                    const double weight[DYN_LAYER_KIND_COUNT], dyn_stage_assignment *out,
                                    dyn_error *err)
{
    memset(out, 0, sizeof *out);
    const dyn_model_config *cfg = dyn_cost_model_config(cm);
    int t5 = cfg->kind == DYN_MODEL_T5;
    int32_t n_enc = cfg->n_layers, n_dec = t5 ? cfg->n_dec_layers : 0, nb = n_enc + n_dec;
    if (n_stages < 1 || n_stages > nb)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "stage assignment: %d stages but the model has %d transformer layers "
                             "(stages more than layers)",
                             n_stages, nb);
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++)
        if (!(weight[k] >= 0.0) || !isfinite(weight[k]))
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "stage assignment: the weight of layer kind %d is %g (must be finite and >= 0)", k,
                                 weight[k]);
    /* A kind the model lacks weighs nothing (GPT has no decoder or bridge). */
    double enc_ms = weight[DYN_LAYER_ENCODER], dec_ms = t5 ? weight[DYN_LAYER_DECODER] : 0.0;
    double bridge_ms = t5 ? weight[DYN_LAYER_BRIDGE] : 0.0;
    double embed_ms = weight[DYN_LAYER_EMBED], head_ms = weight[DYN_LAYER_LM_HEAD];
    dyn_status st = DYN_OK;
    double *block = dyn_calloc((size_t)nb, sizeof(double), "stage assignment", err);
    int32_t *bfirst = dyn_calloc((size_t)n_stages + 1, sizeof(int32_t), "stage assignment", err);
    int32_t nl = nb + 2 + t5; /* + the bridge */
    out->layer_kind = dyn_calloc((size_t)nl, sizeof(int32_t), "stage assignment", err);
    out->stage_first = dyn_calloc((size_t)n_stages + 1, sizeof(int32_t), "stage assignment", err);
    if (!block || !bfirst || !out->layer_kind || !out->stage_first) {
        st = DYN_ERR_NOMEM;
        goto out;
    }
    /* the bridge always runs with the last encoder block */
    for (int32_t b = 0; b < nb; b++) block[b] = b < n_enc ? enc_ms : dec_ms;
    if (t5) block[n_enc - 1] += bridge_ms;
    st = dyn_stage_split(block, nb, n_stages, embed_ms, head_ms, bfirst, &out->max_stage_ms, err);
    if (st != DYN_OK) goto out;
    out->n_stages = n_stages;
    out->n_layers = nl;
    /* block b's flattened index: after the embedding, and for a decoder
     * block after the bridge too */
#define FLAT(b) ((b) + 1 + (t5 && (b) >= n_enc))
    out->layer_kind[0] = DYN_LAYER_EMBED;
    for (int32_t b = 0; b < nb; b++) out->layer_kind[FLAT(b)] = b < n_enc ? DYN_LAYER_ENCODER : DYN_LAYER_DECODER;
    if (t5) out->layer_kind[n_enc + 1] = DYN_LAYER_BRIDGE;
    out->layer_kind[nl - 1] = DYN_LAYER_LM_HEAD;
    /* block boundaries -> flattened layer boundaries: the embedding joins
     * stage 0, the bridge the last encoder block's stage, the head the
     * last stage */
    out->stage_first[0] = 0;
    for (int32_t s = 1; s < n_stages; s++) out->stage_first[s] = FLAT(bfirst[s]);
    out->stage_first[n_stages] = nl;
#undef FLAT
out:
    free(block);
    free(bfirst);
    if (st != DYN_OK) dyn_stage_assignment_free(out);
    return st;
}

/* Does a layer of this kind take the (encoder) hidden state as its input?
 * The others past the embedding take T5's decoder boundary. */
static int reads_hidden(int32_t kind)
{
    return kind == DYN_LAYER_ENCODER || kind == DYN_LAYER_BRIDGE;
}

/* Micro-batch m's row of out (shape sh): each stage's sums over its
 * layers, less the shared inputs (shared_inputs: see
 * dyn_stage_costs_build), its largest peak and what it sends on. */
static dyn_status stage_costs_mb(const dyn_cost_model *cm, const dyn_stage_assignment *a, const dyn_mb_shape *sh,
                                 dyn_recompute rc, int shared_inputs, int32_t m, dyn_stage_costs *out,
                                 dyn_error *err)
{
    const dyn_model_config *cfg = dyn_cost_model_config(cm);
    int32_t S = a->n_stages;
    /* Layers of one kind cost the same on one micro-batch: query each
     * kind once. */
    dyn_layer_cost lc[DYN_LAYER_KIND_COUNT];
    memset(lc, 0, sizeof lc);
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        if (!dyn_cost_kind_present(cfg, (dyn_layer_kind)k)) continue;
        dyn_status st = dyn_cost_layer(cm, (dyn_layer_kind)k, sh, rc, &lc[k], err);
        if (st != DYN_OK) return st;
    }
    /* What crosses a stage boundary, as the model's stage ranges send it
     * (src/model/model.h): GPT the hidden state; T5 up to the bridge
     * the encoder hidden state, and from the first decoder layer on the
     * encoder output and the decoder hidden state together (the
     * bridge's output). */
    double enc_boundary = lc[DYN_LAYER_ENCODER].output_mb;
    double dec_boundary = cfg->kind == DYN_MODEL_T5 ? lc[DYN_LAYER_DECODER].output_mb
                                                    : enc_boundary; /* it carries the encoder output */
    for (int32_t s = 0; s < S; s++) {
        size_t i = (size_t)m * S + s;
        for (int32_t l = a->stage_first[s]; l < a->stage_first[s + 1]; l++) {
            const dyn_layer_cost *c = &lc[a->layer_kind[l]];
            out->fwd_ms[i] += c->fwd_ms;
            out->bwd_ms[i] += c->bwd_ms;
            out->bwd_input_ms[i] += c->bwd_input_ms;
            out->bwd_weight_ms[i] += c->bwd_weight_ms;
            out->stored_mb[i] += c->stored_mb;
            if (shared_inputs && l > a->stage_first[s])
                out->stored_mb[i] -= reads_hidden(a->layer_kind[l]) ? enc_boundary : dec_boundary;
            if (c->peak_mb > out->peak_mb[i]) out->peak_mb[i] = c->peak_mb;
        }
        int32_t next = s < S - 1 ? a->layer_kind[a->stage_first[s + 1]] : -1;
        out->send_mb[i] = next < 0 ? 0 : reads_hidden(next) ? enc_boundary : dec_boundary;
    }
    return DYN_OK;
}

dyn_status dyn_stage_costs_build(const dyn_cost_model *cm, const dyn_stage_assignment *a,
                                 const dyn_mb_shape *shapes, int32_t n_microbatches,
                                 dyn_recompute rc, dyn_stage_costs *out, dyn_error *err)
{
    int32_t S = a->n_stages;
    /* A profiled layer's stored bytes include its own copy of the input
     * boundary (it was measured alone); inside a stage a layer's input is
     * the previous layer's output, which the stage's arena holds once.
     * Measured with stage models (GPT, and T5 over every range of t5-mini
     * at 4 x 64 / 32 tokens): a stage stores, per layer after its first,
     * exactly the output of the layer run before it less than the sum of
     * its layers alone. That output is the hidden state for GPT and T5's
     * encoder layers and bridge, and T5's decoder boundary (encoder output
     * and decoder state) for a decoder layer or the head: the layer before
     * them is a decoder layer or, for the first decoder layer, the bridge,
     * which sends the same. Tables only (the analytic model
     * counts a stage's tensors itself). */
    int32_t gr, ge, gd;
    int shared_inputs = dyn_cost_model_grid_max(cm, &gr, &ge, &gd);
    dyn_status st = dyn_stage_costs_alloc(out, n_microbatches, S, err);
    if (st != DYN_OK) return st;
    for (int32_t s = 0; s < S; s++)
        for (int32_t l = a->stage_first[s]; l < a->stage_first[s + 1]; l++)
            out->states_mb[s] += dyn_cost_layer_states_mb(cm, (dyn_layer_kind)a->layer_kind[l]);
    for (int32_t m = 0; m < n_microbatches; m++) {
        if ((st = stage_costs_mb(cm, a, &shapes[m], rc, shared_inputs, m, out, err)) != DYN_OK) {
            dyn_stage_costs_free(out);
            return st;
        }
    }
    return DYN_OK;
}

dyn_status dyn_stage_costs_from_batch(const dyn_cost_model *cm, const dyn_stage_assignment *a,
                                      const dyn_batch_plan *bp, int32_t replica, dyn_recompute rc,
                                      dyn_stage_costs *out, dyn_mb_shape **shapes_out,
                                      dyn_error *err)
{
    if (shapes_out) *shapes_out = NULL;
    int32_t M = 0;
    for (int32_t i = 0; i < bp->n_microbatches; i++) M += bp->mbs[i].replica == replica;
    if (M == 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "stage costs: replica %d runs no micro-batch",
                             replica);
    dyn_mb_shape *shapes = dyn_calloc((size_t)M, sizeof *shapes, "micro-batch shapes", err);
    if (shapes == NULL) return DYN_ERR_NOMEM;
    for (int32_t i = 0, k = 0; i < bp->n_microbatches; i++)
        if (bp->mbs[i].replica == replica) shapes[k++] = bp->mbs[i].shape;
    dyn_status st = dyn_stage_costs_build(cm, a, shapes, M, rc, out, err);
    if (st == DYN_OK && shapes_out) *shapes_out = shapes;
    else free(shapes);
    return st;
}
