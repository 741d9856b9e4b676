/* dp.c — the micro-batching DP: split an ordered list of samples into
 * consecutive runs (micro-batches) minimising
 *
 *     value(P) = (S - 1) * max_{mb in P} t(mb) / v  +  sum_{mb in P} c(mb) / d
 *
 * subject to the memory limit (encoded in width[]: only runs of at most
 * width[j] samples may end at position j). c = t (the paper's objective)
 * unless the problem gives separate sum-term rows (pb->cost: a stage-aware
 * objective, stage_cost.c); everything below holds for any c >= 0: tau
 * bounds t, the shortest path sums c.
 *
 * For a fixed bound tau on t_max the problem is a shortest path:
 *     F_tau(0) = 0,  F_tau(j+1) = min_{k <= width[j], t(j,k) <= tau} F_tau(j+1-k) + c(j,k)
 * and  OPT = min over candidates tau in T of  (S-1) tau / v + F_tau(n) / d,
 * where T is every achievable run time. (For the optimal partition P*, tau =
 * max t(P*) is in T and F_tau(n) <= sum c(P*); conversely the partition found
 * for any tau has t_max <= tau, so its value is at most the formula's.)
 *
 * The naive method runs one O(n w) pass for each of the |T| = O(n w)
 * candidates. The fast method is exact over the same T and needs a handful of
 * passes, because F_tau is a step function of tau that is known on whole
 * intervals after one pass:
 *   - a pass at tau returns the partition's real maximum tau' <= tau and the
 *     smallest candidate tau+ > tau (the first run time that the pass had to
 *     skip); F is constant on [tau', tau+), and on that interval the value is
 *     smallest at tau', whose value the pass has just scored;
 *   - F is non-increasing in tau, so every candidate in an unexplored interval
 *     [lo, hi) has value >= (S-1) lo / v + F(hi) / d; an interval whose bound
 *     cannot beat the best value found so far is dropped, as is one whose
 *     neighbours on both sides have the same F (it is flat, and its left
 *     neighbour already scored a smaller tau);
 *   - otherwise the pass at the interval's midpoint discovers the flat
 *     interval around it and splits the rest in two.
 * Every pass discovers a new maximal flat interval, so the search ends after
 * at most as many passes as F has distinct values, and nothing is dropped
 * unless it provably cannot be better: the result is the optimum over T (up
 * to the order of floating-point additions, which both methods share).
 * Unlike the reference implementation, no candidate is ever merged with a
 * near neighbour.
 *
 * Within a pass, rows are non-decreasing in k, so each row is cut at its
 * first run slower than tau (bisection, cached along positions that share
 * the row); that run's time is the row's next candidate. Positions that
 * share a row (GPT: samples of equal padded length, all runs ending there
 * padded to it) and whose row is affine in k -- as the analytic model's
 * rows are, up to rounding -- find their best start with a monotone deque
 * in O(1) amortised instead of scanning every run (pass_affine); the value
 * they store is a real partition's, within the row's deviation from affine
 * (at most 1e-13 of its time, i.e. rounding) of the scanned minimum. Other
 * rows are scanned in full. So a pass costs O(n) for large groups of equal
 * lengths (many short samples) and O(sum of runs within tau) otherwise.
 */
#include "plan/plan_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h" /* defines: dyn_calloc */

/* Position j's sum-term row: pb->cost[j], or its time row. */
static inline const double *cost_row(const plan_dp_problem *pb, int32_t j)
{
    return pb->cost ? pb->cost[j] : pb->time[j];
}

double plan_dp_objective(const plan_dp_problem *pb, double t_max, double t_sum)
{
    return plan_objective_ms(pb->stages, pb->chunks, pb->dp, t_max, t_sum);
}

/* Scratch of one solve: F[0..n], choice[1..n]. */
/* A monotone deque over G(i) = F(i) - beta i for one segment key (pass_seg). */
#define DP_SEG_SLOTS 4
typedef struct seg_slot {
    int32_t key, head, tail, push, lo;
    double beta;
    int64_t pass, used; /* valid only in the pass that filled it; LRU stamp */
    int32_t *buf;
} seg_slot;

typedef struct dp_work {
    double *F;
    int32_t *choice;
    int32_t *dq; /* monotone deque of positions (affine fast path) */
    seg_slot slot[DP_SEG_SLOTS];
    int64_t pass, used;
} dp_work;

