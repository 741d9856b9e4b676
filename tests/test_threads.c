/* test_threads.c — the threading set-up of src/model/threads.h: the binary
 * runs on the OpenMP build of OpenBLAS (so BLAS and our loops share one
 * thread pool), dyn_threads_set moves the OpenMP and OpenBLAS counts
 * together, and a model step large enough to go parallel gives bit-identical
 * gradients run after run with a fixed thread count (and the same values as
 * one thread up to rounding). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"   /* defines: dyn_model_*, dyn_microbatch_* */
#include "model/threads.h" /* defines: dyn_threads_*, dyn_par */
#include "util/rng.h"      /* defines: dyn_rng_* */

static void test_blas_is_openmp_build(void **state)
{
    (void)state;
    /* CMakeLists.txt links the OpenMP build and gives the binary its run
     * path; if the loader had picked the pthread build (the Debian default
     * alternative) instead, this is where it shows. */
    assert_string_equal(dyn_threads_blas_kind(), "openmp");
}

static void test_set_moves_both_counts(void **state)
{
    (void)state;
    dyn_threads_set(2);
    assert_int_equal(dyn_threads_get(), 2);
    assert_int_equal(omp_get_max_threads(), 2);
    assert_int_equal(openblas_get_num_threads(), 2);
    dyn_threads_set(0); /* below 1 means 1 */
    assert_int_equal(dyn_threads_get(), 1);
    assert_int_equal(omp_get_max_threads(), 1);
    assert_int_equal(openblas_get_num_threads(), 1);
}

static void test_par_threshold(void **state)
{
    (void)state;
    assert_false(dyn_par(0));
    assert_false(dyn_par(DYN_PAR_MIN_WORK - 1));
    assert_true(dyn_par(DYN_PAR_MIN_WORK));
}

/* Gradients of one forward + backward of a GPT (2 layers, hidden 128, B=4,
 * 96 + 32 tokens: every kernel above DYN_PAR_MIN_WORK) with `threads`. */
static float *gpt_grads(int threads, size_t *n)
{
    dyn_error err;
    dyn_model_config c = dyn_model_config_tiny(DYN_MODEL_GPT, 2, 128, 4, 128);
    dyn_model *m = dyn_model_create(&c, 7, &err);
    assert_non_null(m);
    dyn_model_set_threads(m, threads);
    enum { B = 4, IN = 96, TG = 32 };
    static int32_t tok[B][IN + TG];
    dyn_token_sample s[B];
    dyn_rng r;
    dyn_rng_seed(&r, 11);
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < IN + TG; i++) tok[b][i] = (int32_t)dyn_rng_below(&r, 256);
        s[b].input = tok[b];
        s[b].input_len = IN - 8 * b; /* ragged rows: pad in the layout */
        s[b].target = tok[b] + IN;
        s[b].target_len = TG;
    }
    dyn_microbatch *mb = dyn_microbatch_create_padded(DYN_MODEL_GPT, s, B, &err);
    dyn_model_acts *a = dyn_model_acts_create(&err);
    assert_non_null(mb);
    assert_non_null(a);
    double loss;
    assert_int_equal(dyn_model_forward(m, a, mb, 0, &loss, NULL, &err), DYN_OK);
    assert_int_equal(dyn_model_backward(m, a, mb, 1.0f / (B * TG), &err), DYN_OK);
    *n = dyn_model_num_params(m);
    float *g = malloc(*n * sizeof(float));
    assert_non_null(g);
    memcpy(g, dyn_model_grads(m), *n * sizeof(float));
    dyn_model_acts_free(a);
    dyn_microbatch_free(mb);
    dyn_model_free(m);
    return g;
}

static void test_fixed_count_bit_identical(void **state)
{
    (void)state;
    size_t n1, n2, n3;
    float *a = gpt_grads(2, &n1), *b = gpt_grads(2, &n2), *one = gpt_grads(1, &n3);
    assert_int_equal(n1, n2);
    assert_int_equal(n1, n3);
    assert_memory_equal(a, b, n1 * sizeof(float));
    /* Another count: the same gradient up to rounding (sgemm may split its
     * sums differently; our own kernels do not). */
    double worst = 0.0;
    for (size_t i = 0; i < n1; i++) {
        double d = fabs((double)a[i] - one[i]) / (1e-6 + 1e-4 * fabs((double)one[i]));
        if (!(d <= worst)) worst = d;
    }
    assert_true(worst <= 1.0);
    free(a);
    free(b);
    free(one);
    dyn_threads_set(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blas_is_openmp_build),
        cmocka_unit_test(test_set_moves_both_counts),
        cmocka_unit_test(test_par_threshold),
        cmocka_unit_test(test_fixed_count_bit_identical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
