/* test_blas.c — the BLAS kernel selection of src/model/blas.h, on any
 * x86-64 host. The choice is a pure function (dyn_blas_decide), driven here
 * over a table of simulated machines (Intel with AVX-512, AVX2 only, AVX
 * only, SSE only; AMD Zen 2, 3, 4 and one newer than the library; OpenBLAS
 * picking a good kernel or a generic one; a user's OPENBLAS_CORETYPE;
 * kernels failing the check, up to all of them) with the re-executions
 * played out, and the expected kernels written by hand. Also: the ladder for
 * synthetic feature sets; /proc/cpuinfo text parsed (fixtures of an AMD and
 * an Intel CPU, and this host's against cpuid); the numerical check accepts a
 * correct product computed another way and catches a wrong element, a write
 * into C's row padding and a missing transpose; this test process is at a
 * fixed point of the choice (it starts with dyn_threads_init like every test
 * that multiplies matrices). The CLI end to end asserts only what holds on
 * every host: its kernel, marker and warnings are what the pure function
 * says for this host's CPU and the kernel its OpenBLAS loads, with no
 * variables, a user's OPENBLAS_CORETYPE, the chosen kernel rejected, and
 * every kernel rejected (ending without a loop). */
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

/* Simulated CPUs (vendor, family and model as /proc/cpuinfo gives them). */
#define ISA_AVX512 .avx = 1, .avx2 = 1, .fma = 1, .avx512f = 1, .avx512bw = 1, .avx512dq = 1, .avx512vl = 1
#define ISA_AVX2 .avx = 1, .avx2 = 1, .fma = 1
static const dyn_cpu_features k_xeon207 = {ISA_AVX512, .vendor = "GenuineIntel", .family = 6, .model = 207};
static const dyn_cpu_features k_spr = {ISA_AVX512, .vendor = "GenuineIntel", .family = 6, .model = 143};
static const dyn_cpu_features k_skx = {ISA_AVX512, .vendor = "GenuineIntel", .family = 6, .model = 85};
static const dyn_cpu_features k_hsw = {ISA_AVX2, .vendor = "GenuineIntel", .family = 6, .model = 63};
static const dyn_cpu_features k_snb = {.avx = 1, .vendor = "GenuineIntel", .family = 6, .model = 42};
static const dyn_cpu_features k_nhm = {.vendor = "GenuineIntel", .family = 6, .model = 26}; /* SSE only */
static const dyn_cpu_features k_zen2 = {ISA_AVX2, .vendor = "AuthenticAMD", .family = 23, .model = 49};
static const dyn_cpu_features k_zen3 = {ISA_AVX2, .vendor = "AuthenticAMD", .family = 25, .model = 1};
static const dyn_cpu_features k_zen4 = {ISA_AVX512, .vendor = "AuthenticAMD", .family = 25, .model = 17};
static const dyn_cpu_features k_zen5 = {ISA_AVX512, .vendor = "AuthenticAMD", .family = 26, .model = 2};
static const dyn_cpu_features k_avx512 = {ISA_AVX512, .vendor = ""};
static const dyn_cpu_features k_avx2 = {ISA_AVX2, .vendor = ""};

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
    dyn_cpu_features none = {.vendor = ""};
    assert_string_equal(dyn_blas_kernel_best(&none, NULL, 3), "Prescott");
    /* AMD: OpenBLAS's own AVX2 kernel for it first, then Haswell's. */
    assert_string_equal(dyn_blas_kernel_best(&k_zen3, NULL, 3), "Zen");
    assert_string_equal(dyn_blas_kernel_best(&k_zen3, "Zen", 3), "Haswell");
    assert_string_equal(dyn_blas_kernel_best(&k_zen4, NULL, 3), "SkylakeX");
    assert_string_equal(dyn_blas_kernel_best(&k_zen4, NULL, 2), "Zen");
    assert_string_equal(dyn_blas_kernel_best(&k_hsw, NULL, 3), "Haswell");
    /* Every rung of every ladder is a known kernel; the ladders fit the
     * chain limit. */
    const dyn_cpu_features *cpus[] = {&k_xeon207, &k_zen3};
    for (int c = 0; c < 2; c++) {
        int n = 0;
        for (const char *const *k = dyn_blas_ladder(cpus[c]); *k != NULL; k++, n++)
            assert_true(dyn_blas_kernel_level(*k) >= 0);
        assert_true(n >= 4 && n <= DYN_BLAS_MAX_TRIES);
    }
}

