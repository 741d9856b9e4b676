/* cost_model.c — the cost-model handle: creating the analytic model, checking
 * queries once for both sources, model states, and the names of layer kinds
 * and recompute modes. The two sources live in analytic.c and table.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost/cost_internal.h"
#include "dynapipe/model_config.h" /* defines: dyn_model_config_validate, dyn_machine_validate */
#include "util/util.h"             /* defines: dyn_calloc */

static void fill_states(dyn_cost_model *cm)
{
    double bpp = cost_state_bytes_per_param(cm->machine.bytes_per_elem);
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++)
        cm->states_mb[k] = (double)cost_layer_params(&cm->cfg, (dyn_layer_kind)k) * bpp / DYN_MB;
}

dyn_cost_model *dyn_cost_model_create_analytic(const dyn_model_config *cfg, const dyn_machine *m,
                                               dyn_error *err)
{
    if (cfg == NULL || m == NULL) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "analytic cost model: no model or machine given");
        return NULL;
    }
    if (dyn_model_config_validate(cfg, err) != DYN_OK) return NULL;
    if (dyn_machine_validate(m, err) != DYN_OK) return NULL;
    dyn_cost_model *cm = dyn_calloc(1, sizeof *cm, "cost model", err);
    if (cm == NULL) return NULL;
    cm->cfg = *cfg;
    cm->machine = *m;
    fill_states(cm);
    return cm;
}

void dyn_cost_model_free(dyn_cost_model *cm)
{
    if (cm == NULL) return;
    free(cm->rows);
    free(cm->enc_len);
    free(cm->dec_len);
    free(cm->points);
    free(cm);
}

const dyn_model_config *dyn_cost_model_config(const dyn_cost_model *cm)
{
    return &cm->cfg;
}

const dyn_machine *dyn_cost_model_machine(const dyn_cost_model *cm)
{
    return &cm->machine;
}

int dyn_cost_kind_present(const dyn_model_config *cfg, dyn_layer_kind kind)
{
    if ((unsigned)kind >= DYN_LAYER_KIND_COUNT) return 0;
    return cfg->kind == DYN_MODEL_T5 || (kind != DYN_LAYER_DECODER && kind != DYN_LAYER_BRIDGE);
}

dyn_status dyn_cost_layer(const dyn_cost_model *cm, dyn_layer_kind kind, const dyn_mb_shape *mb,
                          dyn_recompute rc, dyn_layer_cost *out, dyn_error *err)
{
    int t5 = cm->cfg.kind == DYN_MODEL_T5;
    if ((unsigned)kind >= DYN_LAYER_KIND_COUNT)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "cost: unknown layer kind %d", (int)kind);
    if (!dyn_cost_kind_present(&cm->cfg, kind))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "cost: a %s model has no %s layer",
                             dyn_model_kind_name(cm->cfg.kind), dyn_layer_kind_name(kind));
    if ((unsigned)rc >= DYN_RECOMPUTE_COUNT)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "cost: unknown recompute mode %d", (int)rc);
    if (mb->rows <= 0 || mb->enc_len <= 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "cost: micro-batch rows %d x enc_len %d must be positive",
                             mb->rows, mb->enc_len);
    if (t5 && mb->dec_len <= 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "cost: t5 micro-batch needs dec_len > 0 (got %d)",
                             mb->dec_len);
    if (mb->enc_attn < 0 || mb->dec_attn < 0 || mb->cross_attn < 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "cost: negative attention pair count");
    if (cm->is_table)
        cost_table_layer(cm, kind, mb, rc, out);
    else
        cost_analytic_layer(cm, kind, mb, rc, out);
    if (cm->scaled) {
        const double *f = cm->time_scale[kind];
        out->fwd_ms *= f[0];
        out->bwd_ms *= f[1], out->bwd_input_ms *= f[1], out->bwd_weight_ms *= f[1];
    }
    return DYN_OK;
}

dyn_status dyn_cost_model_set_time_scale(dyn_cost_model *cm, dyn_layer_kind kind, double fwd, double bwd,
                                         dyn_error *err)
{
    if ((unsigned)kind >= DYN_LAYER_KIND_COUNT)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "cost: unknown layer kind %d", (int)kind);
    if (!(fwd > 0) || !(bwd > 0) || !isfinite(fwd) || !isfinite(bwd))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "cost: time scales must be finite and > 0 (got %g, %g)",
                             fwd, bwd);
    if (!cm->scaled)
        for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) cm->time_scale[k][0] = cm->time_scale[k][1] = 1.0;
    cm->scaled = 1;
    cm->time_scale[kind][0] = fwd;
    cm->time_scale[kind][1] = bwd;
    return DYN_OK;
}

double dyn_cost_optimizer_ms(const dyn_cost_model *cm, double n_params)
{
    if (!(n_params > 0)) return 0.0;
    if (cm->is_table && cm->has_meta && cm->meta.optimizer_ms_per_mparam > 0)
        return n_params * 1e-6 * cm->meta.optimizer_ms_per_mparam;
    if (cm->machine.optimizer_ms_per_mparam > 0) return n_params * 1e-6 * cm->machine.optimizer_ms_per_mparam;
    return cm->machine.mem_gbps > 0 ? n_params * DYN_OPTIMIZER_BYTES_PER_PARAM / (cm->machine.mem_gbps * 1e6) : 0.0;
}

double dyn_cost_layer_states_mb(const dyn_cost_model *cm, dyn_layer_kind kind)
{
    if (!dyn_cost_kind_present(&cm->cfg, kind)) return 0.0;
    return cm->states_mb[kind];
}

double dyn_cost_model_states_mb(const dyn_cost_model *cm)
{
    return cm->states_mb[DYN_LAYER_EMBED] + cm->cfg.n_layers * cm->states_mb[DYN_LAYER_ENCODER] +
           dyn_cost_layer_states_mb(cm, DYN_LAYER_BRIDGE) +
           cm->cfg.n_dec_layers * dyn_cost_layer_states_mb(cm, DYN_LAYER_DECODER) +
           cm->states_mb[DYN_LAYER_LM_HEAD];
}

static const char *const KIND_NAMES[DYN_LAYER_KIND_COUNT] = {"embed", "encoder", "decoder", "lm_head", "bridge"};
static const char *const RC_NAMES[DYN_RECOMPUTE_COUNT] = {"none", "selective", "full"};

const char *dyn_layer_kind_name(dyn_layer_kind kind)
{
    return (unsigned)kind < DYN_LAYER_KIND_COUNT ? KIND_NAMES[kind] : "?";
}

const char *dyn_recompute_name(dyn_recompute rc)
{
    return (unsigned)rc < DYN_RECOMPUTE_COUNT ? RC_NAMES[rc] : "?";
}

dyn_status dyn_layer_kind_parse(const char *name, dyn_layer_kind *out, dyn_error *err)
{
    for (int k = 0; name && k < DYN_LAYER_KIND_COUNT; k++)
        if (strcmp(name, KIND_NAMES[k]) == 0) {
            *out = (dyn_layer_kind)k;
            return DYN_OK;
        }
    return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                         "unknown layer kind '%s' (embed, encoder, decoder, lm_head, bridge)", name ? name : "(null)");
}

dyn_status dyn_recompute_parse(const char *name, dyn_recompute *out, dyn_error *err)
{
    for (int k = 0; name && k < DYN_RECOMPUTE_COUNT; k++)
        if (strcmp(name, RC_NAMES[k]) == 0) {
            *out = (dyn_recompute)k;
            return DYN_OK;
        }
    return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                         "unknown recompute mode '%s' (none, selective, full)", name ? name : "(null)");
}
