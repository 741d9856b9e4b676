/* cost_internal.h — the cost-model handle shared by the analytic model
 * (analytic.c), the table model (table.c) and the dispatcher (cost_model.c).
 * Not a public header. */
#ifndef DYN_COST_INTERNAL_H
#define DYN_COST_INTERNAL_H

#include "dynapipe/cost.h"

struct dyn_cost_model {
    int is_table;
    dyn_model_config cfg;
    dyn_machine machine;
    double states_mb[DYN_LAYER_KIND_COUNT]; /* per layer of each kind */
    /* Table model only: the grid (owned copies) and every point, indexed as
     * dyn_cost_grid_index says. */
    int32_t n_rows, n_enc, n_dec;
    int32_t *rows, *enc_len, *dec_len;
    dyn_layer_cost *points;
};

/* Parameter count (elements) of one layer of kind in cfg (model_config.c and
 * the analytic model's states use it). */
int64_t cost_layer_params(const dyn_model_config *cfg, dyn_layer_kind kind);

/* Model states per parameter, bytes: weights + gradients + two AdamW moments
 * in fp32 (16), or bf16 weights + bf16 gradients + fp32 master weights + two
 * fp32 moments (2 + 2 + 4 + 4 + 4 = 16). Either way 16 bytes. */
double cost_state_bytes_per_param(int32_t bytes_per_elem);

/* The analytic cost of one layer (analytic.c); arguments already checked. */
void cost_analytic_layer(const struct dyn_cost_model *cm, dyn_layer_kind kind,
                        const dyn_mb_shape *mb, dyn_recompute rc, dyn_layer_cost *out);
/* The interpolated cost of one layer (table.c); arguments already checked. */
void cost_table_layer(const struct dyn_cost_model *cm, dyn_layer_kind kind, const dyn_mb_shape *mb,
                     dyn_recompute rc, dyn_layer_cost *out);

#define DYN_MB (1024.0 * 1024.0)

#endif