static void test_features_format(void **state)
{
    (void)state;
    char buf[128];
    dyn_cpu_features_format(&k_avx2, buf, sizeof(buf));
    assert_string_equal(buf, "avx2 fma avx");
    dyn_cpu_features none = {.vendor = ""};
    dyn_cpu_features_format(&none, buf, sizeof(buf));
    assert_string_equal(buf, "none");
}

/* ---- /proc/cpuinfo --------------------------------------------------------- */

/* Shortened /proc/cpuinfo of an AMD EPYC (Zen 3): AVX2 and FMA, no AVX-512.
 * The second processor's flags are made different on purpose: only the
 * first processor is read. */
static const char k_cpuinfo_zen3[] =
    "processor\t: 0\n"
    "vendor_id\t: AuthenticAMD\n"
    "cpu family\t: 25\n"
    "model\t\t: 1\n"
    "model name\t: AMD EPYC 7B13\n"
    "stepping\t: 0\n"
    "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush "
    "mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl "
    "pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand "
    "hypervisor lahf_lm cmp_legacy abm sse4a misalignsse 3dnowprefetch fsgsbase bmi1 avx2 smep "
    "bmi2 erms invpcid rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves "
    "vaes vpclmulqdq rdpid fsrm\n"
    "bogomips\t: 4899.99\n"
    "\n"
    "processor\t: 1\n"
    "vendor_id\t: AuthenticAMD\n"
    "flags\t\t: fpu avx512f avx512bw avx512dq avx512vl\n";

/* Shortened /proc/cpuinfo of an Intel Xeon (Sapphire Rapids), and one whose
 * flags have AVX-512 extensions but not AVX-512 F itself (words are whole:
 * "avx512fp16" is not "avx512f"). */
static const char k_cpuinfo_spr[] =
    "processor\t: 0\n"
    "vendor_id\t: GenuineIntel\n"
    "cpu family\t: 6\n"
    "model\t\t: 143\n"
    "model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz\n"
    "flags\t\t: fpu sse sse2 ssse3 fma sse4_1 sse4_2 xsave avx f16c avx2 avx512f avx512dq "
    "avx512ifma avx512cd avx512bw avx512vl avx512_bf16 avx512vbmi avx512_vnni avx512fp16 amx_tile\n";
static const char k_cpuinfo_odd[] =
    "vendor_id : GenuineIntel\n"
    "flags : avx512fp16 avx512_bf16 avx2x fmaa avx\n";

static void test_cpuinfo_parse(void **state)
{
    (void)state;
    dyn_cpu_features f;
    assert_int_equal(dyn_cpu_features_parse_cpuinfo(k_cpuinfo_zen3, &f), 1);
    assert_string_equal(f.vendor, "AuthenticAMD");
    assert_int_equal(f.family, 25);
    assert_int_equal(f.model, 1); /* "model name" is not "model" */
    assert_true(f.avx && f.avx2 && f.fma);
    assert_false(f.avx512f || f.avx512bw || f.avx512dq || f.avx512vl);
    assert_string_equal(dyn_blas_kernel_best(&f, NULL, 3), "Zen");

    assert_int_equal(dyn_cpu_features_parse_cpuinfo(k_cpuinfo_spr, &f), 1);
    assert_string_equal(f.vendor, "GenuineIntel");
    assert_int_equal(f.family, 6);
    assert_int_equal(f.model, 143);
    assert_true(f.avx && f.avx2 && f.fma && f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl);
    assert_string_equal(dyn_blas_kernel_best(&f, NULL, 3), "SkylakeX");

    assert_int_equal(dyn_cpu_features_parse_cpuinfo(k_cpuinfo_odd, &f), 1);
    assert_true(f.avx);
    assert_false(f.avx2 || f.fma || f.avx512f);
    assert_int_equal(f.family, 0);

    assert_int_equal(dyn_cpu_features_parse_cpuinfo("processor : 0\nvendor_id : X\n", &f), 0);
    assert_int_equal(dyn_cpu_features_parse_cpuinfo("", &f), 0);
    assert_false(f.avx);
}