/* Reference pass at bound tau (the naive solver): scans every run. Returns
 * F(n), INFINITY if no partition has all runs <= tau. */
static double dp_pass(const plan_dp_problem *pb, double tau, dp_work *w)
{
    w->F[0] = 0.0;
    for (int32_t j = 0; j < pb->n; j++) {
        const double *row = pb->time[j], *crow = cost_row(pb, j);
        int32_t wj = pb->width[j] < j + 1 ? pb->width[j] : j + 1;
        double best = INFINITY;
        int32_t arg = 0;
        for (int32_t k = 1; k <= wj; k++) {
            if (row[k - 1] > tau) continue;
            double v = w->F[j + 1 - k] + crow[k - 1];
            if (v < best) {
                best = v;
                arg = k;
            }
        }
        w->F[j + 1] = best;
        w->choice[j + 1] = arg;
    }
    return w->F[pb->n];
}

/* How many entries of the non-decreasing row[0..len) are <= tau. */
static int32_t count_le(const double *row, int32_t len, double tau)
{
    if (row[len - 1] <= tau) return len;
    int32_t lo = 0, hi = len - 1; /* row[hi] > tau: the answer is in [0, hi] */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (row[mid] <= tau) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The same count, trying a guess g (1 <= g <= len) first: the previous
 * position's count or one more (along the order a run one longer contains
 * the previous position's run, so the count grows by at most one per
 * step). Two probes confirm a right guess; otherwise bisect the side the
 * answer lies on. Any guess gives the right count. */
static int32_t count_le_from(const double *row, int32_t len, double tau, int32_t g)
{
    if (row[g - 1] <= tau) {
        if (g == len || row[g] > tau) return g;
        return g + count_le(row + g, len - g, tau);
    }
    if (g == 1 || row[g - 2] <= tau) return g - 1;
    return count_le(row, g - 1, tau);
}

/* Runs usable at position j under tau: K (<= width, <= j+1, times <= tau).
 * The count is cached for consecutive calls on the same row and width, and
 * a new row starts from the previous count (count_le_from). */
typedef struct k_cache {
    const double *row;
    int32_t width, K;
} k_cache;

static int32_t runs_within(const plan_dp_problem *pb, int32_t j, double tau, k_cache *c)
{
    const double *row = pb->time[j];
    int32_t width = pb->width[j], K;
    if (row != c->row) {
        int32_t g = c->row != NULL && c->K < width ? c->K + 1 : width;
        K = count_le_from(row, width, tau, g);
        c->row = row;
        c->width = width;
        c->K = K;
    } else if (c->K < c->width || width <= c->width) {
        /* the first run over tau lies within the cached width, or the new
         * width is inside it: the count is known */
        K = c->K < width ? c->K : width;
    } else {
        /* wider, and all cached entries were within tau: extend */
        K = c->width + count_le(row + c->width, width - c->width, tau);
        c->width = width;
        c->K = K;
    }
    return K < j + 1 ? K : j + 1;
}

/* Rows that are affine in the number of samples, t(k) = t(1) + beta (k - 1),
 * to within this relative deviation. The analytic cost model's rows are
 * affine up to rounding (every FLOP and byte count is linear in the rows). */
#define DP_AFFINE_TOL 1e-13

/* Is row[0..K) affine within DP_AFFINE_TOL? *beta receives its slope. */
static int row_affine(const double *row, int32_t K, double *beta)
{
    if (K < 2) return 0;
    double b = (row[K - 1] - row[0]) / (double)(K - 1);
    double dmin = 0.0, dmax = 0.0;
    for (int32_t k = 2; k < K; k++) {
        double d = row[k - 1] - row[0] - b * (double)(k - 1);
        if (d < dmin) dmin = d;
        if (d > dmax) dmax = d;
    }
    *beta = b;
    return dmax - dmin <= DP_AFFINE_TOL * fabs(row[K - 1]);
}

/* The shortest run k in 1..K minimising F1[-k] + row[k-1] (F1 = &F[j+1]);
 * *best receives that value; 0 (and INFINITY) if all are infinite. The
 * minimum is taken first over four independent chains (the scan is the
 * DP's inner loop and a single chain of compares is latency-bound), then
 * the first k reaching it is found again: the sums are recomputed with the
 * same operations, so the result is the one-chain scan's, bit for bit. */
