/* test_layers.c — every per-token kernel of layers.h against central finite
 * differences of its own forward (loss L = sum(out ∘ R) for a random R), the
 * LM head + cross-entropy against a brute-force double computation, and the
 * accumulate (+=) contract of the backward functions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <string.h>

#include "model/layers.h"   /* defines: the kernels under test */
#include "model_testutil.h" /* defines: fill_uniform, tol_ratio, fd_mismatches, xcalloc */
#include "model/threads.h" /* defines: dyn_threads_init */

/* A kernel under test: fwd computes out from the current inputs; the
 * harness forms L = sum(out ∘ R). */
typedef struct kcase {
    void (*fwd)(struct kcase *k);
    float *out, *R;
    size_t nout;
    int N, C, OC, F, V;
    float *x, *w, *b, *h;
    float *s1, *s2; /* saved stats */
    int32_t *tok, *pos;
} kcase;

static double kloss(kcase *k)
{
    k->fwd(k);
    double L = 0.0;
    for (size_t i = 0; i < k->nout; i++) L += (double)k->out[i] * k->R[i];
    return L;
}

static double kloss_cb(void *k) { return kloss(k); }

/* Central differences on `trials` random entries of x (n floats) vs the
 * analytic gradient g. */
static void fd_compare(kcase *k, float *x, const float *g, size_t n, int trials, float eps,
                       dyn_rng *rng)
{
    const fd_opts o = {trials, eps, 5e-4, 3e-3, 0, 0, "x"};
    assert_int_equal(fd_mismatches(kloss_cb, k, x, g, n, &o, rng), 0);
    kloss(k); /* leave out consistent with unperturbed inputs */
}

static void linear_fwd(kcase *k) { dyn_linear_forward(k->out, k->x, k->w, k->b, k->N, k->C, k->OC); }

static void test_linear_gradients(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 1);
    kcase k = {.fwd = linear_fwd, .N = 7, .C = 5, .OC = 6};
    k.nout = (size_t)k.N * k.OC;
    k.out = xcalloc(k.nout, 4);
    k.R = xcalloc(k.nout, 4);
    k.x = xcalloc((size_t)k.N * k.C, 4);
    k.w = xcalloc((size_t)k.OC * k.C, 4);
    k.b = xcalloc((size_t)k.OC, 4);
    fill_uniform(k.R, k.nout, 1, &rng);
    fill_uniform(k.x, (size_t)k.N * k.C, 1, &rng);
    fill_uniform(k.w, (size_t)k.OC * k.C, 1, &rng);
    fill_uniform(k.b, (size_t)k.OC, 1, &rng);
    /* Hand check of one output element. */
    kloss(&k);
    double o = k.b[2];
    for (int c = 0; c < k.C; c++) o += (double)k.x[3 * k.C + c] * k.w[2 * k.C + c];
    assert_true(fabs(o - k.out[3 * k.OC + 2]) < 1e-5);
    /* Gradients start at 1 to check that backward accumulates. */
    float *dx = xcalloc((size_t)k.N * k.C, 4), *dw = xcalloc((size_t)k.OC * k.C, 4);
    float *db = xcalloc((size_t)k.OC, 4);
    for (int i = 0; i < k.N * k.C; i++) dx[i] = 1.0f;
    for (int i = 0; i < k.OC * k.C; i++) dw[i] = 1.0f;
    for (int i = 0; i < k.OC; i++) db[i] = 1.0f;
    dyn_linear_backward(dx, dw, db, k.R, k.x, k.w, k.N, k.C, k.OC);
    for (int i = 0; i < k.N * k.C; i++) dx[i] -= 1.0f;
    for (int i = 0; i < k.OC * k.C; i++) dw[i] -= 1.0f;
    for (int i = 0; i < k.OC; i++) db[i] -= 1.0f;
    fd_compare(&k, k.x, dx, (size_t)k.N * k.C, 20, 1e-2f, &rng);
    fd_compare(&k, k.w, dw, (size_t)k.OC * k.C, 20, 1e-2f, &rng);
    fd_compare(&k, k.b, db, (size_t)k.OC, 6, 1e-2f, &rng);
    free(dx); free(dw); free(db);
    free(k.out); free(k.R); free(k.x); free(k.w); free(k.b);
}

