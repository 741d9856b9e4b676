/* test_data_order.c — the sampler's training order (include/dynapipe/data.h):
 * shuffling is a permutation (every training sample exactly once per epoch,
 * counted here), the same (seed, epoch) gives the same order and another
 * seed or epoch another one, a sampler sought to any position k continues
 * exactly as the one that got there by stepping (resume), epochs end where
 * the sampler says and the epoch limit stops it, the held-out split has its
 * exact size, is independent of the seed and never reaches training, and
 * the old sampler (dyn_sampler_create) is still one pass in dataset order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "dynapipe/data.h" /* defines: dyn_sampler_*, dyn_eval_split */

/* n samples with lengths that vary with the index (1..7 + 1..5 tokens). */
static dyn_dataset make_ds(int32_t n)
{
    dyn_dataset ds = {n, calloc((size_t)n, sizeof(dyn_sample))};
    assert_non_null(ds.samples);
    for (int32_t i = 0; i < n; i++)
        ds.samples[i] = (dyn_sample){.id = i, .task = -1, .input_len = 1 + i % 7, .target_len = 1 + (i * 3) % 5};
    return ds;
}

/* The ids of the next `count` samples (across batches), with the epoch of
 * each and whether its batch ended the epoch. */
static void take(dyn_sampler *s, int64_t count, int32_t *ids, int64_t *epoch, int *ended)
{
    int64_t k = 0;
    while (k < count) {
        const dyn_sample *b;
        int32_t n;
        dyn_error err;
        assert_int_equal(dyn_sampler_next(s, &b, &n, &err), DYN_OK);
        assert_true(n > 0);
        for (int32_t j = 0; j < n && k < count; j++, k++) {
            ids[k] = b[j].id;
            if (epoch) epoch[k] = dyn_sampler_epoch(s);
            if (ended) ended[k] = dyn_sampler_epoch_ended(s) && j == n - 1;
        }
        assert_true(k == count || n > 0);
    }
}

static void test_permutation_per_epoch(void **state)
{
    (void)state;
    enum { N = 257, EPOCHS = 4 };
    dyn_dataset ds = make_ds(N);
    dyn_sampler_options o;
    dyn_sampler_options_default(&o);
    o.seed = 42;
    o.epochs = EPOCHS;
    dyn_error err;
    dyn_sampler *s = dyn_sampler_create_ex(&ds, 40, &o, &err);
    assert_non_null(s);
    int32_t ids[N * EPOCHS];
    int64_t ep[N * EPOCHS];
    int ended[N * EPOCHS];
    take(s, N * EPOCHS, ids, ep, ended);
    for (int e = 0; e < EPOCHS; e++) {
        int seen[N] = {0};
        int in_order = 1;
        for (int k = 0; k < N; k++) {
            int32_t id = ids[e * N + k];
            assert_true(id >= 0 && id < N);
            seen[id]++;
            assert_int_equal(ep[e * N + k], e);
            /* the pass ends exactly at its last sample */
            assert_int_equal(ended[e * N + k], k == N - 1);
            if (id != k) in_order = 0;
        }
        for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1);
        assert_false(in_order); /* shuffled */
        if (e > 0) assert_memory_not_equal(&ids[e * N], &ids[(e - 1) * N], N * sizeof(int32_t));
    }
    /* the epoch limit ends the order */
    const dyn_sample *b;
    int32_t n;
    assert_int_equal(dyn_sampler_next(s, &b, &n, &err), DYN_OK);
    assert_int_equal(n, 0);
    assert_int_equal(dyn_sampler_position(s), (int64_t)N * EPOCHS);
    assert_int_equal(dyn_sampler_end(s), (int64_t)N * EPOCHS);

    /* same (seed, epoch): same order; another seed: another one */
    dyn_sampler *s2 = dyn_sampler_create_ex(&ds, 1000, &o, &err); /* another budget: same order */
    int32_t ids2[N * EPOCHS];
    take(s2, N * EPOCHS, ids2, NULL, NULL);
    assert_memory_equal(ids, ids2, sizeof ids);
    dyn_sampler_free(s2);
    o.seed = 43;
    s2 = dyn_sampler_create_ex(&ds, 40, &o, &err);
    take(s2, N, ids2, NULL, NULL);
    assert_memory_not_equal(ids, ids2, N * sizeof(int32_t));
    dyn_sampler_free(s2);
    dyn_sampler_free(s);
    dyn_dataset_free(&ds);
}

/* A sampler sought to the position another reached after k batches returns
 * the same batches from there on, for every k over three epochs. */
