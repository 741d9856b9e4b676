/* stage_cost.c — from the per-layer cost model (cost.h) to the cost of one
 * micro-batch on one pipeline stage, which is what the DP minimises.
 *
 * Stage layout. The model's transformer layers, in order (GPT: its blocks;
 * T5: encoder blocks then decoder blocks), are split into S contiguous
 * groups as evenly as possible, the first (L mod S) stages taking one more.
 * The embedding runs on the first stage, the LM head (final norm, vocabulary
 * projection, loss) on the last, and T5's bridge (the encoder's final norm
 * and the decoder embedding) on the stage of the last encoder layer. With
 * v model chunks per device a device holds the same number of layers in v
 * pieces, so its per-micro-batch work is the same; v only enters the DP
 * objective.
 *
 * t(mb) = max over stages of the stage's fwd + bwd time (ms), the bottleneck
 * stage that paces the pipeline; stored(mb) and peak(mb) are likewise the
 * maxima over stages of its stored activations and of stored + the largest
 * transient working memory of one of its layers. Model states per device are
 * those of the fullest stage.
 *
 * This file also holds dyn_plan_batch_once, so that the parts of the planner that
 * take a custom cost function do not depend on the cost model's code.
 */
#include "plan/plan_internal.h"

#include <stdlib.h>

#include "util/util.h" /* defines: dyn_calloc */

typedef struct stage_layers {
    int32_t n_enc, n_dec; /* encoder-kind (GPT block / T5 encoder) and T5 decoder layers */
    int embed, head, bridge;
} stage_layers;

typedef struct stage_ctx {
    const dyn_cost_model *cm;
    dyn_recompute rc;
    int32_t S;
    stage_layers *st; /* [S] */
} stage_ctx;

static void stage_ctx_free(void *ptr)
{
    stage_ctx *c = ptr;
    if (c) free(c->st);
    free(c);
}

static dyn_status stage_cost_fn(void *ctx, const dyn_mb_shape *mb, dyn_mb_cost *out, dyn_error *err)
{
    const stage_ctx *c = ctx;
    dyn_mb_cost worst = {0};
    /* Per-layer costs do not depend on the stage: query each kind once. */
    dyn_layer_cost lc[DYN_LAYER_KIND_COUNT] = {{0}};
    int have[DYN_LAYER_KIND_COUNT] = {0};
    for (int32_t s = 0; s < c->S; s++) {
        const stage_layers *L = &c->st[s];
        int32_t count[DYN_LAYER_KIND_COUNT] = {L->embed, L->n_enc, L->n_dec, L->head, L->bridge};
        double t = 0, stored = 0, trans = 0;
        for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
            if (count[k] <= 0) continue;
            if (!have[k]) {
                dyn_status st = dyn_cost_layer(c->cm, (dyn_layer_kind)k, mb, c->rc, &lc[k], err);
                if (st != DYN_OK) return st;
                have[k] = 1;
            }
            t += count[k] * (lc[k].fwd_ms + lc[k].bwd_ms);
            stored += count[k] * lc[k].stored_mb;
            if (lc[k].peak_mb > trans) trans = lc[k].peak_mb;
        }
        if (t > worst.time_ms) worst.time_ms = t;
        if (stored > worst.stored_mb) worst.stored_mb = stored;
        if (stored + trans > worst.peak_mb) worst.peak_mb = stored + trans;
    }
    *out = worst;
    return DYN_OK;
}

/* Stages and chunks against the model's total layers: every stage (and,
 * with chunks, every model chunk) needs at least one. */
static int planner_stages_ok(const dyn_plan_options *opt, int32_t total, dyn_error *err)
{
    int32_t S = opt->stages;
    if (S < 1 || S > total) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "%d pipeline stages for a model of %d layers", S,
                      total);
        return 0;
    }
    /* With chunks, each rank holds v model chunks of at least one layer:
     * more chunks than layers would plan for a schedule no plan can have. */
    if (opt->chunks > 1 && (int64_t)S * opt->chunks > total) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG,
                      "%d chunks x %d stages = %lld model chunks, but the model has only %d layers (use --chunks %d or "
                      "fewer)",
                      opt->chunks, S, (long long)S * opt->chunks, total, total / S);
        return 0;
    }
    return 1;
}

