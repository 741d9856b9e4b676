/*
 * auto.c — `--schedule auto`: per global batch, the best schedule x
 * micro-batch order x recompute mode, chosen by simulation; and the plain
 * "this schedule, best order" search it is built from.
 *
 * The schedules come from src/sched (dyn_schedule_build); this file adapts
 * them to the order search's generator interface (permuting the micro-batch
 * shapes along with the costs, so the winning plan carries the right shapes
 * for the runtime) and loops over the candidates.
 *
 * Search: phase 1 schedules every candidate schedule under every recompute
 * mode in the planner's order and simulates it; phase 2 runs the order
 * search (dyn_order_search) on the phase-1 winner only. Searching orders for
 * every schedule would cost (schedules x modes x candidates) generations and
 * simulations, ~10x the 5 ms budget; the choice of schedule and recompute
 * mode depends far more on the micro-batch sizes and the memory limit than
 * on the order, so the order search goes where it pays. All three recompute
 * modes are tried because recomputation is not always slower: under a tight
 * memory limit a schedule throttles (fewer micro-batches in flight) and
 * recomputing can buy back more pipelining than it costs.
 */
#include <stdlib.h>
#include <string.h>

#include "dynapipe/sim.h"
#include "sim/sim_internal.h" /* defines: sim_order_search */
#include "util/util.h" /* defines: dyn_calloc */

typedef struct sched_gen_ctx {
    dyn_schedule kind;
    dyn_sched_options opt;
    const dyn_mb_shape *shapes; /* [M] in the given order, or NULL */
    dyn_mb_shape *scratch;      /* [M] shapes in the candidate order */
} sched_gen_ctx;

static dyn_status gen_build(void *vctx, const dyn_stage_costs *costs, const int32_t *order,
                            dyn_exec_plan *out, dyn_error *err)
{
    sched_gen_ctx *ctx = vctx;
    const dyn_mb_shape *shapes = NULL;
    if (ctx->shapes) {
        for (int32_t i = 0; i < costs->n_microbatches; i++) ctx->scratch[i] = ctx->shapes[order[i]];
        shapes = ctx->scratch;
    }
    return dyn_schedule_build(ctx->kind, costs, shapes, &ctx->opt, out, err);
}

static void gen_free(void *vctx, dyn_exec_plan *plan)
{
    (void)vctx;
    dyn_exec_plan_free(plan);
}

/* dyn_schedule_search; given_ms as sim_order_search (< 0: plain). */
static dyn_status schedule_search(dyn_sim *sim, dyn_schedule kind, const dyn_stage_costs *costs,
                                  const dyn_mb_shape *shapes, const dyn_sched_options *sopt,
                                  const dyn_sim_options *simopt, int32_t order_groups, double given_ms,
                                  dyn_order_result *res, dyn_exec_plan *best_plan,
                                  dyn_stage_costs *best_costs, dyn_error *err)
{
    sched_gen_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.kind = kind;
    ctx.opt = *sopt;
    ctx.shapes = shapes;
    if (shapes) {
        ctx.scratch = dyn_calloc((size_t)costs->n_microbatches, sizeof(dyn_mb_shape), "shapes", err);
        if (ctx.scratch == NULL) return DYN_ERR_NOMEM;
    }
    dyn_sched_gen gen = {gen_build, gen_free, &ctx};
    dyn_status st = sim_order_search(sim, &gen, costs, simopt, order_groups, sopt->memory_limit_mb,
                                     given_ms, res, best_plan, best_costs, err);
    free(ctx.scratch);
    return st;
}

dyn_status dyn_schedule_search(dyn_sim *sim, dyn_schedule kind, const dyn_stage_costs *costs,
                               const dyn_mb_shape *shapes, const dyn_sched_options *sopt,
                               const dyn_sim_options *simopt, int32_t order_groups,
                               dyn_order_result *res, dyn_exec_plan *best_plan,
                               dyn_stage_costs *best_costs, dyn_error *err)
{
    return schedule_search(sim, kind, costs, shapes, sopt, simopt, order_groups, -1.0, res, best_plan,
                           best_costs, err);
}

