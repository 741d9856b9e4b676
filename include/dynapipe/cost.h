/*
 * cost.h — the cost and memory model: how long each layer kind takes, forward
 * and backward, and how much memory it holds, as a function of a micro-batch's
 * shape (dyn_mb_shape) and the recompute mode.
 *
 * Two sources behind one opaque handle:
 *   - analytic: FLOP and byte counts from the model shape divided by a
 *     machine's rates (dyn_machine), for machines you do not have;
 *   - table: points measured by `dynapipe profile` on the training machine,
 *     read from a file and interpolated (format in docs/cost-model.md).
 *
 * Units: ms and MB (2^20 bytes). Every query is pure and thread-safe on a
 * const handle, so a planner thread may share it.
 */
#ifndef DYNAPIPE_COST_H
#define DYNAPIPE_COST_H

#include "dynapipe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dyn_layer_kind {
    DYN_LAYER_EMBED = 0,   /* token (+ position) embedding */
    DYN_LAYER_ENCODER = 1, /* GPT block, or T5 encoder block */
    DYN_LAYER_DECODER = 2, /* T5 decoder block (self + cross attention) */
    DYN_LAYER_LM_HEAD = 3  /* final norm, vocabulary projection and loss */
} dyn_layer_kind;
#define DYN_LAYER_KIND_COUNT 4

/* Cost of one layer for one micro-batch. bwd_ms is the whole backward pass
 * (for recompute != NONE it includes the recomputed forward work);
 * bwd_input_ms + bwd_weight_ms split it into the input-gradient and
 * weight-gradient passes a zero-bubble schedule runs separately (the
 * recomputed forward is counted in bwd_input_ms). */
typedef struct dyn_layer_cost {
    double fwd_ms;
    double bwd_ms;
    double bwd_input_ms;
    double bwd_weight_ms;
    double stored_mb; /* activations kept from forward until backward */
    double peak_mb;   /* transient working memory on top of stored, while fwd or bwd runs */
    double output_mb; /* this layer's output activation (what crosses a stage boundary) */
} dyn_layer_cost;

typedef struct dyn_cost_model dyn_cost_model;

/* Analytic model of cfg on machine m. Returns NULL and sets err when the
 * shape or machine is invalid (zero sizes, heads not dividing hidden, ...). */
dyn_cost_model *dyn_cost_model_create_analytic(const dyn_model_config *cfg, const dyn_machine *m,
                                               dyn_error *err);
/* Table model read from path (format in docs/cost-model.md). */
dyn_cost_model *dyn_cost_model_load_table(const char *path, dyn_error *err);
void dyn_cost_model_free(dyn_cost_model *cm);

const dyn_model_config *dyn_cost_model_config(const dyn_cost_model *cm);

/* Cost of one layer of kind `kind` on micro-batch shape `mb` under recompute
 * mode rc. DYN_ERR_INVALID_ARG for a kind the model does not have (DECODER on
 * GPT) or a shape with rows or lengths <= 0. */
dyn_status dyn_cost_layer(const dyn_cost_model *cm, dyn_layer_kind kind, const dyn_mb_shape *mb,
                          dyn_recompute rc, dyn_layer_cost *out, dyn_error *err);

/* Model states of one layer of `kind` held for training, MB: parameters,
 * gradients and the two AdamW moments. */
double dyn_cost_layer_states_mb(const dyn_cost_model *cm, dyn_layer_kind kind);

/* Built-in machine descriptions by name ("cpu": one core of this kind of
 * machine, fp32; "a100": 8 x A100 40 GB with NVLink, bf16). NULL if unknown.*/
const dyn_machine *dyn_machine_builtin(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* DYNAPIPE_COST_H */