static int32_t best_run(const double *F1, const double *row, int32_t K, double *best)
{
    double m0 = INFINITY, m1 = INFINITY, m2 = INFINITY, m3 = INFINITY;
    int32_t k = 1;
    for (; k + 3 <= K; k += 4) {
        double v0 = F1[-k] + row[k - 1], v1 = F1[-k - 1] + row[k];
        double v2 = F1[-k - 2] + row[k + 1], v3 = F1[-k - 3] + row[k + 2];
        m0 = v0 < m0 ? v0 : m0;
        m1 = v1 < m1 ? v1 : m1;
        m2 = v2 < m2 ? v2 : m2;
        m3 = v3 < m3 ? v3 : m3;
    }
    for (; k <= K; k++) {
        double v = F1[-k] + row[k - 1];
        m0 = v < m0 ? v : m0;
    }
    if (m1 < m0) m0 = m1;
    if (m3 < m2) m2 = m3;
    if (m2 < m0) m0 = m2;
    *best = m0;
    if (!(m0 < INFINITY)) return 0;
    for (k = 1; k < K && F1[-k] + row[k - 1] != m0; k++) {}
    return k;
}

/* Segments shorter than this are scanned: a deque only pays on long ones. */
#define DP_SEG_MIN 8

/* The best start i in [L, R] of G(i) = F(i) - beta i for segment key `key`
 * (largest i on ties). A slot filled earlier in this pass with the same key
 * and slope is reused when its window only moved right (L >= its left end,
 * R at or past what it has taken in): then every start it dropped is out of
 * the window or dominated by a later one inside it. Otherwise the least
 * recently used slot is refilled from L. Consecutive positions whose runs
 * share a cost row (lexicographic T5 orders: the input maximum is the
 * position's own, the target maximum soon saturates) slide one window, so
 * each start enters a deque O(1) times. */
static int32_t seg_best_start(dp_work *w, int32_t key, double beta, int32_t L, int32_t R)
{
    seg_slot *sl = NULL, *lru = &w->slot[0];
    for (int q = 0; q < DP_SEG_SLOTS; q++) {
        seg_slot *c = &w->slot[q];
        if (c->pass == w->pass && c->key == key && c->beta == beta && L >= c->lo && c->push <= R + 1) {
            sl = c;
            break;
        }
        if (lru->pass == w->pass && (c->pass != w->pass || c->used < lru->used)) lru = c;
    }
    if (sl == NULL) {
        sl = lru;
        sl->key = key;
        sl->beta = beta;
        sl->pass = w->pass;
        sl->head = sl->tail = 0;
        sl->push = L;
    }
    const double *F = w->F;
    for (; sl->push <= R; sl->push++) {
        int32_t i = sl->push;
        double g = F[i] - beta * (double)i;
        while (sl->tail > sl->head &&
               F[sl->buf[sl->tail - 1]] - beta * (double)sl->buf[sl->tail - 1] >= g)
            sl->tail--;
        sl->buf[sl->tail++] = i;
    }
    while (sl->buf[sl->head] < L) sl->head++;
    sl->lo = L;
    sl->used = ++w->used;
    return sl->buf[sl->head];
}

/* Position j with affine segments (pb->seg_start): each long affine segment
 * [ka, kb] (cut at K) takes its best start from a deque; the value stored
 * is F(i) + t(j, k) with the row's true time, a real partition within the
 * segment's deviation from affine (<= 1e-13 t) of the scanned minimum.
 * Short or non-affine segments are scanned. Ties keep the shortest run. */
static void pass_seg_pos(const plan_dp_problem *pb, dp_work *w, int32_t j, int32_t K)
{
    const double *row = cost_row(pb, j);
    const double *F = w->F;
    int64_t s0 = pb->seg_start[j], s1 = pb->seg_start[j + 1];
    double best = INFINITY;
    int32_t arg = 0;
    for (int64_t sg = s0; sg < s1; sg++) {
        int32_t ka = pb->seg_k[sg];
        if (ka > K) break;
        int32_t kb = sg + 1 < s1 ? pb->seg_k[sg + 1] - 1 : K;
        if (kb > K) kb = K;
        double beta = pb->seg_beta[sg];
        if (kb - ka + 1 >= DP_SEG_MIN && beta == beta) {
            int32_t i = seg_best_start(w, pb->seg_key[sg], beta, j + 1 - kb, j + 1 - ka);
            int32_t k = j + 1 - i;
            double v = F[i] + row[k - 1];
            if (v < best) {
                best = v;
                arg = k;
            }
        } else {
            for (int32_t k = ka; k <= kb; k++) {
                double v = F[j + 1 - k] + row[k - 1];
                if (v < best) {
                    best = v;
                    arg = k;
                }
            }
        }
    }
    w->F[j + 1] = best;
    w->choice[j + 1] = arg;
}

