/* planner.c — the planner handle and the dynapipe method: order the samples,
 * build the DP instance from cached micro-batch costs, solve it, and turn
 * the runs into a dyn_batch_plan (shapes, costs, memory, replicas).
 *
 * Cost cache. A micro-batch of k samples padded to length L (GPT) or to
 * (input L, target M) (T5) has one cost, whatever samples it holds. The
 * planner keeps one row per padded length (pair) holding t(k) for k = 1, 2,
 * ... up to the largest k that fits the memory limit, filled lazily and kept
 * across global batches, so that after the first few batches a DP step is a
 * table lookup. Lengths are padded up to a multiple of round_to (default 8),
 * so there are at most max_seqlen / round_to rows (their square for T5).
 *
 * Memory limit. A = memory limit - model states of the fullest stage. Under
 * 1F1B the first stage holds the stored activations of up to S micro-batches
 * at once, so each micro-batch may store at most A / S (stored limit), and
 * while one runs with its transient memory on top of S - 1 others' stored
 * activations, its peak may be at most A - (S - 1) * A / S (peak limit).
 * One exception: a micro-batch of one row (a single sample, or one packed
 * row) that breaks those limits but fits A by itself is allowed, because no
 * smaller micro-batch can hold that sample; the schedules then keep fewer
 * micro-batches in flight around it (src/sched throttles to the memory
 * limit, and `dynapipe simulate` checks the simulated peak). Only a sample
 * that does not fit A alone is infeasible.
 */
#include "plan/plan_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h" /* defines: dyn_calloc, DYN_RESERVE, dyn_time_ms */

static const char *const batching_names[DYN_BATCHING_COUNT] = {
    "dynapipe", "padding", "packing", "packing-docmask", "token"};

const char *dyn_batching_name(dyn_batching m)
{
    return (unsigned)m < DYN_BATCHING_COUNT ? batching_names[m] : "unknown";
}

dyn_status dyn_batching_parse(const char *name, dyn_batching *out, dyn_error *err)
{
    for (int i = 0; i < DYN_BATCHING_COUNT; i++)
        if (name && strcmp(name, batching_names[i]) == 0) {
            *out = (dyn_batching)i;
            return DYN_OK;
        }
    return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                         "unknown batching method '%s' (dynapipe, padding, packing, "
                         "packing-docmask, token)",
                         name ? name : "(null)");
}

void dyn_plan_options_default(dyn_plan_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->method = DYN_BATCH_DYNAPIPE;
    opt->stages = 1;
    opt->chunks = 1;
    opt->dp = 1;
    opt->memory_limit_mb = 0.0; /* the machine's memory */
    opt->round_to = 8;
    opt->max_seqlen = 2048;
    opt->recompute = DYN_RECOMPUTE_NONE;
    opt->mb_samples = 0; /* 0: auto, see baselines.c */
    opt->pack_rows = 0;
    opt->mb_tokens = 0;
    opt->enable_packing = 1; /* dynapipe is never behind its candidates (plan.h) */
}

void dyn_batch_plan_free(dyn_batch_plan *plan)
{
    if (plan == NULL) return;
    free(plan->mbs);
    free(plan->sample_ids);
    free(plan->sample_row);
    free(plan->sample_offset);
    free(plan->sample_dec_offset);
    memset(plan, 0, sizeof *plan);
}

/* ---- creation ------------------------------------------------------------ */

static dyn_status options_check(const dyn_plan_options *o, dyn_error *err)
{
    if (o->stages < 1 || o->chunks < 1 || o->dp < 1)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "stages (%d), chunks (%d) and dp (%d) must be >= 1", o->stages,
                             o->chunks, o->dp);
    if (o->round_to < 1 || o->round_to > 4096)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "round_to %d out of range [1, 4096]",
                             o->round_to);
    if (o->max_seqlen < 1 || o->max_seqlen > (1 << 20))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "max_seqlen %d out of range [1, 1048576]",
                             o->max_seqlen);
    if ((unsigned)o->method >= DYN_BATCHING_COUNT)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "unknown batching method %d", o->method);
    if ((unsigned)o->recompute >= DYN_RECOMPUTE_COUNT)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "unknown recompute mode %d", o->recompute);
    if (o->mb_samples < 0 || o->pack_rows < 0 || o->mb_tokens < 0 || !(o->memory_limit_mb == o->memory_limit_mb))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "negative baseline knob or NaN memory limit");
    if (o->stage_objective < 0 || o->stage_objective >= DYN_STAGE_OBJ_COUNT)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "stage_objective %d out of range [0, %d]", o->stage_objective,
                             DYN_STAGE_OBJ_COUNT - 1);
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++)
        if (!(o->split_weight[k] >= 0.0) || !isfinite(o->split_weight[k]))
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "split_weight[%d] is %g (must be finite and >= 0)", k,
                                 o->split_weight[k]);
    return DYN_OK;
}

dyn_planner *dyn_planner_create_custom(dyn_model_kind kind, dyn_mb_cost_fn fn, void *ctx,
                                       double states_mb, const dyn_plan_options *opt,
                                       dyn_error *err)
{
    if (fn == NULL || opt == NULL ||
        (kind != DYN_MODEL_GPT && kind != DYN_MODEL_T5 && kind != DYN_MODEL_LLAMA)) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "planner: missing cost function or options");
        return NULL;
    }
    if (options_check(opt, err) != DYN_OK) return NULL;
    double limit = opt->memory_limit_mb > 0 ? opt->memory_limit_mb : INFINITY;
    double avail = limit - states_mb;
    if (!(avail > 0)) {
        dyn_error_set(err, DYN_ERR_INFEASIBLE,
                      "model states need %.1f MB per device, at or over the memory limit %.1f MB",
                      states_mb, limit);
        return NULL;
    }
    dyn_planner *p = dyn_calloc(1, sizeof *p, "planner", err);
    if (p == NULL) return NULL;
    p->kind = kind;
    p->fn = fn;
    p->ctx = ctx;
    p->states_mb = states_mb;
    p->opt = *opt;
    p->opt.memory_limit_mb = limit;
    p->stored_limit_mb = avail / opt->stages;
    p->peak_limit_mb = isinf(avail) ? avail : avail - (opt->stages - 1) * p->stored_limit_mb;
    p->alone_limit_mb = avail;
    p->n_len = (opt->max_seqlen + opt->round_to - 1) / opt->round_to;
    size_t n_rows = (size_t)p->n_len * (kind == DYN_MODEL_T5 ? (size_t)p->n_len : 1);
    p->rows = dyn_calloc(n_rows, sizeof(plan_cost_row *), "cost cache", err);
    if (p->rows == NULL) {
        free(p);
        return NULL;
    }
    return p;
}

