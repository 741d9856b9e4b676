/* threads.h — the one place where the model code's thread count is set.
 *
 * Threading model (see docs/architecture.md, "Threads"). The process has ONE
 * pool of worker threads: libgomp's. The model kernels' own loops are OpenMP
 * parallel regions, and OpenBLAS is the OpenMP build (Debian
 * libopenblas-openmp-dev, selected by CMakeLists.txt), whose sgemm forks its
 * work onto that same pool when called outside a parallel region and runs
 * single-threaded when called inside one. So there are never more busy or
 * spinning threads than the count set here. (The pthread build of OpenBLAS
 * keeps a second pool of its own; its idle workers spin while libgomp's
 * spin, which on a 2-core machine made two threads 1.5-3x SLOWER than one.)
 *
 * Small work runs on one thread: a parallel region costs a fork and a join
 * (microseconds when the workers spin, tens of microseconds when they sleep
 * or another process holds the core), more than it saves below
 * DYN_PAR_MIN_WORK elements. Every kernel loop that goes parallel says
 * `if (dyn_par(work))`. Results never depend on the thread count chosen this
 * way: the kernels split work so each output is computed by one thread in a
 * fixed order (layers.c, attention.c). */
#ifndef DYN_MODEL_THREADS_H
#define DYN_MODEL_THREADS_H

#include <stddef.h>

/* Elements (floats read or written, or multiply-adds for attention) below
 * which a kernel loop runs on the calling thread alone. Measured on the
 * 2-core development machine with sleeping workers: an empty 2-thread region
 * costs ~11 us, an elementwise update of 32768 floats ~21 us on one thread,
 * so at 32768 floats a second thread saves no more than the region costs;
 * 4x that leaves a clear gain. */
#define DYN_PAR_MIN_WORK ((size_t)1 << 17)

/* Whether a loop over `work` elements is worth a parallel region. */
static inline int dyn_par(size_t work) { return work >= DYN_PAR_MIN_WORK; }

/* Multiply-adds (M*N*K) below which dyn_sgemm makes one plain call on the
 * calling thread. */
#define DYN_GEMM_PAR_MIN ((size_t)1 << 21)

/* Row-major sgemm, C (M×N) = alpha op(A) op(B) + beta C, with op(A) M×K and
 * op(B) K×N (CBLAS conventions; lda/ldb/ldc are row strides). Every model
 * kernel's matrix product goes through here rather than cblas_sgemm.
 * Products of at least DYN_GEMM_PAR_MIN multiply-adds are cut into panels
 * of C along the longer of M and N (about 4 panels, each at least 256 wide,
 * never 3: two threads could not share them evenly; the cut depends only
 * on the shape) and the panels are handed out one at a
 * time to the threads (OpenMP dynamic schedule), each a single-threaded
 * sgemm. Why not let OpenBLAS split it: its split is static, one equal share
 * per thread, so on a machine where another process holds one core half the
 * time, the product waits for the slowed thread and two threads are no
 * faster than one; handed-out panels go to whichever thread is running.
 * Because the cut does not depend on the thread count, neither does the
 * result: bit for bit the same with 1, 2 or more threads. Smaller products
 * make one call with BLAS threading off. Called inside a parallel region it
 * makes one plain call (the OpenMP build of OpenBLAS is single-threaded
 * there). trans_a, trans_b: 0 or 1. */
void dyn_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
               int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* Set the thread count (>= 1; smaller values mean 1) for everything that
 * follows on this process: OpenMP regions without an explicit num_threads and
 * OpenBLAS calls made outside a parallel region. Blocks also take the count
 * explicitly in dyn_block_dims.nthreads (it sizes their workspace); pass the
 * same value. Call from the main thread, outside parallel regions. */
void dyn_threads_set(int n);

/* Start-up for every program that does matrix work; call first thing in
 * main, before MPI_Init and before any BLAS call (it may not return: see
 * below). Two things, both read by their libraries only when they are loaded
 * (before main), so both mean setting a variable and re-executing the
 * program (/proc/self/exe, same arguments, environment otherwise unchanged);
 * one re-execution serves both.
 *
 * 1. Idle OpenMP workers sleep instead of spin. libgomp's default lets an
 * idle worker spin for ~300000 polls after every parallel region. On a
 * machine whose cores other processes also use, the spinning worker holds a
 * core the thread with the work needs, and two threads ran 3-10x slower than
 * one (docs/performance.md, "Threads"); OMP_WAIT_POLICY=PASSIVE fixes that
 * and costs a futex wake-up per region. Set when neither OMP_WAIT_POLICY nor
 * GOMP_SPINCOUNT is set; a policy the user set is left alone.
 *
 * 2. The OpenBLAS kernel (blas.h, dyn_blas_select): when OpenBLAS fell back
 * to a generic kernel on a CPU that supports a better one, OPENBLAS_CORETYPE
 * is set to the best rung of the ladder; whatever kernel runs is checked
 * against a plain loop (~5 ms), and one of ours that disagrees is replaced
 * by the next rung down (one more re-execution per rejected kernel, never
 * the same kernel twice: the DYN_BLAS_MARKER variable records the chain). A
 * kernel the user set in OPENBLAS_CORETYPE stays (a failed check is a
 * warning on stderr). dyn_blas_describe() says what was done.
 *
 * Returns 0 when the process runs with what the user or this call chose, -1
 * when a re-execution failed (the program then goes on with libgomp's
 * default policy and the kernel OpenBLAS loaded, checked). */
int dyn_threads_init(void);

/* The count last set with dyn_threads_set (1 before the first call). */
int dyn_threads_get(void);

/* How the linked OpenBLAS runs in parallel: "openmp" (the build this project
 * requires), "pthread" or "sequential". For benchmark headers and the test
 * that checks the build picked the right library at run time. */
const char *dyn_threads_blas_kind(void);

#endif
