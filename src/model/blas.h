/* blas.h — which OpenBLAS kernel this process runs, chosen for the CPU and
 * checked against a plain loop at start-up (see docs/architecture.md,
 * "BLAS kernel").
 *
 * Why: Debian's OpenBLAS 0.3.21 is built with DYNAMIC_ARCH and picks its
 * kernel from the CPU model number. A CPU newer than the library (the Xeon
 * family 6 model 207 this project runs on) is not in its table, and it falls
 * back to the generic SSE3 "Prescott" kernel: 4x below the AVX-512 kernel of
 * the same library. OpenBLAS reads OPENBLAS_CORETYPE only when it is loaded,
 * so choosing a kernel means setting the variable and re-executing the
 * program; dyn_threads_init (threads.h) does that together with its
 * OMP_WAIT_POLICY re-execution, calling dyn_blas_select below.
 *
 * The kernel ladder, best first: SkylakeX (needs AVX-512 F, BW, DQ and VL;
 * on the Xeon above it measured 135-141 GFLOP/s against 106-118 for
 * Cooperlake, the kernel newer OpenBLAS picks there), Haswell (AVX2 + FMA;
 * on AMD CPUs "Zen" first), Sandybridge (AVX), Prescott (SSE3, every x86-64
 * CPU). A kernel OpenBLAS picked itself is kept unless it is a generic one
 * (SSE-only) on a CPU that supports a better rung (on a CPU it knows, such
 * as AMD's Zen 2 and 3, it picks a good one: "Zen"); a kernel the user
 * named in OPENBLAS_CORETYPE is always kept. Whatever runs is checked
 * numerically first; a kernel that disagrees and was not the user's is
 * dropped for the next rung down.
 *
 * The choice itself is a pure function (dyn_blas_decide) of inputs read in
 * one place (dyn_blas_inputs_detect), so tests drive it for machines they do
 * not run on; dyn_blas_select applies it. */
#ifndef DYN_MODEL_BLAS_H
#define DYN_MODEL_BLAS_H

#include <stddef.h>

/* Environment variable that marks a re-execution made by dyn_blas_select, so
 * that the program never loops and the new process knows the kernel was
 * ours. Value: "<kernel OpenBLAS first loaded>:<k1>,<k2>,...": every k but
 * the last was rejected by the check; the last is the one now requested. */
#define DYN_BLAS_MARKER "DYN_BLAS_SELECTED"

/* Comma-separated kernel names that the start-up check treats as
 * disagreeing on every product, as if they computed wrong results: to
 * exercise the fall-back (tests/test_blas.c) or to keep a kernel out. */
#define DYN_BLAS_REJECT "DYN_BLAS_REJECT"

/* At most this many kernels are ever tried in one chain (the longest ladder
 * has 5 rungs), so a process re-executes at most DYN_BLAS_MAX_TRIES times
 * for the kernel and in practice once. */
#define DYN_BLAS_MAX_TRIES 5

/* What the CPU and the operating system support (cpuid, and xgetbv for the
 * register state the OS saves), and which CPU it is. Each ISA field is 0 or
 * 1. vendor: cpuid's 12-character vendor string ("GenuineIntel",
 * "AuthenticAMD", ...; "" when unknown). family, model: as /proc/cpuinfo
 * numbers them (extended fields folded in: Zen 3 is family 25), 0 when
 * unknown. */
typedef struct dyn_cpu_features {
    int avx, avx2, fma;
    int avx512f, avx512bw, avx512dq, avx512vl;
    char vendor[13];
    int family, model;
} dyn_cpu_features;

/* Fill *f for the CPU this runs on (all zero off x86-64). */
void dyn_cpu_features_detect(dyn_cpu_features *f);

/* Fill *f from the text of /proc/cpuinfo (NUL-terminated; the first
 * processor's "vendor_id", "cpu family", "model" and "flags" lines; whole
 * words of the flags, so "avx512fp16" is not "avx512f"). Linux lists a
 * vector extension only when it saves that register state, as xgetbv
 * tells dyn_cpu_features_detect. Returns 1 when a flags line was found, 0
 * when not (then the ISA fields stay 0). */
