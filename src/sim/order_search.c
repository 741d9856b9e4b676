/*
 * order_search.c — choose the order in which a global batch's micro-batches
 * enter the pipeline, by simulation.
 *
 * Why groups: with M micro-batches there are M! orders, and the simulator,
 * fast as it is, can afford a few dozen per global batch inside the planning
 * budget (5 ms for `--schedule auto`). What matters for a pipeline is mostly
 * where the big micro-batches go relative to the small ones (big ones early
 * fill the pipeline with long stages; big ones late leave a long drain), so
 * the search cuts the micro-batches into at most 4 cost groups and tries
 * every arrangement of the groups plus two interleavings, keeping each
 * group's internal order (the planner's order, which keeps similar lengths
 * together). The candidate list and its bound are documented in sim.h; with
 * M <= 4 every micro-batch is its own group and the search is exhaustive.
 */
#include <stdlib.h>
#include <string.h>

#include "dynapipe/sim.h"
#include "sim/sim_internal.h" /* defines: sim_order_search */
#include "util/util.h" /* defines: dyn_calloc */

typedef struct cost_key {
    double cost;
    int32_t idx;
} cost_key;

static int cost_key_cmp(const void *a, const void *b)
{
    const cost_key *x = a, *y = b;
    if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Fill out (already allocated with in's sizes) with in's rows in order. */
static void permute_into(const dyn_stage_costs *in, const int32_t *order, dyn_stage_costs *out)
{
    int32_t M = in->n_microbatches, S = in->n_stages;
    const double *src[] = {in->fwd_ms, in->bwd_ms, in->bwd_input_ms, in->bwd_weight_ms,
                           in->stored_mb, in->peak_mb, in->send_mb};
    double *dst[] = {out->fwd_ms, out->bwd_ms, out->bwd_input_ms, out->bwd_weight_ms,
                     out->stored_mb, out->peak_mb, out->send_mb};
    for (size_t a = 0; a < sizeof src / sizeof src[0]; a++) {
        for (int32_t i = 0; i < M; i++) {
            if (src[a] == NULL) memset(dst[a] + (size_t)i * S, 0, sizeof(double) * (size_t)S);
            else memcpy(dst[a] + (size_t)i * S, src[a] + (size_t)order[i] * S, sizeof(double) * (size_t)S);
        }
    }
    for (int32_t s = 0; s < S; s++) out->states_mb[s] = in->states_mb ? in->states_mb[s] : 0.0;
}

dyn_status sim_stage_costs_permute(const dyn_stage_costs *in, const int32_t *order,
                                   dyn_stage_costs *out, dyn_error *err)
{
    dyn_status st = dyn_stage_costs_alloc(out, in->n_microbatches, in->n_stages, err);
    if (st != DYN_OK) return st;
    permute_into(in, order, out);
    return DYN_OK;
}

/* Next lexicographic permutation of a[0..n); 0 after the last one. */
static int next_permutation(int32_t *a, int32_t n)
{
    int32_t i = n - 2;
    while (i >= 0 && a[i] >= a[i + 1]) i--;
    if (i < 0) return 0;
    int32_t j = n - 1;
    while (a[j] <= a[i]) j--;
    int32_t t = a[i]; a[i] = a[j]; a[j] = t;
    for (int32_t l = i + 1, r = n - 1; l < r; l++, r--) {
        t = a[l]; a[l] = a[r]; a[r] = t;
    }
    return 1;
}

/* Order: the groups in sequence seq[0..k), each in the given order. */
static void order_concat(const int32_t *group_of, int32_t M, const int32_t *seq, int32_t k,
                         int32_t *order)
{
    int32_t n = 0;
    for (int32_t j = 0; j < k; j++)
        for (int32_t mb = 0; mb < M; mb++)
            if (group_of[mb] == seq[j]) order[n++] = mb;
}

/* Order: one micro-batch from each group in turn (groups in seq order),
 * skipping exhausted groups. cursor is k scratch ints. */
static void order_round_robin(const int32_t *group_of, int32_t M, const int32_t *seq, int32_t k,
                              int32_t *cursor, int32_t *order)
{
    for (int32_t j = 0; j < k; j++) cursor[j] = 0;
    int32_t n = 0;
    while (n < M) {
        for (int32_t j = 0; j < k && n < M; j++) {
            /* advance group seq[j]'s cursor to its next member */
            while (cursor[j] < M && group_of[cursor[j]] != seq[j]) cursor[j]++;
            if (cursor[j] < M) order[n++] = cursor[j]++;
        }
    }
}

typedef struct search_state {
    dyn_sim *sim;
    const dyn_sched_gen *gen;
    const dyn_stage_costs *costs;
    const dyn_sim_options *opt;
    double limit;
    dyn_stage_costs perm; /* reused for every candidate */
    int32_t M;
    int32_t *best_order;
    int have_best;
    double best_makespan, best_peak, min_peak_seen;
    dyn_exec_plan best_plan;
    int32_t candidate, best_candidate, n_feasible;
    double must_beat; /* keep only makespans below this (auto's incumbent); +inf: none */
} search_state;

/* Schedule and simulate one candidate order; keep it if it is the best. */
static dyn_status try_order(search_state *ss, const int32_t *order, dyn_error *err)
{
    int32_t idx = ss->candidate++;
    permute_into(ss->costs, order, &ss->perm);
    dyn_exec_plan plan;
    memset(&plan, 0, sizeof plan);
    dyn_error gerr;
    dyn_status st = ss->gen->build(ss->gen->ctx, &ss->perm, order, &plan, &gerr);
    if (st == DYN_ERR_INFEASIBLE) return DYN_OK; /* this order cannot fit: skip */
    if (st != DYN_OK) {
        if (err) *err = gerr;
        return st;
    }
    const dyn_sim_result *res;
    st = dyn_sim_run(ss->sim, &plan, &ss->perm, ss->opt, &res, err);
    if (st != DYN_OK) {
        ss->gen->free_plan(ss->gen->ctx, &plan);
        return st;
    }
    if (res->max_peak_mb < ss->min_peak_seen) ss->min_peak_seen = res->max_peak_mb;
    int fits = ss->limit <= 0 || res->max_peak_mb <= ss->limit;
    if (fits) ss->n_feasible++;
    if (fits && res->makespan_ms < ss->must_beat &&
        (!ss->have_best || res->makespan_ms < ss->best_makespan)) {
        if (ss->have_best) ss->gen->free_plan(ss->gen->ctx, &ss->best_plan);
        ss->best_plan = plan;
        ss->have_best = 1;
        ss->best_makespan = res->makespan_ms;
        ss->best_peak = res->max_peak_mb;
        ss->best_candidate = idx;
        memcpy(ss->best_order, order, sizeof(int32_t) * (size_t)ss->M);
    } else {
        ss->gen->free_plan(ss->gen->ctx, &plan);
    }
    return DYN_OK;
}

static int same_order(const int32_t *a, const int32_t *b, int32_t n)
{
    return memcmp(a, b, sizeof(int32_t) * (size_t)n) == 0;
}

dyn_status dyn_order_search(dyn_sim *sim, const dyn_sched_gen *gen, const dyn_stage_costs *costs,
                            const dyn_sim_options *opt, int32_t max_groups,
                            double memory_limit_mb, dyn_order_result *res,
                            dyn_exec_plan *best_plan, dyn_stage_costs *best_costs,
                            dyn_error *err)
{
    return sim_order_search(sim, gen, costs, opt, max_groups, memory_limit_mb, -1.0, res, best_plan,
                            best_costs, err);
}

/* Cut the micro-batches into k cost groups: cost = sum over stages of
 * fwd + bwd, k quantiles by cost (group_of[mb]); identity[mb] = mb. keys
 * is M scratch entries. */
static void order_groups(const dyn_stage_costs *costs, int32_t k, cost_key *keys, int32_t *group_of,
                         int32_t *identity)
{
    int32_t M = costs->n_microbatches, S = costs->n_stages;
    for (int32_t mb = 0; mb < M; mb++) {
        double c = 0;
        for (int32_t s = 0; s < S; s++) c += costs->fwd_ms[mb * S + s] + costs->bwd_ms[mb * S + s];
        keys[mb].cost = c;
        keys[mb].idx = mb;
        identity[mb] = mb;
    }
    qsort(keys, (size_t)M, sizeof *keys, cost_key_cmp);
    for (int32_t pos = 0; pos < M; pos++) group_of[keys[pos].idx] = (int32_t)((int64_t)pos * k / M);
}

/* Try every candidate order (sim.h): the given order (unless given_ms >= 0:
 * auto has simulated it already), every arrangement of the k groups, then
 * the two round-robin interleavings. order is M scratch ints. */
static dyn_status order_candidates(search_state *ss, const int32_t *group_of, const int32_t *identity, int32_t k,
                                   double given_ms, int32_t *order, dyn_error *err)
{
    int32_t M = ss->M;
    dyn_status st;
    if (given_ms >= 0) ss->candidate++;
    else if ((st = try_order(ss, identity, err)) != DYN_OK) return st;
    int32_t seq[DYN_ORDER_MAX_GROUPS], cursor[DYN_ORDER_MAX_GROUPS];
    for (int32_t j = 0; j < k; j++) seq[j] = j;
    do {
        order_concat(group_of, M, seq, k, order);
        if (same_order(order, identity, M)) continue;
        if ((st = try_order(ss, order, err)) != DYN_OK) return st;
    } while (next_permutation(seq, k));
    if (k > 1) {
        for (int32_t j = 0; j < k; j++) seq[j] = k - 1 - j; /* costliest first */
        order_round_robin(group_of, M, seq, k, cursor, order);
        if ((st = try_order(ss, order, err)) != DYN_OK) return st;
        for (int32_t j = 0; j < k; j++) seq[j] = j; /* cheapest first */
        order_round_robin(group_of, M, seq, k, cursor, order);
        if ((st = try_order(ss, order, err)) != DYN_OK) return st;
    }
    return DYN_OK;
}

/* The search's outcome into res (the best order is already in
 * res->order), best_costs (may be NULL) and best_plan (may be NULL: the
 * plan then stays with ss, to be freed). */
static dyn_status order_outcome(search_state *ss, const dyn_stage_costs *costs, double memory_limit_mb,
                                double given_ms, dyn_order_result *res, dyn_exec_plan *best_plan,
                                dyn_stage_costs *best_costs, dyn_error *err)
{
    if (!ss->have_best && given_ms >= 0) {
        /* Nothing beat the given order: no plan, candidate -1. */
        res->makespan_ms = given_ms;
        res->max_peak_mb = 0;
        res->candidate = -1;
        res->n_candidates = ss->candidate;
        res->n_feasible = ss->n_feasible;
        return DYN_OK;
    }
    if (!ss->have_best) {
        if (ss->min_peak_seen < 1e300)
            return dyn_error_set(err, DYN_ERR_INFEASIBLE,
                                 "no micro-batch order fits the memory limit of %.1f MB per device (smallest simulated peak %.1f MB)",
                                 memory_limit_mb, ss->min_peak_seen);
        return dyn_error_set(err, DYN_ERR_INFEASIBLE,
                             "the schedule cannot fit the memory limit of %.1f MB per device in any micro-batch order",
                             memory_limit_mb);
    }
    res->makespan_ms = ss->best_makespan;
    res->max_peak_mb = ss->best_peak;
    res->candidate = ss->best_candidate;
    res->n_candidates = ss->candidate;
    res->n_feasible = ss->n_feasible;
    if (best_costs) {
        dyn_status st = sim_stage_costs_permute(costs, res->order, best_costs, err);
        if (st != DYN_OK) return st;
    }
    if (best_plan) {
        *best_plan = ss->best_plan;
        ss->have_best = 0; /* ownership moved to the caller */
    }
    return DYN_OK;
}

dyn_status sim_order_search(dyn_sim *sim, const dyn_sched_gen *gen, const dyn_stage_costs *costs,
                            const dyn_sim_options *opt, int32_t max_groups, double memory_limit_mb,
                            double given_ms, dyn_order_result *res, dyn_exec_plan *best_plan,
                            dyn_stage_costs *best_costs, dyn_error *err)
{
    if (sim == NULL || gen == NULL || gen->build == NULL || gen->free_plan == NULL || costs == NULL ||
        opt == NULL || res == NULL || res->order == NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "order search: missing argument");
    if (max_groups < 1 || max_groups > DYN_ORDER_MAX_GROUPS)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "order search: %d groups, need 1..%d",
                             max_groups, DYN_ORDER_MAX_GROUPS);
    int32_t M = costs->n_microbatches, S = costs->n_stages;
    if (M <= 0 || S <= 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "order search: %d micro-batches x %d stages", M, S);

    /* Candidates need makespan and peak only: no per-instruction events. */
    dyn_sim_options quiet = *opt;
    quiet.skip_events = 1;
    search_state ss = {.sim = sim, .gen = gen, .costs = costs, .opt = &quiet, .limit = memory_limit_mb, .M = M,
                       .best_order = res->order, .min_peak_seen = 1e300,
                       .must_beat = given_ms >= 0 ? given_ms : 1e300};
    int32_t *group_of = dyn_calloc((size_t)M, sizeof(int32_t), "order search", err);
    int32_t *order = dyn_calloc((size_t)M, sizeof(int32_t), "order search", err);
    int32_t *identity = dyn_calloc((size_t)M, sizeof(int32_t), "order search", err);
    cost_key *keys = dyn_calloc((size_t)M, sizeof(cost_key), "order search", err);
    dyn_status st = DYN_ERR_NOMEM;
    if (group_of && order && identity && keys && (st = dyn_stage_costs_alloc(&ss.perm, M, S, err)) == DYN_OK) {
        int32_t k = M < max_groups ? M : max_groups;
        order_groups(costs, k, keys, group_of, identity);
        st = order_candidates(&ss, group_of, identity, k, given_ms, order, err);
        if (st == DYN_OK)
            st = order_outcome(&ss, costs, memory_limit_mb, given_ms, res, best_plan, best_costs, err);
    }
    if (ss.have_best) gen->free_plan(gen->ctx, &ss.best_plan);
    dyn_stage_costs_free(&ss.perm);
    free(group_of);
    free(order);
    free(identity);
    free(keys);
    return st;
}
