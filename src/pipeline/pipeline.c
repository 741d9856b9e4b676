/*
 * pipeline.c — a global batch's micro-batches and every replica's validated,
 * simulated execution plan (include/dynapipe/pipeline.h).
 *
 * The glue only: micro-batching is src/plan's, stage costs src/sim's
 * batch_costs.c (over src/sched's layer-to-stage assignment), schedules
 * src/sched's, the auto search src/sim's auto.c. What this file adds is the
 * one sequence every user needs — costs, schedule, validate, simulate, and
 * the map from plan micro-batches back to the planner's — so that the CLI,
 * the runtime and the binding cannot drift apart.
 */
#include "dynapipe/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline_internal.h" /* defines: pipe_knob_seq_*, pipe_candidate_baseline */
#include "sim/sim_internal.h"           /* defines: sim_stage_costs_permute */
#include "util/util.h"                  /* defines: dyn_calloc, DYN_RESERVE */

struct dyn_pipeline {
    dyn_planner *planner;    /* borrowed */
    const dyn_cost_model *cm;
    dyn_pipeline_options opt;
    dyn_batch_costs *bc;     /* stage assignment once, costs per batch and replica */
    dyn_sim *sim;            /* workspace of auto and of the final simulation */
    int32_t *replica_mbs;    /* [cap_mbs] scratch: a replica's indices into bp->mbs */
    int32_t cap_mbs;
    /* dynapipe with enable_packing: every batch is also planned as each
     * candidate of dyn_pipeline_plan (the DP alone, the baselines at their
     * knob sequences) and the shortest simulated iteration is kept. */
    int candidates;
    int rank_scaled;  /* per-rank factors are set: the candidates' lower bound does not hold */
    int32_t fit_rows; /* rows of max_seqlen one micro-batch fits: the knob sequences' old default */
    dyn_planner *alt; /* DYN_STAGE_OBJ_BOTH: the DP under MAX over the run's split (owned); else NULL */
};

void dyn_pipeline_options_default(dyn_pipeline_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->schedule = DYN_SCHEDULE_AUTO;
    opt->order_groups = DYN_ORDER_MAX_GROUPS;
}

void dyn_replica_plan_free(dyn_replica_plan *r)
{
    if (r == NULL) return;
    dyn_exec_plan_free(&r->plan);
    dyn_stage_costs_free(&r->costs);
    free(r->mb_index);
    free(r->rank_busy_ms);
    free(r->rank_peak_mb);
    memset(r, 0, sizeof *r);
}

void dyn_pipeline_result_free(dyn_pipeline_result *r)
{
    if (r == NULL) return;
    for (int32_t i = 0; r->replicas && i < r->n_replicas; i++) dyn_replica_plan_free(&r->replicas[i]);
    free(r->replicas);
    dyn_batch_plan_free(&r->batch);
    memset(r, 0, sizeof *r);
}

/* ---- one replica from a cost function ------------------------------------ */

/* Auto: the best (schedule, recompute, order); out->costs are its reordered
 * costs and out->mb_index its order. */
static dyn_status build_auto(dyn_sim *sim, const dyn_replica_request *rq, dyn_costs_fn costs_fn,
                             void *costs_ctx, const dyn_mb_shape *shapes, const dyn_sim_options *simopt,
                             dyn_replica_plan *out, dyn_error *err)
{
    const dyn_stage_costs *c1;
    dyn_status st = costs_fn(costs_ctx, 1, DYN_RECOMPUTE_NONE, &c1, err);
    if (st != DYN_OK) return st;
    dyn_auto_options ao;
    memset(&ao, 0, sizeof ao);
    ao.n_ranks = rq->n_ranks;
    ao.chunks = rq->auto_chunks;
    ao.memory_limit_mb = rq->memory_limit_mb;
    ao.order_groups = rq->order_groups;
    ao.replica = rq->replica;
    dyn_auto_choice choice;
    memset(&choice, 0, sizeof choice);
    out->mb_index = dyn_calloc((size_t)c1->n_microbatches, sizeof(int32_t), "schedule order", err);
    if (out->mb_index == NULL) return DYN_ERR_NOMEM;
    choice.order = out->mb_index;
    st = dyn_schedule_auto(sim, costs_fn, costs_ctx, shapes, &ao, simopt, &choice, &out->plan, &out->costs, err);
    if (st != DYN_OK) return st;
    out->schedule = choice.schedule;
    out->recompute = choice.recompute;
    out->chunks = choice.chunks;
    return DYN_OK;
}