static void layernorm_fwd(kcase *k) { dyn_layernorm_forward(k->out, k->s1, k->s2, k->x, k->w, k->b, k->N, k->C); }
static void rmsnorm_fwd(kcase *k) { dyn_rmsnorm_forward(k->out, k->s2, k->x, k->w, k->N, k->C); }

static void norm_case(int rms)
{
    dyn_rng rng;
    dyn_rng_seed(&rng, 2 + (uint64_t)rms);
    kcase k = {.fwd = rms ? rmsnorm_fwd : layernorm_fwd, .N = 4, .C = 12};
    size_t n = (size_t)k.N * k.C;
    k.nout = n;
    k.out = xcalloc(n, 4);
    k.R = xcalloc(n, 4);
    k.x = xcalloc(n, 4);
    k.w = xcalloc((size_t)k.C, 4);
    k.b = xcalloc((size_t)k.C, 4);
    k.s1 = xcalloc((size_t)k.N, 4);
    k.s2 = xcalloc((size_t)k.N, 4);
    fill_uniform(k.R, n, 1, &rng);
    fill_uniform(k.x, n, 2, &rng);
    fill_uniform(k.w, (size_t)k.C, 1, &rng);
    fill_uniform(k.b, (size_t)k.C, 1, &rng);
    kloss(&k);
    /* Hand check: row 1, channel 3. */
    double m = 0, v = 0, ss = 0;
    for (int c = 0; c < k.C; c++) m += k.x[k.C + c];
    m /= k.C;
    for (int c = 0; c < k.C; c++) {
        v += (k.x[k.C + c] - m) * (k.x[k.C + c] - m);
        ss += (double)k.x[k.C + c] * k.x[k.C + c];
    }
    v /= k.C;
    double want = rms ? k.x[k.C + 3] / sqrt(ss / k.C + 1e-6) * k.w[3]
                      : (k.x[k.C + 3] - m) / sqrt(v + 1e-5) * k.w[3] + k.b[3];
    assert_true(fabs(want - k.out[k.C + 3]) < 1e-5);
    float *dx = xcalloc(n, 4), *dw = xcalloc((size_t)k.C, 4), *db = xcalloc((size_t)k.C, 4);
    for (size_t i = 0; i < n; i++) dx[i] = 0.5f;
    if (rms)
        dyn_rmsnorm_backward(dx, dw, k.R, k.x, k.w, k.s2, k.N, k.C);
    else
        dyn_layernorm_backward(dx, dw, db, k.R, k.x, k.w, k.s1, k.s2, k.N, k.C);
    for (size_t i = 0; i < n; i++) dx[i] -= 0.5f;
    fd_compare(&k, k.x, dx, n, 25, 1e-2f, &rng);
    fd_compare(&k, k.w, dw, (size_t)k.C, 8, 1e-2f, &rng);
    if (!rms) fd_compare(&k, k.b, db, (size_t)k.C, 8, 1e-2f, &rng);
    free(dx); free(dw); free(db);
    free(k.out); free(k.R); free(k.x); free(k.w); free(k.b); free(k.s1); free(k.s2);
}

static void test_layernorm_gradients(void **state) { (void)state; norm_case(0); }
static void test_rmsnorm_gradients(void **state) { (void)state; norm_case(1); }

static void gelu_fwd(kcase *k) { dyn_gelu_forward(k->out, k->x, k->nout); }
static void gated_fwd(kcase *k) { dyn_gated_gelu_forward(k->out, k->h, k->N, k->F); }

