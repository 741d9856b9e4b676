/* sampler.c — the global-batch sampler: the next samples of the training
 * order until the next one would push the batch over its token budget
 * (input + target tokens), and the order itself: a held-out split taken out
 * of training, epochs, and a shuffle per epoch.
 *
 * The order is a pure function of the position, so that a checkpoint needs
 * only the position to resume bit for bit:
 *   train     the samples not held out (dyn_eval_split), in dataset order;
 *   position  p = epoch * n_train + k;
 *   sample    train[perm_epoch(k)], perm_epoch a Fisher-Yates permutation of
 *             [0, n_train) drawn from dyn_rng seeded by mix(seed, epoch)
 *             (the identity without shuffle).
 * A batch never crosses the end of an epoch. dyn_sampler_create is the old
 * sampler: one pass in order, no split, batches pointing into the dataset. */
#include "dynapipe/data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/rng.h"  /* defines: dyn_rng_seed, dyn_rng_below, dyn_rng_next_u64 */
#include "util/util.h" /* defines: dyn_calloc */

struct dyn_sampler {
    const dyn_dataset *ds;
    int64_t budget;         /* tokens per global batch */
    dyn_sampler_options o;
    int plain;              /* in order, nothing held out: batches point into ds */
    int32_t n_train;        /* samples in the training order */
    int32_t *train;         /* [n_train] their dataset indices, ascending */
    int32_t *perm;          /* [n_train] the permutation of perm_epoch */
    int64_t perm_epoch;     /* which epoch perm holds; -1 none */
    dyn_sample *batch;      /* [n_train] the returned batch (not plain) */
    int64_t pos;            /* next position to hand out */
    int64_t last_epoch;     /* epoch of the last batch returned; -1 none */
    int last_ended;         /* the last batch returned ended its epoch */
};

void dyn_sampler_options_default(dyn_sampler_options *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->shuffle = 1;
    o->epochs = 0;
    o->eval_split = 0.0;
}

/* A fixed 64-bit mix (splitmix64's finaliser). */
static uint64_t mix64(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

typedef struct keyed {
    uint64_t key;
    int32_t index;
} keyed;

static int cmp_keyed(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

dyn_status dyn_eval_split(int32_t n, double fraction, uint8_t *heldout, int32_t *n_heldout, dyn_error *err)
{
    *n_heldout = 0;
    if (n < 0 || !(fraction >= 0.0 && fraction < 1.0))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "eval split: fraction %g must be in [0, 1)", fraction);
    if (n > 0) memset(heldout, 0, (size_t)n);
    if (fraction == 0.0 || n == 0) return DYN_OK;
    int64_t k = llround(fraction * (double)n);
    if (k < 1) k = 1;
    if (k > n - 1) k = n - 1; /* training keeps at least one */
    if (k < 1)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "eval split: %d sample%s cannot be split into training and held-out", n,
                             n == 1 ? "" : "s");
    keyed *v = dyn_calloc((size_t)n, sizeof *v, "eval split", err);
    if (v == NULL) return DYN_ERR_NOMEM;
    /* The key depends on the index alone (not the run's seed), so that a
     * later eval with another seed holds out the same samples. */
    for (int32_t i = 0; i < n; i++) v[i] = (keyed){mix64((uint64_t)i ^ UINT64_C(0x6576616c73706c74)), i};
    qsort(v, (size_t)n, sizeof *v, cmp_keyed);
    for (int64_t j = 0; j < k; j++) heldout[v[j].index] = 1;
    free(v);
    *n_heldout = (int32_t)k;
    return DYN_OK;
}

dyn_sampler *dyn_sampler_create_ex(const dyn_dataset *ds, int64_t budget_tokens, const dyn_sampler_options *opt,
                                   dyn_error *err)
{
    if (ds == NULL || ds->n < 0 || (ds->n > 0 && ds->samples == NULL)) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "sampler: no dataset");
        return NULL;
    }
    if (budget_tokens <= 0) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "sampler: token budget %lld must be positive",
                      (long long)budget_tokens);
        return NULL;
    }
    dyn_sampler_options o;
    if (opt) o = *opt;
    else dyn_sampler_options_default(&o);
    if (o.epochs < 0) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "sampler: epochs %lld must be >= 0 (0: no limit)",
                      (long long)o.epochs);
        return NULL;
    }
    dyn_sampler *s = dyn_calloc(1, sizeof *s, "sampler", err);
    if (s == NULL) return NULL;
    s->ds = ds;
    s->budget = budget_tokens;
    s->o = o;
    s->perm_epoch = -1;
    s->last_epoch = -1;
    size_t n = ds->n > 0 ? (size_t)ds->n : 1;
    uint8_t *held = dyn_calloc(n, 1, "sampler split", err);
    s->train = dyn_calloc(n, sizeof *s->train, "sampler order", err);
    s->perm = dyn_calloc(n, sizeof *s->perm, "sampler order", err);
    s->batch = dyn_calloc(n, sizeof *s->batch, "sampler batch", err);
    int32_t n_held = 0;
    if (held == NULL || s->train == NULL || s->perm == NULL || s->batch == NULL ||
        dyn_eval_split(ds->n, o.eval_split, held, &n_held, err) != DYN_OK) {
        free(held);
        dyn_sampler_free(s);
        return NULL;
    }
    for (int32_t i = 0; i < ds->n; i++)
        if (!held[i]) s->train[s->n_train++] = i;
    free(held);
    s->plain = !o.shuffle && n_held == 0;
    return s;
}