/* A named schedule in the given order; out->costs is a copy of costs_fn's. */
static dyn_status build_named(const dyn_replica_request *rq, dyn_costs_fn costs_fn, void *costs_ctx,
                              const dyn_mb_shape *shapes, dyn_replica_plan *out, dyn_error *err)
{
    dyn_schedule kind = (dyn_schedule)rq->schedule;
    int32_t v = kind == DYN_SCHEDULE_INTERLEAVED ? rq->chunks : 1;
    if (kind == DYN_SCHEDULE_INTERLEAVED && v < 2)
        return dyn_error_set(err, DYN_ERR_INFEASIBLE, "the interleaved schedule needs --chunks 2 or more");
    const dyn_stage_costs *costs;
    dyn_status st = costs_fn(costs_ctx, v, rq->recompute, &costs, err);
    if (st != DYN_OK) return st;
    int32_t M = costs->n_microbatches;
    out->mb_index = dyn_calloc((size_t)M, sizeof(int32_t), "schedule order", err);
    if (out->mb_index == NULL) return DYN_ERR_NOMEM;
    for (int32_t i = 0; i < M; i++) out->mb_index[i] = i;
    if ((st = sim_stage_costs_permute(costs, out->mb_index, &out->costs, err)) != DYN_OK) return st;
    dyn_sched_options so;
    dyn_sched_options_default(&so);
    so.n_ranks = rq->n_ranks;
    so.chunks = v;
    so.memory_limit_mb = rq->memory_limit_mb;
    so.recompute = rq->recompute;
    so.replica = rq->replica;
    if ((st = dyn_schedule_build(kind, &out->costs, shapes, &so, &out->plan, err)) != DYN_OK) return st;
    out->schedule = kind;
    out->recompute = rq->recompute;
    out->chunks = v;
    return DYN_OK;
}

/* The predicted figures of the validated plan: one simulation without events. */
static dyn_status simulate_plan(dyn_sim *sim, const dyn_replica_request *rq, const dyn_sim_options *simopt,
                                dyn_replica_plan *out, dyn_error *err)
{
    dyn_sim_options quiet = *simopt;
    quiet.skip_events = 1;
    const dyn_sim_result *res;
    dyn_status st = dyn_sim_run(sim, &out->plan, &out->costs, &quiet, &res, err);
    if (st != DYN_OK) return st;
    double limit = rq->memory_limit_mb;
    if (limit > 0 && res->max_peak_mb > limit * (1 + 1e-9))
        return dyn_error_set(err, DYN_ERR_INFEASIBLE, "simulated peak memory %.1f MB exceeds the limit of %.1f MB",
                             res->max_peak_mb, limit);
    int32_t R = out->plan.n_ranks;
    out->rank_busy_ms = dyn_calloc((size_t)R, sizeof(double), "replica plan", err);
    out->rank_peak_mb = dyn_calloc((size_t)R, sizeof(double), "replica plan", err);
    if (out->rank_busy_ms == NULL || out->rank_peak_mb == NULL) return DYN_ERR_NOMEM;
    for (int32_t r = 0; r < R && r < res->n_ranks; r++) {
        out->rank_busy_ms[r] = res->busy_ms[r];
        out->rank_peak_mb[r] = res->peak_mb[r];
    }
    out->makespan_ms = res->makespan_ms;
    out->max_peak_mb = res->max_peak_mb;
    return DYN_OK;
}

dyn_status dyn_replica_plan_from_costs(dyn_sim *sim, const dyn_replica_request *rq, dyn_costs_fn costs_fn,
                                  void *costs_ctx, const dyn_mb_shape *shapes,
                                  const dyn_sim_options *simopt, dyn_replica_plan *out,
                                  dyn_error *err)
{
    memset(out, 0, sizeof *out);
    if (sim == NULL || rq == NULL || costs_fn == NULL || simopt == NULL || rq->schedule < 0 ||
        rq->schedule > DYN_SCHEDULE_AUTO)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "replica plan: missing argument or schedule %d out of range",
                             rq ? (int)rq->schedule : -1);
    out->replica = rq->replica;
    dyn_status st = rq->schedule == DYN_SCHEDULE_AUTO
                        ? build_auto(sim, rq, costs_fn, costs_ctx, shapes, simopt, out, err)
                        : build_named(rq, costs_fn, costs_ctx, shapes, out, err);
    /* A plan is validated before anyone uses it. */
    if (st == DYN_OK) st = dyn_exec_plan_validate(&out->plan, err);
    if (st == DYN_OK) st = simulate_plan(sim, rq, simopt, out, err);
    if (st != DYN_OK) {
        dyn_replica_plan_free(out);
        return st;
    }
    out->n_microbatches = out->plan.n_microbatches;
    return DYN_OK;
}

