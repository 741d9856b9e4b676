/* test_threads.c — the threading set-up of src/model/threads.h: the binary
 * runs on the OpenMP build of OpenBLAS (so BLAS and our loops share one
 * thread pool), dyn_threads_set moves the OpenMP and OpenBLAS counts
 * together, dyn_sgemm's panels give the plain product, and a model step
 * large enough to go parallel gives bit-identical gradients run after run
 * and with 1 or 2 threads. */
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

/* dyn_sgemm against a double-precision loop, for every transpose pair, on
 * shapes cut along M, along N, and too small to cut; 1 and 2 threads give
 * the same bits. */
static void test_sgemm_panels(void **state)
{
    (void)state;
    /* 700 rows: the cut that would be three panels, made two. */
    const int shapes[4][3] = {{300, 70, 130}, {40, 520, 200}, {8, 9, 10}, {700, 30, 120}};
    dyn_rng r;
    dyn_rng_seed(&r, 5);
    for (int si = 0; si < 4; si++) {
        int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
        for (int t = 0; t < 4; t++) {
            int ta = t & 1, tb = t >> 1;
            int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 1;
            size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb;
            float *A = malloc(na * 4), *B = malloc(nb * 4), *C0 = malloc((size_t)M * ldc * 4);
            float *C1 = malloc((size_t)M * ldc * 4), *C2 = malloc((size_t)M * ldc * 4);
            assert_true(A && B && C0 && C1 && C2);
            for (size_t i = 0; i < na; i++) A[i] = (float)dyn_rng_uniform(&r) - 0.5f;
            for (size_t i = 0; i < nb; i++) B[i] = (float)dyn_rng_uniform(&r) - 0.5f;
            for (size_t i = 0; i < (size_t)M * ldc; i++) C0[i] = (float)dyn_rng_uniform(&r);
            memcpy(C1, C0, (size_t)M * ldc * 4);
            memcpy(C2, C0, (size_t)M * ldc * 4);
            dyn_threads_set(1);
            dyn_sgemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 2.0f, C1, ldc);
            dyn_threads_set(2);
            dyn_sgemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 2.0f, C2, ldc);
            assert_memory_equal(C1, C2, (size_t)M * ldc * 4);
            for (int i = 0; i < M; i++) {
                for (int j = 0; j < N; j++) {
                    double acc = 0.0;
                    for (int k = 0; k < K; k++) {
                        double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                        double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                        acc += a * b;
                    }
                    double want = 0.5 * acc + 2.0 * C0[(size_t)i * ldc + j];
                    assert_true(fabs(C1[(size_t)i * ldc + j] - want) <= 1e-4 * (1.0 + fabs(want)));
                }
                /* The padding column past N is untouched. */
                assert_true(C1[(size_t)i * ldc + N] == C0[(size_t)i * ldc + N]);
            }
            free(A);
            free(B);
            free(C0);
            free(C1);
            free(C2);
        }
    }
    dyn_threads_set(1);
}

static void test_par_threshold(void **state)
{
    (void)state;
    assert_false(dyn_par(0));
    assert_false(dyn_par(DYN_PAR_MIN_WORK - 1));
    assert_true(dyn_par(DYN_PAR_MIN_WORK));
}

/* Gradients of one forward + backward of a GPT (2 layers, hidden 256, B=4,
 * up to 96 + 32 tokens: the kernels over all rows reach DYN_PAR_MIN_WORK and
 * the products DYN_GEMM_PAR_MIN) with `threads`. */
static float *gpt_grads(int threads, size_t *n)
{
    dyn_error err;
    dyn_model_config c = dyn_model_config_tiny(DYN_MODEL_GPT, 2, 256, 4, 128);
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
    dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(DYN_MODEL_GPT, s, B, &err);
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
    dyn_model_microbatch_free(mb);
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
    /* Another count: still the same bits (dyn_sgemm cuts products by shape,
     * never by thread count; our loops give each output to one thread). */
    assert_memory_equal(a, one, n1 * sizeof(float));
    float nz = 0.0f;
    for (size_t i = 0; i < n1; i++) nz += fabsf(a[i]);
    assert_true(nz > 0.0f); /* the gradient is not trivially zero */
    free(a);
    free(b);
    free(one);
    dyn_threads_set(1);
}

int main(void)
{
    dyn_threads_init(); /* the selected BLAS kernel, checked (threads.h); may re-execute */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blas_is_openmp_build),
        cmocka_unit_test(test_set_moves_both_counts),
        cmocka_unit_test(test_par_threshold),
        cmocka_unit_test(test_sgemm_panels),
        cmocka_unit_test(test_fixed_count_bit_identical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
