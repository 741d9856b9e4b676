/* test_attention.c — the tiled attention kernel against the naive double
 * reference (forward and backward) on padded, document-masked, unmasked-packed
 * and cross layouts, causal and not, with and without the T5 relative bias;
 * the reference backward against central finite differences of the reference
 * forward; T5 bucket values worked by hand; determinism across runs and
 * thread counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <string.h>

#include "model/layers.h"        /* defines: dyn_attention_*, dyn_t5_bucket */
#include "model/layout.h"        /* defines: dyn_layout_create_* */
#include "model_testutil.h"      /* defines: fill_uniform, tol_ratio, fd_mismatches, lay_*, xcalloc */
#include "model/threads.h" /* defines: dyn_threads_init */

/* One attention problem: layouts, config, inputs, and outputs of both
 * kernels. q/k/v are stored with row strides ldq/ldk/ldv wider than NH*HD
 * to exercise strided access like the fused qkv buffer. */
typedef struct problem {
    dyn_layout *ql, *kl;
    dyn_attn_cfg cfg;
    int ldq, ldk, ldv, W; /* W = NH*HD */
    float *q, *k, *v, *bias, *dout;
    size_t nq, nk;        /* rows */
} problem;

static void problem_init(problem *p, dyn_layout *ql, dyn_layout *kl, int NH, int HD, int causal,
                         int with_bias, int bidirectional, int nthreads, uint64_t seed)
{
    memset(p, 0, sizeof(*p));
    dyn_rng rng;
    dyn_rng_seed(&rng, seed);
    p->ql = ql;
    p->kl = kl ? kl : ql; /* NULL: self-attention */
    p->cfg.NH = NH;
    p->cfg.HD = HD;
    p->cfg.causal = causal;
    p->cfg.scale = 0.5f;
    p->cfg.bidirectional = bidirectional;
    p->cfg.num_buckets = DYN_T5_NUM_BUCKETS;
    p->cfg.max_distance = DYN_T5_MAX_DISTANCE;
    p->cfg.nthreads = nthreads;
    p->W = NH * HD;
    p->ldq = p->W + 3;
    p->ldk = p->W + 5;
    p->ldv = p->W + 1;
    p->nq = (size_t)ql->B * ql->T;
    p->nk = (size_t)p->kl->B * p->kl->T;
    p->q = xcalloc(p->nq * p->ldq, sizeof(float));
    p->k = xcalloc(p->nk * p->ldk, sizeof(float));
    p->v = xcalloc(p->nk * p->ldv, sizeof(float));
    p->dout = xcalloc(p->nq * p->W, sizeof(float));
    fill_uniform(p->q, p->nq * p->ldq, 1.0f, &rng);
    fill_uniform(p->k, p->nk * p->ldk, 1.0f, &rng);
    fill_uniform(p->v, p->nk * p->ldv, 1.0f, &rng);
    fill_uniform(p->dout, p->nq * p->W, 1.0f, &rng);
    if (with_bias) {
        p->bias = xcalloc((size_t)NH * DYN_T5_NUM_BUCKETS, sizeof(float));
        fill_uniform(p->bias, (size_t)NH * DYN_T5_NUM_BUCKETS, 1.0f, &rng);
    }
}

static void problem_free(problem *p)
{
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->dout);
    free(p->bias);
    if (p->kl != p->ql) dyn_layout_free(p->kl);
    dyn_layout_free(p->ql);
}

/* Outputs of one kernel run. */
typedef struct result {
    float *out, *lse, *dq, *dk, *dv, *drel;
} result;

static void result_alloc(result *r, const problem *p)
{
    r->out = xcalloc(p->nq * p->W, sizeof(float));
    r->lse = xcalloc((size_t)p->ql->B * p->cfg.NH * p->ql->T, sizeof(float));
    r->dq = xcalloc(p->nq * p->ldq, sizeof(float));
    r->dk = xcalloc(p->nk * p->ldk, sizeof(float));
    r->dv = xcalloc(p->nk * p->ldv, sizeof(float));
    r->drel = xcalloc((size_t)p->cfg.NH * DYN_T5_NUM_BUCKETS, sizeof(float));
}

static void result_free(result *r)
{
    free(r->out);
    free(r->lse);
    free(r->dq);
    free(r->dk);
    free(r->dv);
    free(r->drel);
}