/* ---- the handle ------------------------------------------------------------ */

/* A stage-aware objective (plan.h DYN_STAGE_OBJ_*) plans dynapipe over the
 * layers each rank really holds: the run's split, as the runtime's (v = 1).
 * The baselines keep the paper's objective (theirs only ranks knob values). */
static dyn_status give_layout(dyn_pipeline *p, const dyn_cost_model *cm, const dyn_plan_options *po,
                              dyn_error *err)
{
    if (po->stage_objective == DYN_STAGE_OBJ_EVEN || po->method != DYN_BATCH_DYNAPIPE) return DYN_OK;
    dyn_error local; /* err may be NULL (common.h); the code is read back */
    if (err == NULL) err = &local;
    dyn_planner *planner = p->planner;
    if (po->stage_objective == DYN_STAGE_OBJ_BOTH) { /* BOTH: a second planner under MAX */
        dyn_plan_options o = *po;
        o.stage_objective = DYN_STAGE_OBJ_MAX;
        if ((p->alt = planner = dyn_planner_create(cm, &o, err)) == NULL) return err->code;
    }
    dyn_stage_assignment a;
    dyn_status st = dyn_stage_assign_run(cm, po->stages, po->split_weight, &a, err);
    if (st != DYN_OK) return st;
    st = dyn_planner_set_stage_layout(planner, a.n_stages, a.n_layers, a.layer_kind, a.stage_first, err);
    dyn_stage_assignment_free(&a);
    if (st == DYN_ERR_INFEASIBLE && p->alt) { /* the real split's fullest stage leaves no memory: even only */
        dyn_planner_free(p->alt);
        p->alt = NULL;
        st = DYN_OK;
    }
    return st;
}

dyn_pipeline *dyn_pipeline_create(dyn_planner *planner, const dyn_pipeline_options *opt, dyn_error *err)
{
    if (planner == NULL || opt == NULL) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "pipeline: missing planner or options");
        return NULL;
    }
    if (opt->schedule < 0 || opt->schedule > DYN_SCHEDULE_AUTO || opt->order_groups < 1 ||
        opt->order_groups > DYN_ORDER_MAX_GROUPS) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "pipeline: schedule %d or order groups %d out of range",
                      opt->schedule, opt->order_groups);
        return NULL;
    }
    const dyn_cost_model *cm = dyn_planner_cost_model(planner);
    if (cm == NULL) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "pipeline: the planner has no cost model (a custom planner)");
        return NULL;
    }
    /* Refused here rather than at the first batch, so no run can plan with
     * a schedule it cannot build. */
    if (opt->schedule == DYN_SCHEDULE_INTERLEAVED && dyn_planner_options(planner)->chunks < 2) {
        dyn_error_set(err, DYN_ERR_INFEASIBLE, "the interleaved schedule needs --chunks 2 or more");
        return NULL;
    }
    dyn_pipeline *p = dyn_calloc(1, sizeof *p, "pipeline", err);
    if (p == NULL) return NULL;
    p->planner = planner;
    p->cm = cm;
    p->opt = *opt;
    const dyn_plan_options *po = dyn_planner_options(planner);
    p->bc = dyn_batch_costs_create(cm, po->stages, po->chunks, po->split_weight, err);
    if (p->bc && give_layout(p, cm, po, err) != DYN_OK) {
        dyn_pipeline_free(p);
        return NULL;
    }
    p->sim = p->bc ? dyn_sim_create(err) : NULL;
    if (p->sim == NULL) {
        dyn_pipeline_free(p);
        return NULL;
    }
    if (po->method == DYN_BATCH_DYNAPIPE && po->enable_packing) {
        p->candidates = 1;
        if (dyn_planner_fit_rows(planner, &p->fit_rows, err) != DYN_OK) {
            dyn_pipeline_free(p);
            return NULL;
        }
    }
    return p;
}

dyn_status dyn_pipeline_set_rank_scale(dyn_pipeline *p, const double *fwd, const double *bwd, dyn_error *err)
{
    dyn_status st = dyn_batch_costs_set_rank_scale(p->bc, fwd, bwd, err);
    if (st == DYN_OK) p->rank_scaled = fwd != NULL || bwd != NULL;
    return st;
}