static void test_resume_reproduces(void **state)
{
    (void)state;
    enum { N = 61 };
    dyn_dataset ds = make_ds(N);
    dyn_sampler_options o;
    dyn_sampler_options_default(&o);
    o.seed = 7;
    o.eval_split = 0.1;
    dyn_error err;
    dyn_sampler *a = dyn_sampler_create_ex(&ds, 25, &o, &err);
    assert_non_null(a);
    int64_t pos[200];
    int32_t first[200], count[200];
    int nb = 0;
    while (nb < 200 && dyn_sampler_position(a) < 3 * (int64_t)dyn_sampler_train_count(a)) {
        pos[nb] = dyn_sampler_position(a);
        const dyn_sample *b;
        int32_t n;
        assert_int_equal(dyn_sampler_next(a, &b, &n, &err), DYN_OK);
        first[nb] = b[0].id;
        count[nb] = n;
        nb++;
    }
    assert_true(nb > 10);
    for (int k = 0; k < nb; k++) {
        dyn_sampler *r = dyn_sampler_create_ex(&ds, 25, &o, &err);
        assert_int_equal(dyn_sampler_seek(r, pos[k], &err), DYN_OK);
        for (int j = k; j < nb && j < k + 5; j++) {
            const dyn_sample *b;
            int32_t n;
            assert_int_equal(dyn_sampler_next(r, &b, &n, &err), DYN_OK);
            assert_int_equal(n, count[j]);
            assert_int_equal(b[0].id, first[j]);
        }
        dyn_sampler_free(r);
    }
    dyn_sampler_free(a);
    dyn_dataset_free(&ds);
}

static void test_heldout_never_trains(void **state)
{
    (void)state;
    enum { N = 1000 };
    dyn_dataset ds = make_ds(N);
    uint8_t held[N], held2[N];
    int32_t nh, nh2;
    dyn_error err;
    assert_int_equal(dyn_eval_split(N, 0.05, held, &nh, &err), DYN_OK);
    assert_int_equal(nh, 50);
    int count = 0;
    for (int i = 0; i < N; i++) count += held[i];
    assert_int_equal(count, 50);
    /* deterministic, and not simply the first or last records */
    assert_int_equal(dyn_eval_split(N, 0.05, held2, &nh2, &err), DYN_OK);
    assert_memory_equal(held, held2, N);
    int head = 0;
    for (int i = 0; i < 50; i++) head += held[i] + held[N - 1 - i];
    assert_true(head < 50);
    /* with any seed and shuffle, over two epochs, training never sees them */
    for (uint64_t seed = 1; seed <= 3; seed++) {
        dyn_sampler_options o;
        dyn_sampler_options_default(&o);
        o.seed = seed;
        o.epochs = 2;
        o.eval_split = 0.05;
        dyn_sampler *s = dyn_sampler_create_ex(&ds, 64, &o, &err);
        assert_non_null(s);
        assert_int_equal(dyn_sampler_train_count(s), N - 50);
        int seen[N] = {0};
        for (;;) {
            const dyn_sample *b;
            int32_t n;
            assert_int_equal(dyn_sampler_next(s, &b, &n, &err), DYN_OK);
            if (n == 0) break;
            for (int32_t j = 0; j < n; j++) seen[b[j].id]++;
        }
        for (int i = 0; i < N; i++) assert_int_equal(seen[i], held[i] ? 0 : 2);
        dyn_sampler_free(s);
    }
    /* bounds */
    assert_int_equal(dyn_eval_split(N, 1.0, held, &nh, &err), DYN_ERR_INVALID_ARG);
    assert_int_equal(dyn_eval_split(N, -0.1, held, &nh, &err), DYN_ERR_INVALID_ARG);
    assert_int_equal(dyn_eval_split(1, 0.5, held, &nh, &err), DYN_ERR_INVALID_ARG);
    assert_int_equal(dyn_eval_split(10, 0.01, held, &nh, &err), DYN_OK);
    assert_int_equal(nh, 1); /* at least one held out */
    assert_int_equal(dyn_eval_split(10, 0.99, held, &nh, &err), DYN_OK);
    assert_int_equal(nh, 9); /* at least one trains */
    dyn_dataset_free(&ds);
}

/* dyn_sampler_create: one pass, dataset order, batches inside the dataset. */
static void test_plain_sampler_unchanged(void **state)
{
    (void)state;
    dyn_dataset ds = make_ds(50);
    dyn_error err;
    dyn_sampler *s = dyn_sampler_create(&ds, 30, &err);
    int32_t next = 0;
    for (;;) {
        const dyn_sample *b;
        int32_t n;
        assert_int_equal(dyn_sampler_next(s, &b, &n, &err), DYN_OK);
        if (n == 0) break;
        assert_ptr_equal(b, &ds.samples[next]);
        next += n;
    }
    assert_int_equal(next, 50);
    assert_int_equal(dyn_sampler_seek(s, 51, &err), DYN_ERR_INVALID_ARG);
    dyn_sampler_free(s);
    dyn_dataset_free(&ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_permutation_per_epoch),
        cmocka_unit_test(test_resume_reproduces),
        cmocka_unit_test(test_heldout_never_trains),
        cmocka_unit_test(test_plain_sampler_unchanged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