/* This host's /proc/cpuinfo, read independently of cpuid, agrees with
 * dyn_cpu_features_detect on every field (Linux lists a vector extension
 * only when it saves its registers, as the xgetbv test does). Nothing is
 * assumed about which CPU this is; without a flags line (not x86, no /proc)
 * there is nothing to compare. */
static void test_cpuinfo_matches_cpuid(void **state)
{
    (void)state;
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (fp == NULL) skip();
    size_t cap = 1 << 16, n = 0;
    char *text = malloc(cap + 1);
    assert_non_null(text);
    size_t got;
    while ((got = fread(text + n, 1, cap - n, fp)) > 0 && (n += got) < cap) {}
    fclose(fp);
    text[n] = '\0'; /* the first processor's block is well inside 64 KiB */
    dyn_cpu_features info, id;
    int found = dyn_cpu_features_parse_cpuinfo(text, &info);
    free(text);
    if (!found) skip();
    dyn_cpu_features_detect(&id);
    assert_string_equal(info.vendor, id.vendor);
    assert_int_equal(info.family, id.family);
    assert_int_equal(info.model, id.model);
    assert_int_equal(info.avx, id.avx);
    assert_int_equal(info.avx2, id.avx2);
    assert_int_equal(info.fma, id.fma);
    assert_int_equal(info.avx512f, id.avx512f);
    assert_int_equal(info.avx512bw, id.avx512bw);
    assert_int_equal(info.avx512dq, id.avx512dq);
    assert_int_equal(info.avx512vl, id.avx512vl);
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

/* ---- the choice, on simulated machines ------------------------------------ */

/* Whether `word` is one of the comma-separated names in `list` (the test's
 * own reading of the lists, case-insensitive as OpenBLAS reads names). */
static int in_list(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; p != NULL && *p != '\0';) {
        size_t len = strcspn(p, ",");
        if (len == n && strncasecmp(p, word, n) == 0) return 1;
        p = p[len] == ',' ? p + len + 1 : NULL;
    }
    return 0;
}

/* Whether kernel `k` can run on *f, from the ISA each kernel needs (written
 * out here, not taken from blas.c). */
static int runs_on(const dyn_cpu_features *f, const char *k)
{
    if (in_list("SkylakeX,Cooperlake", k))
        return f->avx512f && f->avx512bw && f->avx512dq && f->avx512vl && f->avx2 && f->fma;
    if (in_list("Haswell,Zen", k)) return f->avx2 && f->fma;
    if (in_list("Sandybridge", k)) return f->avx;
    return 1;
}

/* What a run of the program comes to on a simulated machine. */
typedef struct sim_result {
    char kernel[32];  /* the kernel the last process keeps */
    char marker[256]; /* DYN_BLAS_MARKER in the last process ("" none) */
    char how[256];
    int execs;        /* re-executions for the kernel */
    int warned;       /* the last process warns that its kernel disagrees */
} sim_result;

/* Play out dyn_threads_init's kernel choice on a CPU `cpu` whose OpenBLAS
 * loads `pick` by itself and honours OPENBLAS_CORETYPE (as Debian's
 * DYNAMIC_ARCH build does), the user's environment being `coretype` and
 * `reject` (NULL: unset), and the numerical check failing exactly for the
 * kernels in `bad`. Each re-execution must ask for a kernel the CPU runs
 * and that was not asked for before, and there are at most
 * DYN_BLAS_MAX_TRIES of them. */