static void test_gelu_values_and_gradients(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 4);
    /* Values against tanh from libm (independent of the fast tanh). */
    float xs[7] = {-20.0f, -3.0f, -0.5f, 0.0f, 0.3f, 2.0f, 20.0f}, ys[7];
    dyn_gelu_forward(ys, xs, 7);
    for (int i = 0; i < 7; i++) {
        double x = xs[i];
        double want = 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
        assert_true(fabs(want - ys[i]) < 1e-6 + 1e-6 * fabs(want));
    }
    kcase k = {.fwd = gelu_fwd, .nout = 64};
    k.out = xcalloc(64, 4);
    k.R = xcalloc(64, 4);
    k.x = xcalloc(64, 4);
    fill_uniform(k.R, 64, 1, &rng);
    fill_uniform(k.x, 64, 4, &rng);
    float *dx = xcalloc(64, 4), *d2 = xcalloc(64, 4);
    dyn_gelu_backward(dx, k.x, k.R, 64);
    memcpy(d2, k.R, 64 * 4);
    dyn_gelu_backward_inplace(d2, k.x, 64);
    assert_memory_equal(dx, d2, 64 * 4);
    fd_compare(&k, k.x, dx, 64, 30, 1e-3f, &rng);
    free(dx); free(d2); free(k.out); free(k.R); free(k.x);

    /* Gated GELU: out = gelu(h[:, :F]) * h[:, F:]. */
    kcase g = {.fwd = gated_fwd, .N = 3, .F = 10};
    g.nout = 30;
    g.out = xcalloc(30, 4);
    g.R = xcalloc(30, 4);
    g.h = xcalloc(60, 4);
    fill_uniform(g.R, 30, 1, &rng);
    fill_uniform(g.h, 60, 3, &rng);
    kloss(&g);
    float one;
    dyn_gelu_forward(&one, &g.h[40 + 4], 1);
    assert_true(fabs(one * g.h[40 + 10 + 4] - g.out[2 * 10 + 4]) < 1e-5);
    float *dh = xcalloc(60, 4);
    for (int i = 0; i < 60; i++) dh[i] = 7.0f; /* overwritten, not accumulated */
    dyn_gated_gelu_backward(dh, g.R, g.h, g.N, g.F);
    fd_compare(&g, g.h, dh, 60, 30, 1e-3f, &rng);
    free(dh); free(g.out); free(g.R); free(g.h);
}

/* The GPT MLP's pair (forward keeps gelu', backward multiplies by it and
 * sums the fc bias gradient) against the plain kernels: the same bits for
 * the values and the input gradient, and bias sums within rounding of a
 * double loop, accumulated (+=). N*F reaches DYN_PAR_MIN_WORK, so with two
 * threads the channel-split path runs. */
static void test_gelu_kept_grad(void **state)
{
    (void)state;
    enum { N = 70, F = 2048 };
    size_t n = (size_t)N * F;
    dyn_rng rng;
    dyn_rng_seed(&rng, 9);
    float *x = xcalloc(n, 4), *kept = xcalloc(n, 4), *y0 = xcalloc(n, 4), *y1 = xcalloc(n, 4);
    float *d0 = xcalloc(n, 4), *d1 = xcalloc(n, 4), *d2 = xcalloc(n, 4);
    float *db = xcalloc(F, 4);
    fill_uniform(x, n, 4, &rng);
    fill_uniform(d0, n, 1, &rng);
    for (int f = 0; f < F; f++) db[f] = 0.25f;
    memcpy(kept, x, n * 4);
    memcpy(d1, d0, n * 4);
    memcpy(d2, d0, n * 4);
    dyn_threads_set(2);
    dyn_gelu_forward(y0, x, n);
    dyn_gelu_forward_keep_grad(y1, kept, n);
    assert_memory_equal(y0, y1, n * 4);
    dyn_gelu_backward_inplace(d0, x, n);
    dyn_gelu_backward_kept(d1, db, kept, N, F);
    dyn_gelu_backward_kept(d2, NULL, kept, N, F);
    dyn_threads_set(1);
    assert_memory_equal(d0, d1, n * 4);
    assert_memory_equal(d0, d2, n * 4);
    for (int f = 0; f < F; f++) {
        double want = 0.25;
        for (int r = 0; r < N; r++) want += d0[(size_t)r * F + f];
        assert_true(fabs(db[f] - want) < 1e-4 * (1.0 + fabs(want)));
    }
    free(x); free(kept); free(y0); free(y1); free(d0); free(d1); free(d2); free(db);
}

/* dyn_linear_backward_input_set overwrites (whatever dinp held) with
 * dout · w, against a double loop; the shape is large enough for
 * dyn_sgemm's panels, on two threads. */
