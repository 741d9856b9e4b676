/* plan_internal.h — the pieces of the micro-batch planner, shared by the
 * files of src/plan, its tests and its benchmark (not a public API):
 *
 *   dp.c        the DP over t_max (fast, exact) and the naive reference DP
 *   order.c     sample orderings (length sort; 2-D orderings for T5)
 *   planner.c   the planner handle: shape-cost cache, dynapipe method,
 *               result assembly, options and names
 *   baselines.c padding, packing, packing with document masks, token budget
 *   balance.c   micro-batches over data-parallel replicas (KK, round-robin)
 *   stage_cost.c per-layer cost model -> cost of a micro-batch on a stage
 *
 * Names: n samples; a "run" is a consecutive range of the ordered samples
 * that becomes one micro-batch; run (j, k) is the k samples ending at
 * position j (inclusive), i.e. positions j-k+1 .. j. */
#ifndef DYN_PLAN_INTERNAL_H
#define DYN_PLAN_INTERNAL_H

#include "dynapipe/plan.h"

/* ---- dp.c ---------------------------------------------------------------- */

/* One DP instance over an ordered list of n samples.
 * width[j] (>= 1): the longest feasible run ending at j (memory limit);
 * time[j][k-1], k = 1..width[j]: predicted time (ms) of run (j, k), which
 * must be non-decreasing in k (it is, when the cost function honours the
 * dyn_mb_cost_fn contract: a longer run has more rows and no shorter
 * lengths). Objective of a partition into runs:
 *     (stages - 1) * max t / chunks + sum c / dp,
 * c = cost[j][k-1] (the stage-aware sum term, also non-decreasing in k),
 * or c = t when cost is NULL. */
typedef struct plan_dp_problem {
    int32_t n;
    const int32_t *width;
    const double *const *time;
    int32_t stages;
    int32_t chunks;
    int32_t dp;
    /* 1 if every run takes at least as long as each of its samples would
     * alone (true of the planner's problems: costs are monotone in rows and
     * lengths). Lets the search start at max_j t(j, 1), below which no
     * partition exists; with 0 it finds that boundary by search. */
    int singles_bound;
    /* The caller already holds a solution this good (ms; INFINITY: none):
     * the fast solver does not explore t_max values that provably cannot
     * beat it, so its result is exact only when it is below this. */
    double known_ms;
    /* Optional (NULL: none). Affine segments of a position's row: position
     * j's runs k = seg_k[s] .. (seg_k[s+1] - 1, or width) for s in
     * seg_start[j] .. seg_start[j+1]-1 (seg_start has n + 1 entries; no
     * segments: equal starts) all have time t(ka) + seg_beta[s] (k - ka)
     * within 1e-13 relative (NAN: not affine), and seg_key[s] names the
     * cost row they come from: equal keys have equal slopes. The fast pass
     * then finds each segment's best start with a monotone deque shared by
     * consecutive positions with the same key (see dp.c). */
    const int64_t *seg_start;
    const int32_t *seg_k;
    const int32_t *seg_key;
    const double *seg_beta;
    /* Optional (NULL: the time rows): each position's sum-term row, parallel
     * to time (same widths; positions that share a time row share a cost
     * row); seg_beta are then its slopes. */
    const double *const *cost;
} plan_dp_problem;

/* Result: run_len[0..n_runs) (caller allocates n entries) are the run sizes
 * in order; objective/t_max/t_sum (the sum of c) in ms; n_evals counts DP
 * passes. */
typedef struct plan_dp_result {
    int32_t n_runs;
    int32_t *run_len;
    double objective_ms;
    double t_max_ms;
    double t_sum_ms;
    int32_t n_evals;
} plan_dp_result;

/* Exact optimum over the candidate set T = { time[j][k-1] : all j, k <=
 * width[j] } (every achievable micro-batch time) by branch and bound over
 * t_max; see dp.c. DYN_ERR_NOMEM only. */
dyn_status plan_dp_solve(const plan_dp_problem *pb, plan_dp_result *res, dyn_error *err);
/* Reference: one full DP pass for every candidate in T, O(n * w * |T|). */
dyn_status plan_dp_solve_naive(const plan_dp_problem *pb, plan_dp_result *res, dyn_error *err);
/* The DP objective, the predicted iteration time (ms), of a partition whose
 * slowest micro-batch takes t_max and whose micro-batches sum to t_sum:
 * (S - 1) * t_max / v + t_sum / d. The one formula: the DP, the planner's
 * bounds and the plan's objective_ms / balanced_ms (d = 1, t_sum = the
 * busiest replica's load) all call it. */
static inline double plan_objective_ms(int32_t S, int32_t v, int32_t d, double t_max, double t_sum)
{
    return (double)(S - 1) * t_max / (double)v + t_sum / (double)d;
}
/* plan_objective_ms with pb's S, v and d. */
double plan_dp_objective(const plan_dp_problem *pb, double t_max, double t_sum);

/* ---- order.c ------------------------------------------------------------- */

/* Padded length of a sample side: len rounded up to a multiple of r. */
static inline int32_t plan_round_up(int32_t len, int32_t r)
{
    return r > 1 ? (len + r - 1) / r * r : len;
}

/* GPT: perm[0..n) = indices of samples sorted by input+target (ties: index). */
dyn_status plan_order_gpt(const dyn_sample *s, int32_t n, int32_t *perm, dyn_error *err);
/* T5, lexicographic: by input, then target, then index. */
dyn_status plan_order_t5_lex(const dyn_sample *s, int32_t n, int32_t *perm, dyn_error *err);
/* T5, by padded lengths: (input rounded up to r, target rounded up to r,
 * input, index), so that samples of equal padded shape are adjacent and the
 * DP can share one cost row among them. */
