/* test_optim.c — AdamW against hand-worked updates, global-norm clipping and
 * the warm-up + cosine learning-rate schedule at chosen steps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>

#include "model/optim.h" /* defines: dyn_adamw_*, dyn_grad_clip, dyn_lr_at */
#include "model/threads.h" /* defines: dyn_threads_init */

static void test_adamw_first_step_by_hand(void **state)
{
    (void)state;
    /* t = 1: m = (1-b1) g, v = (1-b2) g^2, so m_hat = g, v_hat = g^2 and the
     * Adam step is g/|g| = sign(g) (up to eps). With decay:
     * p' = p - lr * (sign(g) + wd * p). */
    dyn_adamw_config c = {0.9f, 0.999f, 1e-8f, 0.1f};
    float p[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.5f, 0.1f, -4.0f}, m[3] = {0}, v[3] = {0};
    dyn_adamw_update(p, g, m, v, 3, 1, 0.1f, &c, 1);
    assert_float_equal(p[0], 1.0 - 0.1 * (1.0 + 0.1 * 1.0), 1e-6);   /* 0.89 */
    assert_float_equal(p[1], -2.0 - 0.1 * (1.0 + 0.1 * -2.0), 1e-6); /* -2.08 */
    assert_float_equal(p[2], 0.5 - 0.1 * (-1.0 + 0.1 * 0.5), 1e-6);  /* 0.595 */
    assert_float_equal(m[0], 0.05, 1e-7);
    assert_float_equal(v[2], 0.001 * 16.0, 1e-6); /* 1 - b2 rounds in float */
    /* Without decay (biases, norm gains) only the Adam step applies. */
    float q[1] = {1.0f}, mq[1] = {0}, vq[1] = {0}, gq[1] = {0.5f};
    dyn_adamw_update(q, gq, mq, vq, 1, 1, 0.1f, &c, 0);
    assert_float_equal(q[0], 0.9, 1e-6);
}

static void test_adamw_three_steps_match_double_reference(void **state)
{
    (void)state;
    dyn_adamw_config c = {0.9f, 0.95f, 1e-6f, 0.05f};
    float p = 0.3f, m = 0, v = 0;
    double rp = 0.3, rm = 0, rv = 0;
    const double gs[3] = {0.2, -0.7, 0.05}, lrs[3] = {0.01, 0.02, 0.005};
    for (int t = 1; t <= 3; t++) {
        float g = (float)gs[t - 1];
        dyn_adamw_update(&p, &g, &m, &v, 1, t, (float)lrs[t - 1], &c, 1);
        rm = 0.9 * rm + 0.1 * gs[t - 1];
        rv = 0.95 * rv + 0.05 * gs[t - 1] * gs[t - 1];
        double mh = rm / (1 - pow(0.9, t)), vh = rv / (1 - pow(0.95, t));
        rp = rp - lrs[t - 1] * (mh / (sqrt(vh) + 1e-6) + 0.05 * rp);
        assert_float_equal(p, rp, 1e-6);
    }
}

static void test_clip_scales_to_max_norm(void **state)
{
    (void)state;
    float g[2] = {3.0f, 4.0f};
    assert_float_equal(dyn_grad_clip(g, 2, 10.0), 5.0, 1e-12); /* below: untouched */
    assert_float_equal(g[0], 3.0, 0);
    assert_float_equal(dyn_grad_clip(g, 2, 1.0), 5.0, 1e-12);
    assert_float_equal(g[0], 0.6, 1e-7);
    assert_float_equal(g[1], 0.8, 1e-7);
    assert_float_equal(dyn_grad_norm(g, 2), 1.0, 1e-6);
    float h[2] = {30.0f, 40.0f};
    assert_float_equal(dyn_grad_clip(h, 2, 0.0), 50.0, 1e-12); /* disabled */
    assert_float_equal(h[1], 40.0, 0);
}

static void test_lr_schedule_values(void **state)
{
    (void)state;
    dyn_lr_schedule s = {1e-3f, 1e-4f, 10, 111};
    assert_float_equal(dyn_lr_at(&s, 0), 1e-4, 1e-9);   /* 1/10 of max */
    assert_float_equal(dyn_lr_at(&s, 4), 5e-4, 1e-9);   /* 5/10 */
    assert_float_equal(dyn_lr_at(&s, 9), 1e-3, 1e-9);   /* end of warm-up */
    assert_float_equal(dyn_lr_at(&s, 10), 1e-3, 1e-9);  /* cosine starts at max */
    assert_float_equal(dyn_lr_at(&s, 60), 5.5e-4, 1e-9); /* halfway: (max+min)/2 */
    /* a quarter of the way: min + (max-min) * (1 + cos(pi/4)) / 2 */
    assert_float_equal(dyn_lr_at(&s, 35), 1e-4 + 9e-4 * (1 + sqrt(0.5)) / 2, 1e-9);
    assert_float_equal(dyn_lr_at(&s, 110), 1e-4, 1e-9); /* last step: floor */
    assert_float_equal(dyn_lr_at(&s, 1000), 1e-4, 1e-9);
    dyn_lr_schedule nowarm = {2e-3f, 0.0f, 0, 3};
    assert_float_equal(dyn_lr_at(&nowarm, 0), 2e-3, 1e-9);
    assert_float_equal(dyn_lr_at(&nowarm, 1), 1e-3, 1e-9);
    assert_float_equal(dyn_lr_at(&nowarm, 2), 0.0, 1e-9);
}

int main(void)
{
    dyn_threads_init(); /* the selected BLAS kernel, checked (threads.h); may re-execute */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_first_step_by_hand),
        cmocka_unit_test(test_adamw_three_steps_match_double_reference),
        cmocka_unit_test(test_clip_scales_to_max_norm),
        cmocka_unit_test(test_lr_schedule_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