static void test_linear_backward_input_set(void **state)
{
    (void)state;
    enum { N = 600, C = 64, OC = 100 };
    dyn_rng rng;
    dyn_rng_seed(&rng, 12);
    float *d = xcalloc((size_t)N * OC, 4), *w = xcalloc((size_t)OC * C, 4);
    float *dx = xcalloc((size_t)N * C, 4);
    fill_uniform(d, (size_t)N * OC, 1, &rng);
    fill_uniform(w, (size_t)OC * C, 1, &rng);
    for (size_t i = 0; i < (size_t)N * C; i++) dx[i] = 7.0f;
    dyn_threads_set(2);
    dyn_linear_backward_input_set(dx, d, w, N, C, OC);
    dyn_threads_set(1);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double want = 0.0;
            for (int o = 0; o < OC; o++) want += (double)d[(size_t)n * OC + o] * w[(size_t)o * C + c];
            assert_true(fabs(dx[(size_t)n * C + c] - want) < 1e-4 * (1.0 + fabs(want)));
        }
    free(d); free(w); free(dx);
}

/* The _res forms of the norm input gradients (dinp = dres + gradient,
 * dres read only) give the bits of copying dres into dinp and
 * accumulating, and leave dres alone. */
static void test_norm_backward_input_res(void **state)
{
    (void)state;
    enum { N = 300, C = 512 };
    size_t n = (size_t)N * C;
    dyn_rng rng;
    dyn_rng_seed(&rng, 13);
    float *x = xcalloc(n, 4), *d = xcalloc(n, 4), *res = xcalloc(n, 4), *res0 = xcalloc(n, 4);
    float *w = xcalloc(C, 4), *b = xcalloc(C, 4), *y = xcalloc(n, 4), *mean = xcalloc(N, 4);
    float *rstd = xcalloc(N, 4), *acc = xcalloc(n, 4), *out = xcalloc(n, 4);
    fill_uniform(x, n, 2, &rng);
    fill_uniform(d, n, 1, &rng);
    fill_uniform(res, n, 1, &rng);
    fill_uniform(w, C, 1, &rng);
    fill_uniform(b, C, 1, &rng);
    memcpy(res0, res, n * 4);
    for (int rms = 0; rms < 2; rms++) {
        memcpy(acc, res, n * 4);
        for (size_t i = 0; i < n; i++) out[i] = 7.0f;
        if (rms) {
            dyn_rmsnorm_forward(y, rstd, x, w, N, C);
            dyn_rmsnorm_backward_input(acc, d, x, w, rstd, N, C);
            dyn_rmsnorm_backward_input_res(out, res, d, x, w, rstd, N, C);
        } else {
            dyn_layernorm_forward(y, mean, rstd, x, w, b, N, C);
            dyn_layernorm_backward_input(acc, d, x, w, mean, rstd, N, C);
            dyn_layernorm_backward_input_res(out, res, d, x, w, mean, rstd, N, C);
        }
        assert_memory_equal(acc, out, n * 4);
        assert_memory_equal(res, res0, n * 4);
        assert_true(acc[5] != res[5]); /* the gradient is not zero */
    }
    free(x); free(d); free(res); free(res0); free(w); free(b); free(y); free(mean); free(rstd);
    free(acc); free(out);
}

/* The fused residual + LayerNorm gives the bits of the two calls. */
static void test_residual_layernorm(void **state)
{
    (void)state;
    enum { N = 300, C = 512 };
    size_t n = (size_t)N * C;
    dyn_rng rng;
    dyn_rng_seed(&rng, 14);
    float *x0 = xcalloc(n, 4), *x1 = xcalloc(n, 4), *res = xcalloc(n, 4), *w = xcalloc(C, 4);
    float *b = xcalloc(C, 4), *y0 = xcalloc(n, 4), *y1 = xcalloc(n, 4);
    float *m0 = xcalloc(N, 4), *m1 = xcalloc(N, 4), *r0 = xcalloc(N, 4), *r1 = xcalloc(N, 4);
    fill_uniform(x0, n, 2, &rng);
    fill_uniform(res, n, 2, &rng);
    fill_uniform(w, C, 1, &rng);
    fill_uniform(b, C, 1, &rng);
    memcpy(x1, x0, n * 4);
    dyn_residual_forward(x0, x0, res, n);
    dyn_layernorm_forward(y0, m0, r0, x0, w, b, N, C);
    dyn_residual_layernorm_forward(x1, res, y1, m1, r1, w, b, N, C);
    assert_memory_equal(x0, x1, n * 4);
    assert_memory_equal(y0, y1, n * 4);
    assert_memory_equal(m0, m1, N * 4);
    assert_memory_equal(r0, r1, N * 4);
    free(x0); free(x1); free(res); free(w); free(b); free(y0); free(y1);
    free(m0); free(m1); free(r0); free(r1);
}

