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
#include "dynapipe/model_config.h" /* model shapes and machines: dyn_machine_builtin, ... */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dyn_layer_kind {
    DYN_LAYER_EMBED = 0,   /* token (+ position) embedding; T5: the encoder's input tokens */
    DYN_LAYER_ENCODER = 1, /* GPT or Llama block, or T5 encoder block */
    DYN_LAYER_DECODER = 2, /* T5 decoder block (self + cross attention) */
    DYN_LAYER_LM_HEAD = 3, /* final norm, vocabulary projection and loss */
    DYN_LAYER_BRIDGE = 4   /* T5 only: the encoder's final norm and the decoder embedding,
                              run on the stage of the last encoder block */
} dyn_layer_kind;
#define DYN_LAYER_KIND_COUNT 5

/* The largest time (ms) or size (MB) a cost input may give: a point of a
 * cost table, a row of a what-if file, a machine's per-message or per-layer
 * latency. 1e12 ms is 31 years and 1e12 MB an exabyte, far above any real
 * profile, while sums of such values over any plan (at most ~1e6 layers x
 * micro-batches x stages, 1e18) stay finite: a huge number cannot become an
 * infinity that the planner or simulator reports as a deadlock. */
#define DYN_COST_VALUE_MAX 1e12
#define DYN_COST_VALUE_MAX_TEXT "1e12" /* the same, for messages */

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
    double kept_mb;   /* split backward: what B keeps for W, held from B until W, on top of stored
                         (a profile measures it; the analytic model and older tables give 0) */
} dyn_layer_cost;

typedef struct dyn_cost_model dyn_cost_model;

/* Analytic model of cfg on machine m. Returns NULL and sets err when the
 * shape or machine is invalid (zero sizes, heads not dividing hidden, ...). */
dyn_cost_model *dyn_cost_model_create_analytic(const dyn_model_config *cfg, const dyn_machine *m,
                                               dyn_error *err);
/* Table model read from path (format in docs/cost-model.md). */
dyn_cost_model *dyn_cost_model_load_table(const char *path, dyn_error *err);
void dyn_cost_model_free(dyn_cost_model *cm); /* NULL is a no-op */

/* The model shape the costs are for (the analytic model's copy of cfg, or the
 * table's); owned by cm, valid until dyn_cost_model_free. */
const dyn_model_config *dyn_cost_model_config(const dyn_cost_model *cm);

/* Cost of one layer of kind `kind` on micro-batch shape `mb` under recompute
 * mode rc. DYN_ERR_INVALID_ARG for a kind the model does not have (DECODER or
 * BRIDGE on GPT or Llama) or a shape with rows or lengths <= 0. */
dyn_status dyn_cost_layer(const dyn_cost_model *cm, dyn_layer_kind kind, const dyn_mb_shape *mb,
                          dyn_recompute rc, dyn_layer_cost *out, dyn_error *err);

/* 1 when a model of cfg's kind has layers of `kind`: every kind for T5;
 * GPT and Llama (decoder-only) have no DECODER and no BRIDGE. */
int dyn_cost_kind_present(const dyn_model_config *cfg, dyn_layer_kind kind);

/* Model states of one layer of `kind` held for training, MB: parameters,
 * gradients and the two AdamW moments. */
double dyn_cost_layer_states_mb(const dyn_cost_model *cm, dyn_layer_kind kind);

/* ---- the handle's machine, states, names, grids and table writing -------- */

/* The machine the model's costs are for: the analytic model's machine, or the
 * `machine` line of a table file. Never NULL for a valid handle. */
const dyn_machine *dyn_cost_model_machine(const dyn_cost_model *cm);

/* Model states of every layer of the model on one device if it held them all,
 * MB (sum of dyn_cost_layer_states_mb over the model's layers). */
double dyn_cost_model_states_mb(const dyn_cost_model *cm);

/* Names: "embed" "encoder" "decoder" "lm_head" "bridge"; "none" "selective" "full". */
const char *dyn_layer_kind_name(dyn_layer_kind kind);
const char *dyn_recompute_name(dyn_recompute rc);
dyn_status dyn_layer_kind_parse(const char *name, dyn_layer_kind *out, dyn_error *err);
dyn_status dyn_recompute_parse(const char *name, dyn_recompute *out, dyn_error *err);

/* Grid of a cost table: measured micro-batch sizes (rows), input lengths
 * (enc_len, tokens) and target lengths (dec_len, tokens; GPT, Llama: the single value
 * 0). Each axis strictly increasing, rows and enc_len >= 1, dec_len >= 1 for
 * T5. */
typedef struct dyn_cost_grid {
    int32_t n_rows, n_enc, n_dec;
    const int32_t *rows;
    const int32_t *enc_len;
    const int32_t *dec_len;
} dyn_cost_grid;

/* Number of points of one (kind, recompute) slice: n_rows * n_enc * n_dec. */
int64_t dyn_cost_grid_size(const dyn_cost_grid *g);
/* Index of a point in a table's points array:
 *   ((((kind * DYN_RECOMPUTE_COUNT + rc) * n_rows + i_rows) * n_enc + i_enc) * n_dec + i_dec)
 * The array has DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT * grid-size entries;
 * for GPT and Llama the DECODER and BRIDGE slices are ignored. */