/* Empty the cost cache: every row freed, its slot NULL. */
static void rows_clear(dyn_planner *p)
{
    size_t n_rows = (size_t)p->n_len * (p->kind == DYN_MODEL_T5 ? (size_t)p->n_len : 1);
    for (size_t i = 0; i < n_rows; i++) {
        if (p->rows[i]) {
            free(p->rows[i]->time);
            free(p->rows[i]->cost);
            free(p->rows[i]->amin);
        }
        free(p->rows[i]);
        p->rows[i] = NULL;
    }
}

void dyn_planner_free(dyn_planner *p)
{
    if (p == NULL) return;
    rows_clear(p);
    free(p->rows);
    free(p->cost);
    free(p->cband);
    free(p->perm);
    free(p->width);
    free(p->run_len);
    free(p->perm2);
    free(p->run_len2);
    free(p->shared);
    free(p->pe);
    free(p->pd);
    free(p->seg_start);
    free(p->seg_k);
    free(p->seg_key);
    free(p->seg_beta);
    free(p->shape_seen);
    free(p->time);
    free(p->band);
    if (p->free_ctx) p->free_ctx(p->owned_ctx);
    free(p);
}

const dyn_plan_options *dyn_planner_options(const dyn_planner *p)
{
    return &p->opt;
}

const dyn_cost_model *dyn_planner_cost_model(const dyn_planner *p)
{
    return p->cm;
}

double dyn_planner_states_mb(const dyn_planner *p)
{
    return p->states_mb;
}

double dyn_planner_stored_limit_mb(const dyn_planner *p)
{
    return p->stored_limit_mb;
}

double dyn_planner_peak_limit_mb(const dyn_planner *p)
{
    return p->peak_limit_mb;
}

dyn_status plan_reset_costs(dyn_planner *p, double states_mb, dyn_error *err)
{
    double avail = p->opt.memory_limit_mb - states_mb;
    if (!(avail > 0))
        return dyn_error_set(err, DYN_ERR_INFEASIBLE,
                             "model states need %.1f MB per device, at or over the memory limit %.1f MB", states_mb,
                             p->opt.memory_limit_mb);
    rows_clear(p);
    p->states_mb = states_mb;
    p->stored_limit_mb = avail / p->opt.stages;
    p->peak_limit_mb = isinf(avail) ? avail : avail - (p->opt.stages - 1) * p->stored_limit_mb;
    p->alone_limit_mb = avail;
    return DYN_OK;
}

/* ---- micro-batch costs ------------------------------------------------- */

dyn_status plan_mb_cost(const dyn_planner *p, const dyn_mb_shape *shape, dyn_mb_cost *out,
                               int *fits, dyn_error *err)
{
    out->sum_ms = 0.0;
    dyn_status st = p->fn(p->ctx, shape, out, err);
    if (st != DYN_OK) return st;
    if (!(out->sum_ms > 0.0)) out->sum_ms = out->time_ms;
    *fits = (out->stored_mb <= p->stored_limit_mb && out->peak_mb <= p->peak_limit_mb) ||
            (shape->rows == 1 && out->peak_mb <= p->alone_limit_mb);
    return DYN_OK;
}

/* Make sure row (ei, di) -- padded lengths (ei+1)*r, (di+1)*r -- holds t(k)
 * for k = 1..want, or up to its memory cap. *avail receives how many entries
 * are usable (<= want). */
static dyn_status row_ensure(dyn_planner *p, int32_t ei, int32_t di, int32_t want,
                             plan_cost_row **rowp, int32_t *avail, dyn_error *err)
{
    size_t idx = (size_t)ei * (p->kind == DYN_MODEL_T5 ? (size_t)p->n_len : 1) + (size_t)di;
    plan_cost_row *row = p->rows[idx];
    if (row == NULL) {
        row = dyn_calloc(1, sizeof *row, "cost cache row", err);
        if (row == NULL) return DYN_ERR_NOMEM;
        row->cap = -1;
        p->rows[idx] = row;
    }
    if (row->n < want && row->cap < 0) {
        if (want > row->alloc) {
            size_t c = (size_t)row->alloc; /* both grow alike (dyn_reserve) */
            if (DYN_RESERVE(row->time, (size_t){c}, want) != 0 || DYN_RESERVE(row->cost, (size_t){c}, want) != 0 ||
                DYN_RESERVE(row->amin, c, want) != 0)
                return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory growing the cost cache");
            row->alloc = c > INT32_MAX ? INT32_MAX : (int32_t)c;
        }
        dyn_mb_shape sh = {0};
        sh.enc_len = (ei + 1) * p->opt.round_to;
        sh.dec_len = p->kind == DYN_MODEL_T5 ? (di + 1) * p->opt.round_to : 0;
        while (row->n < want) {
            sh.rows = row->n + 1;
            dyn_mb_cost c;
            int fits;
            dyn_status st = plan_mb_cost(p, &sh, &c, &fits, err);
            if (st != DYN_OK) return st;
            if (!fits) {
                row->cap = row->n;
                break;
            }
            double per = c.sum_ms / sh.rows;
            row->amin[row->n] = row->n > 0 && row->amin[row->n - 1] < per ? row->amin[row->n - 1] : per;
            row->cost[row->n] = c.sum_ms;
            row->time[row->n++] = c.time_ms;
        }
    }
    *rowp = row;
    *avail = row->n < want ? row->n : want;
    return DYN_OK;
}

/* ---- scratch ------------------------------------------------------------- */

static dyn_status scratch_ensure(dyn_planner *p, int32_t n, dyn_error *err)
{
    if (n <= p->scratch_n) return DYN_OK;
    /* the arrays share one capacity: each grows from a copy of the old one
     * (dyn_reserve), so all reach the same new one, c; seg_start has c + 1 */
    size_t old = (size_t)p->scratch_n, c = old, need = n < 64 ? 64 : (size_t)n;
    if (DYN_RESERVE(p->perm, c, need) != 0 || DYN_RESERVE(p->width, (size_t){old}, need) != 0 ||
        DYN_RESERVE(p->run_len, (size_t){old}, need) != 0 || DYN_RESERVE(p->perm2, (size_t){old}, need) != 0 ||
        DYN_RESERVE(p->run_len2, (size_t){old}, need) != 0 || DYN_RESERVE(p->time, (size_t){old}, need) != 0 ||
        DYN_RESERVE(p->cost, (size_t){old}, need) != 0 ||
        DYN_RESERVE(p->shared, (size_t){old}, need) != 0 || DYN_RESERVE(p->pe, (size_t){old}, need) != 0 ||
        DYN_RESERVE(p->pd, (size_t){old}, need) != 0 ||
        DYN_RESERVE(p->seg_start, (size_t){p->seg_start ? old + 1 : 0}, need + 1) != 0)
        return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for planner scratch (%d samples)", n);
    p->scratch_n = c > INT32_MAX ? INT32_MAX : (int32_t)c;
    return DYN_OK;
}