int dyn_cpu_features_parse_cpuinfo(const char *text, dyn_cpu_features *f);

/* Space-separated names of the features set in *f, e.g.
 * "avx512f avx512bw avx512dq avx512vl avx2 fma avx", or "none", into buf. */
void dyn_cpu_features_format(const dyn_cpu_features *f, char *buf, size_t cap);

/* ISA level of an OpenBLAS core name (case-insensitive): 3 AVX-512, 2 AVX2,
 * 1 AVX, 0 a generic SSE kernel (Prescott, Core2, Nehalem, Atom, ...);
 * -1 for a name not known here (treated as "not generic": kept). */
int dyn_blas_kernel_level(const char *name);

/* The ladder for *f, best first, NULL-terminated: SkylakeX, Haswell,
 * Sandybridge, Prescott; on an AMD CPU (or Hygon's, the same cores) "Zen"
 * comes before Haswell: the same AVX2 kernels with the cache blocking
 * OpenBLAS itself uses on every AMD CPU it knows, so an AMD CPU newer than
 * the library gets what a known one gets. Static storage. */
const char *const *dyn_blas_ladder(const dyn_cpu_features *f);

/* The best kernel on *f's ladder that *f supports, is not named in the
 * comma-separated list `rejected` (may be NULL or ""; case-insensitive) and
 * has level <= max_level (pass 3 for no limit). NULL when none is left. */
const char *dyn_blas_kernel_best(const dyn_cpu_features *f, const char *rejected, int max_level);

/* ---- the choice, as a pure function -------------------------------------
 * Everything the kernel choice depends on, read once from the process
 * (dyn_blas_inputs_detect) or made up by a test for a machine it is not on;
 * dyn_blas_decide then reads nothing else: no cpuid, no environment, no
 * OpenBLAS. Strings are borrowed (not copied); NULL and "" mean unset. */
typedef struct dyn_blas_inputs {
    dyn_cpu_features cpu;
    const char *loaded;   /* kernel OpenBLAS runs in this process (openblas_get_corename) */
    const char *coretype; /* OPENBLAS_CORETYPE: the user's when `marker` is unset, else ours */
    const char *marker;   /* DYN_BLAS_MARKER: this process is a re-execution we asked for */
    const char *reject;   /* DYN_BLAS_REJECT: kernels whose check counts as failed */
    int check;            /* dyn_blas_check on `loaded`: DYN_BLAS_UNCHECKED until it ran,
                           * else its result (0 agrees, > 0 products off, -1 not checked) */
} dyn_blas_inputs;

#define DYN_BLAS_UNCHECKED (-2)

typedef enum dyn_blas_action {
    DYN_BLAS_CHECK, /* keep `loaded` if it passes: run dyn_blas_check, put the
                     * result in inputs.check and decide again */
    DYN_BLAS_KEEP,  /* `loaded` stays (warn non-empty: it disagrees, say so) */
    DYN_BLAS_LOAD,  /* set OPENBLAS_CORETYPE=kernel and DYN_BLAS_MARKER=marker,
                     * then re-execute the program */
} dyn_blas_action;

typedef struct dyn_blas_decision {
    dyn_blas_action action;
    char kernel[32];  /* LOAD: the kernel asked for */
    char marker[256]; /* LOAD: "<kernel OpenBLAS first loaded>:<rejected,...,kernel>" */
    char how[256];    /* how the kernel in use was chosen (dyn_blas_describe) */
    int check_bad;    /* KEEP: inputs.check, or DYN_BLAS_CHECK_PRODUCTS for a
                       * kernel named in inputs.reject */
    int forced;       /* KEEP: `loaded` is named in inputs.reject */
    char warn[96];    /* KEEP with a disagreeing kernel: why it stays anyway */
} dyn_blas_decision;

/* This process's inputs: dyn_cpu_features_detect, openblas_get_corename,
 * the three variables; check = DYN_BLAS_UNCHECKED. */
void dyn_blas_inputs_detect(dyn_blas_inputs *in);