void dyn_pipeline_free(dyn_pipeline *p)
{
    if (p == NULL) return;
    dyn_sim_free(p->sim);
    dyn_batch_costs_free(p->bc);
    dyn_planner_free(p->alt);
    free(p->replica_mbs);
    free(p);
}

int32_t dyn_pipeline_chunks(const dyn_pipeline *p)
{
    return dyn_batch_costs_chunks(p->bc);
}

/* p->replica_mbs[0..*m): the indices in bp->mbs of replica's micro-batches,
 * in plan order (the order dyn_stage_costs_from_batch takes them in). */
static dyn_status replica_mbs(dyn_pipeline *p, const dyn_batch_plan *bp, int32_t replica, int32_t *m,
                              dyn_error *err)
{
    if (bp->n_microbatches > p->cap_mbs) {
        size_t c = (size_t)p->cap_mbs;
        if (DYN_RESERVE(p->replica_mbs, c, bp->n_microbatches) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for a replica's micro-batches");
        p->cap_mbs = c > INT32_MAX ? INT32_MAX : (int32_t)c;
    }
    *m = 0;
    for (int32_t i = 0; i < bp->n_microbatches; i++)
        if (bp->mbs[i].replica == replica) p->replica_mbs[(*m)++] = i;
    return DYN_OK;
}

dyn_status dyn_pipeline_plan_replica(dyn_pipeline *p, const dyn_batch_plan *bp, int32_t replica,
                                      dyn_schedule schedule, dyn_replica_plan *out, dyn_error *err)
{
    memset(out, 0, sizeof *out);
    const dyn_plan_options *po = dyn_planner_options(p->planner);
    if (bp == NULL || replica < 0 || replica >= po->dp)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "pipeline: replica %d of %d", replica, po->dp);
    out->replica = replica;
    int32_t m = 0;
    dyn_status st = replica_mbs(p, bp, replica, &m, err);
    if (st != DYN_OK || m == 0) return st; /* m == 0: an idle replica */
    if ((st = dyn_batch_costs_set_batch(p->bc, bp, replica, err)) != DYN_OK) return st;
    dyn_replica_request rq = {
        .schedule = schedule,
        .n_ranks = po->stages,
        .chunks = po->chunks,
        .auto_chunks = dyn_batch_costs_chunks(p->bc),
        .memory_limit_mb = po->memory_limit_mb,
        .recompute = po->recompute,
        .order_groups = p->opt.order_groups,
        .replica = replica,
    };
    dyn_sim_options so;
    dyn_sim_options_from_machine(&so, dyn_cost_model_machine(p->cm), bp->real_tokens);
    so.skip_events = 1; /* searches and figures only: no per-instruction events */
    const dyn_mb_shape *shapes = dyn_batch_costs_shapes(p->bc, NULL);
    if ((st = dyn_replica_plan_from_costs(p->sim, &rq, dyn_batch_costs_get, p->bc, shapes, &so, out, err)) != DYN_OK)
        return st;
    /* The plan's micro-batch j is the replica's mb_index[j]-th: map it to bp. */
    for (int32_t j = 0; j < out->n_microbatches; j++) out->mb_index[j] = p->replica_mbs[out->mb_index[j]];
    return DYN_OK;
}

/* The slowest replica's simulated makespan (ms). */
static double result_ms(const dyn_pipeline_result *r)
{
    double ms = 0.0;
    for (int32_t k = 0; k < r->n_replicas; k++)
        if (r->replicas[k].makespan_ms > ms) ms = r->replicas[k].makespan_ms;
    return ms;
}

/* Every replica's plan of out->batch; on failure out is freed. */
static dyn_status build_replicas(dyn_pipeline *p, dyn_pipeline_result *out, dyn_error *err)
{
    dyn_status st;
    int32_t d = dyn_planner_options(p->planner)->dp;
    out->replicas = dyn_calloc((size_t)d, sizeof *out->replicas, "replica plans", err);
    if (out->replicas == NULL) {
        dyn_pipeline_result_free(out);
        return DYN_ERR_NOMEM;
    }
    out->n_replicas = d;
    for (int32_t r = 0; r < d; r++) {
        st = dyn_pipeline_plan_replica(p, &out->batch, r, p->opt.schedule, &out->replicas[r], err);
        if (st != DYN_OK) {
            char where[32];
            snprintf(where, sizeof where, "replica %d", r);
            dyn_error_prefix(err, st, where);
            dyn_pipeline_result_free(out);
            return st;
        }
    }
    return DYN_OK;
}