static dyn_status band_ensure(dyn_planner *p, int64_t need, dyn_error *err)
{
    if (need <= p->band_alloc) return DYN_OK;
    size_t old = (size_t)p->band_alloc, c = old, want = need < 4096 ? 4096 : (size_t)need;
    if (DYN_RESERVE(p->band, c, want) != 0 || DYN_RESERVE(p->cband, (size_t){old}, want) != 0 ||
        DYN_RESERVE(p->seg_k, (size_t){old}, want) != 0 ||
        DYN_RESERVE(p->seg_key, (size_t){old}, want) != 0 || DYN_RESERVE(p->seg_beta, (size_t){old}, want) != 0)
        return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the DP band");
    p->band_alloc = (int64_t)c;
    return DYN_OK;
}

/* The message for a sample that does not fit even alone. */
static dyn_status infeasible_sample(const dyn_planner *p, const dyn_sample *s, dyn_error *err)
{
    dyn_mb_shape sh = {0};
    sh.rows = 1;
    if (dyn_model_kind_decoder_only(p->kind)) {
        sh.enc_len = plan_round_up(s->input_len + s->target_len, p->opt.round_to);
    } else {
        sh.enc_len = plan_round_up(s->input_len, p->opt.round_to);
        sh.dec_len = plan_round_up(s->target_len, p->opt.round_to);
    }
    dyn_mb_cost c = {0};
    int fits = 0;
    dyn_status st = plan_mb_cost(p, &sh, &c, &fits, err);
    if (st != DYN_OK) return st;
    return dyn_error_set(err, DYN_ERR_INFEASIBLE,
                         "sample %d (input %d + target %d tokens) cannot fit alone: it needs "
                         "%.1f MB peak activations per stage, limit %.1f MB "
                         "(memory limit %.1f MB minus model states %.1f MB)",
                         s->id, s->input_len, s->target_len, c.peak_mb, p->alone_limit_mb,
                         p->opt.memory_limit_mb, p->states_mb);
}

/* ---- the dynapipe method ------------------------------------------------- */

static int32_t len_index(int32_t len, int32_t r)
{
    return (len + r - 1) / r - 1;
}

/* Cap on useful run times (ms). For the optimum P*, (S-1) t_max / v +
 * sum(P*) / d = OPT <= V0, the value of all-singletons, and sum(P*) >= LB, a
 * lower bound on the sum of any partition. So no run slower than
 *     tau_cap = (V0 - LB / d) * v / (S - 1)
 * can be in an optimum, and such runs are left out of the DP (S = 1: no
 * cap). LB sums, over the samples, the cheapest time per sample of any
 * micro-batch that could hold the sample: see lower_bound_row. A tiny
 * relative slack keeps rounding from cutting a run the optimum needs. */
static double cap_of_value(const dyn_planner *p, double v0, double single_max, double lb)
{
    if (p->opt.stages <= 1) return INFINITY;
    double cap = (v0 - lb / p->opt.dp) * p->opt.chunks / (p->opt.stages - 1);
    if (cap < single_max) cap = single_max;
    return cap * (1.0 + 1e-9);
}

static double time_cap(const dyn_planner *p, double single_max, double single_sum, double lb)
{
    if (p->opt.stages <= 1) return INFINITY;
    double v0 = plan_objective_ms(p->opt.stages, p->opt.chunks, p->opt.dp, single_max, single_sum);
    return cap_of_value(p, v0, single_max, lb);
}

/* Largest grid value <= u on the grid 1, 2, 3, 4, 6, 8, 12, 16, ... */
static int32_t grid_floor(int32_t u)
{
    int32_t p2 = 1;
    while (p2 * 2 <= u) p2 *= 2;
    return p2 >= 2 && u >= p2 + p2 / 2 ? p2 + p2 / 2 : p2;
}

/* Cheapest ms per sample of any run of at most n samples that contains a
 * sample padded to (ei, di). A run holding it is padded to at least these
 * lengths, so (monotone costs) it costs at least t(k rows at (ei, di)) and,
 * fitting the memory limit, has at most as many rows as that row's cap. Any
 * (ei', di') <= (ei, di) gives a valid, weaker bound: T5 uses a coarse grid
 * of lengths so that few rows need filling. */
static dyn_status lower_bound_row(dyn_planner *p, int32_t ei, int32_t di, int32_t n, double *per,
                                  dyn_error *err)
{
    plan_cost_row *row;
    int32_t avail;
    dyn_status st = row_ensure(p, ei, di, n, &row, &avail, err);
    if (st != DYN_OK) return st;
    *per = avail > 0 ? row->amin[avail - 1] : 0.0;
    return DYN_OK;
}

/* GPT: one row pointer per position (perm2 holds the row index). */
static dyn_status build_gpt(dyn_planner *p, const dyn_sample *s, int32_t n, const int32_t *perm,
                            dyn_error *err)
{
    double cap_sum = 0.0, cap_max = 0.0;
    for (int32_t j = 0; j < n; j++) {
        const dyn_sample *x = &s[perm[j]];
        int32_t li = len_index(x->input_len + x->target_len, p->opt.round_to);
        plan_cost_row *row;
        int32_t avail;
        dyn_status st = row_ensure(p, li, 0, j + 1, &row, &avail, err);
        if (st != DYN_OK) return st;
        if (avail < 1) return infeasible_sample(p, x, err);
        p->width[j] = avail;
        p->perm2[j] = li;
        cap_sum += row->cost[0];
        if (row->time[0] > cap_max) cap_max = row->time[0];
    }
    double lb = 0.0, tau_cap = INFINITY;
    if (p->opt.stages > 1 && !p->use_naive_dp) { /* the reference gets the whole band */
        for (int32_t j = 0; j < n; j++) {
            double per;
            dyn_status st = lower_bound_row(p, p->perm2[j], 0, n, &per, err);
            if (st != DYN_OK) return st;
            lb += per;
        }
        tau_cap = time_cap(p, cap_max, cap_sum, lb);
    }
    /* Pointers only now: a row's array may move while it grows. Widths
     * shrink to the runs within the cap (rows are sorted: bisect). */
    for (int32_t j = 0; j < n; j++) {
        const double *t = p->rows[p->perm2[j]]->time;
        p->time[j] = t;
        p->cost[j] = p->rows[p->perm2[j]]->cost;
        if (t[p->width[j] - 1] > tau_cap) {
            int32_t lo = 1, hi = p->width[j]; /* t[lo-1] <= cap < t[hi-1] */
            while (hi - lo > 1) {
                int32_t mid = lo + (hi - lo) / 2;
                if (t[mid - 1] <= tau_cap) lo = mid;
                else hi = mid;
            }
            p->width[j] = lo;
        }
    }
    return DYN_OK;
}