/* Plain positions j in [j0, j1) sharing one row: scan every usable run. */
static void pass_plain(const plan_dp_problem *pb, double tau, dp_work *w, int32_t j0, int32_t j1,
                       double *nxt, k_cache *kc)
{
    for (int32_t j = j0; j < j1; j++) {
        const double *row = pb->time[j];
        int32_t wj = pb->width[j] < j + 1 ? pb->width[j] : j + 1;
        int32_t K = runs_within(pb, j, tau, kc);
        if (K < wj && row[K] < *nxt) *nxt = row[K];
        if (pb->seg_start && pb->seg_start[j + 1] > pb->seg_start[j]) {
            pass_seg_pos(pb, w, j, K);
            continue;
        }
        double best;
        w->choice[j + 1] = best_run(w->F + j + 1, cost_row(pb, j), K, &best);
        w->F[j + 1] = best;
    }
}

/* Positions j in [j0, j1) sharing one affine row t(k) = t(1) + beta (k-1):
 * F(i) + t(j+1-i) = (F(i) - beta i) + t(1) + beta j, so the best start i
 * is the minimum of G(i) = F(i) - beta i over the window [j+1-K_j, j].
 * Windows only slide right (K_j grows by at most 1 per step), so a
 * monotone deque yields each minimum in O(1) amortised, instead of O(K).
 * The value stored is F(i) + t(k) with the row's true t(k): a real
 * partition, at most the row's deviation from affine (<= 1e-13 t) above the
 * scanned minimum. Ties keep the latest start (the shortest run). */
static void pass_affine(const plan_dp_problem *pb, double tau, dp_work *w, int32_t j0, int32_t j1,
                        double beta, double *nxt, k_cache *kc)
{
    const double *row = pb->time[j0], *crow = cost_row(pb, j0);
    int32_t head = 0, tail = 0;
    int32_t push = j0 + 1 - runs_within(pb, j0, tau, kc); /* next start to enter */
    if (push < 0) push = 0;
    for (int32_t j = j0; j < j1; j++) {
        int32_t wj = pb->width[j] < j + 1 ? pb->width[j] : j + 1;
        int32_t K = runs_within(pb, j, tau, kc);
        if (K < wj && row[K] < *nxt) *nxt = row[K];
        if (K == 0) {
            w->F[j + 1] = INFINITY;
            w->choice[j + 1] = 0;
            continue;
        }
        int32_t L = j + 1 - K;
        if (push < L) push = L;
        for (; push <= j; push++) {
            double g = w->F[push] - beta * (double)push;
            while (tail > head && w->F[w->dq[tail - 1]] - beta * (double)w->dq[tail - 1] >= g) tail--;
            w->dq[tail++] = push;
        }
        while (head < tail && w->dq[head] < L) head++;
        int32_t i = w->dq[head];
        w->F[j + 1] = w->F[i] + crow[j - i];
        w->choice[j + 1] = j + 1 - i;
    }
}

/* Fast pass at bound tau. Each row is cut at its first run over tau by
 * bisection (rows are non-decreasing); that run is the row's next candidate:
 * *next receives the smallest run time > tau. Positions that share a row
 * (GPT: equal padded lengths) use the deque when the row is affine. */
static double dp_pass_fast(const plan_dp_problem *pb, double tau, dp_work *w, double *next)
{
    double nxt = INFINITY;
    k_cache kc = {NULL, -1, 0};
    w->pass++; /* deque slots of earlier passes are stale */
    w->F[0] = 0.0;
    for (int32_t j0 = 0; j0 < pb->n;) {
        int32_t j1 = j0 + 1;
        while (j1 < pb->n && pb->time[j1] == pb->time[j0]) j1++;
        double beta = 0.0;
        int affine = 0;
        if (j1 - j0 >= 2) { /* a single position has nothing to share */
            k_cache last = {NULL, -1, 0};
            affine = row_affine(cost_row(pb, j0), runs_within(pb, j1 - 1, tau, &last), &beta);
        }
        if (affine)
            pass_affine(pb, tau, w, j0, j1, beta, &nxt, &kc);
        else
            pass_plain(pb, tau, w, j0, j1, &nxt, &kc);
        j0 = j1;
    }
    *next = nxt;
    return w->F[pb->n];
}

