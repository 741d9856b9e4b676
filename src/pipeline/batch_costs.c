/*
 * batch_costs.c — per-stage costs of a global batch's micro-batches, for the
 * simulator and the schedule search: the glue between the planner's output
 * (dyn_batch_plan), the cost model and src/sched's layer-to-stage
 * assignment.
 *
 * The layer-to-stage assignment is a property of the training run, not of a
 * batch, so it is computed once per chunk count (v = 1, and v = chunks for
 * the interleaved schedule), balanced for the run's split weights (the
 * micro-batches of a sample of its batches, dyn_pipeline_tune_split) or by
 * default for the longest sequence the model takes (one row of max_seqlen
 * tokens; T5: max_seqlen on both sides) without recomputation, and reused
 * for every batch and recompute mode. Costs of the
 * current batch are built lazily per (v, recompute) and cached until the
 * next batch.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/pipeline.h"
#include "util/util.h" /* defines: dyn_calloc */

struct dyn_batch_costs {
    const dyn_cost_model *cm;
    int32_t n_ranks, chunks;
    dyn_stage_assignment assign[2]; /* [0]: v = 1, [1]: v = chunks (if > 1 and possible) */
    int have_chunked;               /* the S * v assignment exists */
    char chunked_error[DYN_ERROR_MSG_MAX]; /* why not, if chunks > 1 and it does not */
    const dyn_batch_plan *bp;
    int32_t replica;
    dyn_mb_shape *shapes; /* [M] of the replica's micro-batches */
    int32_t n_mb;
    int have[2][DYN_RECOMPUTE_COUNT];
    dyn_stage_costs costs[2][DYN_RECOMPUTE_COUNT];
    double *rank_scale; /* [2 * n_ranks]: fwd then bwd factor per rank; NULL: none */
};

/* The per-rank factors (dyn_batch_costs_set_rank_scale) on freshly built
 * costs. */
static void scale_costs(const dyn_batch_costs *bc, dyn_stage_costs *c)
{
    if (bc->rank_scale == NULL) return;
    const double *f = bc->rank_scale, *b = bc->rank_scale + bc->n_ranks;
    for (int32_t j = 0; j < c->n_microbatches; j++)
        for (int32_t s = 0; s < c->n_stages; s++) {
            size_t k = (size_t)j * (size_t)c->n_stages + (size_t)s;
            int32_t r = s % bc->n_ranks;
            c->fwd_ms[k] *= f[r];
            c->bwd_ms[k] *= b[r];
            c->bwd_input_ms[k] *= b[r];
            c->bwd_weight_ms[k] *= b[r];
        }
}

dyn_status dyn_batch_costs_set_rank_scale(dyn_batch_costs *bc, const double *fwd, const double *bwd,
                                          dyn_error *err)
{
    if (fwd == NULL || bwd == NULL) {
        free(bc->rank_scale);
        bc->rank_scale = NULL;
        return DYN_OK;
    }
    for (int32_t r = 0; r < bc->n_ranks; r++)
        if (!(fwd[r] > 0) || !(bwd[r] > 0) || !isfinite(fwd[r]) || !isfinite(bwd[r]))
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "stage costs: rank %d time scales must be finite and > 0 (got %g, %g)", r, fwd[r],
                                 bwd[r]);
    if (bc->rank_scale == NULL &&
        (bc->rank_scale = dyn_calloc(2 * (size_t)bc->n_ranks, sizeof(double), "rank time scales", err)) == NULL)
        return DYN_ERR_NOMEM;
    memcpy(bc->rank_scale, fwd, (size_t)bc->n_ranks * sizeof(double));
    memcpy(bc->rank_scale + bc->n_ranks, bwd, (size_t)bc->n_ranks * sizeof(double));
    return DYN_OK;
}

static void drop_batch(dyn_batch_costs *bc)
{
    for (int a = 0; a < 2; a++)
        for (int rc = 0; rc < DYN_RECOMPUTE_COUNT; rc++) {
            if (bc->have[a][rc]) dyn_stage_costs_free(&bc->costs[a][rc]);
            bc->have[a][rc] = 0;
        }
    free(bc->shapes);
    bc->shapes = NULL;
    bc->n_mb = 0;
    bc->bp = NULL;
}