/* How many entries of the non-decreasing row[0..len) are <= cap. */
static int32_t count_le_row(const double *row, int32_t len, double cap)
{
    int32_t lo = 0, hi = len; /* row[0..lo) <= cap < row[hi..len) */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (row[mid] <= cap) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Slope of segment [ka, kb] of cost row R if its times are affine in k
 * there, t(k) = t(ka) + beta (k - ka) within 1e-13 relative, with beta =
 * t(2) - t(1) so that every segment of R has the same slope (the DP's
 * deques are shared by key); NAN if not, or if too short to matter. The
 * row's affine prefix (each entry within 0.5e-13 of the line through t(1)
 * with that slope, so any two within 1e-13 of each other's line) is
 * verified once and extended as needed, so this is O(1) amortised. */
#define PLAN_SEG_MIN 8
static double segment_slope(plan_cost_row *R, int32_t ka, int32_t kb)
{
    if (kb - ka + 1 < PLAN_SEG_MIN || R->n < 2) return NAN;
    double beta = R->cost[1] - R->cost[0], t1 = R->cost[0];
    while (R->aff_n < kb && !R->aff_bad && R->aff_n < R->n) {
        int32_t k = R->aff_n + 1;
        if (fabs(R->cost[k - 1] - t1 - beta * (double)(k - 1)) > 0.5e-13 * R->cost[k - 1])
            R->aff_bad = 1;
        else
            R->aff_n = k;
    }
    return R->aff_n >= kb ? beta : NAN;
}

/* T5: the value of a real partition of the order, for the time cap: cut
 * into chunks of m consecutive samples for m = 2, 4, 8, ... while every
 * chunk fits, and keep the best value (INFINITY if none fits). O(n log n)
 * cost-row lookups, much less than one DP pass over the band. */
static dyn_status chunk_value(dyn_planner *p, const dyn_sample *s, int32_t n, const int32_t *perm,
                              double *value, dyn_error *err)
{
    const int32_t r = p->opt.round_to;
    *value = INFINITY;
    for (int32_t m = 2; m <= n; m *= 2) {
        double tmax = 0.0, tsum = 0.0;
        for (int32_t i = 0; i < n; i += m) {
            int32_t len = n - i < m ? n - i : m, max_in = 0, max_tg = 0;
            for (int32_t q = i; q < i + len; q++) {
                const dyn_sample *x = &s[perm[q]];
                if (x->input_len > max_in) max_in = x->input_len;
                if (x->target_len > max_tg) max_tg = x->target_len;
            }
            plan_cost_row *row;
            int32_t avail;
            dyn_status st = row_ensure(p, len_index(max_in, r), len_index(max_tg, r), len, &row,
                                       &avail, err);
            if (st != DYN_OK) return st;
            if (avail < len) return DYN_OK; /* m does not fit: larger m will not either */
            double t = row->time[len - 1];
            if (t > tmax) tmax = t;
            tsum += row->cost[len - 1];
        }
        double v = plan_objective_ms(p->opt.stages, p->opt.chunks, p->opt.dp, tmax, tsum);
        if (v < *value) *value = v;
    }
    return DYN_OK;
}

/* T5, build_t5's first pass: each position's padded shape (p->pe, p->pd)
 * and its single's row entry; the singles' largest and summed time and the
 * lower bound, for the cap. */
static dyn_status t5_singles(dyn_planner *p, const dyn_sample *s, int32_t n, const int32_t *perm,
                             double *single_max, double *single_sum, double *lb, dyn_error *err)
{
    const int32_t r = p->opt.round_to;
    *single_max = *single_sum = *lb = 0.0;
    for (int32_t j = 0; j < n; j++) {
        const dyn_sample *x = &s[perm[j]];
        plan_cost_row *row;
        int32_t avail;
        int32_t e = len_index(x->input_len, r), d = len_index(x->target_len, r);
        p->pe[j] = e;
        p->pd[j] = d;
        dyn_status st = row_ensure(p, e, d, 1, &row, &avail, err);
        if (st != DYN_OK) return st;
        if (avail < 1) return infeasible_sample(p, x, err);
        double t = row->time[0], per;
        if (t > *single_max) *single_max = t;
        *single_sum += row->cost[0];
        if (p->opt.stages > 1 && !p->use_naive_dp) {
            st = lower_bound_row(p, grid_floor(e + 1) - 1, grid_floor(d + 1) - 1, n, &per, err);
            if (st != DYN_OK) return st;
            *lb += per;
        }
    }
    return DYN_OK;
}

/* T5: the time cap on a run (INFINITY with one stage or the naive DP). */
static dyn_status t5_tau_cap(dyn_planner *p, const dyn_sample *s, int32_t n, const int32_t *perm,
                             double known_ms, double single_max, double single_sum, double lb,
                             double *tau_cap, dyn_error *err)
{
    *tau_cap = INFINITY;
    if (p->opt.stages > 1 && !p->use_naive_dp) {
        double vh;
        dyn_status st = chunk_value(p, s, n, perm, &vh, err);
        if (st != DYN_OK) return st;
        if (known_ms < vh) vh = known_ms;
        *tau_cap = time_cap(p, single_max, single_sum, lb);
        double c = cap_of_value(p, vh, single_max, lb);
        if (c < *tau_cap) *tau_cap = c;
    }
    return DYN_OK;
}

/* T5: position j, whose predecessor's runs all lay in j's group of equal
 * shapes (row own) and stopped at W before leaving it: j's W runs do too.
 * One more (W + 1 samples) is in the group as well, so it stops j only if
 * the row itself stops there; then *shared = 1 and j uses the row. */
static dyn_status t5_shared_width(dyn_planner *p, int32_t j, int32_t own, double tau_cap, int *shared,
                                  dyn_error *err)
{
    int32_t W = p->width[j - 1], avail;
    plan_cost_row *row;
    dyn_status st = row_ensure(p, p->pe[j], p->pd[j], W + 1, &row, &avail, err);
    if (st != DYN_OK) return st;
    *shared = avail < W + 1 || row->time[W] > tau_cap;
    if (*shared) {
        p->shared[j] = own;
        p->width[j] = W;
    }
    return DYN_OK;
}

/* T5: position j's band at p->band + off, walked back in extents of one
 * padded shape: the running maxima (e, d) of the padded indices (rounding
 * up is monotone, so they are the padded running maxima of the lengths)
 * grow at the first sample that exceeds them, and until then every run
 * costs row (e, d)'s t(k), so an extent is one row lookup, a bisection
 * against the cap (rows are non-decreasing) and a copy. Monotone costs
 * bound the band: run (j, k) holds run (j-1, k-1) and one more sample, so
 * it is no cheaper and no smaller, and j's band is at most one longer than
 * j-1's. *k_end: one past the last run kept; *in_group: every run lies in
 * j's group of equal shapes. With segs, each extent is a new segment at
 * *nseg (a larger shape). */
static dyn_status t5_band_walk(dyn_planner *p, int32_t j, int64_t off, double tau_cap, int segs, int64_t *nseg,
                               int32_t *k_end, int *in_group, dyn_error *err)
{
    const int32_t nl = p->n_len, own_e = p->pe[j], own_d = p->pd[j];
    int32_t kmax = j == 0 ? 1 : p->width[j - 1] + 1;
    int32_t e = -1, d = -1, k = 1;
    plan_cost_row *row = NULL, *srow = NULL;
    dyn_status st;
    *in_group = 1;
    if ((st = band_ensure(p, off + j + 1, err)) != DYN_OK) return st;
    while (k <= kmax) {
        if (p->pe[j + 1 - k] > e) e = p->pe[j + 1 - k];
        if (p->pd[j + 1 - k] > d) d = p->pd[j + 1 - k];
        int32_t k2 = k; /* the extent: runs k .. k2 */
        while (k2 < kmax && p->pe[j - k2] <= e && p->pd[j - k2] <= d) k2++;
        int32_t avail;
        st = row_ensure(p, e, d, k2, &row, &avail, err);
        if (st != DYN_OK) return st;
        if (avail < k) break; /* memory: run k does not fit */
        int32_t hi = avail < k2 ? avail : k2;
        int32_t c = count_le_row(row->time + (k - 1), hi - k + 1, tau_cap);
        if (c == 0 && k == 1) c = 1; /* a single always stays */
        if (c == 0) break;
        memcpy(p->band + off + k - 1, row->time + (k - 1), (size_t)c * sizeof(double));
        memcpy(p->cband + off + k - 1, row->cost + (k - 1), (size_t)c * sizeof(double));
        if (*in_group) {
            if (e != own_e || d != own_d) *in_group = 0;
            for (int32_t q = k; q < k + c && *in_group; q++)
                if (p->pe[j + 1 - q] != own_e || p->pd[j + 1 - q] != own_d) *in_group = 0;
        }
        if (segs) {
            if (srow) p->seg_beta[*nseg - 1] = segment_slope(srow, p->seg_k[*nseg - 1], k - 1);
            p->seg_k[*nseg] = k;
            p->seg_key[*nseg] = e * nl + d;
            (*nseg)++;
            srow = row;
        }
        k += c;
        if (k <= k2) break; /* memory or the cap ended the band inside the extent */
    }
    if (srow) p->seg_beta[*nseg - 1] = segment_slope(srow, p->seg_k[*nseg - 1], k - 1);
    *k_end = k;
    return DYN_OK;
}

/* T5: position j's width, and whether it keeps its band entries (at *off,
 * advanced past them) and segments or shares its row. */
static void t5_band_keep(dyn_planner *p, int32_t j, int32_t k, int in_group, int64_t *off, int64_t *nseg)
{
    p->width[j] = k - 1;
    int any_affine = 0; /* else the plain scan is cheaper: keep no segments */
    for (int64_t q = p->seg_start[j]; q < *nseg; q++) any_affine |= p->seg_beta[q] == p->seg_beta[q];
    if (!any_affine) *nseg = p->seg_start[j];
    if (in_group && !p->use_naive_dp) {
        p->shared[j] = p->pe[j] * p->n_len + p->pd[j]; /* band entries equal the row's: drop them */
        *nseg = p->seg_start[j];
    } else {
        p->shared[j] = -1;
        *off += k - 1;
    }
    p->seg_start[j + 1] = *nseg;
}

/* T5: a band of run times, grown backwards from each position while the run
 * fits and stays within the time cap; a run's padded shape is (k, max input,
 * max target). The cap (time_cap) comes from the smallest of three values
 * that an optimum worth finding cannot exceed: all singletons, the best
 * chunking (chunk_value; both are partitions of this order), and known_ms,
 * an earlier order's optimum (this order only matters if it beats it, and
 * the search ignores what does not). */
static dyn_status build_t5(dyn_planner *p, const dyn_sample *s, int32_t n, const int32_t *perm,
                           double known_ms, dyn_error *err)
{
    double single_max, single_sum, lb, tau_cap;
    dyn_status st = t5_singles(p, s, n, perm, &single_max, &single_sum, &lb, err);
    if (st == DYN_OK) st = t5_tau_cap(p, s, n, perm, known_ms, single_max, single_sum, lb, &tau_cap, err);
    if (st != DYN_OK) return st;
    /* Runs ending at j whose samples all have j's padded shape (e, d) cost
     * row (e, d)'s t(k). When all of j's runs are like that -- the band
     * stopped (memory or cap) before leaving j's group of equal shapes --
     * j uses that row directly (shared[j]); the next position of the same
     * shape then has the same width without scanning when the row itself
     * ends there (memory or cap), since its window stays in the group.
     * Positions sharing a row let the DP take its affine shortcut. */
    const int32_t nl = p->n_len;
    const int segs = p->seg_on && !p->use_naive_dp;
    int64_t off = 0, nseg = 0;
    p->seg_start[0] = 0;
    for (int32_t j = 0; j < n; j++) {
        p->seg_start[j + 1] = nseg; /* none unless the band below adds some */
        int32_t own = p->pe[j] * nl + p->pd[j];
        if (!p->use_naive_dp && j > 0 && p->shared[j - 1] == own && p->width[j - 1] < j) {
            int shared;
            if ((st = t5_shared_width(p, j, own, tau_cap, &shared, err)) != DYN_OK) return st;
            if (shared) continue;
        }
        int32_t k;
        int in_group;
        if ((st = t5_band_walk(p, j, off, tau_cap, segs, &nseg, &k, &in_group, err)) != DYN_OK) return st;
        t5_band_keep(p, j, k, in_group, &off, &nseg);
    }
    /* Pointers only now: the band and the rows may have moved while growing. */
    off = 0;
    for (int32_t j = 0; j < n; j++) {
        if (p->shared[j] >= 0) {
            p->time[j] = p->rows[p->shared[j]]->time;
            p->cost[j] = p->rows[p->shared[j]]->cost;
        } else {
            p->time[j] = p->band + off;
            p->cost[j] = p->cband + off;
            off += p->width[j];
        }
    }
    return DYN_OK;
}

static dyn_status solve_order(dyn_planner *p, const dyn_sample *s, int32_t n, const int32_t *perm,
                              double known_ms, plan_dp_result *res, dyn_error *err)
{
    dyn_status st = dyn_model_kind_decoder_only(p->kind) ? build_gpt(p, s, n, perm, err)
                                             : build_t5(p, s, n, perm, known_ms, err);
    if (st != DYN_OK) return st;
    plan_dp_problem pb = {n, p->width, p->time, p->opt.stages, p->opt.chunks, p->opt.dp, 1, known_ms,
                         NULL, NULL, NULL, NULL, (const double *const *)p->cost};
    if (p->kind == DYN_MODEL_T5 && p->seg_on && !p->use_naive_dp) {
        pb.seg_start = p->seg_start;
        pb.seg_k = p->seg_k;
        pb.seg_key = p->seg_key;
        pb.seg_beta = p->seg_beta;
    }
    st = p->use_naive_dp ? plan_dp_solve_naive(&pb, res, err) : plan_dp_solve(&pb, res, err);
    p->dp_evals += res->n_evals;
    return st;
}

/* T5 orderings tried: -1 by padded lengths, 0 lexicographic, > 0 serpentine
 * with that bucket width in units of round_to. The best DP optimum wins;
 * ties keep the earlier. The order by padded lengths is tried (first: its
 * shared cost rows make it fast, and its optimum prunes the others' search)
 * only when padded shapes repeat a lot -- at least T5_SHARED_MIN samples per
 * distinct shape, as with many short samples; on ordinary batches, where
 * shapes barely repeat, it would cost time and rarely win. */
#define T5_SHARED_MIN 4
static const int32_t t5_buckets[] = {-1, 0, 16};

static dyn_status plan_dynapipe(dyn_planner *p, const dyn_sample *s, int32_t n, dyn_batch_plan *out,
                                dyn_error *err)
{
    dyn_status st = scratch_ensure(p, n, err);
    if (st != DYN_OK) return st;
    plan_dp_result res = {.run_len = p->run_len};
    if (dyn_model_kind_decoder_only(p->kind)) {
        if ((st = plan_order_gpt(s, n, p->perm, err)) != DYN_OK) return st;
        if ((st = solve_order(p, s, n, p->perm, INFINITY, &res, err)) != DYN_OK) return st;
    } else {
        /* perm/run_len hold the best so far; perm2/run_len2 the trial. */
        double best = INFINITY;
        int32_t best_runs = 0, tried = 0;
        int use_padded = 0;
        if (!p->t5_lex_only) { /* distinct padded shapes, by batch stamps */
            const int32_t r = p->opt.round_to;
            if (p->shape_seen == NULL) {
                p->shape_seen = dyn_calloc((size_t)p->n_len * (size_t)p->n_len, sizeof(uint32_t),
                                           "shape stamps", err);
                if (p->shape_seen == NULL) return DYN_ERR_NOMEM;
            }
            if (++p->batch_stamp == 0) { /* wrapped: forget old stamps */
                memset(p->shape_seen, 0, (size_t)p->n_len * (size_t)p->n_len * sizeof(uint32_t));
                p->batch_stamp = 1;
            }
            int32_t shapes = 0;
            for (int32_t i = 0; i < n; i++) {
                size_t k = (size_t)len_index(s[i].input_len, r) * (size_t)p->n_len +
                           (size_t)len_index(s[i].target_len, r);
                shapes += p->shape_seen[k] != p->batch_stamp;
                p->shape_seen[k] = p->batch_stamp;
            }
            use_padded = n >= T5_SHARED_MIN * shapes;
        }
        /* Affine segments pay when shapes repeat (long runs of one padded
         * shape inside the bands); on ordinary batches their bookkeeping
         * costs more than the scans it saves. */
        p->seg_on = use_padded;
        for (size_t c = 0; c < sizeof t5_buckets / sizeof t5_buckets[0]; c++) {
            int32_t b = t5_buckets[c];
            if ((p->t5_lex_only && b != 0) || (b < 0 && !use_padded)) continue;
            int32_t *perm = tried == 0 ? p->perm : p->perm2;
            st = b < 0    ? plan_order_t5_padded(s, n, p->opt.round_to, perm, err)
                 : b == 0 ? plan_order_t5_lex(s, n, perm, err)
                          : plan_order_t5_serpentine(s, n, b * p->opt.round_to, perm, err);
            if (st != DYN_OK) return st;
            plan_dp_result trial = {.run_len = tried == 0 ? p->run_len : p->run_len2};
            /* Later orders only need to beat the best so far: the search
             * skips t_max values that cannot (exact for the better one). */
            if ((st = solve_order(p, s, n, perm, best, &trial, err)) != DYN_OK) return st;
            if (tried == 0 || trial.objective_ms < best) {
                best = trial.objective_ms;
                best_runs = trial.n_runs;
                if (tried != 0) {
                    memcpy(p->perm, p->perm2, (size_t)n * sizeof(int32_t));
                    memcpy(p->run_len, p->run_len2, (size_t)trial.n_runs * sizeof(int32_t));
                }
            }
            tried++;
        }
        res.n_runs = best_runs;
    }
    return plan_assemble(p, s, n, p->perm, p->run_len, res.n_runs, NULL, NULL, NULL, NULL, out,
                             err);
}

static dyn_status check_samples(const dyn_planner *p, const dyn_sample *s, int32_t n, dyn_error *err)
{
    const int dec_only = dyn_model_kind_decoder_only(p->kind);
    for (int32_t i = 0; i < n; i++) {
        /* Decoder-only (GPT, Llama) data may have no target (the whole
         * sequence is the sample). */
        if (s[i].input_len <= 0 || s[i].target_len < (dec_only ? 0 : 1))
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "sample %d: lengths must be > 0%s (input %d, target %d)", s[i].id,
                                 dec_only ? " (a decoder-only target >= 0)" : "", s[i].input_len, s[i].target_len);
        int64_t longest = dec_only ? (int64_t)s[i].input_len + s[i].target_len
                          : s[i].input_len > s[i].target_len ? s[i].input_len
                                                             : s[i].target_len;
        if (longest > p->opt.max_seqlen)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "sample %d: %s %lld tokens exceeds max_seqlen %d", s[i].id,
                                 dec_only ? "sequence" : "side", (long long)longest, p->opt.max_seqlen);
    }
    return DYN_OK;
}