static int lb_by_release_desc(const void *a, const void *b)
{
    double x = ((const sim_lb_job *)a)->release, y = ((const sim_lb_job *)b)->release;
    return (x < y) - (x > y);
}

static int lb_by_delivery_desc(const void *a, const void *b)
{
    double x = ((const sim_lb_job *)a)->delivery, y = ((const sim_lb_job *)b)->delivery;
    return (x < y) - (x > y);
}

/* A lower bound (ms) on the simulated makespan of schedule k on costs c
 * (S ranks, stage s on rank s % S), in any micro-batch order and for any
 * link model, cheap enough to skip candidates that cannot win. A rank runs
 * one compute instruction at a time. Micro-batch m's work on rank r comes
 * after its forwards through stages 0..r-1 (release h_m) and, except under
 * zero-bubble (whose last instruction on a rank can be a weight-gradient
 * pass that nothing waits for), ends with a backward pass whose gradient
 * must still go back through stages r-1..0 (delivery t_m). The single-
 * machine bound with release and delivery times: for any threshold tau,
 * the micro-batches released at or after tau run all their work after it,
 * so makespan >= tau + their work + their smallest delivery; mirrored for
 * delivery thresholds (with the work that precedes the delivery). Max over
 * ranks and thresholds. (Declared in sim_internal.h for the tests.) */
double sim_makespan_lower_bound(const dyn_stage_costs *c, int k, int32_t S, sim_lb_job *jobs)
{
    int32_t M = c->n_microbatches, n = c->n_stages;
    int zb = k == DYN_SCHEDULE_ZB;
    double lb = 0;
    for (int32_t r = 0; r < S && r < n; r++) {
        for (int32_t mb = 0; mb < M; mb++) {
            const double *f = c->fwd_ms + (size_t)mb * n, *b = c->bwd_ms + (size_t)mb * n;
            const double *bi = c->bwd_input_ms + (size_t)mb * n, *bw = c->bwd_weight_ms + (size_t)mb * n;
            sim_lb_job *j = &jobs[mb];
            j->release = j->delivery = j->work = j->work_nw = 0;
            for (int32_t s = 0; s < r; s++) {
                j->release += f[s];
                j->delivery += zb ? bi[s] : b[s];
            }
            for (int32_t s = r; s < n; s += S) {
                j->work += f[s] + (zb ? bi[s] + bw[s] : b[s]);
                j->work_nw += f[s] + (zb ? bi[s] : b[s]);
            }
        }
        /* Release thresholds: jobs by release, latest first; a prefix is
         * the set released at or after its last member's release. Ties
         * only make a prefix a subset of the true set: still a bound. */
        qsort(jobs, (size_t)M, sizeof *jobs, lb_by_release_desc);
        double work = 0, min_del = 1e300;
        for (int32_t i = 0; i < M; i++) {
            work += jobs[i].work;
            if (jobs[i].delivery < min_del) min_del = jobs[i].delivery;
            double v = jobs[i].release + work + (zb ? 0.0 : min_del);
            if (v > lb) lb = v;
        }
        /* Delivery thresholds: the work before each delivery (all of it,
         * or all but the weight-gradient passes under zero-bubble). */
        qsort(jobs, (size_t)M, sizeof *jobs, lb_by_delivery_desc);
        double work_nw = 0, min_rel = 1e300;
        for (int32_t i = 0; i < M; i++) {
            work_nw += jobs[i].work_nw;
            if (jobs[i].release < min_rel) min_rel = jobs[i].release;
            double v = min_rel + work_nw + jobs[i].delivery;
            if (v > lb) lb = v;
        }
    }
    return lb;
}

/* 1 when a candidate with lower bound lb cannot beat (or tie) an
 * incumbent of best_ms. The bound and a makespan add the same times in
 * different orders, so a bound that a schedule reaches (zero bubble: the
 * run-ahead zb order often does) can come out an ulp above that
 * schedule's makespan; the margin keeps such a candidate. */
