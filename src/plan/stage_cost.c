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
 * Stage-aware objective (dyn_plan_options.stage_objective, an experiment).
 * With MAX or BOTTLENECK the layout is the run's real split, given by the
 * pipeline (dyn_planner_set_stage_layout: the runtime's layers per rank),
 * not the even one. BOTTLENECK also sets sum_ms = the micro-batch's time on
 * the split's bottleneck stage b, the stage with the most work for the
 * weights the split was balanced for (split_weight, else one max_seqlen row):
 * why that term. Under 1F1B, stage b is busy for sum_m t_b(m) and idles only
 * while the first forward reaches it and the last backward leaves the
 * stages before it, so the makespan is about
 *     sum_m t_b(m) + fill/drain,  fill/drain <= (S - 1) max_m t(m),
 * where t(m) is the slowest stage; a micro-batch whose own slowest stage is
 * not b does not lengthen b's steady state by its max, only by t_b. The
 * paper's sum of t(m) counts each micro-batch at its slowest stage, as if
 * every stage were the bottleneck for it. The (S - 1) max term is kept:
 * the DP needs one bound on every run (t(m), for the cut at tau) and a sum
 * of one number per run (t_b), which plan_dp_problem.cost allows; the true
 * max over stages of the stage sums would need a multi-criteria DP.
 * Measured in the simulator (the report of branch stageobj): MAX is faster
 * than EVEN on T5 and slower on one GPT row; BOTTLENECK is slower than MAX
 * where the stage a micro-batch leans on is not b (its other stages' sums
 * are left out, and grow). BOTH (src/pipeline: EVEN here, and the DP under
 * MAX as one more simulated candidate) is never behind EVEN.
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
    int32_t bneck;    /* BOTTLENECK: the stage whose time is sum_ms; -1: sum_ms = 0 (time_ms) */
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
    double t_b = 0.0;
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
        if (s == c->bneck) t_b = t;
        if (stored > worst.stored_mb) worst.stored_mb = stored;
        if (stored + trans > worst.peak_mb) worst.peak_mb = stored + trans;
    }
    worst.sum_ms = t_b;
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
    c->bneck = -1;
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

/* Per-kind weights the split was balanced for (ms): split_weight when
 * given, else one row of max_seqlen tokens (T5: both sides), as
 * dyn_stage_assign_run does. */
static dyn_status split_weights(const dyn_planner *p, double w[DYN_LAYER_KIND_COUNT], dyn_error *err)
{
    int given = 0;
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        w[k] = p->opt.split_weight[k];
        given |= w[k] != 0.0;
    }
    if (given) return DYN_OK;
    const dyn_model_config *cfg = dyn_cost_model_config(p->cm);
    dyn_mb_shape ref = {0};
    ref.rows = 1;
    ref.enc_len = cfg->max_seqlen;
    ref.dec_len = cfg->kind == DYN_MODEL_T5 ? cfg->max_seqlen : 0;
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        w[k] = 0.0;
        if (!dyn_cost_kind_present(cfg, (dyn_layer_kind)k)) continue;
        dyn_layer_cost lc;
        dyn_status st = dyn_cost_layer(p->cm, (dyn_layer_kind)k, &ref, DYN_RECOMPUTE_NONE, &lc, err);
        if (st != DYN_OK) return st;
        w[k] = lc.fwd_ms + lc.bwd_ms;
    }
    return DYN_OK;
}

/* Counts of each kind per stage from a flattened layout; 0 when it is not
 * one (a kind out of range, stages not increasing, a stage without a
 * transformer block). */
static int layout_counts(stage_layers *st, int32_t S, int32_t n_layers, const int32_t *kind,
                         const int32_t *first)
{
    if (first[0] != 0 || first[S] != n_layers) return 0;
    for (int32_t s = 0; s < S; s++) {
        stage_layers L = {0, 0, 0, 0, 0};
        if (first[s + 1] <= first[s]) return 0;
        for (int32_t l = first[s]; l < first[s + 1]; l++) {
            switch (kind[l]) {
            case DYN_LAYER_EMBED: L.embed++; break;
            case DYN_LAYER_ENCODER: L.n_enc++; break;
            case DYN_LAYER_DECODER: L.n_dec++; break;
            case DYN_LAYER_LM_HEAD: L.head++; break;
            case DYN_LAYER_BRIDGE: L.bridge++; break;
            default: return 0;
            }
        }
        if (L.n_enc + L.n_dec < 1) return 0;
        st[s] = L;
    }
    return 1;
}

dyn_status dyn_planner_set_stage_layout(dyn_planner *p, int32_t n_stages, int32_t n_layers,
                                        const int32_t *layer_kind, const int32_t *stage_first,
                                        dyn_error *err)
{
    if (p == NULL || p->cm == NULL || layer_kind == NULL || stage_first == NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "stage layout: no planner with a cost model, or no layout");
    if (p->opt.stage_objective == DYN_STAGE_OBJ_EVEN || p->opt.stage_objective == DYN_STAGE_OBJ_BOTH) return DYN_OK;
    stage_ctx *c = p->owned_ctx;
    if (n_stages != c->S || n_layers < n_stages)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "stage layout: %d stages of %d layers for a planner of %d stages",
                             n_stages, n_layers, c->S);
    stage_layers *st = dyn_calloc((size_t)n_stages, sizeof *st, "stage layout", err);
    if (st == NULL) return DYN_ERR_NOMEM;
    if (!layout_counts(st, n_stages, n_layers, layer_kind, stage_first)) {
        free(st);
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "stage layout: not a split of the model's layers into %d stages",
                             n_stages);
    }
    double w[DYN_LAYER_KIND_COUNT];
    dyn_status rc = split_weights(p, w, err);
    if (rc != DYN_OK) {
        free(st);
        return rc;
    }
    double states = 0.0, heaviest = -1.0;
    int32_t b = 0;
    for (int32_t s = 0; s < n_stages; s++) {
        const stage_layers *L = &st[s];
        int32_t count[DYN_LAYER_KIND_COUNT] = {L->embed, L->n_enc, L->n_dec, L->head, L->bridge};
        double load = 0.0, st_mb = 0.0;
        for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
            load += count[k] * w[k];
            st_mb += count[k] * dyn_cost_layer_states_mb(p->cm, (dyn_layer_kind)k);
        }
        if (load > heaviest) {
            heaviest = load;
            b = s;
        }
        if (st_mb > states) states = st_mb;
    }
    free(c->st);
    c->st = st;
    c->bneck = p->opt.stage_objective == DYN_STAGE_OBJ_BOTTLENECK ? b : -1;
    return plan_reset_costs(p, states, err);
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