/* dynapipe with enable_packing: the DP's plan, replaced by a document-masked
 * packing of the batch (packing-docmask, 1, 2, 4, ... rows per micro-batch,
 * up to the first that does not fit or the first single micro-batch) when
 * that one's objective is lower. Both objectives are the same formula over
 * the same stage costs (the packed shapes carry their per-sample attention
 * counts), so the plan kept is never predicted slower than either. */
static dyn_status plan_dynapipe_or_packed(dyn_planner *p, const dyn_sample *s, int32_t n,
                                          dyn_batch_plan *out, dyn_error *err)
{
    dyn_status st = plan_dynapipe(p, s, n, out, err);
    if (st != DYN_OK || !p->opt.enable_packing) return st;
    const dyn_plan_options saved = p->opt;
    p->opt.method = DYN_BATCH_PACKING_DOCMASK;
    for (int32_t rows = 1; rows <= (1 << 24); rows *= 2) {
        p->opt.pack_rows = rows;
        dyn_batch_plan alt;
        memset(&alt, 0, sizeof alt);
        dyn_error e2;
        st = plan_baseline(p, s, n, &alt, &e2);
        if (st == DYN_ERR_INFEASIBLE) { /* larger micro-batches do not fit either */
            dyn_batch_plan_free(&alt);
            st = DYN_OK;
            break;
        }
        if (st != DYN_OK) {
            *err = e2;
            dyn_batch_plan_free(&alt);
            break;
        }
        int single = alt.n_microbatches == 1;
        if (alt.objective_ms < out->objective_ms) {
            dyn_batch_plan_free(out);
            *out = alt;
        } else {
            dyn_batch_plan_free(&alt);
        }
        if (single) break;
    }
    p->opt = saved;
    return st;
}