static void run_fast(result *r, const problem *p)
{
    size_t wn = dyn_attention_work_floats(p->ql->B, p->ql->T, p->kl->T, &p->cfg);
    float *work = xcalloc(wn, sizeof(float));
    dyn_attention_forward(r->out, r->lse, p->q, p->ldq, p->k, p->ldk, p->v, p->ldv, p->bias, p->ql,
                          p->kl, &p->cfg, work);
    dyn_attention_backward(r->dq, r->dk, r->dv, r->drel, p->dout, p->q, p->ldq, p->k, p->ldk, p->v,
                           p->ldv, r->out, r->lse, p->bias, p->ql, p->kl, &p->cfg, work);
    free(work);
}

static void run_ref(result *r, const problem *p)
{
    assert_int_equal(dyn_attention_forward_ref(r->out, r->lse, p->q, p->ldq, p->k, p->ldk, p->v,
                                               p->ldv, p->bias, p->ql, p->kl, &p->cfg), 0);
    assert_int_equal(dyn_attention_backward_ref(r->dq, r->dk, r->dv, r->drel, p->dout, p->q,
                                                p->ldq, p->k, p->ldk, p->v, p->ldv, p->bias,
                                                p->ql, p->kl, &p->cfg), 0);
}

/* Compare the W owned columns of strided rows. */
static double strided_ratio(const float *a, const float *b, size_t rows, int ld, int W)
{
    double worst = 0.0;
    for (size_t r = 0; r < rows; r++) {
        double x = tol_ratio(a + r * ld, b + r * ld, (size_t)W, 1e-4, 1e-3);
        if (!(x <= worst)) worst = x;
    }
    return worst;
}

static void check_fast_vs_ref(problem *p)
{
    result f, r;
    result_alloc(&f, p);
    result_alloc(&r, p);
    run_fast(&f, p);
    run_ref(&r, p);
    assert_true(tol_ratio(f.out, r.out, p->nq * p->W, 1e-4, 1e-3) <= 1.0);
    assert_true(tol_ratio(f.lse, r.lse, (size_t)p->ql->B * p->cfg.NH * p->ql->T, 1e-4, 1e-4) <= 1.0);
    assert_true(strided_ratio(f.dq, r.dq, p->nq, p->ldq, p->W) <= 1.0);
    assert_true(strided_ratio(f.dk, r.dk, p->nk, p->ldk, p->W) <= 1.0);
    assert_true(strided_ratio(f.dv, r.dv, p->nk, p->ldv, p->W) <= 1.0);
    if (p->bias)
        assert_true(tol_ratio(f.drel, r.drel, (size_t)p->cfg.NH * DYN_T5_NUM_BUCKETS, 1e-3, 1e-3) <= 1.0);
    /* Pad query rows produce exactly 0 output. */
    int32_t *seg = xcalloc(p->nq, sizeof(int32_t));
    dyn_layout_segment_ids(p->ql, seg);
    for (size_t i = 0; i < p->nq; i++)
        if (seg[i] < 0)
            for (int c = 0; c < p->W; c++) assert_true(f.out[i * p->W + c] == 0.0f);
    free(seg);
    result_free(&f);
    result_free(&r);
}

static void test_fast_matches_ref_padded(void **state)
{
    (void)state;
    const int32_t lens[3] = {150, 37, 0};
    for (int causal = 0; causal <= 1; causal++)
        for (int bias = 0; bias <= 1; bias++) {
            problem p;
            problem_init(&p, lay_padded(lens, 3, 160), NULL, 2, 16, causal, bias, !causal, 2, 11);
            check_fast_vs_ref(&p);
            problem_free(&p);
        }
}

static void test_fast_matches_ref_docmask(void **state)
{
    (void)state;
    /* Segments straddle tile boundaries (64/128) on purpose. */
    const int32_t lens[6] = {70, 1, 90, 130, 5, 60};
    const int32_t counts[2] = {3, 3};
    for (int causal = 0; causal <= 1; causal++)
        for (int bias = 0; bias <= 1; bias++) {
            problem p;
            problem_init(&p, lay_packed(lens, counts, 2, 200, 1), NULL, 2, 8, causal, bias, !causal, 2, 12);
            check_fast_vs_ref(&p);
            problem_free(&p);
        }
}

static void test_fast_matches_ref_nomask(void **state)
{
    (void)state;
    const int32_t lens[4] = {40, 50, 100, 30};
    const int32_t counts[2] = {2, 2};
    problem p;
    problem_init(&p, lay_packed(lens, counts, 2, 140, 0), NULL, 3, 8, 1, 0, 0, 2, 13);
    assert_int_equal(p.ql->n_seg, 2);
    check_fast_vs_ref(&p);
    problem_free(&p);
}