static void simulate(const dyn_cpu_features *cpu, const char *pick, const char *coretype,
                     const char *reject, const char *bad, sim_result *r)
{
    char core[32] = "", mark[256] = "", asked[256] = "";
    memset(r, 0, sizeof(*r));
    if (coretype) snprintf(core, sizeof(core), "%s", coretype);
    for (;;) {
        dyn_blas_inputs in;
        memset(&in, 0, sizeof(in));
        in.cpu = *cpu;
        in.loaded = core[0] != '\0' && dyn_blas_kernel_level(core) >= 0 ? core : pick;
        in.coretype = core;
        in.marker = mark;
        in.reject = reject;
        in.check = DYN_BLAS_UNCHECKED;
        dyn_blas_decision d;
        dyn_blas_decide(&in, &d);
        if (d.action == DYN_BLAS_CHECK) {
            in.check = in_list(bad, in.loaded) ? DYN_BLAS_CHECK_PRODUCTS : 0;
            dyn_blas_decide(&in, &d);
            assert_int_not_equal(d.action, DYN_BLAS_CHECK);
        }
        if (d.action == DYN_BLAS_LOAD) {
            assert_true(runs_on(cpu, d.kernel));
            assert_false(in_list(asked, d.kernel));
            assert_true(++r->execs <= DYN_BLAS_MAX_TRIES);
            size_t used = strlen(asked);
            snprintf(asked + used, sizeof(asked) - used, "%s%s", used ? "," : "", d.kernel);
            snprintf(core, sizeof(core), "%s", d.kernel);
            snprintf(mark, sizeof(mark), "%s", d.marker);
            continue;
        }
        assert_int_equal(d.action, DYN_BLAS_KEEP);
        snprintf(r->kernel, sizeof(r->kernel), "%s", in.loaded);
        snprintf(r->marker, sizeof(r->marker), "%s", mark);
        snprintf(r->how, sizeof(r->how), "%s", d.how);
        r->warned = d.warn[0] != '\0';
        assert_int_equal(r->warned, d.check_bad > 0);
        return;
    }
}

typedef struct machine_case {
    const char *what;
    const dyn_cpu_features *cpu;
    const char *pick;     /* what OpenBLAS loads by itself */
    const char *coretype; /* the user's OPENBLAS_CORETYPE */
    const char *reject;   /* DYN_BLAS_REJECT */
    const char *bad;      /* kernels whose check fails */
    const char *kernel;   /* expected: the kernel that runs */
    int execs;            /* expected: re-executions */
    int warned;           /* expected: a warning */
    const char *how;      /* expected: in the "how chosen" text */
} machine_case;

#define ALL "SkylakeX,Cooperlake,Zen,Haswell,Sandybridge,Prescott,Nehalem"