dyn_status dyn_planner_plan_as(dyn_planner *p, dyn_batching method, int64_t knob, const dyn_sample *samples,
                               int32_t n, dyn_batch_plan *out, dyn_error *err)
{
    memset(out, 0, sizeof *out);
    if (p == NULL || (unsigned)method >= DYN_BATCHING_COUNT || knob < 0 || (n > 0 && samples == NULL) || n < 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "plan as: bad arguments (method %d, knob %lld)", (int)method,
                             (long long)knob);
    if (n == 0) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "plan: empty global batch");
    if (knob > (method == DYN_BATCH_TOKEN ? (INT64_C(1) << 40) : (int64_t)(1 << 24)))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "plan as %s: knob %lld out of range", dyn_batching_name(method),
                             (long long)knob);
    const dyn_plan_options saved = p->opt;
    p->opt.method = method;
    p->opt.enable_packing = 0;
    switch (method) {
    case DYN_BATCH_PADDING: p->opt.mb_samples = (int32_t)knob; break;
    case DYN_BATCH_PACKING:
    case DYN_BATCH_PACKING_DOCMASK: p->opt.pack_rows = (int32_t)knob; break;
    case DYN_BATCH_TOKEN: p->opt.mb_tokens = knob; break;
    default: break;
    }
    double t0 = dyn_time_ms();
    dyn_status st = check_samples(p, samples, n, err);
    if (st == DYN_OK)
        st = method == DYN_BATCH_DYNAPIPE ? plan_dynapipe(p, samples, n, out, err) : plan_baseline(p, samples, n, out, err);
    p->opt = saved;
    if (st != DYN_OK) {
        dyn_batch_plan_free(out);
        return st;
    }
    out->plan_time_ms = dyn_time_ms() - t0;
    return DYN_OK;
}