static void test_residual(void **state)
{
    (void)state;
    float a[3] = {1, 2, 3}, b[3] = {10, 20, 30}, o[3], da[3] = {1, 1, 1}, db[3] = {0, 0, 0};
    float d[3] = {0.5f, -1, 2};
    dyn_residual_forward(o, a, b, 3);
    assert_true(o[0] == 11 && o[1] == 22 && o[2] == 33);
    dyn_residual_backward(da, db, d, 3);
    assert_true(da[0] == 1.5f && da[1] == 0.0f && da[2] == 3.0f);
    assert_true(db[0] == 0.5f && db[1] == -1.0f && db[2] == 2.0f);
}

static void test_embeddings(void **state)
{
    (void)state;
    enum { N = 6, C = 4, V = 5, P = 8 };
    int32_t tok[N] = {3, 1, 3, 0, 4, 3}, pos[N] = {0, 1, 2, 0, 1, 7};
    float wte[V * C], wpe[P * C], out[N * C], dout[N * C];
    dyn_rng rng;
    dyn_rng_seed(&rng, 6);
    fill_uniform(wte, V * C, 1, &rng);
    fill_uniform(wpe, P * C, 1, &rng);
    fill_uniform(dout, N * C, 1, &rng);
    dyn_embed_pos_forward(out, tok, pos, wte, wpe, N, C);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            assert_true(out[n * C + c] == wte[tok[n] * C + c] + wpe[pos[n] * C + c]);
    float dwte[V * C] = {0}, dwpe[P * C] = {0};
    dyn_embed_pos_backward(dwte, dwpe, dout, tok, pos, N, C);
    /* Token 3 appears at rows 0, 2, 5; position 0 at rows 0, 3. */
    for (int c = 0; c < C; c++) {
        assert_true(fabsf(dwte[3 * C + c] - (dout[0 * C + c] + dout[2 * C + c] + dout[5 * C + c])) < 1e-6f);
        assert_true(fabsf(dwpe[0 * C + c] - (dout[0 * C + c] + dout[3 * C + c])) < 1e-6f);
        assert_true(dwte[2 * C + c] == 0.0f && dwpe[6 * C + c] == 0.0f);
    }
    float out2[N * C], dwte2[V * C] = {0};
    dyn_embed_forward(out2, tok, wte, N, C);
    assert_memory_equal(out2 + 4 * C, wte + 4 * C, C * sizeof(float));
    dyn_embed_backward(dwte2, dout, tok, N, C);
    assert_true(fabsf(dwte2[1 * C + 2] - dout[1 * C + 2]) < 1e-7f);
}

/* Brute-force per-row cross-entropy in double. */
static double brute_ce(const float *x, const float *w, int32_t t, int C, int V)
{
    double mx = -INFINITY, *lg = xcalloc((size_t)V, sizeof(double));
    for (int v = 0; v < V; v++) {
        double s = 0;
        for (int c = 0; c < C; c++) s += (double)x[c] * w[(size_t)v * C + c];
        lg[v] = s;
        if (s > mx) mx = s;
    }
    double sum = 0;
    for (int v = 0; v < V; v++) sum += exp(lg[v] - mx);
    double l = mx + log(sum) - lg[t];
    free(lg);
    return l;
}

/* The LM head's loss as a kcase: out = the single loss sum, R = 1. */
typedef struct lm_ctx {
    kcase k;
    int32_t *targets;
    float *weights, *lse, *work, loss;
} lm_ctx;

static void lm_fwd(kcase *k)
{
    lm_ctx *m = (lm_ctx *)k;
    m->loss = (float)dyn_lmhead_ce_forward(NULL, m->lse, k->x, k->w, m->targets, m->weights, k->N,
                                           k->C, k->V, m->work);
    k->out[0] = m->loss;
}