void dyn_batch_costs_free(dyn_batch_costs *bc)
{
    if (bc == NULL) return;
    drop_batch(bc);
    free(bc->rank_scale);
    dyn_stage_assignment_free(&bc->assign[0]);
    dyn_stage_assignment_free(&bc->assign[1]);
    free(bc);
}

dyn_batch_costs *dyn_batch_costs_create(const dyn_cost_model *cm, int32_t n_ranks, int32_t chunks,
                                        const double *split_weight, dyn_error *err)
{
    if (cm == NULL || n_ranks < 1 || chunks < 1) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "stage costs: %d stages x %d chunks", n_ranks, chunks);
        return NULL;
    }
    dyn_batch_costs *bc = dyn_calloc(1, sizeof *bc, "stage costs", err);
    if (bc == NULL) return NULL;
    bc->cm = cm;
    bc->n_ranks = n_ranks;
    bc->chunks = chunks;
    if (dyn_stage_assign_run(cm, n_ranks, split_weight, &bc->assign[0], err) != DYN_OK) {
        dyn_batch_costs_free(bc);
        return NULL;
    }
    /* S * v stages may be more than the model has layers: then only the
     * chunked schedules are unavailable, reported when asked for. */
    if (chunks > 1) {
        dyn_error e;
        if (dyn_stage_assign_run(cm, n_ranks * chunks, split_weight, &bc->assign[1], &e) == DYN_OK)
            bc->have_chunked = 1;
        else
            snprintf(bc->chunked_error, sizeof bc->chunked_error, "%s", e.msg);
    }
    return bc;
}

dyn_status dyn_batch_costs_set_batch(dyn_batch_costs *bc, const dyn_batch_plan *bp, int32_t replica,
                                     dyn_error *err)
{
    drop_batch(bc);
    bc->bp = bp;
    bc->replica = replica;
    /* Shapes come with the v = 1, no-recompute costs, built now so that
     * the micro-batch count is known. */
    dyn_status st = dyn_stage_costs_from_batch(bc->cm, &bc->assign[0], bp, replica, DYN_RECOMPUTE_NONE,
                                               &bc->costs[0][0], &bc->shapes, err);
    if (st != DYN_OK) {
        bc->shapes = NULL;
        return st;
    }
    scale_costs(bc, &bc->costs[0][0]);
    bc->have[0][0] = 1;
    bc->n_mb = bc->costs[0][0].n_microbatches;
    return DYN_OK;
}

dyn_status dyn_batch_costs_get(void *ctx, int32_t chunks, dyn_recompute rc,
                               const dyn_stage_costs **out, dyn_error *err)
{
    dyn_batch_costs *bc = ctx;
    if (bc->bp == NULL) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "stage costs: no batch set");
    int a = chunks > 1;
    if ((a && chunks != bc->chunks) || (unsigned)rc >= DYN_RECOMPUTE_COUNT)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "stage costs: %d chunks (configured %d)", chunks,
                             bc->chunks);
    if (a && !bc->have_chunked)
        return dyn_error_set(err, DYN_ERR_INFEASIBLE, "%d chunks per rank: %s", chunks, bc->chunked_error);
    if (!bc->have[a][rc]) {
        dyn_status st = dyn_stage_costs_from_batch(bc->cm, &bc->assign[a], bc->bp, bc->replica, rc,
                                                   &bc->costs[a][rc], NULL, err);
        if (st != DYN_OK) return st;
        scale_costs(bc, &bc->costs[a][rc]);
        bc->have[a][rc] = 1;
    }
    *out = &bc->costs[a][rc];
    return DYN_OK;
}

int32_t dyn_batch_costs_chunks(const dyn_batch_costs *bc)
{
    return bc->have_chunked ? bc->chunks : 1;
}

const dyn_mb_shape *dyn_batch_costs_shapes(const dyn_batch_costs *bc, int32_t *n_microbatches)
{
    if (n_microbatches) *n_microbatches = bc->n_mb;
    return bc->shapes;
}
