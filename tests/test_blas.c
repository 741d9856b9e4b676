/* test_blas.c — the BLAS kernel selection of src/model/blas.h: the ladder
 * picks the best kernel the CPU features allow, skipping rejected ones; the
 * numerical check accepts a correct product computed another way and
 * catches a wrong element, a write into C's row padding and a missing
 * transpose; this test process itself runs the selected kernel (it starts
 * with dyn_threads_init like every test that multiplies matrices); and the
 * CLI end to end: selection over a generic kernel, a user's
 * OPENBLAS_CORETYPE kept, a kernel that fails the check replaced by the next
 * rung, and a chain where every kernel fails ending without a loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>

#include "model/blas.h"    /* defines: dyn_blas_*, dyn_cpu_* */
#include "model/threads.h" /* defines: dyn_threads_init */

static const dyn_cpu_features k_avx512 = {1, 1, 1, 1, 1, 1, 1};
static const dyn_cpu_features k_avx2 = {1, 1, 1, 0, 0, 0, 0};

static void test_kernel_level(void **state)
{
    (void)state;
    assert_int_equal(dyn_blas_kernel_level("SkylakeX"), 3);
    assert_int_equal(dyn_blas_kernel_level("skylakex"), 3); /* OpenBLAS ignores case too */
    assert_int_equal(dyn_blas_kernel_level("Cooperlake"), 3);
    assert_int_equal(dyn_blas_kernel_level("Haswell"), 2);
    assert_int_equal(dyn_blas_kernel_level("Zen"), 2);
    assert_int_equal(dyn_blas_kernel_level("Sandybridge"), 1);
    assert_int_equal(dyn_blas_kernel_level("Prescott"), 0);
    assert_int_equal(dyn_blas_kernel_level("Nehalem"), 0);
    assert_int_equal(dyn_blas_kernel_level("NoSuchCore"), -1);
    assert_int_equal(dyn_blas_kernel_level(NULL), -1);
}

static void test_kernel_best(void **state)
{
    (void)state;
    assert_string_equal(dyn_blas_kernel_best(&k_avx512, NULL, 3), "SkylakeX");
    assert_string_equal(dyn_blas_kernel_best(&k_avx512, "", 3), "SkylakeX");
    assert_string_equal(dyn_blas_kernel_best(&k_avx512, "skylakex", 3), "Haswell");
    assert_string_equal(dyn_blas_kernel_best(&k_avx512, "Prescott,SkylakeX,Haswell", 3),
                        "Sandybridge");
    assert_string_equal(dyn_blas_kernel_best(&k_avx512, NULL, 2), "Haswell");
    assert_string_equal(dyn_blas_kernel_best(&k_avx512, NULL, 0), "Prescott");
    assert_null(dyn_blas_kernel_best(&k_avx512, "SkylakeX,Haswell,Sandybridge,Prescott", 3));
    /* A name that merely starts like a rung does not reject it. */
    assert_string_equal(dyn_blas_kernel_best(&k_avx512, "Skylake", 3), "SkylakeX");
    assert_string_equal(dyn_blas_kernel_best(&k_avx2, NULL, 3), "Haswell");
    /* AVX-512F alone is not enough for the SkylakeX kernel (it uses BW/DQ/VL). */
    dyn_cpu_features f = k_avx2;
    f.avx512f = 1;
    assert_string_equal(dyn_blas_kernel_best(&f, NULL, 3), "Haswell");
    /* AVX2 without FMA: the AVX kernel. */
    f = k_avx2;
    f.fma = 0;
    assert_string_equal(dyn_blas_kernel_best(&f, NULL, 3), "Sandybridge");
    dyn_cpu_features none = {0, 0, 0, 0, 0, 0, 0};
    assert_string_equal(dyn_blas_kernel_best(&none, NULL, 3), "Prescott");
}

static void test_features_format(void **state)
{
    (void)state;
    char buf[128];
    dyn_cpu_features_format(&k_avx2, buf, sizeof(buf));
    assert_string_equal(buf, "avx2 fma avx");
    dyn_cpu_features none = {0, 0, 0, 0, 0, 0, 0};
    dyn_cpu_features_format(&none, buf, sizeof(buf));
    assert_string_equal(buf, "none");
    /* /proc/cpuinfo's flags, read independently of cpuid, agree on AVX2 and
     * AVX-512F (both need OS support to be listed there too). */
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (fp == NULL) return;
    char line[8192];
    int avx2 = -1, avx512f = -1;
    while (fgets(line, sizeof(line), fp))
        if (strncmp(line, "flags", 5) == 0) {
            avx2 = strstr(line, " avx2") != NULL;
            avx512f = strstr(line, " avx512f") != NULL;
            break;
        }
    fclose(fp);
    dyn_cpu_features f;
    dyn_cpu_features_detect(&f);
    if (avx2 >= 0) {
        assert_int_equal(f.avx2, avx2);
        assert_int_equal(f.avx512f, avx512f);
    }
}