static void test_fast_matches_ref_cross(void **state)
{
    (void)state;
    /* Decoder segments i attend encoder segments i; lengths differ. */
    const int32_t dlens[3] = {20, 70, 9};
    const int32_t elens[3] = {150, 3, 80};
    const int32_t counts[2] = {2, 1};
    problem p;
    problem_init(&p, lay_packed(dlens, counts, 2, 96, 1), lay_packed(elens, counts, 2, 160, 1), 2, 16, 0,
                 0, 0, 2, 14);
    check_fast_vs_ref(&p);
    problem_free(&p);
}

/* Random layouts of every kind, random causal/bias/cross, against the
 * reference: lengths straddle tile sizes at random. */
static void test_fast_matches_ref_random_layouts(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 2024);
    for (int trial = 0; trial < 8; trial++) {
        int B = 1 + (int)dyn_rng_below(&rng, 3), T = 40 + (int)dyn_rng_below(&rng, 300);
        int kind = (int)dyn_rng_below(&rng, 3), cross = trial % 4 == 3;
        int32_t lens[64], counts[3], elens[64];
        int n = 0;
        for (int b = 0; b < B; b++) {
            int used = 0, cnt = 0;
            int want = kind == DYN_LAYOUT_PADDED ? 1 : 1 + (int)dyn_rng_below(&rng, 4);
            while (cnt < want && used < T) {
                int len = 1 + (int)dyn_rng_below(&rng, (uint64_t)(T - used));
                lens[n] = len;
                elens[n] = 1 + (int)dyn_rng_below(&rng, 150);
                n++;
                cnt++;
                used += len;
            }
            counts[b] = cnt;
        }
        dyn_layout *ql, *kl = NULL;
        if (kind == DYN_LAYOUT_PADDED) {
            ql = lay_padded(lens, B, T);
            if (cross) kl = lay_padded(elens, B, 150);
        } else {
            ql = lay_packed(lens, counts, B, T, kind == DYN_LAYOUT_PACKED_DOCMASK);
            if (cross) {
                /* Cross pairs segments by index: give the encoder one
                 * segment per query segment. */
                int32_t ecounts[3] = {0, 0, 0};
                ecounts[0] = ql->n_seg;
                kl = lay_packed(elens, ecounts, B, 150 * ql->n_seg, 1);
            }
        }
        int causal = cross ? 0 : (int)dyn_rng_below(&rng, 2);
        int bias = cross ? 0 : (int)dyn_rng_below(&rng, 2);
        problem p;
        problem_init(&p, ql, kl, 2, 8, causal, bias, !causal, 1 + trial % 2, 100 + (uint64_t)trial);
        check_fast_vs_ref(&p);
        problem_free(&p);
    }
}

static void test_fast_matches_ref_long(void **state)
{
    (void)state;
    const int32_t lens[1] = {700};
    problem p;
    problem_init(&p, lay_padded(lens, 1, 720), NULL, 2, 32, 1, 1, 0, 2, 15);
    check_fast_vs_ref(&p);
    problem_free(&p);
}

/* Grouped-query attention (kv_heads < NH; 1 is multi-query): the tiled
 * kernel against the reference over several query and key tiles, causal,
 * packed documents; and the reference against plain multi-head attention
 * on k/v heads repeated by hand (query head h uses k/v head h / (NH/KVH)),
 * whose k/v gradients summed over each group must equal the GQA ones. */
static void test_gqa_matches_ref_and_repeated_heads(void **state)
{
    (void)state;
    for (int kvh = 1; kvh <= 2; kvh++) {
        const int32_t lens[3] = {300, 150, 90}, counts[2] = {2, 1};
        problem p;
        problem_init(&p, lay_packed(lens, counts, 2, 460, 1), NULL, 4, 16, 1, 0, 0, 2, 30 + (uint64_t)kvh);
        p.cfg.kv_heads = kvh;
        check_fast_vs_ref(&p);
        /* Repeat k/v heads into a plain multi-head problem. */
        int NH = 4, HD = 16, rep = NH / kvh;
        problem e = p;
        e.cfg.kv_heads = 0;
        e.k = xcalloc(p.nk * p.ldk, sizeof(float));
        e.v = xcalloc(p.nk * p.ldv, sizeof(float));
        for (size_t r = 0; r < p.nk; r++)
            for (int h = 0; h < NH; h++)
                for (int x = 0; x < HD; x++) {
                    e.k[r * p.ldk + (size_t)h * HD + x] = p.k[r * p.ldk + (size_t)(h / rep) * HD + x];
                    e.v[r * p.ldv + (size_t)h * HD + x] = p.v[r * p.ldv + (size_t)(h / rep) * HD + x];
                }
        result g, m;
        result_alloc(&g, &p);
        result_alloc(&m, &e);
        run_ref(&g, &p);
        run_ref(&m, &e);
        assert_true(tol_ratio(g.out, m.out, p.nq * p.W, 1e-6, 1e-6) <= 1.0);
        for (size_t r = 0; r < p.nk; r++)
            for (int gk = 0; gk < kvh; gk++)
                for (int x = 0; x < HD; x++) {
                    double sk = 0, sv = 0;
                    for (int h = gk * rep; h < (gk + 1) * rep; h++) {
                        sk += m.dk[r * p.ldk + (size_t)h * HD + x];
                        sv += m.dv[r * p.ldv + (size_t)h * HD + x];
                    }
                    assert_true(fabs(sk - g.dk[r * p.ldk + (size_t)gk * HD + x]) <= 1e-4 + 1e-4 * fabs(sk));
                    assert_true(fabs(sv - g.dv[r * p.ldv + (size_t)gk * HD + x]) <= 1e-4 + 1e-4 * fabs(sv));
                }
        result_free(&g);
        result_free(&m);
        free(e.k);
        free(e.v);
        problem_free(&p);
    }
}