/* The batch planned by p's planner (its own method) and every replica's plan. */
static dyn_status plan_with(dyn_pipeline *p, const dyn_sample *samples, int32_t n, dyn_pipeline_result *out,
                            dyn_error *err)
{
    memset(out, 0, sizeof *out);
    dyn_status st = dyn_planner_plan(p->planner, samples, n, &out->batch, err);
    if (st != DYN_OK) {
        dyn_batch_plan_free(&out->batch);
        return st;
    }
    return build_replicas(p, out, err);
}

/* out's ideal bound, optimizer step, iteration and efficiency. */
static dyn_status fill_bound(dyn_pipeline *p, const dyn_sample *samples, int32_t n, dyn_pipeline_result *out,
                             dyn_error *err)
{
    const dyn_plan_options *po = dyn_planner_options(p->planner);
    dyn_status st = dyn_ideal_bound_of(p->cm, samples, n, po->stages, po->dp, &out->ideal, err);
    if (st != DYN_OK) return st;
    out->step_ms = 0.0;
    for (int32_t r = 0; r < out->n_replicas; r++) {
        double ms = dyn_replica_plan_step_ms(p->cm, &out->replicas[r]);
        if (ms > out->step_ms) out->step_ms = ms;
    }
    out->iteration_ms = result_ms(out) + out->step_ms;
    out->efficiency = out->iteration_ms > 0 ? out->ideal.bound_ms / out->iteration_ms : 0.0;
    return DYN_OK;
}

/* The candidates' search state: the best result so far (best->n_replicas
 * == 0: none yet), its iteration time, the planning time summed over every
 * candidate, and the first error of a candidate that could not be planned
 * (reported when none could). */
typedef struct cand_search {
    dyn_pipeline_result *best;
    double best_ms;
    double planned_ms;
    dyn_status first_st;
    dyn_error first_err;
} cand_search;

/* A lower bound of any schedule's iteration for batch plan bp (ms): the
 * busiest replica's work summed over every stage and micro-batch, no
 * recompute, spread evenly over the S ranks; messages, bubbles and
 * recompute only add to it. 0 when it does not hold (per-rank factors). */
static dyn_status work_bound_ms(const dyn_pipeline *p, const dyn_batch_plan *bp, double *lb, dyn_error *err)
{
    *lb = 0.0;
    if (p->rank_scaled) return DYN_OK;
    const dyn_plan_options *po = dyn_planner_options(p->planner);
    double *rep = dyn_calloc((size_t)po->dp, sizeof(double), "replica work", err);
    if (rep == NULL) return DYN_ERR_NOMEM;
    dyn_status st = DYN_OK;
    for (int32_t i = 0; i < bp->n_microbatches && st == DYN_OK; i++) {
        double ms;
        st = pipe_model_ms(p->cm, bp->mbs[i].shape, bp->mbs[i].shape.rows, &ms, err);
        if (st == DYN_OK) rep[bp->mbs[i].replica] += ms;
    }
    for (int32_t r = 0; r < po->dp; r++)
        if (rep[r] / po->stages > *lb) *lb = rep[r] / po->stages;
    free(rep);
    return st;
}

/* Plan the batch as one candidate (method -1: the planner's own plan, -2:
 * p->alt's DP, else plan_as that method and knob) and keep it if its
 * iteration is shorter than the best so far (ties: the earlier candidate). *single: it is one
 * micro-batch. A candidate whose work alone cannot beat the best is not
 * scheduled (work_bound_ms). DYN_ERR_INFEASIBLE: this candidate does not
 * fit (recorded); other errors are the caller's. */