static const machine_case k_machines[] = {
    /* OpenBLAS 0.3.21 does not know the CPU and runs its generic kernel. */
    {"Xeon 6/207, generic", &k_xeon207, "Prescott", NULL, NULL, NULL, "SkylakeX", 1, 0,
     "selected for this CPU (OpenBLAS loaded Prescott)"},
    {"Intel AVX2 only, generic", &k_hsw, "Prescott", NULL, NULL, NULL, "Haswell", 1, 0, "selected"},
    {"Intel AVX only, generic", &k_snb, "Prescott", NULL, NULL, NULL, "Sandybridge", 1, 0, "selected"},
    {"Zen 3, generic (older library)", &k_zen3, "Prescott", NULL, NULL, NULL, "Zen", 1, 0,
     "selected for this CPU (OpenBLAS loaded Prescott)"},
    {"Zen 4, generic", &k_zen4, "Prescott", NULL, NULL, NULL, "SkylakeX", 1, 0, "selected"},
    {"Zen 5, generic", &k_zen5, "Prescott", NULL, NULL, NULL, "SkylakeX", 1, 0, "selected"},
    /* OpenBLAS knows the CPU: its choice stays, no re-execution. */
    {"Sapphire Rapids, newer library", &k_spr, "Cooperlake", NULL, NULL, NULL, "Cooperlake", 0, 0,
     "chosen by OpenBLAS"},
    {"Skylake-SP", &k_skx, "SkylakeX", NULL, NULL, NULL, "SkylakeX", 0, 0, "chosen by OpenBLAS"},
    {"Intel AVX2 only", &k_hsw, "Haswell", NULL, NULL, NULL, "Haswell", 0, 0, "chosen by OpenBLAS"},
    {"Intel AVX only", &k_snb, "Sandybridge", NULL, NULL, NULL, "Sandybridge", 0, 0, "chosen by OpenBLAS"},
    {"Zen 2", &k_zen2, "Zen", NULL, NULL, NULL, "Zen", 0, 0, "chosen by OpenBLAS"},
    {"Zen 3 (issue 25's machine)", &k_zen3, "Zen", NULL, NULL, NULL, "Zen", 0, 0, "chosen by OpenBLAS"},
    {"Zen 4, AVX2 kernel", &k_zen4, "Zen", NULL, NULL, NULL, "Zen", 0, 0, "chosen by OpenBLAS"},
    {"Zen 4, AVX-512 kernel", &k_zen4, "SkylakeX", NULL, NULL, NULL, "SkylakeX", 0, 0, "chosen by OpenBLAS"},
    /* SSE only: a generic kernel is all there is. */
    {"SSE only, Nehalem", &k_nhm, "Nehalem", NULL, NULL, NULL, "Nehalem", 0, 0, "chosen by OpenBLAS"},
    {"SSE only, Prescott", &k_nhm, "Prescott", NULL, NULL, NULL, "Prescott", 0, 0, "chosen by OpenBLAS"},
    /* The user's OPENBLAS_CORETYPE stays, even when it fails the check. */
    {"Xeon, user Haswell", &k_xeon207, "Prescott", "Haswell", NULL, NULL, "Haswell", 0, 0,
     "set by OPENBLAS_CORETYPE=Haswell"},
    {"Zen 3, user Prescott", &k_zen3, "Zen", "Prescott", NULL, NULL, "Prescott", 0, 0,
     "set by OPENBLAS_CORETYPE=Prescott"},
    {"Zen 3, user kernel fails", &k_zen3, "Zen", "Haswell", NULL, "Haswell", "Haswell", 0, 1,
     "set by OPENBLAS_CORETYPE=Haswell"},
    {"Zen 3, user kernel rejected", &k_zen3, "Zen", "Zen", "Zen", NULL, "Zen", 0, 1, "set by"},
    /* A kernel failing the check: the next rung no higher than it. */
    {"Xeon, SkylakeX fails", &k_xeon207, "Prescott", NULL, NULL, "SkylakeX", "Haswell", 2, 0,
     "(OpenBLAS loaded Prescott; rejected by the check: SkylakeX)"},
    {"Xeon, SkylakeX rejected", &k_xeon207, "Prescott", NULL, "SkylakeX", NULL, "Haswell", 2, 0,
     "rejected by the check: SkylakeX)"},
    {"Zen 3, OpenBLAS's Zen fails", &k_zen3, "Zen", NULL, NULL, "Zen", "Haswell", 1, 0,
     "(OpenBLAS loaded Zen; rejected by the check: Zen)"},
    {"Zen 3, Zen rejected", &k_zen3, "Zen", NULL, "Zen", NULL, "Haswell", 1, 0,
     "rejected by the check: Zen)"},
    {"Zen 3 generic, Zen fails", &k_zen3, "Prescott", NULL, NULL, "Zen", "Haswell", 2, 0,
     "rejected by the check: Zen)"},
    {"Zen 4, AVX-512 fails", &k_zen4, "SkylakeX", NULL, NULL, "SkylakeX", "Zen", 1, 0,
     "rejected by the check: SkylakeX)"},
    {"Intel AVX2, Haswell fails", &k_hsw, "Haswell", NULL, NULL, "Haswell", "Sandybridge", 1, 0,
     "rejected by the check: Haswell)"},
    {"SSE only, Nehalem fails", &k_nhm, "Nehalem", NULL, NULL, "Nehalem", "Prescott", 1, 0,
     "rejected by the check: Nehalem)"},
    /* Everything fails: the chain ends at the bottom with one warning. */
    {"Xeon, all fail", &k_xeon207, "Prescott", NULL, NULL, ALL, "Prescott", 4, 1,
     "rejected by the check: SkylakeX,Haswell,Sandybridge)"},
    {"Xeon, all rejected", &k_xeon207, "Prescott", NULL, ALL, NULL, "Prescott", 4, 1,
     "rejected by the check: SkylakeX,Haswell,Sandybridge)"},
    {"Sapphire Rapids newer library, all fail", &k_spr, "Cooperlake", NULL, NULL, ALL, "Prescott", 4, 1,
     "rejected by the check: Cooperlake,SkylakeX,Haswell,Sandybridge)"},
    {"Zen 3, all fail", &k_zen3, "Zen", NULL, NULL, ALL, "Prescott", 3, 1,
     "rejected by the check: Zen,Haswell,Sandybridge)"},
    {"Zen 4 generic, all fail", &k_zen4, "Prescott", NULL, NULL, ALL, "Prescott", 5, 1,
     "rejected by the check: SkylakeX,Zen,Haswell,Sandybridge)"},
    {"SSE only, all fail", &k_nhm, "Nehalem", NULL, NULL, ALL, "Prescott", 1, 1,
     "rejected by the check: Nehalem)"},
};