static int lb_cannot_win(double lb, double best_ms) { return lb > best_ms + 1e-9 * best_ms; }

/* The running best of an auto search: owns its plan and costs. */
typedef struct auto_best {
    int have;
    int32_t rank; /* its place in the tie-break order (phase 2: after all) */
    dyn_exec_plan plan;
    dyn_stage_costs costs;
} auto_best;

/* One dyn_schedule_auto call: its arguments, its scratch and the running
 * best. */
typedef struct auto_run {
    dyn_sim *sim;
    dyn_costs_fn costs_fn;
    void *costs_ctx;
    const dyn_mb_shape *shapes;
    const dyn_auto_options *ao;
    const dyn_sim_options *simopt;
    dyn_auto_choice *choice;
    int32_t *order;   /* [M] the searched order, scratch */
    sim_lb_job *jobs; /* [M] sim_makespan_lower_bound's scratch */
    auto_best best;
    char why[DYN_ERROR_MSG_MAX]; /* why the last candidate did not fit */
} auto_run;

/* Keep a search's result (plan, costs, its order in a->order) as the best
 * when it is faster than the best so far, or as fast and earlier in the
 * tie-break order; else free it. */
static void keep_if_best(auto_run *a, int k, int32_t v, dyn_recompute rc, int32_t rank,
                         const dyn_order_result *res, dyn_exec_plan *plan, dyn_stage_costs *pcosts, int32_t M)
{
    auto_best *best = &a->best;
    dyn_auto_choice *choice = a->choice;
    if (best->have && (res->makespan_ms > choice->makespan_ms ||
                       (res->makespan_ms == choice->makespan_ms && rank >= best->rank))) {
        dyn_exec_plan_free(plan);
        dyn_stage_costs_free(pcosts);
        return;
    }
    if (best->have) {
        dyn_exec_plan_free(&best->plan);
        dyn_stage_costs_free(&best->costs);
    }
    best->plan = *plan;
    best->costs = *pcosts;
    best->have = 1;
    best->rank = rank;
    choice->schedule = (dyn_schedule)k;
    choice->recompute = rc;
    choice->chunks = v;
    choice->makespan_ms = res->makespan_ms;
    choice->max_peak_mb = res->max_peak_mb;
    choice->order_candidate = res->candidate;
    memcpy(choice->order, a->order, sizeof(int32_t) * (size_t)M);
}

/* Search schedule k (chunks v, recompute rc) with `groups` order groups and
 * keep it in a->best / a->choice if it beats them. Returns DYN_OK also when
 * it does not fit (then a->why says why); other errors as
 * dyn_schedule_search. */
static dyn_status try_schedule(auto_run *a, int k, int32_t v, dyn_recompute rc, int32_t groups, double given_ms,
                               int32_t rank, dyn_error *err)
{
    const dyn_stage_costs *costs = NULL;
    dyn_status st = a->costs_fn(a->costs_ctx, v, rc, &costs, err);
    if (st != DYN_OK) return st;
    dyn_sched_options so;
    dyn_sched_options_default(&so);
    so.n_ranks = a->ao->n_ranks;
    so.chunks = v;
    so.memory_limit_mb = a->ao->memory_limit_mb;
    so.recompute = rc;
    so.replica = a->ao->replica;
    dyn_order_result res;
    memset(&res, 0, sizeof res);
    res.order = a->order;
    dyn_exec_plan plan;
    dyn_stage_costs pcosts;
    memset(&plan, 0, sizeof plan);
    memset(&pcosts, 0, sizeof pcosts);
    dyn_error e;
    st = schedule_search(a->sim, (dyn_schedule)k, costs, a->shapes, &so, a->simopt, groups, given_ms, &res, &plan,
                         &pcosts, &e);
    if (st == DYN_ERR_INFEASIBLE) {
        snprintf(a->why, DYN_ERROR_MSG_MAX, "%s", e.msg);
        return DYN_OK;
    }
    if (st != DYN_OK) {
        if (err) *err = e;
        return st;
    }
    /* With given_ms the given order was not simulated again. */
    a->choice->n_simulations += res.n_candidates - (given_ms >= 0);
    if (res.candidate < 0) return DYN_OK; /* nothing beat given_ms: no plan */
    keep_if_best(a, k, v, rc, rank, &res, &plan, &pcosts, costs->n_microbatches);
    return DYN_OK;
}