static dyn_status try_candidate(dyn_pipeline *p, cand_search *cs, int method, int64_t knob, const dyn_sample *samples,
                                int32_t n, int *single, dyn_error *err)
{
    dyn_pipeline_result alt;
    dyn_error e2;
    memset(&alt, 0, sizeof alt);
    dyn_status st = method == -1 ? dyn_planner_plan(p->planner, samples, n, &alt.batch, &e2)
                    : method == -2
                        ? dyn_planner_plan_as(p->alt, DYN_BATCH_DYNAPIPE, 0, samples, n, &alt.batch, &e2)
                        : dyn_planner_plan_as(p->planner, (dyn_batching)method, knob, samples, n, &alt.batch, &e2);
    if (st == DYN_OK && cs->best->n_replicas > 0) {
        double lb;
        if ((st = work_bound_ms(p, &alt.batch, &lb, &e2)) == DYN_OK && lb >= cs->best_ms) {
            cs->planned_ms += alt.batch.plan_time_ms;
            *single = alt.batch.n_microbatches == 1;
            dyn_batch_plan_free(&alt.batch);
            return DYN_OK; /* it cannot be faster */
        }
    }
    if (st == DYN_OK) st = build_replicas(p, &alt, &e2);
    else dyn_batch_plan_free(&alt.batch);
    if (st != DYN_OK) {
        if (cs->first_st == DYN_OK) {
            cs->first_st = st;
            cs->first_err = e2;
        }
        if (st != DYN_ERR_INFEASIBLE) *err = e2;
        return st;
    }
    cs->planned_ms += alt.batch.plan_time_ms;
    *single = alt.batch.n_microbatches == 1;
    double ms = result_ms(&alt);
    if (cs->best->n_replicas == 0 || ms < cs->best_ms) {
        cs->best_ms = ms;
        dyn_pipeline_result_free(cs->best);
        *cs->best = alt;
    } else {
        dyn_pipeline_result_free(&alt);
    }
    return DYN_OK;
}

dyn_status dyn_pipeline_plan(dyn_pipeline *p, const dyn_sample *samples, int32_t n,
                             dyn_pipeline_result *out, dyn_error *err)
{
    /* err may be NULL (common.h), but the candidates' first failure is
     * copied back into it: keep a record of our own then. */
    dyn_error local;
    if (err == NULL) err = &local;
    memset(out, 0, sizeof *out);
    if (p == NULL) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "pipeline: no handle");
    if (!p->candidates) {
        dyn_status st = plan_with(p, samples, n, out, err);
        if (st == DYN_OK) st = fill_bound(p, samples, n, out, err);
        if (st != DYN_OK) dyn_pipeline_result_free(out);
        return st;
    }
    /* Never behind: the planner's plan (the DP's, or a document-masked
     * packing with a lower DP objective), the DP alone, and every baseline
     * at each value of its knob sequence (pipeline_internal.h: it includes
     * the value dyn_pipeline_tune would choose for any set of batches
     * holding this one), each scheduled and simulated as this pipeline
     * schedules; the shortest iteration wins. The DP objective does not see
     * the pipeline's real bubbles (per-stage times, the schedule), so only
     * the simulation can tell which is faster. */
    cand_search cs = {.best = out, .best_ms = 0.0, .planned_ms = 0.0, .first_st = DYN_OK};
    int single = 0;
    dyn_status st = try_candidate(p, &cs, -1, 0, samples, n, &single, err);
    if (st == DYN_OK || st == DYN_ERR_INFEASIBLE) st = try_candidate(p, &cs, DYN_BATCH_DYNAPIPE, 0, samples, n, &single, err);
    if (p->alt && (st == DYN_OK || st == DYN_ERR_INFEASIBLE)) /* BOTH: the DP over the run's split */
        st = try_candidate(p, &cs, -2, 0, samples, n, &single, err);
    const dyn_plan_options *po = dyn_planner_options(p->planner);
    for (int b = 0; b < PIPE_N_CANDIDATE_BASELINES; b++) { /* pipeline_internal.h */
        if (st != DYN_OK && st != DYN_ERR_INFEASIBLE) break;
        st = DYN_OK;
        dyn_plan_options bo = *po;
        bo.method = pipe_candidate_baseline(b);
        pipe_knob_seq seq;
        pipe_knob_seq_init(&seq, p->cm, &bo, p->fit_rows);
        for (int64_t v; (v = pipe_knob_seq_next(&seq)) != 0;) {
            st = try_candidate(p, &cs, (int)bo.method, v, samples, n, &single, err);
            if (st != DYN_OK || single) break; /* larger values need more memory, or plan the same */
        }
    }
    if (st == DYN_ERR_INFEASIBLE) st = DYN_OK;
    if (st == DYN_OK && out->n_replicas == 0) { /* no candidate fits: the first one's reason */
        st = cs.first_st;
        *err = cs.first_err;
    }
    if (st == DYN_OK) {
        out->batch.plan_time_ms = cs.planned_ms;
        st = fill_bound(p, samples, n, out, err);
    }
    if (st != DYN_OK) dyn_pipeline_result_free(out);
    return st;
}