/* ---- the check ----------------------------------------------------------- */

/* A plain sgemm, independent of OpenBLAS: float accumulation in reverse k
 * order (a different rounding from both OpenBLAS and the check's double
 * loop). `fault` makes it wrong on purpose. */
enum { FAULT_NONE, FAULT_ONE_ELEMENT, FAULT_PADDING, FAULT_NO_TRANSPOSE };
static int g_fault;

static void sgemm_plain(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc)
{
    /* Element counts of the operands as stored, from the real flags. */
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb;
    if (g_fault == FAULT_NO_TRANSPOSE) ta = tb = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = 0.0f;
            for (int k = K - 1; k >= 0; k--) {
                size_t ia = ta ? (size_t)k * lda + i : (size_t)i * lda + k;
                size_t ib = tb ? (size_t)j * ldb + k : (size_t)k * ldb + j;
                /* With the transpose dropped, an index may leave the
                 * operand: wrap it (the product is wrong either way). */
                s += A[ia % na] * B[ib % nb];
            }
            float *c = &C[(size_t)i * ldc + j];
            *c = alpha * s + (beta != 0.0f ? beta * *c : 0.0f);
        }
    if (g_fault == FAULT_ONE_ELEMENT) C[(size_t)(M / 2) * ldc + N / 2] *= 1.01f; /* 1% off */
    if (g_fault == FAULT_PADDING && ldc > N) C[N] = 0.0f;
}

static void test_check_accepts_correct(void **state)
{
    (void)state;
    double ms = -1.0;
    assert_int_equal(dyn_blas_check(NULL, &ms), 0); /* the loaded kernel */
    assert_true(ms >= 0.0); /* its speed (well under 100 ms) is measured by bench_layer, not asserted here */
    g_fault = FAULT_NONE;
    assert_int_equal(dyn_blas_check(sgemm_plain, NULL), 0); /* rounding differs: still agrees */
}

static void test_check_catches_faults(void **state)
{
    (void)state;
    g_fault = FAULT_ONE_ELEMENT;
    assert_int_equal(dyn_blas_check(sgemm_plain, NULL), DYN_BLAS_CHECK_PRODUCTS);
    /* Two of the four shapes have padded C rows, each in three forms. */
    g_fault = FAULT_PADDING;
    assert_int_equal(dyn_blas_check(sgemm_plain, NULL), 6);
    /* Forms NT and TN (8 products) go wrong; NN stays right. */
    g_fault = FAULT_NO_TRANSPOSE;
    assert_int_equal(dyn_blas_check(sgemm_plain, NULL), 8);
    g_fault = FAULT_NONE;
}

/* ---- this process -------------------------------------------------------- */

static void test_process_runs_selected_kernel(void **state)
{
    (void)state;
    const char *user = getenv("OPENBLAS_CORETYPE");
    const char *desc = dyn_blas_describe();
    assert_non_null(strstr(desc, dyn_blas_kernel()));
    assert_non_null(strstr(desc, "agrees with a plain loop"));
    if (user != NULL && getenv(DYN_BLAS_MARKER) == NULL) {
        /* The user's choice stays. */
        assert_int_equal(strcasecmp(dyn_blas_kernel(), user), 0);
        assert_non_null(strstr(desc, "set by OPENBLAS_CORETYPE"));
        return;
    }
    /* Not a generic kernel where the CPU supports a better one. */
    dyn_cpu_features f;
    dyn_cpu_features_detect(&f);
    const char *best = dyn_blas_kernel_best(&f, getenv(DYN_BLAS_REJECT), 3);
    assert_non_null(best);
    if (dyn_blas_kernel_level(best) > 0) assert_int_not_equal(dyn_blas_kernel_level(dyn_blas_kernel()), 0);
}

static void test_fma_peak(void **state)
{
    (void)state;
    double g = dyn_cpu_fma_peak_gflops(5.0);
    /* Any x86-64 core of this century does more than 1 GFLOP/s, and none a
     * thousand (that would mean the loop was optimised away). */
    assert_true(g > 1.0 && g < 1000.0);
}

/* ---- end to end through the CLI -------------------------------------------- */

/* Run the CLI's smallest bench with the environment prefix `env` (e.g.
 * "env -u X Y=1 "); capture stdout+stderr; return the exit code. */
