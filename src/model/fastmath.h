/* fastmath.h — vectorisable exp and tanh for the model kernels (private to
 * src/model).
 *
 * Why: glibc's expf/tanhf are scalar calls that GCC does not vectorise under
 * strict IEEE flags, and GELU and softmax apply them to every element of
 * (N,F) and (tile × tile) arrays, where they cost more than the matrix
 * products around them. These versions are plain float arithmetic (range
 * reduction by ln 2, a degree-6 polynomial, the exponent built from bits), so
 * loops over them vectorise, and they are deterministic: the same input gives
 * the same bits on every call. Relative error about 2e-7 over the clamped
 * range [-87, 88]; exp(x < -87) returns exp(-87) ~ 1.6e-38, which callers
 * treat as 0 after scaling. */
#ifndef DYN_MODEL_FASTMATH_H
#define DYN_MODEL_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The clamps in dyn_fast_expf are selects; GCC if-converts them inside a
 * vectorised loop only when floating-point operations may be assumed not to
 * trap. Nothing in dynapipe reads the FP exception flags, so results are
 * unchanged; this applies to the functions of each file that includes this
 * header (layers.c, attention.c), which include it first. GCC only: clang
 * does not know the pragma. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

/* exp(x), relative error below 3e-7 for x in [-87, 88]; below -87 it gives
 * exp(-87) (down to where expf reaches 0) and in (88, 88.72] exp(88). At
 * the ends it answers as expf: NaN for NaN, +inf above 88.72 (+inf
 * included), 0 below -103.97 (-inf included). The exponent is computed
 * from a clamped copy with NaN made 0, so the integer conversion and the
 * shift below never see a value out of range (NaN used to reach
 * (int32_t)NaN and a left shift of a negative value). */
static inline float dyn_fast_expf(float x)
{
    float y = x < -87.0f ? -87.0f : x;
    y = y > 88.0f ? 88.0f : y;
    y = y == y ? y : 0.0f; /* NaN fails both comparisons above */
    /* n = round(y / ln 2) through the 1.5 * 2^23 trick (round to nearest). */
    float n = (y * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = y - n * 0.693145751953125f;  /* ln 2, high part (exact product) */
    r = r - n * 1.428606765330187045e-06f; /* ln 2, low part */
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23; /* n in [-126, 127]: a positive exponent field */
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    float e = p * scale;
    e = x > 88.7228394f ? HUGE_VALF : e; /* expf overflows to +inf above ln(FLT_MAX) */
    e = x < -103.972084f ? 0.0f : e;     /* and underflows to 0 below ln of the least subnormal */
    return x == x ? e : x;
}

/* tanh(u) = 1 - 2 / (1 + exp(2u)); absolute error about 2e-7. */
static inline float dyn_fast_tanhf(float u)
{
    return 1.0f - 2.0f / (1.0f + dyn_fast_expf(2.0f * u));
}

/* Reductions over a row in 8 fixed lanes, combined in a fixed order: GCC
 * vectorises them without -ffast-math (no reassociation is needed) and the
 * result does not depend on alignment or threads. */
#define DYN_LANES 8

static inline float dyn_row_max(const float *x, int n, float init)
{
    float acc[DYN_LANES];
    for (int j = 0; j < DYN_LANES; j++) acc[j] = init;
    int c = 0;
    for (; c + DYN_LANES <= n; c += DYN_LANES) {
#pragma omp simd
        for (int j = 0; j < DYN_LANES; j++) acc[j] = x[c + j] > acc[j] ? x[c + j] : acc[j];
    }
    float m = init;
    for (int j = 0; j < DYN_LANES; j++) m = acc[j] > m ? acc[j] : m;
    for (; c < n; c++) m = x[c] > m ? x[c] : m;
    return m;
}

static inline float dyn_row_sum(const float *x, int n)
{
    float acc[DYN_LANES] = {0};
    int c = 0;
    for (; c + DYN_LANES <= n; c += DYN_LANES)
        for (int j = 0; j < DYN_LANES; j++) acc[j] += x[c + j];
    float s = 0.0f;
    for (int j = 0; j < DYN_LANES; j++) s += acc[j];
    for (; c < n; c++) s += x[c];
    return s;
}

static inline float dyn_row_dot(const float *x, const float *y, int n)
{
    float acc[DYN_LANES] = {0};
    int c = 0;
    for (; c + DYN_LANES <= n; c += DYN_LANES)
        for (int j = 0; j < DYN_LANES; j++) acc[j] += x[c + j] * y[c + j];
    float s = 0.0f;
    for (int j = 0; j < DYN_LANES; j++) s += acc[j];
    for (; c < n; c++) s += x[c] * y[c];
    return s;
}

/* x[c] = exp(x[c] - m) for c < n. */
static inline void dyn_row_exp_sub(float *x, int n, float m)
{
#pragma omp simd
    for (int c = 0; c < n; c++) x[c] = dyn_fast_expf(x[c] - m);
}

#endif
