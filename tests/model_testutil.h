/* model_testutil.h — helpers shared by the model tests (test_layers.c,
 * test_attention.c, test_blocks.c, test_model.c, test_model_checkpoint.c):
 * seeded random fills, error measures, a central finite-difference driver,
 * layouts that must build, random byte samples, and loss + gradient of a
 * micro-batch in one call. Header-only so each test stays one executable. */
#ifndef DYN_TESTS_MODEL_TESTUTIL_H
#define DYN_TESTS_MODEL_TESTUTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/layout.h" /* defines: dyn_layout_create_* */
#include "model/model.h"  /* defines: dyn_model_*, dyn_token_sample */
#include "util/rng.h"     /* defines: dyn_rng, dyn_rng_seed, dyn_rng_uniform */

/* Uniform in [-scale, scale). */
static inline void fill_uniform(float *x, size_t n, float scale, dyn_rng *rng)
{
    for (size_t i = 0; i < n; i++) x[i] = (float)((2.0 * dyn_rng_uniform(rng) - 1.0) * scale);
}

/* max |a-b| / (atol + rtol*|b|) over n elements: <= 1 means within tolerance. */
static inline double tol_ratio(const float *a, const float *b, size_t n, double atol, double rtol)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = fabs((double)a[i] - (double)b[i]) / (atol + rtol * fabs((double)b[i]));
        if (!(r <= worst)) worst = r; /* NaN propagates as failure */
    }
    return worst;
}

/* Central differences of loss(ctx) at o->trials random entries of x (n
 * floats) against the analytic gradient g: |fd - g| <= atol + rtol*|fd|.
 * With o->ld > 0, an entry whose column i % ld is >= o->width (a padding
 * column) is drawn but not checked. Each mismatch is printed, named o->what;
 * returns their count. x is left as it was; the last loss call saw x[i]-eps. */
typedef struct fd_opts {
    int trials;
    float eps;
    double atol, rtol;
    size_t ld, width;
    const char *what;
} fd_opts;

static inline int fd_mismatches(double (*loss)(void *), void *ctx, float *x, const float *g, size_t n,
                                const fd_opts *o, dyn_rng *rng)
{
    int bad = 0;
    for (int t = 0; t < o->trials; t++) {
        size_t i = (size_t)dyn_rng_below(rng, n);
        if (o->ld > 0 && i % o->ld >= o->width) continue;
        float x0 = x[i];
        x[i] = x0 + o->eps;
        double lp = loss(ctx);
        x[i] = x0 - o->eps;
        double lm = loss(ctx);
        x[i] = x0;
        double fd = (lp - lm) / (2.0 * o->eps);
        if (fabs(fd - g[i]) > o->atol + o->rtol * fabs(fd)) {
            fprintf(stderr, "%s[%zu]: fd %.6f analytic %.6f\n", o->what, i, fd, g[i]);
            bad++;
        }
    }
    return bad;
}

static inline void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    if (!p) {
        fprintf(stderr, "test: out of memory\n");
        abort();
    }
    return p;
}

/* Layouts that must build (test inputs are valid); abort otherwise. */
static inline dyn_layout *lay_padded(const int32_t *lens, int B, int T)
{
    dyn_layout *l = dyn_layout_create_padded(lens, B, T, NULL);
    if (!l) {
        fprintf(stderr, "test: padded layout refused\n");
        abort();
    }
    return l;
}

static inline dyn_layout *lay_packed(const int32_t *lens, const int32_t *counts, int B, int T, int docmask)
{
    dyn_layout *l = dyn_layout_create_packed(lens, counts, B, T, docmask, NULL);
    if (!l) {
        fprintf(stderr, "test: packed layout refused\n");
        abort();
    }
    return l;
}

/* ---- whole models (test_model.c, test_model_checkpoint.c) ---- */

/* n samples with input lengths in [in_lo, in_hi] and target lengths in
 * [tg_lo, tg_hi], random byte tokens. Storage in *store (free it). */
static inline void make_samples(dyn_token_sample *s, int n, int in_lo, int in_hi, int tg_lo, int tg_hi, uint64_t seed,
                                int32_t **store)
{
    dyn_rng r;
    dyn_rng_seed(&r, seed);
    int32_t *buf = calloc((size_t)n * (size_t)(in_hi + tg_hi), sizeof(int32_t));
    *store = buf;
    for (int i = 0; i < n; i++) {
        int32_t *in = buf + (size_t)i * (in_hi + tg_hi), *tg = in + in_hi;
        s[i].input = in;
        s[i].target = tg;
        s[i].input_len = in_lo + (int)dyn_rng_below(&r, (uint64_t)(in_hi - in_lo + 1));
        s[i].target_len = tg_lo + (int)dyn_rng_below(&r, (uint64_t)(tg_hi - tg_lo + 1));
        for (int k = 0; k < s[i].input_len; k++) in[k] = (int32_t)dyn_rng_below(&r, 256);
        for (int k = 0; k < s[i].target_len; k++) tg[k] = (int32_t)dyn_rng_below(&r, 256);
    }
}

