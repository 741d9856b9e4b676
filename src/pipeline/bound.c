/*
 * bound.c — the ideal bound of a global batch and the optimizer step of a
 * replica plan (include/dynapipe/pipeline.h, dyn_ideal_bound_of): what
 * `simulate` and the runtime divide by to say how close to the limit a
 * plan runs.
 *
 * The bound charges each sample what its own tokens cost and nothing else:
 * a row of exactly its length (T5: its input and its target) with dense
 * attention inside the row, through every layer of the model, forward and
 * backward, no recompute. The fixed costs of a kernel launch are the part
 * batching exists to amortise, so the bound takes the marginal cost of
 * such rows, (t(2K rows) - t(K rows)) / K, rather than one row alone: a
 * sample alone would be charged the analytic model's gemm_n_half rows and
 * per-layer overhead, and a plan packing many short samples would then beat
 * the "bound". Padding, cross-document attention, stage imbalance, bubbles,
 * waiting on messages and recompute are what a plan adds on top.
 */
#include "dynapipe/pipeline.h"

#include <string.h>

#include "dynapipe/model_config.h"     /* defines: dyn_model_config_params */
#include "pipeline/pipeline_internal.h" /* defines: pipe_model_ms */

#define BOUND_ROWS 64 /* K: rows of one sample's shape the marginal cost is taken over */

/* Layers of each kind in the model (0: the kind is absent). */
static int32_t layer_count(const dyn_model_config *cfg, dyn_layer_kind kind)
{
    if (!dyn_cost_kind_present(cfg, kind)) return 0;
    switch (kind) {
    case DYN_LAYER_ENCODER: return cfg->n_layers;
    case DYN_LAYER_DECODER: return cfg->n_dec_layers;
    default: return 1;
    }
}

dyn_status pipe_model_ms(const dyn_cost_model *cm, dyn_mb_shape sh, int32_t rows, double *ms, dyn_error *err)
{
    const dyn_model_config *cfg = dyn_cost_model_config(cm);
    sh.rows = rows;
    *ms = 0.0;
    for (int kind = 0; kind < DYN_LAYER_KIND_COUNT; kind++) {
        int32_t count = layer_count(cfg, (dyn_layer_kind)kind);
        if (count == 0) continue;
        dyn_layer_cost c;
        dyn_status st = dyn_cost_layer(cm, (dyn_layer_kind)kind, &sh, DYN_RECOMPUTE_NONE, &c, err);
        if (st != DYN_OK) return st;
        *ms += count * (c.fwd_ms + c.bwd_ms);
    }
    return DYN_OK;
}

/* One sample's own compute through the model, fwd + bwd, ms: the marginal
 * cost of a row of exactly its shape. */
static dyn_status sample_ms(const dyn_cost_model *cm, const dyn_sample *x, double *ms, dyn_error *err)
{
    int gpt = dyn_model_kind_decoder_only(dyn_cost_model_config(cm)->kind); /* GPT or Llama */
    dyn_mb_shape sh = {0};
    sh.enc_len = gpt ? x->input_len + x->target_len : x->input_len;
    sh.dec_len = gpt ? 0 : x->target_len;
    double one, two;
    dyn_status st = pipe_model_ms(cm, sh, BOUND_ROWS, &one, err);
    if (st == DYN_OK) st = pipe_model_ms(cm, sh, 2 * BOUND_ROWS, &two, err);
    *ms = (two - one) / BOUND_ROWS;
    return st;
}

dyn_status dyn_mb_useful_fraction(const dyn_cost_model *cm, const dyn_mb_shape *shape, const dyn_sample *samples,
                                  int32_t n, double *frac, dyn_error *err)
{
    *frac = 1.0;
    if (cm == NULL || shape == NULL || (samples == NULL && n > 0) || n < 0 || shape->rows < 1)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "useful fraction: bad arguments (%d samples)", n);
    double own = 0.0;
    for (int32_t i = 0; i < n; i++) {
        double ms;
        if (samples[i].input_len < 1 || samples[i].target_len < 0)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "useful fraction: sample %d has lengths %d, %d",
                                 samples[i].id, samples[i].input_len, samples[i].target_len);
        dyn_status st = sample_ms(cm, &samples[i], &ms, err);
        if (st != DYN_OK) return st;
        own += ms;
    }
    /* the shape's marginal cost: K and 2K copies of it (its attention
     * counts are sums over its rows: they scale with the copies; 0 stays
     * dense) */
    dyn_mb_shape k1 = *shape, k2 = *shape;
    k1.enc_attn *= BOUND_ROWS, k1.dec_attn *= BOUND_ROWS, k1.cross_attn *= BOUND_ROWS;
    k2.enc_attn *= 2 * BOUND_ROWS, k2.dec_attn *= 2 * BOUND_ROWS, k2.cross_attn *= 2 * BOUND_ROWS;
    double one, two;
    dyn_status st = pipe_model_ms(cm, k1, BOUND_ROWS * shape->rows, &one, err);
    if (st == DYN_OK) st = pipe_model_ms(cm, k2, 2 * BOUND_ROWS * shape->rows, &two, err);
    if (st != DYN_OK) return st;
    double mb = (two - one) / BOUND_ROWS;
    *frac = mb > 0 ? own / mb : 1.0;
    if (*frac > 1.0) *frac = 1.0; /* a table model's interpolation */
    if (!(*frac >= 0.0)) *frac = 0.0;
    return DYN_OK;
}

dyn_status dyn_ideal_bound_of(const dyn_cost_model *cm, const dyn_sample *samples, int32_t n, int32_t stages,
                              int32_t dp, dyn_ideal_bound *out, dyn_error *err)
{
    memset(out, 0, sizeof *out);
    if (cm == NULL || (samples == NULL && n > 0) || n < 0 || stages < 1 || dp < 1)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "ideal bound: bad arguments (%d samples, %d stages, %d replicas)",
                             n, stages, dp);
    const dyn_model_config *cfg = dyn_cost_model_config(cm);
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        const dyn_sample *x = &samples[i];
        if (x->input_len < 1 || x->target_len < 0)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "ideal bound: sample %d has lengths %d, %d", x->id,
                                 x->input_len, x->target_len);
        double ms;
        dyn_status st = sample_ms(cm, x, &ms, err);
        if (st != DYN_OK) return st;
        sum += ms;
    }
    out->compute_ms = sum / ((double)stages * dp);
    out->step_ms = dyn_cost_optimizer_ms(cm, (double)dyn_model_config_params(cfg) / stages);
    out->bound_ms = out->compute_ms + out->step_ms;
    return DYN_OK;
}

double dyn_replica_plan_step_ms(const dyn_cost_model *cm, const dyn_replica_plan *r)
{
    if (r == NULL || r->n_microbatches == 0 || r->costs.states_mb == NULL || r->plan.stage_rank == NULL) return 0.0;
    double worst = 0.0;
    for (int32_t rank = 0; rank < r->plan.n_ranks; rank++) {
        double mb = 0.0;
        for (int32_t s = 0; s < r->costs.n_stages && s < r->plan.n_stages; s++)
            if (r->plan.stage_rank[s] == rank) mb += r->costs.states_mb[s];
        double ms = dyn_cost_optimizer_ms(cm, mb * 1024.0 * 1024.0 / 16.0);
        if (ms > worst) worst = ms;
    }
    return worst;
}
