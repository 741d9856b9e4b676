/* threads.c — set the OpenMP and OpenBLAS thread counts together (see
 * threads.h for the threading model), and the start-up re-execution that
 * makes idle workers sleep and loads the BLAS kernel chosen in blas.c. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/blas.h"    /* defines: dyn_blas_select, dyn_blas_select_undo */
#include "model/threads.h" /* defines: dyn_threads_* */
#include "util/util.h"     /* defines: dyn_file_read_all */

static int g_threads = 1;

/* This process's arguments from /proc/self/cmdline (NUL-separated); a
 * malloc'd NULL-terminated array whose strings live in *buf, or NULL. */
static char **read_cmdline(char **buf)
{
    char *b = NULL;
    size_t len = 0;
    dyn_error err;
    if (dyn_file_read_all("/proc/self/cmdline", &b, &len, &err) != DYN_OK) return NULL;
    if (len == 0 || b[len - 1] != '\0') {
        free(b);
        return NULL;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += b[i] == '\0';
    char **argv = malloc((n + 1) * sizeof(char *));
    if (argv == NULL) {
        free(b);
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < len; i += strlen(b + i) + 1) argv[k++] = b + i;
    argv[k] = NULL;
    *buf = b;
    return argv;
}

int dyn_threads_init(void)
{
    int want_omp = getenv("OMP_WAIT_POLICY") == NULL && getenv("GOMP_SPINCOUNT") == NULL;
    /* The BLAS kernel (blas.h) may ask for a re-execution of its own; one
     * exec then serves both. */
    int want_blas = dyn_blas_select(want_omp);
    if (!want_omp && !want_blas) return 0;
    char *buf = NULL;
    char **argv = read_cmdline(&buf);
    if (argv == NULL || (want_omp && setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0)) {
        free(argv);
        free(buf);
        dyn_blas_select_undo();
        return -1;
    }
    fflush(NULL);
    execv("/proc/self/exe", argv);
    /* Still here: exec failed. Do not leave variables that this process's
     * libraries never read, so the reports stay true. */
    if (want_omp) unsetenv("OMP_WAIT_POLICY");
    dyn_blas_select_undo();
    free(argv);
    free(buf);
    return -1;
}

void dyn_threads_set(int n)
{
    if (n < 1) n = 1;
    g_threads = n;
    omp_set_num_threads(n);
    /* The OpenMP build of OpenBLAS follows omp_get_max_threads() anyway; the
     * call keeps its own count in step (and is what a pthread build obeys). */
    openblas_set_num_threads(n);
}

int dyn_threads_get(void) { return g_threads; }

const char *dyn_threads_blas_kind(void)
{
    switch (openblas_get_parallel()) {
    case OPENBLAS_OPENMP: return "openmp";
    case OPENBLAS_THREAD: return "pthread";
    default: return "sequential";
    }
}

/* ---- sgemm in panels ----------------------------------------------------- */

#define GEMM_PANELS 4     /* target panel count: load balance vs packing cost.
                             Each panel re-packs the whole other operand;
                             with the AVX-512 kernel that costs 3-10% of a
                             2048-row product at 8 panels against 4 (one
                             thread, best of 7, bench/bench_layer shapes) */
#define GEMM_MIN_WIDTH 256 /* narrower panels reuse each packed block of the
                              other operand too little (measured: 64 cost 15%
                              on one thread, 256 nothing) */

/* One plain single-threaded sgemm; trans_* are 0 or 1. */
static void sgemm1(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void dyn_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
               int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0) return;
    if (omp_in_parallel()) {
        sgemm1(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int nt = omp_get_max_threads();
    size_t work = (size_t)M * (size_t)N * (size_t)(K > 0 ? K : 1);
    /* Panel width from the shape alone (never from nt): a multiple of 16,
     * at least GEMM_MIN_WIDTH, about GEMM_PANELS panels. */
    int along_m = M >= N, dim = along_m ? M : N;
    int w = (dim + GEMM_PANELS - 1) / GEMM_PANELS;
    w = (w + 15) / 16 * 16;
    if (w < GEMM_MIN_WIDTH) w = GEMM_MIN_WIDTH;
    int np = (dim + w - 1) / w;
    if (np == 3) {
        /* Only for 513-768 (w is then GEMM_MIN_WIDTH): two threads would
         * share three panels 2:1, at 1.5x one thread where two panels
         * reach 2x; two panels also pack the other operand once less. */
        w = ((dim + 1) / 2 + 15) / 16 * 16;
        np = (dim + w - 1) / w;
    }
    if (work < DYN_GEMM_PAR_MIN || np < 2) {
        /* One call, BLAS threading off (the OpenMP build follows this). */
        if (nt > 1) omp_set_num_threads(1);
        sgemm1(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        if (nt > 1) omp_set_num_threads(nt);
        return;
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1)
    for (int p = 0; p < np; p++) {
        int p0 = p * w, pw = dim - p0 < w ? dim - p0 : w;
        if (along_m) {
            /* Rows p0.. of op(A) and of C. */
            const float *Ap = trans_a ? A + p0 : A + (size_t)p0 * lda;
            sgemm1(trans_a, trans_b, pw, N, K, alpha, Ap, lda, B, ldb, beta,
                   C + (size_t)p0 * ldc, ldc);
        } else {
            /* Columns p0.. of op(B) and of C. */
            const float *Bp = trans_b ? B + (size_t)p0 * ldb : B + p0;
            sgemm1(trans_a, trans_b, M, pw, K, alpha, A, lda, Bp, ldb, beta, C + p0, ldc);
        }
    }
}