dyn_sampler *dyn_sampler_create(const dyn_dataset *ds, int64_t budget_tokens, dyn_error *err)
{
    dyn_sampler_options o;
    dyn_sampler_options_default(&o);
    o.shuffle = 0;
    o.epochs = 1;
    return dyn_sampler_create_ex(ds, budget_tokens, &o, err);
}

/* Make s->perm the permutation of epoch e. */
static void load_epoch(dyn_sampler *s, int64_t e)
{
    if (s->perm_epoch == e) return;
    for (int32_t k = 0; k < s->n_train; k++) s->perm[k] = k;
    if (s->o.shuffle) {
        dyn_rng rng;
        dyn_rng_seed(&rng, mix64(s->o.seed) ^ mix64((uint64_t)e + UINT64_C(0x5eed)));
        for (int32_t k = s->n_train - 1; k > 0; k--) {
            int32_t j = (int32_t)dyn_rng_below(&rng, (uint64_t)k + 1);
            int32_t t = s->perm[k];
            s->perm[k] = s->perm[j];
            s->perm[j] = t;
        }
    }
    s->perm_epoch = e;
}

/* The dataset sample at position p (within the epoch loaded). */
static const dyn_sample *sample_at(const dyn_sampler *s, int64_t k)
{
    return &s->ds->samples[s->train[s->perm[k]]];
}

int64_t dyn_sampler_end(const dyn_sampler *s)
{
    return s->o.epochs == 0 ? -1 : s->o.epochs * (int64_t)s->n_train;
}

dyn_status dyn_sampler_next(dyn_sampler *s, const dyn_sample **batch, int32_t *n, dyn_error *err)
{
    *batch = NULL;
    *n = 0;
    if (s->n_train == 0) return DYN_OK;
    int64_t end_pos = dyn_sampler_end(s);
    if (end_pos >= 0 && s->pos >= end_pos) return DYN_OK;
    int64_t e = s->pos / s->n_train, k0 = s->pos % s->n_train;
    load_epoch(s, e);
    int64_t tokens = 0, k = k0;
    while (k < s->n_train) {
        const dyn_sample *x = sample_at(s, k);
        int64_t t = (int64_t)x->input_len + x->target_len;
        if (tokens + t > s->budget) break;
        tokens += t;
        k++;
    }
    if (k == k0) {
        const dyn_sample *first = sample_at(s, k0);
        return dyn_error_set(err, DYN_ERR_INFEASIBLE,
                             "sampler: sample %d alone has %lld tokens (input %d + target %d), over "
                             "the global-batch budget of %lld tokens",
                             first->id, (long long)first->input_len + first->target_len, first->input_len,
                             first->target_len, (long long)s->budget);
    }
    if (s->plain) {
        *batch = sample_at(s, k0);
    } else {
        for (int64_t j = k0; j < k; j++) s->batch[j - k0] = *sample_at(s, j);
        *batch = s->batch;
    }
    *n = (int32_t)(k - k0);
    s->pos += k - k0;
    s->last_epoch = e;
    s->last_ended = k == s->n_train;
    return DYN_OK;
}

void dyn_sampler_reset(dyn_sampler *s)
{
    s->pos = 0;
    s->last_epoch = -1;
    s->last_ended = 0;
}

int64_t dyn_sampler_position(const dyn_sampler *s)
{
    return s->pos;
}

dyn_status dyn_sampler_seek(dyn_sampler *s, int64_t pos, dyn_error *err)
{
    int64_t end_pos = dyn_sampler_end(s);
    if (pos < 0 || (end_pos >= 0 && pos > end_pos))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "sampler: position %lld outside [0, %lld] (%d samples%s)",
                             (long long)pos, (long long)(end_pos < 0 ? INT64_MAX : end_pos), s->n_train,
                             s->o.epochs > 1 ? " per epoch" : "");
    s->pos = pos;
    s->last_epoch = -1;
    s->last_ended = 0;
    return DYN_OK;
}

int64_t dyn_sampler_epoch(const dyn_sampler *s) { return s->last_epoch; }

int dyn_sampler_epoch_ended(const dyn_sampler *s) { return s->last_ended; }

int32_t dyn_sampler_train_count(const dyn_sampler *s) { return s->n_train; }

void dyn_sampler_free(dyn_sampler *s)
{
    if (s == NULL) return;
    free(s->train);
    free(s->perm);
    free(s->batch);
    free(s);
}
