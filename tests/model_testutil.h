/* model_testutil.h — helpers shared by the model-layer tests
 * (test_layers.c, test_attention.c, test_blocks.c): seeded random fills,
 * error measures and a central finite-difference driver. Header-only so each
 * test stays one executable. */
#ifndef DYN_TESTS_MODEL_TESTUTIL_H
#define DYN_TESTS_MODEL_TESTUTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/rng.h" /* defines: dyn_rng, dyn_rng_seed, dyn_rng_uniform */

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

static inline void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    if (!p) {
        fprintf(stderr, "test: out of memory\n");
        abort();
    }
    return p;
}

#endif