/* Reference backward vs central differences of the reference forward, on
 * L = sum(out ∘ dout). */
static double ref_loss(problem *p, float *out, float *lse)
{
    assert_int_equal(dyn_attention_forward_ref(out, lse, p->q, p->ldq, p->k, p->ldk, p->v, p->ldv,
                                               p->bias, p->ql, p->kl, &p->cfg), 0);
    double L = 0.0;
    for (size_t i = 0; i < p->nq * p->W; i++) L += (double)out[i] * p->dout[i];
    return L;
}

typedef struct ref_ctx {
    problem *p;
    float *out, *lse;
} ref_ctx;

static double ref_loss_cb(void *c)
{
    ref_ctx *r = c;
    return ref_loss(r->p, r->out, r->lse);
}

/* With stride_ld > 0, entries in columns >= W of each row are padding and
 * are not checked. */
static void fd_check(problem *p, float *x, const float *g, size_t n, int stride_ld, int W,
                     dyn_rng *rng, float *out, float *lse)
{
    ref_ctx c = {p, out, lse};
    const fd_opts o = {25, 1e-2f, 5e-4, 5e-3, (size_t)(stride_ld > 0 ? stride_ld : 0), (size_t)W, "x"};
    assert_int_equal(fd_mismatches(ref_loss_cb, &c, x, g, n, &o, rng), 0);
}

static void test_ref_backward_matches_finite_differences(void **state)
{
    (void)state;
    const int32_t lens[3] = {9, 14, 6};
    const int32_t counts[2] = {2, 1};
    for (int causal = 0; causal <= 1; causal++) {
        problem p;
        problem_init(&p, lay_packed(lens, counts, 2, 24, 1), NULL, 2, 4, causal, 1, !causal, 1, 21);
            result r;
        result_alloc(&r, &p);
        run_ref(&r, &p);
        dyn_rng rng;
        dyn_rng_seed(&rng, 5);
        fd_check(&p, p.q, r.dq, p.nq * p.ldq, p.ldq, p.W, &rng, r.out, r.lse);
        fd_check(&p, p.k, r.dk, p.nk * p.ldk, p.ldk, p.W, &rng, r.out, r.lse);
        fd_check(&p, p.v, r.dv, p.nk * p.ldv, p.ldv, p.W, &rng, r.out, r.lse);
        fd_check(&p, p.bias, r.drel, (size_t)p.cfg.NH * DYN_T5_NUM_BUCKETS, 0, 0, &rng, r.out, r.lse);
        result_free(&r);
        problem_free(&p);
    }
}

static void test_t5_bucket_hand_values(void **state)
{
    (void)state;
    /* Bidirectional: 16 buckets per direction, 8 exact. */
    assert_int_equal(dyn_t5_bucket(0, 1, 32, 128), 0);
    assert_int_equal(dyn_t5_bucket(-1, 1, 32, 128), 1);
    assert_int_equal(dyn_t5_bucket(1, 1, 32, 128), 17);
    assert_int_equal(dyn_t5_bucket(-7, 1, 32, 128), 7);
    assert_int_equal(dyn_t5_bucket(-8, 1, 32, 128), 8);
    /* n = 20: 8 + floor(log(20/8)/log(128/8) * 8) = 8 + floor(2.644) = 10. */
    assert_int_equal(dyn_t5_bucket(-20, 1, 32, 128), 10);
    assert_int_equal(dyn_t5_bucket(500, 1, 32, 128), 31);
    /* Causal: future maps to 0, 16 exact buckets. */
    assert_int_equal(dyn_t5_bucket(5, 0, 32, 128), 0);
    assert_int_equal(dyn_t5_bucket(-3, 0, 32, 128), 3);
    assert_int_equal(dyn_t5_bucket(-16, 0, 32, 128), 16);
    /* n = 20: 16 + floor(log(20/16)/log(8) * 16) = 16 + floor(1.717) = 17. */
    assert_int_equal(dyn_t5_bucket(-20, 0, 32, 128), 17);
    assert_int_equal(dyn_t5_bucket(-1000, 0, 32, 128), 31);
}