int64_t dyn_cost_grid_index(const dyn_cost_grid *g, dyn_layer_kind kind, dyn_recompute rc,
                            int32_t i_rows, int32_t i_enc, int32_t i_dec);

/* The version a cost table file is written with. Version 2 added T5's
 * bridge; a version 1 GPT table still loads, a version 1 T5 table is
 * refused (its embedding counted the bridge). */
#define DYN_COST_TABLE_VERSION 2

/* Write a cost table file atomically (format in docs/cost-model.md): the
 * model it was measured for, the machine, per-layer model states (MB, indexed
 * by dyn_layer_kind), the grid and every point. This is what the profiler
 * calls; dyn_cost_model_load_table reads it back exactly (values are written
 * with 17 significant digits). */
dyn_status dyn_cost_table_write(const char *path, const dyn_model_config *cfg,
                                const dyn_machine *m, const double states_mb[DYN_LAYER_KIND_COUNT],
                                const dyn_cost_grid *grid, const dyn_layer_cost *points,
                                dyn_error *err);

/* Sample any cost model on a grid and write the table (e.g. an analytic model
 * turned into a table for tests, or a calibrated one). Shapes are dense. */
dyn_status dyn_cost_table_write_from_model(const char *path, const dyn_cost_model *cm,
                                           const dyn_cost_grid *grid, dyn_error *err);

/* Multiply the times of layer `kind` by fwd (fwd_ms) and bwd (bwd_ms and
 * both halves) from now on, e.g. the runtime's online calibration from
 * measured instruction times (1, 1 undoes it). Memory is unchanged. This
 * mutates the handle: call it only while nothing queries cm. */
dyn_status dyn_cost_model_set_time_scale(dyn_cost_model *cm, dyn_layer_kind kind, double fwd, double bwd,
                                         dyn_error *err);

/* ---- profiles (tables measured by `dynapipe profile`) ----------------- */

/* What a profile was measured on; written as the table's optional
 * `profile` line. Names have no blanks (written with '_' for them). */
typedef struct dyn_profile_meta {
    char host[64];   /* host name */
    char cpu[64];    /* CPU model */
    char dtype[64];  /* element type of the measured layers, "fp32" */
    int32_t threads; /* threads per layer while measuring, >= 1 */
    int32_t repeats; /* timed repeats per point (the median is kept), >= 1 */
    /* The optimizer step measured per million parameters (gradient norm,
     * AdamW with clipping, zeroing the gradients), ms; 0: not measured. */
    double optimizer_ms_per_mparam;
} dyn_profile_meta;

/* dyn_cost_table_write with a profile line (meta may be NULL: none). */
dyn_status dyn_cost_table_write_profile(const char *path, const dyn_model_config *cfg,
                                        const dyn_machine *m, const double states_mb[DYN_LAYER_KIND_COUNT],
                                        const dyn_cost_grid *grid, const dyn_layer_cost *points,
                                        const dyn_profile_meta *meta, dyn_error *err);

/* Predicted time of one optimizer step (gradient norm, AdamW, zeroing
 * the gradients) over n_params parameters, ms: a table's measured
 * `optimizer_ms_per_mparam` (profile line) when it has one, else the
 * machine's measured one (dyn_machine.optimizer_ms_per_mparam, set by
 * `--machine auto`), else the machine's memory bandwidth over the bytes
 * the step reads and writes (DYN_OPTIMIZER_BYTES_PER_PARAM per
 * parameter). 0 for n_params <= 0. */
#define DYN_OPTIMIZER_BYTES_PER_PARAM 36.0
double dyn_cost_optimizer_ms(const dyn_cost_model *cm, double n_params);

/* 1 and *out filled when cm is a table with a profile line, else 0. */
int dyn_cost_model_profile_meta(const dyn_cost_model *cm, dyn_profile_meta *out);

/* The largest grid value of each axis of a table model (tokens; GPT's
 * dec_len is 0) and 1; 0 for the analytic model. Queries beyond them are
 * extrapolated linearly from the last grid interval (docs/cost-model.md). */
int dyn_cost_model_grid_max(const dyn_cost_model *cm, int32_t *rows, int32_t *enc_len, int32_t *dec_len);

/* DYN_OK when cm's model shape is `want`'s (kind, layers, hidden, heads,
 * head_dim, ffn, vocab; max_seqlen may differ: longer lengths are
 * extrapolated); otherwise DYN_ERR_INVALID_ARG with one line naming both. */
dyn_status dyn_cost_model_check_shape(const dyn_cost_model *cm, const dyn_model_config *want, dyn_error *err);

/* Make every value of every (kind, recompute) slice of points non-decreasing
 * along each grid axis (isotonic least-squares fit, one axis after the
 * other; monotone input is unchanged). The reader applies it to every table
 * it loads, so interpolated costs are monotone in rows and lengths. */
dyn_status dyn_cost_points_make_monotone(const dyn_model_config *cfg, const dyn_cost_grid *grid,
                                         dyn_layer_cost *points, dyn_error *err);

#ifdef __cplusplus
}
#endif
#endif /* DYNAPIPE_COST_H */
