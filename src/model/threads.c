/* threads.c — set the OpenMP and OpenBLAS thread counts together (see
 * threads.h for the threading model). */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/threads.h" /* defines: dyn_threads_* */

static int g_threads = 1;

/* This process's arguments from /proc/self/cmdline (NUL-separated); a
 * malloc'd NULL-terminated array whose strings live in *buf, or NULL. */
static char **read_cmdline(char **buf)
{
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (f == NULL) return NULL;
    size_t cap = 4096, len = 0;
    char *b = malloc(cap);
    while (b != NULL) {
        len += fread(b + len, 1, cap - len, f);
        if (len < cap) break;
        char *nb = realloc(b, cap * 2);
        if (nb == NULL) {
            free(b);
            b = NULL;
            break;
        }
        b = nb;
        cap *= 2;
    }
    fclose(f);
    if (b == NULL || len == 0 || b[len - 1] != '\0') {
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
    if (getenv("OMP_WAIT_POLICY") != NULL || getenv("GOMP_SPINCOUNT") != NULL) return 0;
    char *buf = NULL;
    char **argv = read_cmdline(&buf);
    if (argv == NULL || setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) {
        free(argv);
        free(buf);
        return -1;
    }
    fflush(NULL);
    execv("/proc/self/exe", argv);
    /* Still here: exec failed. Do not leave a variable that libgomp of this
     * process never read, so the report stays true. */
    unsetenv("OMP_WAIT_POLICY");
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