static void test_deterministic_across_runs_and_threads(void **state)
{
    (void)state;
    const int32_t lens[5] = {100, 28, 200, 3, 50};
    const int32_t counts[2] = {2, 3};
    result r[3];
    for (int run = 0; run < 3; run++) {
        problem p;
        problem_init(&p, lay_packed(lens, counts, 2, 260, 1), NULL, 4, 8, 1, 1, 0, run == 2 ? 1 : 2, 31);
            result_alloc(&r[run], &p);
        run_fast(&r[run], &p);
        if (run > 0) {
            assert_memory_equal(r[run].out, r[0].out, p.nq * p.W * sizeof(float));
            assert_memory_equal(r[run].dq, r[0].dq, p.nq * p.ldq * sizeof(float));
            assert_memory_equal(r[run].dk, r[0].dk, p.nk * p.ldk * sizeof(float));
            assert_memory_equal(r[run].dv, r[0].dv, p.nk * p.ldv * sizeof(float));
            assert_memory_equal(r[run].drel, r[0].drel, (size_t)p.cfg.NH * DYN_T5_NUM_BUCKETS * sizeof(float));
        }
        problem_free(&p);
    }
    for (int run = 0; run < 3; run++) result_free(&r[run]);
}

static void test_layout_constructors(void **state)
{
    (void)state;
    const int32_t lens[4] = {3, 2, 4, 1};
    const int32_t counts[2] = {2, 2};
    dyn_layout *d = lay_packed(lens, counts, 2, 6, 1), *n = lay_packed(lens, counts, 2, 6, 0);
    int32_t pos[12];
    float mask[12];
    dyn_layout_positions(d, pos);
    const int32_t want_d[12] = {0, 1, 2, 0, 1, 0, 0, 1, 2, 3, 0, 0};
    assert_memory_equal(pos, want_d, sizeof(want_d));
    dyn_layout_positions(n, pos);
    const int32_t want_n[12] = {0, 1, 2, 3, 4, 0, 0, 1, 2, 3, 4, 0};
    assert_memory_equal(pos, want_n, sizeof(want_n));
    dyn_layout_valid_mask(d, mask);
    assert_true(mask[4] == 1.0f && mask[5] == 0.0f && mask[10] == 1.0f && mask[11] == 0.0f);
    assert_int_equal(d->n_seg, 4);
    assert_int_equal(n->n_seg, 2);
    assert_int_equal(n->n_samples, 4);
    assert_int_equal(n->samples[1].pos0, 3);
    assert_int_equal(dyn_layout_attn_pairs(d), 9 + 4 + 16 + 1);
    assert_int_equal(dyn_layout_attn_pairs(n), 25 + 25);
    dyn_layout_free(d);
    dyn_layout_free(n);
    /* Bad input: a row over T, negative length. */
    dyn_error err;
    const int32_t too_long[2] = {5, 3};
    const int32_t one[1] = {2};
    assert_null(dyn_layout_create_packed(too_long, one, 1, 6, 1, &err));
    assert_int_equal(err.code, DYN_ERR_INVALID_ARG);
    const int32_t neg[2] = {3, -1};
    assert_null(dyn_layout_create_padded(neg, 2, 6, &err));
    assert_int_equal(err.code, DYN_ERR_INVALID_ARG);
}

int main(void)
{
    dyn_threads_init(); /* the selected BLAS kernel, checked (threads.h); may re-execute */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_constructors),
        cmocka_unit_test(test_t5_bucket_hand_values),
        cmocka_unit_test(test_fast_matches_ref_padded),
        cmocka_unit_test(test_fast_matches_ref_docmask),
        cmocka_unit_test(test_fast_matches_ref_nomask),
        cmocka_unit_test(test_fast_matches_ref_cross),
        cmocka_unit_test(test_fast_matches_ref_long),
        cmocka_unit_test(test_fast_matches_ref_random_layouts),
        cmocka_unit_test(test_gqa_matches_ref_and_repeated_heads),
        cmocka_unit_test(test_ref_backward_matches_finite_differences),
        cmocka_unit_test(test_deterministic_across_runs_and_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