dyn_status dyn_planner_plan(dyn_planner *p, const dyn_sample *samples, int32_t n,
                            dyn_batch_plan *out, dyn_error *err)
{
    memset(out, 0, sizeof *out);
    if (p == NULL || (n > 0 && samples == NULL) || n < 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "plan: bad arguments");
    if (n == 0) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "plan: empty global batch");
    double t0 = dyn_time_ms();
    dyn_status st = check_samples(p, samples, n, err);
    if (st == DYN_OK)
        st = p->opt.method == DYN_BATCH_DYNAPIPE ? plan_dynapipe_or_packed(p, samples, n, out, err)
                                                 : plan_baseline(p, samples, n, out, err);
    if (st != DYN_OK) {
        dyn_batch_plan_free(out);
        return st;
    }
    out->plan_time_ms = dyn_time_ms() - t0;
    return DYN_OK;
}

/* ---- assembling a plan --------------------------------------------------- */

/* Scratch of plan_assemble, per micro-batch group; one free. */
typedef struct assemble_scratch {
    dyn_plan_microbatch *mbs; /* [n_groups] in planning order */
    int32_t *first;           /* [n_groups] position of the group's first sample in perm */
    int32_t *rep;             /* [n_groups] replica */
    int32_t *order;           /* [n_groups] groups by replica, each replica's in planning order */
    double *load;             /* [n_groups] predicted time (ms), for the balance */
} assemble_scratch;

static void assemble_scratch_free(assemble_scratch *a)
{
    free(a->mbs);
    free(a->first);
    free(a->rep);
    free(a->order);
    free(a->load);
}

/* What the plan's figures are made of, summed over the groups. */
typedef struct assemble_sums {
    double tmax, tsum, max_stored, max_peak; /* ms, ms, MB, MB */
    int64_t real, padded;                    /* tokens */
} assemble_sums;

/* Padded shape of the group of len samples starting at perm[pos]. */
static dyn_mb_shape group_shape(const dyn_planner *p, const dyn_sample *s, const int32_t *perm, int32_t pos,
                                int32_t len)
{
    dyn_mb_shape sh = {0};
    sh.rows = len;
    for (int32_t i = pos; i < pos + len; i++) {
        const dyn_sample *x = &s[perm[i]];
        int32_t a = dyn_model_kind_decoder_only(p->kind) ? x->input_len + x->target_len : x->input_len;
        if (a > sh.enc_len) sh.enc_len = a;
        if (p->kind == DYN_MODEL_T5 && x->target_len > sh.dec_len) sh.dec_len = x->target_len;
    }
    sh.enc_len = plan_round_up(sh.enc_len, p->opt.round_to);
    sh.dec_len = plan_round_up(sh.dec_len, p->opt.round_to);
    return sh;
}

/* Phase 1: every group's shape, cost and memory check, and the sums. */
static dyn_status cost_groups(const dyn_planner *p, const dyn_sample *s, int32_t n, const int32_t *perm,
                              const int32_t *group_len, int32_t n_groups, const dyn_mb_shape *shapes,
                              assemble_scratch *a, assemble_sums *sum, dyn_error *err)
{
    int32_t pos = 0;
    for (int32_t g = 0; g < n_groups; g++) {
        a->first[g] = pos;
        dyn_mb_shape sh = shapes ? shapes[g] : group_shape(p, s, perm, pos, group_len[g]);
        for (int32_t i = pos; i < pos + group_len[g]; i++)
            sum->real += (int64_t)s[perm[i]].input_len + s[perm[i]].target_len;
        sum->padded += (int64_t)sh.rows * (sh.enc_len + sh.dec_len);
        dyn_mb_cost c;
        int fits;
        dyn_status st = plan_mb_cost(p, &sh, &c, &fits, err);
        if (st != DYN_OK) return st;
        if (!fits) {
            char shape[64]; /* GPT "rows x len", T5 "rows x enc+dec" */
            if (p->kind == DYN_MODEL_T5)
                snprintf(shape, sizeof shape, "%d rows x %d+%d tokens", sh.rows, sh.enc_len, sh.dec_len);
            else
                snprintf(shape, sizeof shape, "%d rows x %d tokens", sh.rows, sh.enc_len);
            return dyn_error_set(err, DYN_ERR_INFEASIBLE,
                                 "%s: micro-batch %d (%s) needs %.1f MB stored / "
                                 "%.1f MB peak per stage, over the limit %.1f / %.1f MB",
                                 dyn_batching_name(p->opt.method), g, shape, c.stored_mb, c.peak_mb,
                                 p->stored_limit_mb, p->peak_limit_mb);
        }
        dyn_plan_microbatch *mb = &a->mbs[g];
        mb->n_samples = group_len[g];
        mb->shape = sh;
        mb->time_ms = c.time_ms;
        mb->stored_mb = c.stored_mb;
        mb->peak_mb = c.peak_mb;
        a->load[g] = c.sum_ms; /* the sum term: what a replica's steady state adds up */
        if (c.time_ms > sum->tmax) sum->tmax = c.time_ms;
        if (c.stored_mb > sum->max_stored) sum->max_stored = c.stored_mb;
        if (c.peak_mb > sum->max_peak) sum->max_peak = c.peak_mb;
        sum->tsum += c.sum_ms;
        pos += group_len[g];
    }
    if (pos != n) return dyn_error_set(err, DYN_ERR_INTERNAL, "plan covers %d of %d samples", pos, n);
    return DYN_OK;
}