static void lmhead_case(int N, int C, int V, int fd)
{
    dyn_rng rng;
    dyn_rng_seed(&rng, (uint64_t)(N * 31 + V));
    lm_ctx m;
    memset(&m, 0, sizeof(m));
    kcase *k = &m.k;
    k->fwd = lm_fwd;
    k->N = N;
    k->C = C;
    k->V = V;
    k->nout = 1;
    k->out = xcalloc(1, 4);
    k->R = xcalloc(1, 4);
    k->R[0] = 1.0f;
    k->x = xcalloc((size_t)N * C, 4);
    k->w = xcalloc((size_t)V * C, 4);
    m.targets = xcalloc((size_t)N, 4);
    m.weights = xcalloc((size_t)N, 4);
    m.lse = xcalloc((size_t)N, 4);
    m.work = xcalloc(dyn_lmhead_work_floats(N, C, V), 4);
    fill_uniform(k->x, (size_t)N * C, 1, &rng);
    fill_uniform(k->w, (size_t)V * C, 1, &rng);
    for (int n = 0; n < N; n++) {
        m.targets[n] = (int32_t)dyn_rng_below(&rng, (uint64_t)V);
        /* Every third row is not a target; some targets weigh 0.5. */
        m.weights[n] = n % 3 == 1 ? 0.0f : (n % 5 == 0 ? 0.5f : 1.0f);
    }
    float *losses = xcalloc((size_t)N, 4);
    double total = dyn_lmhead_ce_forward(losses, m.lse, k->x, k->w, m.targets, m.weights, N, C, V,
                                         m.work);
    double want_total = 0;
    for (int n = 0; n < N; n++) {
        double want = m.weights[n] == 0.0f ? 0.0
                      : m.weights[n] * brute_ce(k->x + (size_t)n * C, k->w, m.targets[n], C, V);
        assert_true(fabs(want - losses[n]) < 1e-4 + 1e-4 * fabs(want));
        want_total += want;
    }
    assert_true(fabs(total - want_total) < 1e-3 + 1e-5 * fabs(want_total));
    if (fd) {
        float *dx = xcalloc((size_t)N * C, 4), *dw = xcalloc((size_t)V * C, 4);
        dyn_lmhead_ce_backward(dx, dw, k->x, k->w, m.targets, m.weights, m.lse, 1.0f, N, C, V,
                               m.work);
        for (int n = 0; n < N; n++)
            if (m.weights[n] == 0.0f)
                for (int c = 0; c < C; c++) assert_true(dx[(size_t)n * C + c] == 0.0f);
        fd_compare(k, k->x, dx, (size_t)N * C, 20, 1e-2f, &rng);
        fd_compare(k, k->w, dw, (size_t)V * C, 20, 1e-2f, &rng);
        /* dloss scales the gradient linearly. */
        float *dw2 = xcalloc((size_t)V * C, 4);
        dyn_lmhead_ce_backward(NULL, dw2, k->x, k->w, m.targets, m.weights, m.lse, 0.25f, N, C, V,
                               m.work);
        for (size_t i = 0; i < (size_t)V * C; i++) assert_true(fabsf(4.0f * dw2[i] - dw[i]) < 1e-5f);
        free(dx); free(dw); free(dw2);
    }
    free(losses);
    free(k->out); free(k->R); free(k->x); free(k->w);
    free(m.targets); free(m.weights); free(m.lse); free(m.work);
}

static void test_lmhead_small_fd(void **state) { (void)state; lmhead_case(6, 8, 37, 1); }
/* V over one chunk and N over one row block: the chunked online logsumexp
 * and the row gathering are exercised. */
static void test_lmhead_chunked(void **state) { (void)state; lmhead_case(300, 8, 2 * DYN_LMHEAD_VCHUNK + 77, 0); }
static void test_lmhead_chunked_fd(void **state) { (void)state; lmhead_case(5, 4, DYN_LMHEAD_VCHUNK + 300, 1); }

int main(void)
{
    dyn_threads_init(); /* the selected BLAS kernel, checked (threads.h); may re-execute */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_gradients),
        cmocka_unit_test(test_layernorm_gradients),
        cmocka_unit_test(test_rmsnorm_gradients),
        cmocka_unit_test(test_gelu_values_and_gradients),
        cmocka_unit_test(test_gelu_kept_grad),
        cmocka_unit_test(test_linear_backward_input_set),
        cmocka_unit_test(test_norm_backward_input_res),
        cmocka_unit_test(test_residual_layernorm),
        cmocka_unit_test(test_residual),
        cmocka_unit_test(test_embeddings),
        cmocka_unit_test(test_lmhead_small_fd),
        cmocka_unit_test(test_lmhead_chunked),
        cmocka_unit_test(test_lmhead_chunked_fd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
