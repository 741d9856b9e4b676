/* test_fastmath.c — the fast exp behind softmax and GELU (src/model/fastmath.h)
 * against libm's expf: close over the range the kernels use, and the same
 * answer as expf at the ends, NaN and the infinities included (NaN used to
 * reach (int32_t)NaN and a left shift of a negative value: undefined, and
 * caught by UBSan; +inf gave exp(88) and -inf exp(-87)). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>

#include "model/fastmath.h" /* defines: dyn_fast_expf, dyn_fast_tanhf */

/* Relative error against expf over [-87, 88] on a fine grid. */
static void test_expf_range(void **state)
{
    (void)state;
    double worst = 0;
    for (int k = 0; k <= 175000; k++) {
        float x = (float)(-87.0 + k * 0.001); /* the grid in double: the last point is 88 exactly */
        double want = expf(x), got = dyn_fast_expf(x);
        double rel = fabs(got - want) / want;
        if (rel > worst) worst = rel;
    }
    assert_true(worst < 1e-6);
    assert_true(dyn_fast_expf(0.0f) == 1.0f);
}

/* The ends answer as expf does (exact for 0 and inf; NaN stays NaN). */
static void test_expf_special(void **state)
{
    (void)state;
    assert_true(isnan(dyn_fast_expf(NAN)));
    assert_true(isnan(dyn_fast_expf(-NAN)));
    assert_true(isinf(dyn_fast_expf(INFINITY)) && dyn_fast_expf(INFINITY) > 0);
    assert_true(dyn_fast_expf(-INFINITY) == 0.0f);
    assert_true(isinf(dyn_fast_expf(1e30f)));
    assert_true(isinf(dyn_fast_expf(89.0f)) && isinf(expf(89.0f)));
    assert_true(dyn_fast_expf(-1e30f) == 0.0f && expf(-1e30f) == 0.0f);
    assert_true(dyn_fast_expf(-110.0f) == 0.0f && expf(-110.0f) == 0.0f);
    assert_true(isfinite(dyn_fast_expf(88.5f)) && dyn_fast_expf(88.5f) > 1e38f);
    assert_true(dyn_fast_expf(-90.0f) > 0.0f); /* not yet where expf reaches 0 */
    /* tanh through it: finite saturation, NaN propagates */
    assert_true(dyn_fast_tanhf(INFINITY) == 1.0f);
    assert_true(dyn_fast_tanhf(-INFINITY) == -1.0f);
    assert_true(isnan(dyn_fast_tanhf(NAN)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expf_range),
        cmocka_unit_test(test_expf_special),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
