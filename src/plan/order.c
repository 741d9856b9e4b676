/* order.c — orderings of the samples of a global batch before the DP cuts
 * them into consecutive runs. Neighbours should have similar lengths, so that
 * a run pads little.
 *
 * GPT: one length (input + target), so sorting is optimal for padding.
 * T5: two lengths. Sorting by input then target (lexicographic) leaves the
 * target jumping from its largest back to its smallest at every new input
 * length; the serpentine order groups inputs into coarser buckets and walks
 * each bucket's targets alternately up and down, so a run that crosses a
 * bucket boundary meets similar targets on both sides (a boustrophedon path,
 * the cheap cousin of the reference's TSP tour over clustered points). The
 * planner tries lexicographic, the order by padded lengths (which lets
 * samples of equal padded shape share cost rows, see dp.c) and a serpentine
 * order, and keeps the order whose DP optimum is best, so it is never worse
 * than lexicographic.
 *
 * All sorts break ties by sample index: the same input gives the same order.
 */
#include "plan/plan_internal.h"

#include <stdlib.h>

#include "util/util.h" /* defines: dyn_calloc */

/* Sort keys packed into one 64-bit integer per sample (fields < 2^21 each),
 * ties broken by sample index. */
typedef struct order_key {
    uint64_t key;
    int32_t idx;
} order_key;

static int cmp_key(const void *a, const void *b)
{
    const order_key *x = a, *y = b;
    if (x->key != y->key) return (x->key > y->key) - (x->key < y->key);
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static uint64_t pack3(uint64_t a, uint64_t b, uint64_t c)
{
    return (a << 42) | (b << 21) | c;
}

/* Sort perm by keys. */
static void sort_by_keys(order_key *keys, int32_t n, int32_t *perm)
{
    qsort(keys, (size_t)n, sizeof(order_key), cmp_key);
    for (int32_t i = 0; i < n; i++) perm[i] = keys[i].idx;
}

static uint64_t clamp21(int64_t v)
{
    if (v < 0) return 0;
    if (v >= (1 << 21)) return (1 << 21) - 1;
    return (uint64_t)v;
}

dyn_status plan_order_gpt(const dyn_sample *s, int32_t n, int32_t *perm, dyn_error *err)
{
    order_key *keys = dyn_calloc((size_t)n, sizeof(order_key), "ordering keys", err);
    if (keys == NULL) return DYN_ERR_NOMEM;
    for (int32_t i = 0; i < n; i++) {
        keys[i].key = pack3(0, 0, clamp21((int64_t)s[i].input_len + s[i].target_len));
        keys[i].idx = i;
    }
    sort_by_keys(keys, n, perm);
    free(keys);
    return DYN_OK;
}

dyn_status plan_order_t5_lex(const dyn_sample *s, int32_t n, int32_t *perm, dyn_error *err)
{
    order_key *keys = dyn_calloc((size_t)n, sizeof(order_key), "ordering keys", err);
    if (keys == NULL) return DYN_ERR_NOMEM;
    for (int32_t i = 0; i < n; i++) {
        keys[i].key = pack3(0, clamp21(s[i].input_len), clamp21(s[i].target_len));
        keys[i].idx = i;
    }
    sort_by_keys(keys, n, perm);
    free(keys);
    return DYN_OK;
}

dyn_status plan_order_t5_padded(const dyn_sample *s, int32_t n, int32_t r, int32_t *perm,
                               dyn_error *err)
{
    order_key *keys = dyn_calloc((size_t)n, sizeof(order_key), "ordering keys", err);
    if (keys == NULL) return DYN_ERR_NOMEM;
    for (int32_t i = 0; i < n; i++) {
        int64_t pi = (s[i].input_len + r - 1) / r, pt = (s[i].target_len + r - 1) / r;
        keys[i].key = pack3(clamp21(pi), clamp21(pt), clamp21(s[i].input_len));
        keys[i].idx = i;
    }
    sort_by_keys(keys, n, perm);
    free(keys);
    return DYN_OK;
}

dyn_status plan_order_t5_serpentine(const dyn_sample *s, int32_t n, int32_t bucket, int32_t *perm,
                                   dyn_error *err)
{
    if (bucket < 1) bucket = 1;
    order_key *keys = dyn_calloc((size_t)n, sizeof(order_key), "ordering keys", err);
    if (keys == NULL) return DYN_ERR_NOMEM;
    for (int32_t i = 0; i < n; i++) {
        int64_t b = (s[i].input_len - 1) / bucket;
        int64_t t = s[i].target_len;
        if (b & 1) t = (1 << 21) - 1 - clamp21(t); /* odd buckets walk targets downwards */
        /* Within equal (bucket, target), order by input so runs stay tight. */
        keys[i].key = (clamp21(b) << 42) | (clamp21(t) << 21) | clamp21(s[i].input_len);
        keys[i].idx = i;
    }
    sort_by_keys(keys, n, perm);
    free(keys);
    return DYN_OK;
}