/* Walk the choices back from n: run sizes into res (in order), its max and
 * sum of times. Requires F(n) finite. */
static void dp_traceback(const plan_dp_problem *pb, const dp_work *w, plan_dp_result *res)
{
    int32_t m = 0;
    double tmax = 0.0;
    for (int32_t j = pb->n; j > 0; j -= w->choice[j]) {
        int32_t k = w->choice[j];
        double t = pb->time[j - 1][k - 1];
        if (t > tmax) tmax = t;
        res->run_len[m++] = k;
    }
    for (int32_t a = 0, b = m - 1; a < b; a++, b--) { /* reverse into order */
        int32_t tmp = res->run_len[a];
        res->run_len[a] = res->run_len[b];
        res->run_len[b] = tmp;
    }
    res->n_runs = m;
    res->t_max_ms = tmax;
    res->t_sum_ms = w->F[pb->n];
    res->objective_ms = plan_dp_objective(pb, tmax, w->F[pb->n]);
}

static void work_free(dp_work *w)
{
    free(w->F);
    free(w->choice);
    free(w->dq);
    for (int q = 0; q < DP_SEG_SLOTS; q++) free(w->slot[q].buf);
}

static dyn_status work_alloc(dp_work *w, int32_t n, int segments, dyn_error *err)
{
    memset(w, 0, sizeof *w);
    w->F = dyn_calloc((size_t)n + 1, sizeof(double), "DP table", err);
    w->choice = dyn_calloc((size_t)n + 1, sizeof(int32_t), "DP choices", err);
    w->dq = dyn_calloc((size_t)n + 1, sizeof(int32_t), "DP deque", err);
    int ok = w->F && w->choice && w->dq;
    for (int q = 0; q < DP_SEG_SLOTS && segments && ok; q++) {
        w->slot[q].buf = dyn_calloc((size_t)n + 1, sizeof(int32_t), "DP segment deque", err);
        w->slot[q].pass = -1;
        ok = w->slot[q].buf != NULL;
    }
    if (!ok) {
        work_free(w);
        return err ? err->code : DYN_ERR_NOMEM;
    }
    return DYN_OK;
}

/* The search state of the fast solver. The best partition is kept as run
 * sizes in best->run_len (best is the caller's result). */
typedef struct dp_search {
    const plan_dp_problem *pb;
    dp_work w;
    plan_dp_result *best;
    int32_t evals;
} dp_search;

/* One pass at tau: score its partition against the incumbent. Returns F(n);
 * *lo_flat / *hi_flat receive the flat interval [tau', tau+) around tau. */
static double search_eval(dp_search *s, double tau, double *lo_flat, double *hi_flat)
{
    double next;
    double F = dp_pass_fast(s->pb, tau, &s->w, &next);
    s->evals++;
    *hi_flat = next;
    if (!isfinite(F)) {
        *lo_flat = -INFINITY; /* infeasible below tau too */
        return F;
    }
    /* Score the partition: its real t_max may be below tau. */
    double tmax = 0.0;
    for (int32_t j = s->pb->n; j > 0; j -= s->w.choice[j]) {
        double t = s->pb->time[j - 1][s->w.choice[j] - 1];
        if (t > tmax) tmax = t;
    }
    *lo_flat = tmax;
    double obj = plan_dp_objective(s->pb, tmax, F);
    if (obj < s->best->objective_ms) dp_traceback(s->pb, &s->w, s->best);
    return F;
}

/* Explore candidates in [lo, hi): F_left is F just below lo, F_right is F
 * at hi (the next known point). */