dyn_status plan_order_t5_padded(const dyn_sample *s, int32_t n, int32_t r, int32_t *perm,
                               dyn_error *err);
/* T5, serpentine: inputs cut into buckets of `bucket` tokens (rounded input /
 * bucket); buckets in increasing input; within a bucket sorted by target,
 * alternately increasing and decreasing, so that consecutive buckets meet at
 * similar targets. */
dyn_status plan_order_t5_serpentine(const dyn_sample *s, int32_t n, int32_t bucket, int32_t *perm,
                                   dyn_error *err);

/* ---- balance.c ----------------------------------------------------------- */

/* Assign m items with loads w[0..m) (ms) to d bins; replica[i] receives the
 * bin. Karmarkar-Karp multi-way differencing. Returns the largest bin load. */
dyn_status plan_balance_kk(const double *w, int32_t m, int32_t d, int32_t *replica, double *max_load,
                          dyn_error *err);
/* Round-robin in the given order (the comparison baseline). */
double plan_balance_round_robin(const double *w, int32_t m, int32_t d, int32_t *replica);

/* ---- planner.c / baselines.c --------------------------------------------- */

/* What a planner holds. Costs of micro-batch shapes are cached by
 * (padded input or sequence length, padded target length) in rows indexed
 * by the number of samples: see struct plan_cost_row. */
typedef struct plan_cost_row {
    int32_t n;     /* entries 1..n evaluated (index k-1) */
    int32_t cap;   /* largest feasible row count, once known; -1 not yet */
    int32_t alloc;
    double *time;  /* ms */
    double *cost;  /* the sum term (dyn_mb_cost.sum_ms), ms; == time unless stage-aware */
    double *amin;  /* amin[k-1] = min over i <= k of cost[i-1] / i: cheapest ms per sample */
    int32_t aff_n; /* T5 segments: entries 1..aff_n are affine, t(1) + (t(2) - t(1)) (k - 1) */
    int32_t aff_bad; /* 1: entry aff_n + 1 is not, so no longer prefix is */
} plan_cost_row;

struct dyn_planner {
    dyn_model_kind kind;
    dyn_mb_cost_fn fn;
    void *ctx;
    void *owned_ctx;              /* freed with the planner (cost-model adapter) */
    const dyn_cost_model *cm;     /* dyn_planner_create's (borrowed); NULL for a custom planner */
    void (*free_ctx)(void *);
    double states_mb;
    dyn_plan_options opt;
    double stored_limit_mb;       /* per micro-batch, per stage */
    double peak_limit_mb;
    double alone_limit_mb;  /* A: what one-row micro-batch may use with nothing else in flight */
    int32_t n_len;                /* padded lengths 1..n_len units of round_to */
    plan_cost_row **rows;          /* [n_len * (T5 ? n_len : 1)], lazily made */
    /* knobs for the benchmark and tests (0 = normal operation) */
    int use_naive_dp;             /* solve with plan_dp_solve_naive, over all runs (no time cap) */
    int t5_lex_only;              /* T5: try only the lexicographic order */
    int64_t dp_evals;             /* DP passes, summed over solves */
    /* scratch, grown as needed */
    int32_t scratch_n;
    int32_t *perm, *width, *run_len, *perm2, *run_len2;
    int32_t *shared; /* T5: cost-row index a position's runs all use, or -1 */
    int32_t *pe, *pd; /* T5: padded input / target length index of each position */
    int seg_on;       /* T5: track affine segments in this batch's bands (shapes repeat) */
    uint32_t *shape_seen;  /* T5: per padded (input, target) pair, the batch that last had it */
    uint32_t batch_stamp;  /* T5: planned batches, for shape_seen */
    const double **time;
    const double **cost; /* [scratch_n] the positions' sum-term rows */
    double *band, *cband; /* T5: run times and their sum terms */
    int64_t band_alloc;
    /* T5: affine segments of the band rows (see plan_dp_problem) */
    int64_t *seg_start;  /* [scratch_n + 1] */
    int32_t *seg_k, *seg_key;
    double *seg_beta;    /* the seg_* arrays have band_alloc entries */
};

/* Cost of a micro-batch shape through the planner's function, with the
 * memory check: *fits = 0 when stored or peak exceed the limits; out->sum_ms
 * is resolved (0 from the function: time_ms). */
dyn_status plan_mb_cost(const dyn_planner *p, const dyn_mb_shape *shape, dyn_mb_cost *out,
                               int *fits, dyn_error *err);
/* Fill plan from micro-batch groups: ids in final order (perm over samples),
 * group sizes, shapes; computes costs, checks memory, balances, objective.
 * rows/offsets may be NULL (one sample per row, offset 0). */
dyn_status plan_assemble(const dyn_planner *p, const dyn_sample *s, int32_t n,
                             const int32_t *perm, const int32_t *group_len, int32_t n_groups,
                             const dyn_mb_shape *shapes, const int32_t *rows,
                             const int32_t *enc_off, const int32_t *dec_off, dyn_batch_plan *out,
                             dyn_error *err);
/* New model states per device (MB): the cost cache is emptied and the
 * memory limits follow (stage_cost.c, when the stage layout changes). */
dyn_status plan_reset_costs(dyn_planner *p, double states_mb, dyn_error *err);
/* Baselines (baselines.c): fill out for method p->opt.method. */
dyn_status plan_baseline(dyn_planner *p, const dyn_sample *s, int32_t n, dyn_batch_plan *out,
                             dyn_error *err);
/* Largest number of rows of max_seqlen-long sequences that fits the memory
 * limit (at least 1 when a single row fits; 0 if none does), capped at cap. */
dyn_status plan_max_rows(const dyn_planner *p, int32_t cap, int32_t *rows, dyn_error *err);

#endif