static int run_bench(const char *env, char *buf, size_t cap)
{
    const char *cli = getenv("DYN_CLI");
    assert_non_null(cli);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "env -u OPENBLAS_CORETYPE -u " DYN_BLAS_MARKER " -u " DYN_BLAS_REJECT
             " %s '%s' bench layer --model gpt --hidden 32 --heads 4 --batch 1 --seq 8 "
             "--repeat 1 --verbose 2>&1",
             env, cli);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(buf, 1, cap - 1, p);
    buf[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The kernel name on the CLI's "blas" line ("... kernel <name>, ..."). */
static void cli_kernel(const char *out, char *name, size_t cap)
{
    const char *line = strstr(out, "\nblas ");
    assert_non_null(line);
    const char *k = strstr(line, " kernel ");
    assert_non_null(k);
    k += 8;
    size_t n = strcspn(k, ", \n");
    assert_true(n < cap);
    memcpy(name, k, n);
    name[n] = '\0';
}

static void test_cli_selects(void **state)
{
    (void)state;
    char out[8192], name[64];
    assert_int_equal(run_bench("", out, sizeof(out)), 0);
    cli_kernel(out, name, sizeof(name));
    dyn_cpu_features f;
    dyn_cpu_features_detect(&f);
    const char *best = dyn_blas_kernel_best(&f, NULL, 3);
    if (strstr(out, "selected for this CPU") != NULL) {
        assert_string_equal(name, best);
        assert_non_null(strstr(out, "agrees with a plain loop"));
    } else {
        /* OpenBLAS chose a non-generic kernel itself; it was kept. */
        assert_non_null(strstr(out, "chosen by OpenBLAS"));
        assert_int_not_equal(dyn_blas_kernel_level(name), 0);
    }
    /* The report comes out once (the re-execution printed nothing before). */
    assert_null(strstr(strstr(out, "model gpt") + 1, "model gpt"));
}

static void test_cli_keeps_user_kernel(void **state)
{
    (void)state;
    char out[8192], name[64];
    assert_int_equal(run_bench("OPENBLAS_CORETYPE=Prescott", out, sizeof(out)), 0);
    cli_kernel(out, name, sizeof(name));
    assert_string_equal(name, "Prescott");
    assert_non_null(strstr(out, "set by OPENBLAS_CORETYPE=Prescott"));
    assert_non_null(strstr(out, "agrees with a plain loop"));
}

static void test_cli_falls_back(void **state)
{
    (void)state;
    dyn_cpu_features f;
    dyn_cpu_features_detect(&f);
    const char *best = dyn_blas_kernel_best(&f, NULL, 3);
    if (dyn_blas_kernel_level(best) == 0) skip(); /* nothing below the generic kernel */
    char env[128], out[8192], name[64];
    snprintf(env, sizeof(env), DYN_BLAS_REJECT "=%s", best);
    assert_int_equal(run_bench(env, out, sizeof(out)), 0);
    cli_kernel(out, name, sizeof(name));
    const char *next = dyn_blas_kernel_best(&f, best, 3);
    assert_string_equal(name, next);
    assert_non_null(strstr(out, "rejected by the check"));
    assert_non_null(strstr(out, "agrees with a plain loop"));
    assert_null(strstr(out, "warning"));
    assert_null(strstr(strstr(out, "model gpt") + 1, "model gpt"));
}

static void test_cli_all_rejected_ends(void **state)
{
    (void)state;
    char out[8192], name[64];
    assert_int_equal(
        run_bench(DYN_BLAS_REJECT "=SkylakeX,Haswell,Sandybridge,Prescott", out, sizeof(out)), 0);
    cli_kernel(out, name, sizeof(name));
    /* The chain stops at the last rung, says so once, and runs. */
    assert_string_equal(name, "Prescott");
    const char *w = strstr(out, "warning: OpenBLAS kernel Prescott disagrees");
    assert_non_null(w);
    assert_null(strstr(w + 1, "warning"));
    assert_non_null(strstr(out, "DISAGREES"));
    assert_non_null(strstr(out, "forward+backward"));
}

int main(void)
{
    dyn_threads_init(); /* the selected BLAS kernel, checked (threads.h); may re-execute */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_level),
        cmocka_unit_test(test_kernel_best),
        cmocka_unit_test(test_features_format),
        cmocka_unit_test(test_check_accepts_correct),
        cmocka_unit_test(test_check_catches_faults),
        cmocka_unit_test(test_process_runs_selected_kernel),
        cmocka_unit_test(test_fma_peak),
        cmocka_unit_test(test_cli_selects),
        cmocka_unit_test(test_cli_keeps_user_kernel),
        cmocka_unit_test(test_cli_falls_back),
        cmocka_unit_test(test_cli_all_rejected_ends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