static void test_decide_machines(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(k_machines) / sizeof(k_machines[0]); i++) {
        const machine_case *c = &k_machines[i];
        sim_result r;
        print_message("%s\n", c->what);
        simulate(c->cpu, c->pick, c->coretype, c->reject, c->bad, &r);
        assert_string_equal(r.kernel, c->kernel);
        assert_int_equal(r.execs, c->execs);
        assert_int_equal(r.warned, c->warned);
        assert_non_null(strstr(r.how, c->how));
        /* The marker is absent exactly when nothing was re-executed. */
        assert_int_equal(r.marker[0] == '\0', r.execs == 0);
    }
}

/* Vendor, family and model choose nothing but the ladder: the same ISA on
 * another vendor gives the same choice except for the AVX2 rung's name. */
static void test_decide_vendor(void **state)
{
    (void)state;
    dyn_cpu_features intel = k_zen3;
    snprintf(intel.vendor, sizeof(intel.vendor), "GenuineIntel");
    intel.family = 6;
    intel.model = 255; /* a model no library knows */
    sim_result a, b;
    simulate(&intel, "Prescott", NULL, NULL, NULL, &a);
    simulate(&k_zen3, "Prescott", NULL, NULL, NULL, &b);
    assert_string_equal(a.kernel, "Haswell");
    assert_string_equal(b.kernel, "Zen");
    dyn_cpu_features hygon = k_zen3;
    snprintf(hygon.vendor, sizeof(hygon.vendor), "HygonGenuine");
    simulate(&hygon, "Prescott", NULL, NULL, NULL, &a);
    assert_string_equal(a.kernel, "Zen");
    /* AVX-512 machines: the same kernel whoever made them. */
    simulate(&k_zen4, "Prescott", NULL, NULL, NULL, &a);
    simulate(&k_spr, "Prescott", NULL, NULL, NULL, &b);
    assert_string_equal(a.kernel, b.kernel);
}

/* Inputs the program may meet but never writes itself. */
static void test_decide_odd_inputs(void **state)
{
    (void)state;
    dyn_blas_inputs in;
    dyn_blas_decision d;
    memset(&in, 0, sizeof(in));
    in.cpu = k_zen3;
    in.loaded = "Zen";
    in.marker = "no-colon-here";
    in.check = DYN_BLAS_UNCHECKED;
    dyn_blas_decide(&in, &d);
    assert_int_equal(d.action, DYN_BLAS_CHECK);
    in.check = 3;
    dyn_blas_decide(&in, &d);
    assert_int_equal(d.action, DYN_BLAS_KEEP);
    assert_non_null(strstr(d.how, "unreadable"));
    assert_int_equal(d.check_bad, 3);
    assert_true(d.warn[0] != '\0');
    /* A check that could not run (out of memory) is not a failure. */
    in.marker = NULL;
    in.check = -1;
    dyn_blas_decide(&in, &d);
    assert_int_equal(d.action, DYN_BLAS_KEEP);
    assert_int_equal(d.check_bad, -1);
    assert_true(d.warn[0] == '\0');
    /* A kernel name the table does not know (a newer library's) is kept. */
    in.loaded = "Zen5";
    in.check = DYN_BLAS_UNCHECKED;
    dyn_blas_decide(&in, &d);
    assert_int_equal(d.action, DYN_BLAS_CHECK);
    /* Nothing loaded at all (no name): treated like an unknown kernel. */
    in.loaded = NULL;
    dyn_blas_decide(&in, &d);
    assert_int_equal(d.action, DYN_BLAS_CHECK);
}