/* A phase-1 candidate: schedule k with v chunks under recompute mode rc;
 * rank = its place in the tie-break order; lb = sim_makespan_lower_bound. */
typedef struct phase1_cand {
    int k, rc;
    int32_t v, rank;
    double lb;
} phase1_cand;

static int phase1_cand_cmp(const void *a, const void *b)
{
    const phase1_cand *x = a, *y = b;
    if (x->lb != y->lb) return x->lb < y->lb ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* The schedules to try: ao->schedules or all, less interleaved without
 * chunks (it needs v > 1) and less cyclic beside wait-free cyclic (which
 * runs cyclic's instruction order without the barriers, so it is never
 * slower and holds the same memory, a tested property: cyclic cannot win
 * when both are candidates). */
static uint32_t auto_schedule_mask(const dyn_auto_options *ao)
{
    uint32_t mask = ao->schedules ? ao->schedules : (1u << DYN_SCHEDULE_COUNT) - 1;
    if (ao->chunks <= 1) mask &= ~(1u << DYN_SCHEDULE_INTERLEAVED);
    if (mask & (1u << DYN_SCHEDULE_WAIT_FREE_CYCLIC)) mask &= ~(1u << DYN_SCHEDULE_CYCLIC);
    return mask;
}

/* Phase 1's candidates into cand[], in the tie-break order (modes before
 * schedules), each with its lower bound unless ao->no_prune. A mode whose
 * costs are the very same array as an earlier mode's (a what-if file has
 * one set) is not listed twice. */
static dyn_status phase1_list(auto_run *a, uint32_t mask, phase1_cand *cand, int *n_cand, dyn_error *err)
{
    const dyn_stage_costs *seen[2][DYN_RECOMPUTE_COUNT] = {{NULL}};
    *n_cand = 0;
    for (int rc = 0; rc < DYN_RECOMPUTE_COUNT; rc++) {
        for (int k = 0; k < DYN_SCHEDULE_COUNT; k++) {
            if (!(mask & (1u << k))) continue;
            int32_t v = k == DYN_SCHEDULE_INTERLEAVED ? a->ao->chunks : 1;
            const dyn_stage_costs *cr = NULL;
            dyn_status st = a->costs_fn(a->costs_ctx, v, (dyn_recompute)rc, &cr, err);
            if (st != DYN_OK) return st;
            int dup = 0;
            for (int q = 0; q < rc; q++) dup |= seen[v > 1][q] == cr;
            seen[v > 1][rc] = cr;
            if (dup) continue;
            phase1_cand *c = &cand[*n_cand];
            c->k = k;
            c->rc = rc;
            c->v = v;
            c->rank = (*n_cand)++;
            c->lb = a->ao->no_prune ? 0 : sim_makespan_lower_bound(cr, k, a->ao->n_ranks, a->jobs);
        }
    }
    return DYN_OK;
}

/* Phase 1: every schedule under every recompute mode, in the planner's
 * order. Unless ao->no_prune the candidates are tried in order of their
 * lower bound, so that a good incumbent comes early, and one whose bound
 * is above the incumbent's makespan (lb_cannot_win) is skipped. */
static dyn_status phase1(auto_run *a, uint32_t mask, dyn_error *err)
{
    phase1_cand cand[DYN_RECOMPUTE_COUNT * DYN_SCHEDULE_COUNT];
    int n_cand;
    const int no_prune = a->ao->no_prune;
    dyn_status st = phase1_list(a, mask, cand, &n_cand, err);
    if (st != DYN_OK) return st;
    if (!no_prune) qsort(cand, (size_t)n_cand, sizeof *cand, phase1_cand_cmp);
    for (int i = 0; i < n_cand; i++) {
        const phase1_cand *c = &cand[i];
        if (!no_prune && a->best.have && lb_cannot_win(c->lb, a->choice->makespan_ms)) {
            a->choice->n_pruned++;
            continue;
        }
        st = try_schedule(a, c->k, c->v, (dyn_recompute)c->rc, 1, -1.0, c->rank, err);
        if (st != DYN_OK) return st;
    }
    return DYN_OK;
}

/* Phase 2: the order search on the best of phase 1. Pruned: the planner's
 * order (phase 1's winner) is not simulated again, and the search is
 * skipped when no order can beat it (lb_cannot_win). */
static dyn_status phase2(auto_run *a, dyn_error *err)
{
    const dyn_auto_options *ao = a->ao;
    int first = a->best.have ? (int)a->choice->schedule : -1, first_rc = (int)a->choice->recompute;
    double first_ms = a->choice->makespan_ms;
    if (first < 0 || ao->order_groups <= 1) return DYN_OK;
    int32_t v = first == DYN_SCHEDULE_INTERLEAVED ? ao->chunks : 1;
    double given = ao->no_prune ? -1.0 : first_ms;
    const dyn_stage_costs *cf = NULL;
    dyn_status st = a->costs_fn(a->costs_ctx, v, (dyn_recompute)first_rc, &cf, err);
    if (st != DYN_OK) return st;
    if (!ao->no_prune && lb_cannot_win(sim_makespan_lower_bound(cf, first, ao->n_ranks, a->jobs), first_ms)) {
        a->choice->n_pruned++;
        return DYN_OK;
    }
    return try_schedule(a, first, v, (dyn_recompute)first_rc, ao->order_groups, given, INT32_MAX, err);
}

dyn_status dyn_schedule_auto(dyn_sim *sim, dyn_costs_fn costs_fn, void *costs_ctx,
                             const dyn_mb_shape *shapes, const dyn_auto_options *ao,
                             const dyn_sim_options *simopt, dyn_auto_choice *choice,
                             dyn_exec_plan *best_plan, dyn_stage_costs *best_costs,
                             dyn_error *err)
{
    if (choice == NULL || choice->order == NULL || ao == NULL || costs_fn == NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "auto schedule: missing argument");
    uint32_t mask = auto_schedule_mask(ao);
    const dyn_stage_costs *c1 = NULL;
    dyn_status st = costs_fn(costs_ctx, 1, DYN_RECOMPUTE_NONE, &c1, err);
    if (st != DYN_OK) return st;
    int32_t M = c1->n_microbatches;
    auto_run a = (auto_run){.sim = sim, .costs_fn = costs_fn, .costs_ctx = costs_ctx, .shapes = shapes, .ao = ao,
                   .simopt = simopt, .choice = choice};
    snprintf(a.why, sizeof a.why, "no schedule to try");
    a.order = dyn_calloc((size_t)M, sizeof(int32_t), "auto schedule", err);
    if (a.order == NULL) return DYN_ERR_NOMEM;
    a.jobs = dyn_calloc((size_t)M, sizeof(sim_lb_job), "auto schedule", err);
    if (a.jobs == NULL) {
        free(a.order);
        return DYN_ERR_NOMEM;
    }
    choice->n_simulations = 0;
    choice->n_pruned = 0;
    if ((st = phase1(&a, mask, err)) == DYN_OK && (st = phase2(&a, err)) == DYN_OK && !a.best.have)
        st = dyn_error_set(err, DYN_ERR_INFEASIBLE,
                           "no schedule fits the memory limit under any recompute mode (%s)", a.why);
    if (st == DYN_OK) {
        if (best_plan) {
            *best_plan = a.best.plan;
            memset(&a.best.plan, 0, sizeof a.best.plan);
        }
        if (best_costs) {
            *best_costs = a.best.costs;
            memset(&a.best.costs, 0, sizeof a.best.costs);
        }
    }
    dyn_exec_plan_free(&a.best.plan);
    dyn_stage_costs_free(&a.best.costs);
    free(a.order);
    free(a.jobs);
    return st;
}
