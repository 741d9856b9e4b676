/* balance.c — spread micro-batches over d data-parallel replicas so that the
 * busiest replica's total predicted time is small.
 *
 * Karmarkar-Karp multi-way differencing: start with one partial solution per
 * item (the item alone in one of d bins); repeatedly take the two partial
 * solutions with the largest spread (largest minus smallest bin) and merge
 * them, pairing the heaviest bin of one with the lightest of the other, so
 * that their differences cancel. The last partial solution is the
 * assignment. O(m^2 d) with linear scans: m (micro-batches per global batch)
 * is in the hundreds at most. Deterministic: ties go to the lower index.
 *
 * Round-robin (micro-batch i to replica i mod d) is kept as the comparison.
 */
#include "plan/plan_internal.h"

#include <stdlib.h>

#include "util/util.h" /* defines: dyn_calloc */

/* A partial solution: d bins, each a linked list of items (head, tail) and a
 * load. Bins are kept sorted by load, heaviest first. */
typedef struct kk_bin {
    double load;
    int32_t head, tail; /* item indices, -1 when empty */
} kk_bin;

static void bins_sort_desc(kk_bin *b, int32_t d)
{
    for (int32_t i = 1; i < d; i++) { /* insertion sort: d is small */
        kk_bin x = b[i];
        int32_t j = i - 1;
        while (j >= 0 && b[j].load < x.load) {
            b[j + 1] = b[j];
            j--;
        }
        b[j + 1] = x;
    }
}

/* The trivial cases: one replica (or no items) takes everything; d >= m
 * gives each item a replica of its own (nothing to balance, and no m x d
 * table). */
static void balance_trivial(const double *w, int32_t m, int32_t d, int32_t *replica, double *max_load)
{
    double load = 0.0;
    for (int32_t i = 0; i < m; i++) {
        if (d <= 1) {
            replica[i] = 0;
            load += w[i];
        } else {
            replica[i] = i;
            if (w[i] > load) load = w[i];
        }
    }
    if (max_load) *max_load = load;
}

/* Merge the two live partial solutions with the largest spreads: the
 * heaviest bin of one with the lightest of the other, and so on; the
 * second dies. */
static void kk_merge_widest(kk_bin *bins, int32_t *next, char *alive, int32_t m, int32_t d)
{
    int32_t p = -1, q = -1;
    double sp = -1.0, sq = -1.0;
    for (int32_t i = 0; i < m; i++) {
        if (!alive[i]) continue;
        const kk_bin *b = bins + (size_t)i * d;
        double s = b[0].load - b[d - 1].load;
        if (s > sp) {
            q = p, sq = sp;
            p = i, sp = s;
        } else if (s > sq) {
            q = i, sq = s;
        }
    }
    kk_bin *a = bins + (size_t)p * d, *b = bins + (size_t)q * d;
    for (int32_t r = 0; r < d; r++) {
        kk_bin *x = &a[r], *y = &b[d - 1 - r];
        x->load += y->load;
        if (y->head >= 0) {
            if (x->head < 0) x->head = y->head;
            else next[x->tail] = y->head;
            x->tail = y->tail;
        }
    }
    bins_sort_desc(a, d);
    alive[q] = 0;
}

dyn_status plan_balance_kk(const double *w, int32_t m, int32_t d, int32_t *replica, double *max_load,
                           dyn_error *err)
{
    if (d <= 1 || m <= 0 || d >= m) {
        balance_trivial(w, m, d, replica, max_load);
        return DYN_OK;
    }
    kk_bin *bins = dyn_calloc((size_t)m * (size_t)d, sizeof(kk_bin), "KK partial solutions", err);
    int32_t *next = dyn_calloc((size_t)m, sizeof(int32_t), "KK item links", err);
    char *alive = dyn_calloc((size_t)m, 1, "KK flags", err);
    if (bins == NULL || next == NULL || alive == NULL) {
        free(bins);
        free(next);
        free(alive);
        return DYN_ERR_NOMEM;
    }
    for (int32_t i = 0; i < m; i++) {
        kk_bin *b = bins + (size_t)i * d;
        for (int32_t r = 0; r < d; r++) b[r] = (kk_bin){0.0, -1, -1};
        b[0] = (kk_bin){w[i], i, i};
        next[i] = -1;
        alive[i] = 1;
    }
    for (int32_t left = m; left > 1; left--) kk_merge_widest(bins, next, alive, m, d);
    int32_t last = 0;
    while (!alive[last]) last++;
    const kk_bin *b = bins + (size_t)last * d;
    /* Replica numbers by ascending load of the bin, so replica 0 is lightest;
     * the order is arbitrary but fixed. */
    for (int32_t r = 0; r < d; r++)
        for (int32_t it = b[r].head; it >= 0; it = next[it]) replica[it] = d - 1 - r;
    if (max_load) *max_load = b[0].load;
    free(bins);
    free(next);
    free(alive);
    return DYN_OK;
}

double plan_balance_round_robin(const double *w, int32_t m, int32_t d, int32_t *replica)
{
    if (d < 1) d = 1;
    double load[64] = {0};
    double *ld = load;
    double *heap = NULL;
    if (d > 64) {
        heap = calloc((size_t)d, sizeof(double));
        if (heap == NULL) return -1.0; /* caller treats as failure */
        ld = heap;
    }
    for (int32_t i = 0; i < m; i++) {
        replica[i] = i % d;
        ld[i % d] += w[i];
    }
    double mx = 0.0;
    for (int32_t r = 0; r < d; r++)
        if (ld[r] > mx) mx = ld[r];
    free(heap);
    return mx;
}
