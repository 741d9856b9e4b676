/* threads.c — set the OpenMP and OpenBLAS thread counts together (see
 * threads.h for the threading model). */
#include <cblas.h>
#include <omp.h>

#include "model/threads.h" /* defines: dyn_threads_* */

static int g_threads = 1;

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