/* The choice. A kernel the user named in OPENBLAS_CORETYPE (no marker) is
 * kept, checked, and warned about if it disagrees. A kernel OpenBLAS chose
 * itself is kept unless it is generic (level 0) on a CPU whose ladder has a
 * better rung: then LOAD the best rung. A kernel that fails the check is
 * replaced by the best untried rung no higher than its level (LOAD, the
 * marker growing by one name), until DYN_BLAS_MAX_TRIES kernels were
 * rejected or none is left: then KEEP with a warning. Vendor, family and
 * model matter only through dyn_blas_ladder. Never fails; every string in
 * *d is NUL-terminated (a marker too long to fit ends the chain: KEEP). */
void dyn_blas_decide(const dyn_blas_inputs *in, dyn_blas_decision *d);

/* Row-major sgemm with CBLAS conventions: C (M×N) = alpha op(A) op(B) +
 * beta C; op(A) M×K, op(B) K×N; ta, tb 0 or 1; lda/ldb/ldc row strides. */
typedef void (*dyn_blas_sgemm_fn)(int ta, int tb, int M, int N, int K, float alpha,
                                  const float *A, int lda, const float *B, int ldb, float beta,
                                  float *C, int ldc);

/* Products the check makes (each of the layers' forms NN, NT, TN, with
 * strided operands, alpha != 1 and beta = 0 and 1; sizes that leave partial
 * register tiles). */
#define DYN_BLAS_CHECK_PRODUCTS 12

/* Check `fn` against a plain double-precision loop on DYN_BLAS_CHECK_PRODUCTS
 * small products with fixed pseudo-random inputs; an element disagrees when
 * it is off by more than 2·(K+2)·FLT_EPSILON·|alpha|·Σ|a·b| (twice the
 * worst-case rounding of any summation order) plus the beta term's
 * rounding. Returns the number of products with a disagreeing element
 * (0 = agrees), or -1 if the buffers could not be allocated; *ms (may be
 * NULL) gets the time taken (4-8 ms on the Xeon, mostly the double loop).
 * fn NULL means the loaded OpenBLAS's cblas_sgemm. */
int dyn_blas_check(dyn_blas_sgemm_fn fn, double *ms);

/* Decide this process's kernel; called by dyn_threads_init before anything
 * else touches BLAS. exec_pending: the caller re-executes the program anyway
 * (for OMP_WAIT_POLICY), so a kernel that stays is checked by the new
 * process rather than by both. Returns 1 when the program must re-execute to
 * load another kernel: OPENBLAS_CORETYPE and DYN_BLAS_MARKER are then set in
 * the environment. Returns 0 when the kernel now loaded stays: it has been
 * checked, unless exec_pending (result in dyn_blas_describe; a disagreeing
 * kernel that cannot be replaced, e.g. one the user set, is reported on
 * stderr as a warning). If the re-execution fails, call
 * dyn_blas_select_undo. */
int dyn_blas_select(int exec_pending);

/* After a failed re-execution: restore the environment dyn_blas_select
 * changed, record that the selection could not be applied, and check the
 * loaded kernel if that has not been done. */
void dyn_blas_select_undo(void);

/* The OpenBLAS core name in use now, e.g. "SkylakeX". */
const char *dyn_blas_kernel(void);

/* One line (no newline) for logs: library version, kernel, how it was chosen
 * (selected for this CPU over the one OpenBLAS loaded / chosen by OpenBLAS /
 * set by OPENBLAS_CORETYPE / kernels rejected), the CPU's features and the
 * result of the numerical check. Before dyn_threads_init it says the kernel
 * was not checked. The string is static; valid until the next call. */
const char *dyn_blas_describe(void);

/* Measured fp32 FMA peak of one core, GFLOP/s (2 FLOP per lane per fused
 * multiply-add): independent FMA chains in the widest vectors the CPU
 * supports (AVX-512, AVX2+FMA, else SSE multiply + add), whatever the build
 * flags, timed for about `ms` milliseconds (>= 1) on the calling thread. */
double dyn_cpu_fma_peak_gflops(double ms);

#endif
