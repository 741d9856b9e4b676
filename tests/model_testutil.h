/* model_testutil.h — helpers shared by the model-layer tests
 * (test_layers.c, test_attention.c, test_blocks.c): seeded random fills,
 * error measures and a central finite-difference driver. Header-only so each
 * test stays one executable. */
#ifndef DYN_TESTS_MODEL_TESTUTIL_H
#define DYN_TESTS_MODEL_TESTUTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/layout.h" /* defines: dyn_layout_create_* */
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

#endif