/* Zero grads, forward + backward with dloss; returns the loss sum. */
static inline double loss_and_grad(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, float dloss,
                                   int recompute, float *sample_loss)
{
    dyn_error err;
    double loss = 0;
    if (dyn_model_forward(m, a, mb, recompute, &loss, sample_loss, &err) != DYN_OK) {
        fprintf(stderr, "forward: %s\n", err.msg);
        abort();
    }
    if (dyn_model_backward(m, a, mb, dloss, &err) != DYN_OK) {
        fprintf(stderr, "backward: %s\n", err.msg);
        abort();
    }
    return loss;
}

static inline double loss_only(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb)
{
    dyn_error err;
    double loss = 0;
    if (dyn_model_forward(m, a, mb, 0, &loss, NULL, &err) != DYN_OK) {
        fprintf(stderr, "forward: %s\n", err.msg);
        abort();
    }
    return loss;
}

static inline void test_oom(void)
{
    fprintf(stderr, "test: out of memory\n");
    abort();
}

/* Zero nothing; forward, then the split halves B and W with dloss. */
static inline double split_loss_and_grad(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, float dloss,
                                         int recompute)
{
    dyn_error err;
    double loss = 0;
    int L = dyn_model_num_layers(m);
    if (dyn_model_forward(m, a, mb, recompute, &loss, NULL, &err) != DYN_OK ||
        dyn_model_stage_backward_input(m, a, mb, 0, L, NULL, NULL, dloss, &err) != DYN_OK ||
        dyn_model_stage_backward_weight(m, a, mb, 0, L, &err) != DYN_OK) {
        fprintf(stderr, "split backward: %s\n", err.msg);
        abort();
    }
    return loss;
}

/* Per-tensor directional derivative check. For tensor t the direction u is
 * its analytic gradient (normalised) plus a random unit vector, so a wrong
 * magnitude, sign or a missing contribution all show up, and the signal is
 * well above fp32 noise. FD: (f(p + h u) - f(p - h u)) / 2h, h = 1e-2 in
 * parameter-norm units. Tolerance: 3% relative + 2e-3 absolute. The
 * gradient comes from the fused backward, or with split != 0 from the split
 * halves (backward_input then backward_weight). Prints each mismatch and
 * returns their count. */
static inline int model_grad_check(dyn_model *m, const dyn_model_microbatch *mb, const char *what, int split)
{
    dyn_model_acts *a = dyn_model_acts_create(NULL);
    if (a == NULL) test_oom();
    dyn_model_zero_grad(m);
    if (split) split_loss_and_grad(m, a, mb, 1.0f, 0);
    else loss_and_grad(m, a, mb, 1.0f, 0, NULL);
    size_t np = dyn_model_num_params(m);
    float *g = malloc(np * sizeof(float)), *u = malloc(np * sizeof(float));
    if (g == NULL || u == NULL) test_oom();
    int bad = 0;
    memcpy(g, dyn_model_grads(m), np * sizeof(float));
    float *p = dyn_model_params(m);
    dyn_rng r;
    dyn_rng_seed(&r, 99);
    const double h = 1e-2;
    for (int ti = 0; ti < dyn_model_num_tensors(m); ti++) {
        const dyn_param_tensor *t = dyn_model_tensor(m, ti);
        float *gt = g + t->offset, *ut = u + t->offset, *pt = p + t->offset;
        double gn = 0, rn = 0;
        for (size_t k = 0; k < t->numel; k++) gn += (double)gt[k] * gt[k];
        for (size_t k = 0; k < t->numel; k++) {
            ut[k] = (float)dyn_rng_normal(&r);
            rn += (double)ut[k] * ut[k];
        }
        gn = sqrt(gn);
        rn = sqrt(rn);
        double un = 0;
        for (size_t k = 0; k < t->numel; k++) {
            ut[k] = (float)((gn > 0 ? gt[k] / gn : 0.0) + ut[k] / rn);
            un += (double)ut[k] * ut[k];
        }
        un = sqrt(un);
        double an = 0;
        for (size_t k = 0; k < t->numel; k++) {
            ut[k] = (float)(ut[k] / un);
            an += (double)gt[k] * ut[k];
        }
        float *save = malloc(t->numel * sizeof(float));
        if (save == NULL) test_oom();
        memcpy(save, pt, t->numel * sizeof(float));
        for (size_t k = 0; k < t->numel; k++) pt[k] = (float)(save[k] + h * ut[k]);
        double fp = loss_only(m, a, mb);
        for (size_t k = 0; k < t->numel; k++) pt[k] = (float)(save[k] - h * ut[k]);
        double fm = loss_only(m, a, mb);
        memcpy(pt, save, t->numel * sizeof(float));
        free(save);
        double fd = (fp - fm) / (2 * h);
        if (fabs(fd - an) > 3e-2 * fabs(an) + 2e-3) {
            fprintf(stderr, "%s: tensor %s: finite difference %.6g, analytic %.6g\n", what, t->name, fd, an);
            bad++;
        }
    }
    free(g);
    free(u);
    dyn_model_acts_free(a);
    return bad;
}

#endif