/* a->order: groups by replica, each replica's in planning order (a
 * counting sort: dp may be large); *max_per_replica its largest count. */
static dyn_status order_by_replica(assemble_scratch *a, int32_t n_groups, int32_t dp, int32_t *max_per_replica,
                                   dyn_error *err)
{
    int32_t *start = dyn_calloc((size_t)dp + 1, sizeof(int32_t), "replica counts", err);
    if (start == NULL) return DYN_ERR_NOMEM;
    *max_per_replica = 0;
    for (int32_t g = 0; g < n_groups; g++) start[a->rep[g] + 1]++;
    for (int32_t rr = 0; rr < dp; rr++) {
        if (start[rr + 1] > *max_per_replica) *max_per_replica = start[rr + 1];
        start[rr + 1] += start[rr];
    }
    for (int32_t g = 0; g < n_groups; g++) a->order[start[a->rep[g]]++] = g;
    free(start);
    return DYN_OK;
}

/* The plan's micro-batches in a->order and their samples' ids, rows and
 * offsets, grouped by micro-batch. */
static dyn_status write_groups(const dyn_sample *s, const int32_t *perm, const int32_t *group_len, int32_t n_groups,
                               const int32_t *rows, const int32_t *enc_off, const int32_t *dec_off,
                               const assemble_scratch *a, dyn_batch_plan *out, dyn_error *err)
{
    dyn_plan_microbatch *sorted = dyn_calloc((size_t)n_groups, sizeof *sorted, "micro-batches", err);
    if (sorted == NULL) return DYN_ERR_NOMEM;
    int32_t pos = 0;
    for (int32_t i = 0; i < n_groups; i++) {
        int32_t g = a->order[i];
        sorted[i] = a->mbs[g];
        sorted[i].first = pos;
        sorted[i].replica = a->rep[g];
        for (int32_t k = 0; k < group_len[g]; k++) {
            int32_t src = a->first[g] + k;
            out->sample_ids[pos] = s[perm[src]].id;
            out->sample_row[pos] = rows ? rows[src] : k;
            out->sample_offset[pos] = enc_off ? enc_off[src] : 0;
            out->sample_dec_offset[pos] = dec_off ? dec_off[src] : 0;
            pos++;
        }
    }
    out->mbs = sorted;
    return DYN_OK;
}

dyn_status plan_assemble(const dyn_planner *p, const dyn_sample *s, int32_t n,
                             const int32_t *perm, const int32_t *group_len, int32_t n_groups,
                             const dyn_mb_shape *shapes, const int32_t *rows,
                             const int32_t *enc_off, const int32_t *dec_off, dyn_batch_plan *out,
                             dyn_error *err)
{
    assemble_scratch a;
    a.mbs = dyn_calloc((size_t)n_groups, sizeof *a.mbs, "micro-batches", err);
    a.first = dyn_calloc((size_t)n_groups, sizeof(int32_t), "micro-batch offsets", err);
    a.rep = dyn_calloc((size_t)n_groups, sizeof(int32_t), "replica assignment", err);
    a.order = dyn_calloc((size_t)n_groups, sizeof(int32_t), "micro-batch order", err);
    a.load = dyn_calloc((size_t)n_groups, sizeof(double), "micro-batch times", err);
    out->sample_ids = dyn_calloc((size_t)n, sizeof(int32_t), "plan sample ids", err);
    out->sample_row = dyn_calloc((size_t)n, sizeof(int32_t), "plan sample rows", err);
    out->sample_offset = dyn_calloc((size_t)n, sizeof(int32_t), "plan sample offsets", err);
    out->sample_dec_offset = dyn_calloc((size_t)n, sizeof(int32_t), "plan sample offsets", err);
    dyn_status st = DYN_OK;
    assemble_sums sum = {0, 0, 0, 0, 0, 0};
    double max_load = 0;
    int32_t max_per_replica = 0;
    if (!a.mbs || !a.first || !a.rep || !a.order || !a.load || !out->sample_ids || !out->sample_row ||
        !out->sample_offset || !out->sample_dec_offset)
        st = DYN_ERR_NOMEM;
    if (st == DYN_OK) st = cost_groups(p, s, n, perm, group_len, n_groups, shapes, &a, &sum, err);
    if (st == DYN_OK) st = plan_balance_kk(a.load, n_groups, p->opt.dp, a.rep, &max_load, err);
    if (st == DYN_OK) st = order_by_replica(&a, n_groups, p->opt.dp, &max_per_replica, err);
    if (st == DYN_OK) st = write_groups(s, perm, group_len, n_groups, rows, enc_off, dec_off, &a, out, err);
    if (st == DYN_OK) {
        out->n_microbatches = n_groups;
        out->n_samples = n;
        int32_t in_flight = max_per_replica < p->opt.stages ? max_per_replica : p->opt.stages;
        out->objective_ms = plan_objective_ms(p->opt.stages, p->opt.chunks, p->opt.dp, sum.tmax, sum.tsum);
        out->balanced_ms = plan_objective_ms(p->opt.stages, p->opt.chunks, 1, sum.tmax, max_load);
        out->device_peak_mb = p->states_mb + (in_flight > 0 ? in_flight - 1 : 0) * sum.max_stored + sum.max_peak;
        out->real_tokens = sum.real;
        out->padded_tokens = sum.padded;
        out->method = (int32_t)p->opt.method;
        out->knob = p->opt.method == DYN_BATCH_PADDING ? p->opt.mb_samples
                    : p->opt.method == DYN_BATCH_PACKING || p->opt.method == DYN_BATCH_PACKING_DOCMASK
                        ? p->opt.pack_rows
                    : p->opt.method == DYN_BATCH_TOKEN ? p->opt.mb_tokens
                                                       : 0;
    }
    assemble_scratch_free(&a);
    if (st != DYN_OK) dyn_batch_plan_free(out);
    return st;
}