/* ---- this process -------------------------------------------------------- */

static void test_process_runs_selected_kernel(void **state)
{
    (void)state;
    const char *desc = dyn_blas_describe();
    assert_non_null(strstr(desc, dyn_blas_kernel()));
    /* The process is at a fixed point of the choice: with its own inputs
     * and the check of the kernel it runs, the decision is to keep it. */
    dyn_blas_inputs in;
    dyn_blas_decision d;
    dyn_blas_inputs_detect(&in);
    in.check = dyn_blas_check(NULL, NULL);
    dyn_blas_decide(&in, &d);
    assert_int_equal(d.action, DYN_BLAS_KEEP);
    assert_non_null(strstr(desc, d.how));
    if (d.check_bad == 0) assert_non_null(strstr(desc, "agrees with a plain loop"));
}

static void test_fma_peak(void **state)
{
    (void)state;
    double g = dyn_cpu_fma_peak_gflops(5.0);
    /* A rate came out, and not an impossible one: no core does a thousand
     * GFLOP/s, so more would mean the loop was optimised away. How fast is
     * a benchmark's business (bench_layer), not asserted here. */
    assert_true(g > 0.0 && g < 1000.0);
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

/* The text after `key` on the CLI's line starting with `line` ("blas ",
 * "start-up env "), up to one of `stop`, into name (empty when absent). */
static void cli_field(const char *out, const char *line, const char *key, const char *stop, char *name,
                      size_t cap)
{
    name[0] = '\0';
    char start[64];
    snprintf(start, sizeof(start), "\n%s", line);
    const char *l = strstr(out, start);
    assert_non_null(l);
    const char *end = strchr(l + 1, '\n');
    const char *k = strstr(l, key);
    if (k == NULL || (end != NULL && k > end)) return;
    k += strlen(key);
    size_t n = strcspn(k, stop);
    assert_true(n < cap);
    memcpy(name, k, n);
    name[n] = '\0';
}

/* The kernel the CLI ran ("blas ... kernel <name>, ...") and its marker
 * ("start-up env ... DYN_BLAS_SELECTED <marker>", "" for "unset"). */
static void cli_kernel(const char *out, char *name, size_t cap)
{
    cli_field(out, "blas ", " kernel ", ", \n", name, cap);
    assert_true(name[0] != '\0');
}

static void cli_marker(const char *out, char *mark, size_t cap)
{
    cli_field(out, "start-up env ", DYN_BLAS_MARKER " ", " \n", mark, cap);
    if (strcmp(mark, "unset") == 0) mark[0] = '\0';
}

/* This host's inputs, as a fresh CLI process sees them: the CPU (the same
 * one this test runs on) and the kernel its OpenBLAS loads by itself, read
 * from a run without variables: the marker's first name when the CLI asked
 * for another kernel, else the kernel it ran. */
static void host_inputs(dyn_cpu_features *cpu, char *pick, size_t cap)
{
    char out[8192], mark[256];
    dyn_cpu_features_detect(cpu);
    assert_int_equal(run_bench("", out, sizeof(out)), 0);
    cli_marker(out, mark, sizeof(mark));
    if (mark[0] != '\0') {
        size_t n = strcspn(mark, ":");
        assert_true(n > 0 && n < cap);
        memcpy(pick, mark, n);
        pick[n] = '\0';
    } else {
        cli_kernel(out, pick, cap);
    }
}

/* The CLI's run under environment prefix `env` matches the simulation of
 * the same inputs: kernel, marker (so the same chain of re-executions),
 * whether it warned (once at most), and the report printed once. */
static void expect_cli_as_simulated(const char *env, const sim_result *r, char *out, size_t cap)
{
    char name[64], mark[256];
    assert_int_equal(run_bench(env, out, cap), 0);
    cli_kernel(out, name, sizeof(name));
    cli_marker(out, mark, sizeof(mark));
    assert_int_equal(strcasecmp(name, r->kernel), 0);
    assert_string_equal(mark, r->marker);
    assert_non_null(strstr(out, r->how));
    const char *w = strstr(out, "warning");
    assert_int_equal(w != NULL, r->warned);
    if (w != NULL) {
        assert_null(strstr(w + 1, "warning"));
        assert_non_null(strstr(out, "DISAGREES"));
    } else {
        assert_non_null(strstr(out, "agrees with a plain loop"));
    }
    assert_null(strstr(strstr(out, "model gpt") + 1, "model gpt"));
    assert_non_null(strstr(out, "forward+backward"));
}

static void test_cli_selects(void **state)
{
    (void)state;
    dyn_cpu_features cpu;
    char pick[64], out[8192];
    sim_result r;
    host_inputs(&cpu, pick, sizeof(pick));
    simulate(&cpu, pick, NULL, NULL, NULL, &r);
    expect_cli_as_simulated("", &r, out, sizeof(out));
    /* Never a generic kernel where the CPU has a better rung. */
    const char *best = dyn_blas_kernel_best(&cpu, NULL, 3);
    if (best != NULL && dyn_blas_kernel_level(best) > 0)
        assert_int_not_equal(dyn_blas_kernel_level(r.kernel), 0);
}

static void test_cli_keeps_user_kernel(void **state)
{
    (void)state;
    /* Prescott runs on every x86-64 CPU. */
    dyn_cpu_features cpu;
    char pick[64], out[8192];
    sim_result r;
    host_inputs(&cpu, pick, sizeof(pick));
    simulate(&cpu, pick, "Prescott", NULL, NULL, &r);
    assert_string_equal(r.kernel, "Prescott");
    expect_cli_as_simulated("OPENBLAS_CORETYPE=Prescott", &r, out, sizeof(out));
    assert_non_null(strstr(out, "set by OPENBLAS_CORETYPE=Prescott"));
}

static void test_cli_falls_back(void **state)
{
    (void)state;
    dyn_cpu_features cpu;
    char pick[64], out[8192], env[128];
    sim_result first, r;
    host_inputs(&cpu, pick, sizeof(pick));
    /* Reject the kernel this host ends up with: another must replace it. */
    simulate(&cpu, pick, NULL, NULL, NULL, &first);
    snprintf(env, sizeof(env), DYN_BLAS_REJECT "=%s", first.kernel);
    simulate(&cpu, pick, NULL, first.kernel, NULL, &r);
    if (r.warned) skip(); /* nothing below it (a generic kernel on an SSE-only CPU) */
    assert_int_not_equal(strcasecmp(r.kernel, first.kernel), 0);
    expect_cli_as_simulated(env, &r, out, sizeof(out));
    assert_non_null(strstr(out, "rejected by the check"));
}

static void test_cli_all_rejected_ends(void **state)
{
    (void)state;
    dyn_cpu_features cpu;
    char pick[64], out[8192], env[256];
    sim_result r;
    host_inputs(&cpu, pick, sizeof(pick));
    /* Every rung of this host's ladder and the kernel OpenBLAS loads. */
    int n = snprintf(env, sizeof(env), DYN_BLAS_REJECT "=%s", pick);
    for (const char *const *k = dyn_blas_ladder(&cpu); *k != NULL; k++)
        n += snprintf(env + n, sizeof(env) - n, ",%s", *k);
    assert_true(n > 0 && (size_t)n < sizeof(env));
    simulate(&cpu, pick, NULL, env + strlen(DYN_BLAS_REJECT "="), NULL, &r);
    /* The chain stops, says so once, and the program runs. */
    assert_true(r.warned);
    expect_cli_as_simulated(env, &r, out, sizeof(out));
    char want[128];
    snprintf(want, sizeof(want), "warning: OpenBLAS kernel %s disagrees", r.kernel);
    assert_non_null(strstr(out, want));
}

int main(void)
{
    dyn_threads_init(); /* the selected BLAS kernel, checked (threads.h); may re-execute */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_level),
        cmocka_unit_test(test_kernel_best),
        cmocka_unit_test(test_features_format),
        cmocka_unit_test(test_cpuinfo_parse),
        cmocka_unit_test(test_cpuinfo_matches_cpuid),
        cmocka_unit_test(test_decide_machines),
        cmocka_unit_test(test_decide_vendor),
        cmocka_unit_test(test_decide_odd_inputs),
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