static void search_interval(dp_search *s, double lo, double hi, double F_left, double F_right)
{
    while (lo < hi) {
        if (F_left == F_right) return; /* flat: dominated by the left neighbour */
        double bound = plan_dp_objective(s->pb, lo, F_right);
        double inc = s->best->objective_ms < s->pb->known_ms ? s->best->objective_ms : s->pb->known_ms;
        if (!(bound < inc)) return;
        double mid = isfinite(hi) ? lo + (hi - lo) * 0.5 : lo;
        if (!(mid >= lo && mid < hi)) mid = lo; /* rounding when lo, hi are adjacent */
        double a, b;
        double F = search_eval(s, mid, &a, &b);
        /* Left part [lo, a) lies below the flat interval, right part [b, hi)
         * above it. Recurse into the left, loop on the right. */
        if (a > lo) search_interval(s, lo, a, F_left, F);
        lo = b;
        F_left = F;
    }
}

dyn_status plan_dp_solve(const plan_dp_problem *pb, plan_dp_result *res, dyn_error *err)
{
    dp_search s = {.pb = pb, .best = res, .evals = 0};
    res->objective_ms = INFINITY;
    res->n_runs = 0;
    if (pb->n <= 0) {
        res->objective_ms = res->t_max_ms = res->t_sum_ms = 0.0;
        res->n_evals = 0;
        return DYN_OK;
    }
    dyn_status st = work_alloc(&s.w, pb->n, pb->seg_start != NULL, err);
    if (st != DYN_OK) return st;
    /* Start from the two ends: the smallest tau that can be feasible and
     * tau = infinity (the unconstrained optimum). With singles_bound, every
     * run containing sample j takes at least t(j, 1), so no tau below
     * max_j t(j, 1) is feasible and at that tau all-singletons is. Otherwise
     * start at the smallest candidate, min_j t(j, 1) (rows are monotone). */
    double tau0 = pb->singles_bound ? 0.0 : INFINITY;
    for (int32_t j = 0; j < pb->n; j++) {
        double t = pb->time[j][0];
        if (pb->singles_bound ? t > tau0 : t < tau0) tau0 = t;
    }
    double a0, b0, a1, b1;
    double F0 = search_eval(&s, tau0, &a0, &b0);
    double Finf = search_eval(&s, INFINITY, &a1, &b1);
    /* Unexplored: [b0, a1), between the two flat intervals. */
    if (b0 < a1) search_interval(&s, b0, a1, F0, Finf);
    res->n_evals = s.evals;
    work_free(&s.w);
    if (!isfinite(res->objective_ms))
        return dyn_error_set(err, DYN_ERR_INTERNAL, "DP found no partition (width or times invalid)");
    return DYN_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

dyn_status plan_dp_solve_naive(const plan_dp_problem *pb, plan_dp_result *res, dyn_error *err)
{
    res->objective_ms = INFINITY;
    res->n_runs = 0;
    res->n_evals = 0;
    if (pb->n <= 0) {
        res->objective_ms = res->t_max_ms = res->t_sum_ms = 0.0;
        return DYN_OK;
    }
    size_t m = 0;
    for (int32_t j = 0; j < pb->n; j++) m += (size_t)(pb->width[j] < j + 1 ? pb->width[j] : j + 1);
    double *cand = dyn_calloc(m, sizeof(double), "DP candidates", err);
    if (cand == NULL) return DYN_ERR_NOMEM;
    size_t c = 0;
    for (int32_t j = 0; j < pb->n; j++) {
        int32_t wj = pb->width[j] < j + 1 ? pb->width[j] : j + 1;
        for (int32_t k = 1; k <= wj; k++) cand[c++] = pb->time[j][k - 1];
    }
    qsort(cand, m, sizeof(double), cmp_double);
    dp_work w;
    dyn_status st = work_alloc(&w, pb->n, 0, err);
    if (st != DYN_OK) {
        free(cand);
        return st;
    }
    double best_value = INFINITY;
    for (size_t i = 0; i < m; i++) {
        if (i > 0 && cand[i] == cand[i - 1]) continue;
        double F = dp_pass(pb, cand[i], &w);
        res->n_evals++;
        if (!isfinite(F)) continue;
        double value = plan_dp_objective(pb, cand[i], F);
        if (value < best_value) {
            best_value = value;
            dp_traceback(pb, &w, res);
        }
    }
    work_free(&w);
    free(cand);
    if (!isfinite(res->objective_ms))
        return dyn_error_set(err, DYN_ERR_INTERNAL, "DP found no partition (width or times invalid)");
    return DYN_OK;
}