/* Each of c's S stages' layers, n_enc encoder then n_dec decoder layers
 * spread evenly (the first stages one more); returns the largest stage's
 * training states, MB. */
static double stage_layout(stage_ctx *c, const dyn_cost_model *cm, int32_t n_enc, int32_t n_dec)
{
    int32_t total = n_enc + n_dec, S = c->S;
    double states = 0.0;
    int32_t next = 0; /* index of the next layer in encoder-then-decoder order */
    for (int32_t s = 0; s < S; s++) {
        int32_t cnt = total / S + (s < total % S);
        stage_layers *L = &c->st[s];
        for (int32_t i = next; i < next + cnt; i++) {
            if (i < n_enc) L->n_enc++;
            else L->n_dec++;
        }
        L->bridge = n_dec > 0 && next < n_enc && n_enc <= next + cnt; /* holds the last encoder layer */
        next += cnt;
        L->embed = s == 0;
        L->head = s == S - 1;
        double st_mb = L->n_enc * dyn_cost_layer_states_mb(cm, DYN_LAYER_ENCODER) +
                       L->n_dec * dyn_cost_layer_states_mb(cm, DYN_LAYER_DECODER) +
                       L->embed * dyn_cost_layer_states_mb(cm, DYN_LAYER_EMBED) +
                       L->bridge * dyn_cost_layer_states_mb(cm, DYN_LAYER_BRIDGE) +
                       L->head * dyn_cost_layer_states_mb(cm, DYN_LAYER_LM_HEAD);
        if (st_mb > states) states = st_mb;
    }
    return states;
}

dyn_planner *dyn_planner_create(const dyn_cost_model *cm, const dyn_plan_options *opt,
                                dyn_error *err)
{
    if (cm == NULL || opt == NULL) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "planner: missing cost model or options");
        return NULL;
    }
    const dyn_model_config *cfg = dyn_cost_model_config(cm);
    int32_t n_enc = cfg->n_layers, n_dec = cfg->kind == DYN_MODEL_T5 ? cfg->n_dec_layers : 0;
    int32_t S = opt->stages;
    if (!planner_stages_ok(opt, n_enc + n_dec, err)) return NULL;
    stage_ctx *c = dyn_calloc(1, sizeof *c, "stage cost", err);
    if (c == NULL) return NULL;
    c->st = dyn_calloc((size_t)S, sizeof(stage_layers), "stage layout", err);
    if (c->st == NULL) {
        free(c);
        return NULL;
    }
    c->cm = cm;
    c->rc = opt->recompute;
    c->S = S;
    double states = stage_layout(c, cm, n_enc, n_dec);
    /* A limit <= 0 means the memory of the cost model's machine. */
    dyn_plan_options o = *opt;
    if (!(o.memory_limit_mb > 0)) o.memory_limit_mb = dyn_cost_model_machine(cm)->device_memory_mb;
    dyn_planner *p = dyn_planner_create_custom(cfg->kind, stage_cost_fn, c, states, &o, err);
    if (p == NULL) {
        stage_ctx_free(c);
        return NULL;
    }
    p->owned_ctx = c;
    p->free_ctx = stage_ctx_free;
    p->cm = cm;
    return p;
}

dyn_status dyn_plan_batch_once(const dyn_cost_model *cm, const dyn_plan_options *opt,
                          const dyn_sample *samples, int32_t n, dyn_batch_plan *out,
                          dyn_error *err)
{
    /* The failure code of dyn_planner_create is read back from err: keep a
     * record of our own when the caller gave none (common.h: err may be
     * NULL). */
    dyn_error local;
    if (err == NULL) err = &local;
    dyn_planner *p = dyn_planner_create(cm, opt, err);
    if (p == NULL) {
        if (out) {
            dyn_batch_plan empty = {0};
            *out = empty;
        }
        return err->code;
    }
    dyn_status st = dyn_planner_plan(p, samples, n, out, err);
    dyn_planner_free(p);
    return st;
}
