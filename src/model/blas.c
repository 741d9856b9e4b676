/* blas.c — choose the OpenBLAS kernel for this CPU, check it against a plain
 * loop, and say which one runs (see blas.h for why and for the ladder). Also
 * the measured FMA peak of one core, so benchmarks can show how close the
 * kernels come to the machine's limit. */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define DYN_X86 1
#else
#define DYN_X86 0
#endif

#include "model/blas.h" /* defines: dyn_blas_*, dyn_cpu_* */
#include "util/util.h"  /* defines: dyn_time_ms */

/* ---- CPU features ------------------------------------------------------- */

#if DYN_X86
/* XCR0: which register state the OS saves on a context switch. */
static unsigned long long xcr0_read(void)
{
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}
#endif

void dyn_cpu_features_detect(dyn_cpu_features *f)
{
    memset(f, 0, sizeof(*f));
#if DYN_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return;
    memcpy(f->vendor, &b, 4); /* the string is in EBX, EDX, ECX */
    memcpy(f->vendor + 4, &d, 4);
    memcpy(f->vendor + 8, &c, 4);
    f->vendor[12] = '\0';
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    unsigned base_family = (a >> 8) & 0xF, base_model = (a >> 4) & 0xF;
    f->family = (int)(base_family + (base_family == 0xF ? (a >> 20) & 0xFF : 0));
    f->model = (int)(base_model + (base_family == 0x6 || base_family == 0xF ? ((a >> 16) & 0xF) << 4 : 0));
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1;
    if (!osxsave || !avx) return;
    unsigned long long xcr0 = xcr0_read();
    if ((xcr0 & 0x6) != 0x6) return; /* OS does not save YMM state */
    f->avx = 1;
    f->fma = fma;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    f->avx2 = (b >> 5) & 1;
    if ((xcr0 & 0xE6) != 0xE6) return; /* no opmask / ZMM state */
    f->avx512f = (b >> 16) & 1;
    f->avx512dq = (b >> 17) & 1;
    f->avx512bw = (b >> 30) & 1;
    f->avx512vl = (b >> 31) & 1;
#endif
}

/* The value of a "key<tabs/spaces>: value" line of cpuinfo if `line` (up to
 * its newline) has that key, else NULL. */
static const char *cpuinfo_value(const char *line, const char *key)
{
    size_t n = strlen(key);
    if (strncmp(line, key, n) != 0) return NULL;
    const char *p = line + n;
    while (*p == ' ' || *p == '\t') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ' || *p == '\t') p++;
    return p;
}

/* Whether the space-separated words from p to the end of its line include
 * `word` exactly. */
static int words_have(const char *p, const char *word)
{
    size_t n = strlen(word);
    while (*p != '\0' && *p != '\n') {
        while (*p == ' ' || *p == '\t') p++;
        size_t len = strcspn(p, " \t\n");
        if (len == n && strncmp(p, word, n) == 0) return 1;
        p += len;
    }
    return 0;
}

int dyn_cpu_features_parse_cpuinfo(const char *text, dyn_cpu_features *f)
{
    memset(f, 0, sizeof(*f));
    int seen_processor = 0;
    for (const char *line = text; line != NULL && *line != '\0';) {
        const char *v;
        if (cpuinfo_value(line, "processor") != NULL) {
            if (seen_processor) break; /* the second processor: the first one's lines are read */
            seen_processor = 1;
        } else if ((v = cpuinfo_value(line, "vendor_id")) != NULL) {
            size_t len = strcspn(v, " \t\n");
            if (len >= sizeof(f->vendor)) len = sizeof(f->vendor) - 1;
            memcpy(f->vendor, v, len);
            f->vendor[len] = '\0';
        } else if ((v = cpuinfo_value(line, "cpu family")) != NULL) {
            f->family = atoi(v);
        } else if ((v = cpuinfo_value(line, "model")) != NULL) {
            f->model = atoi(v);
        } else if ((v = cpuinfo_value(line, "flags")) != NULL) {
            f->avx = words_have(v, "avx");
            f->avx2 = words_have(v, "avx2");
            f->fma = words_have(v, "fma");
            f->avx512f = words_have(v, "avx512f");
            f->avx512bw = words_have(v, "avx512bw");
            f->avx512dq = words_have(v, "avx512dq");
            f->avx512vl = words_have(v, "avx512vl");
            return 1;
        }
        line = strchr(line, '\n');
        if (line != NULL) line++;
    }
    return 0;
}

void dyn_cpu_features_format(const dyn_cpu_features *f, char *buf, size_t cap)
{
    const struct { int on; const char *name; } t[] = {
        {f->avx512f, "avx512f"}, {f->avx512bw, "avx512bw"}, {f->avx512dq, "avx512dq"},
        {f->avx512vl, "avx512vl"}, {f->avx2, "avx2"}, {f->fma, "fma"}, {f->avx, "avx"},
    };
    size_t used = 0;
    if (cap == 0) return;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        if (!t[i].on) continue;
        int n = snprintf(buf + used, cap - used, "%s%s", used ? " " : "", t[i].name);
        if (n < 0 || (size_t)n >= cap - used) return;
        used += (size_t)n;
    }
    if (used == 0) snprintf(buf, cap, "none");
}

/* ---- kernels ------------------------------------------------------------- */

/* OpenBLAS core names (as openblas_get_corename spells them for x86-64) and
 * the widest vector ISA their sgemm uses. */
static const struct { const char *name; int level; } g_known[] = {
    {"SkylakeX", 3},    {"Cooperlake", 3},  {"SapphireRapids", 3}, {"Haswell", 2},
    {"Zen", 2},         {"Sandybridge", 1}, {"Bulldozer", 1},      {"Piledriver", 1},
    {"Steamroller", 1}, {"Excavator", 1},   {"Prescott", 0},       {"Core2", 0},
    {"Penryn", 0},      {"Dunnington", 0},  {"Nehalem", 0},        {"Atom", 0},
    {"Katmai", 0},      {"Coppermine", 0},  {"Northwood", 0},      {"Athlon", 0},
    {"Opteron", 0},     {"Opteron_SSE3", 0}, {"Barcelona", 0},     {"Nano", 0},
    {"Unknown", 0},
};

/* The ladders, best first; what each rung needs is in kernel_supported. */
static const char *const g_ladder[] = {"SkylakeX", "Haswell", "Sandybridge", "Prescott", NULL};
static const char *const g_ladder_amd[] = {"SkylakeX", "Zen", "Haswell", "Sandybridge", "Prescott",
                                           NULL};

int dyn_blas_kernel_level(const char *name)
{
    if (name == NULL) return -1;
    for (size_t i = 0; i < sizeof(g_known) / sizeof(g_known[0]); i++)
        if (strcasecmp(name, g_known[i].name) == 0) return g_known[i].level;
    return -1;
}

static int kernel_supported(const dyn_cpu_features *f, int level)
{
    switch (level) {
    case 3: return f->avx512f && f->avx512bw && f->avx512dq && f->avx512vl && f->avx2 && f->fma;
    case 2: return f->avx2 && f->fma;
    case 1: return f->avx;
    default: return DYN_X86;
    }
}

/* Whether `name` is one of the comma-separated names in `list`. */
static int list_has(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncasecmp(p, name, n) == 0) return 1;
        p = end ? end + 1 : NULL;
    }
    return 0;
}

static int list_count(const char *list)
{
    if (list == NULL || *list == '\0') return 0;
    int n = 1;
    for (const char *p = list; *p; p++) n += *p == ',';
    return n;
}

const char *const *dyn_blas_ladder(const dyn_cpu_features *f)
{
    int amd = strcmp(f->vendor, "AuthenticAMD") == 0 || strcmp(f->vendor, "HygonGenuine") == 0;
    return amd ? g_ladder_amd : g_ladder;
}

const char *dyn_blas_kernel_best(const dyn_cpu_features *f, const char *rejected, int max_level)
{
    for (const char *const *k = dyn_blas_ladder(f); *k != NULL; k++) {
        int lv = dyn_blas_kernel_level(*k);
        if (lv > max_level || !kernel_supported(f, lv) || list_has(rejected, *k)) continue;
        return *k;
    }
    return NULL;
}

const char *dyn_blas_kernel(void) { return openblas_get_corename(); }

/* ---- numerical check ------------------------------------------------------ */

static void sgemm_cblas(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* Fixed pseudo-random values in [-1, 1) (a 32-bit LCG: no shared state). */
static void fill_uniform(float *x, size_t n, unsigned seed)
{
    unsigned s = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((double)(s >> 8) / (double)(1u << 23)) - 1.0f;
    }
}

/* One product of the check: shape, scalars and row padding of A, B, C. */
typedef struct check_case { int M, N, K; float alpha, beta; int pad; } check_case;

/* Products of shape c in form (ta, tb) against a double loop; 1 if some
 * element disagrees or fn wrote outside C's M×N block, 0 if not, -1 on
 * allocation failure. */
static int check_one(dyn_blas_sgemm_fn fn, const check_case *c, int ta, int tb, unsigned seed)
{
    int M = c->M, N = c->N, K = c->K;
    int arows = ta ? K : M, acols = ta ? M : K, brows = tb ? N : K, bcols = tb ? K : N;
    int lda = acols + c->pad, ldb = bcols + c->pad, ldc = N + c->pad;
    size_t na = (size_t)arows * lda, nb = (size_t)brows * ldb, nc = (size_t)M * ldc;
    float *A = malloc(na * sizeof(float)), *B = malloc(nb * sizeof(float));
    float *C = malloc(nc * sizeof(float)), *C0 = malloc(nc * sizeof(float));
    int bad = -1;
    if (A == NULL || B == NULL || C == NULL || C0 == NULL) goto out;
    fill_uniform(A, na, seed);
    fill_uniform(B, nb, seed + 1);
    fill_uniform(C0, nc, seed + 2);
    memcpy(C, C0, nc * sizeof(float));
    fn(ta, tb, M, N, K, c->alpha, A, lda, B, ldb, c->beta, C, ldc);
    bad = 0;
    for (int i = 0; i < M && !bad; i++) {
        for (int j = 0; j < ldc; j++) {
            size_t ic = (size_t)i * ldc + j;
            if (j >= N) { /* padding: must be untouched */
                if (memcmp(&C[ic], &C0[ic], sizeof(float)) != 0) bad = 1;
                continue;
            }
            double s = 0.0, mag = 0.0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                s += a * b;
                mag += fabs(a * b);
            }
            double cz = c->beta != 0.0f ? (double)c->beta * C0[ic] : 0.0;
            double ref = (double)c->alpha * s + cz;
            /* Twice the worst-case bound of fp32 summation in any order
             * (gamma_K = K * FLT_EPSILON / 2, times sum |a b|), plus the
             * rounding of the beta term; a wrong kernel is off by far more. */
            double tol = 2.0 * (K + 2) * FLT_EPSILON * fabs((double)c->alpha) * mag +
                         4.0 * FLT_EPSILON * fabs(cz) + 1e-30;
            if (!(fabs((double)C[ic] - ref) <= tol)) bad = 1; /* NaN counts as bad */
        }
    }
out:
    free(A);
    free(B);
    free(C);
    free(C0);
    return bad;
}

int dyn_blas_check(dyn_blas_sgemm_fn fn, double *ms)
{
    /* Sizes that leave partial register tiles in every dimension, one that
     * fills them, padded rows (the layers multiply per-head slices of wider
     * rows), alpha != 1 (attention's scale) and beta = 1 (gradients
     * accumulate). Three forms: NN, NT, TN, the ones src/model uses. */
    static const check_case cases[4] = {
        {17, 33, 20, 1.0f, 0.0f, 0}, {48, 64, 96, 1.0f, 1.0f, 5},
        {70, 45, 129, 0.125f, 1.0f, 3}, {96, 96, 64, 1.0f, 0.0f, 0},
    };
    static const int forms[3][2] = {{0, 0}, {0, 1}, {1, 0}};
    if (fn == NULL) fn = sgemm_cblas;
    double t0 = dyn_time_ms();
    /* One thread: the check is about the kernel, and the process may not
     * have settled its thread set-up yet. */
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    int bad = 0;
    for (int c = 0; c < 4; c++) {
        for (int f = 0; f < 3; f++) {
            int r = check_one(fn, &cases[c], forms[f][0], forms[f][1], (unsigned)(3 * c + f));
            if (r < 0) {
                bad = -1;
                goto out;
            }
            bad += r;
        }
    }
out:
    omp_set_num_threads(nt);
    if (ms) *ms = dyn_time_ms() - t0;
    return bad;
}

/* ---- the choice (pure) ------------------------------------------------------ */

/* The check result that counts for kernel `loaded`: a kernel named in the
 * reject list disagrees on every product (blas.h, DYN_BLAS_REJECT). */
static int effective_bad(int check, const char *reject, const char *loaded, int *forced)
{
    *forced = list_has(reject, loaded);
    return *forced && check >= 0 ? DYN_BLAS_CHECK_PRODUCTS : check;
}

static int is_set(const char *s) { return s != NULL && *s != '\0'; }

/* Finish *d for a kernel that stays if it passes: CHECK until the check
 * ran, then KEEP, with `why` as the warning when it disagrees. */
static void decide_keep(const dyn_blas_inputs *in, dyn_blas_decision *d, const char *why)
{
    if (in->check == DYN_BLAS_UNCHECKED) {
        d->action = DYN_BLAS_CHECK;
        return;
    }
    d->action = DYN_BLAS_KEEP;
    d->check_bad = effective_bad(in->check, in->reject, in->loaded ? in->loaded : "", &d->forced);
    if (d->check_bad > 0) snprintf(d->warn, sizeof(d->warn), "%s", why);
}

/* Ask for `next`, the marker "<orig>:<tried>,<next>"; 0 (nothing set) when
 * the marker would not fit. */
static int decide_load(dyn_blas_decision *d, const char *orig, const char *tried, const char *next)
{
    int n = snprintf(d->marker, sizeof(d->marker), "%s:%s%s%s", orig, tried, *tried ? "," : "", next);
    if (n < 0 || (size_t)n >= sizeof(d->marker) || strlen(next) >= sizeof(d->kernel)) {
        d->marker[0] = '\0';
        return 0;
    }
    snprintf(d->kernel, sizeof(d->kernel), "%s", next);
    d->action = DYN_BLAS_LOAD;
    return 1;
}

void dyn_blas_decide(const dyn_blas_inputs *in, dyn_blas_decision *d)
{
    memset(d, 0, sizeof(*d));
    const char *cur = in->loaded ? in->loaded : "";
    const char *mark = is_set(in->marker) ? in->marker : NULL;
    if (mark == NULL && is_set(in->coretype)) {
        snprintf(d->how, sizeof(d->how), "set by OPENBLAS_CORETYPE=%.200s", in->coretype);
        decide_keep(in, d, "was set by OPENBLAS_CORETYPE, so it stays");
        return;
    }
    char orig[64], tried[192];
    if (mark != NULL) {
        const char *colon = strchr(mark, ':');
        if (colon == NULL || colon == mark || (size_t)(colon - mark) >= sizeof(orig) ||
            strlen(colon + 1) >= sizeof(tried)) {
            snprintf(d->how, sizeof(d->how), "kept (unreadable %s=%.180s)", DYN_BLAS_MARKER, mark);
            decide_keep(in, d, "no other was tried");
            return;
        }
        snprintf(orig, sizeof(orig), "%.*s", (int)(colon - mark), mark);
        snprintf(tried, sizeof(tried), "%s", colon + 1);
    } else {
        snprintf(orig, sizeof(orig), "%.63s", cur);
        tried[0] = '\0';
    }
    if (mark == NULL) {
        /* OpenBLAS's own choice: replaced only when generic and the ladder
         * has better. */
        const char *best = dyn_blas_kernel_best(&in->cpu, NULL, 3);
        if (dyn_blas_kernel_level(cur) == 0 && best != NULL && dyn_blas_kernel_level(best) > 0 &&
            decide_load(d, orig, "", best))
            return;
        snprintf(d->how, sizeof(d->how), "chosen by OpenBLAS");
    } else {
        /* tried = rejected kernels, then the one requested (last). */
        const char *last = strrchr(tried, ',');
        last = last ? last + 1 : tried;
        int nrej = list_count(tried) - 1;
        size_t cap = sizeof(d->how);
        int n = snprintf(d->how, cap, "selected for this CPU (OpenBLAS loaded %s", orig);
        if (n > 0 && nrej > 0 && (size_t)n < cap)
            n += snprintf(d->how + n, cap - n, "; rejected by the check: %.*s", (int)(last - tried - 1),
                          tried);
        if (n > 0 && (size_t)n < cap && strcasecmp(last, cur) != 0)
            n += snprintf(d->how + n, cap - n, "; asked for %s", last);
        if (n > 0 && (size_t)n < cap) snprintf(d->how + n, cap - n, ")");
    }
    decide_keep(in, d, "no other kernel is left to try");
    if (d->action != DYN_BLAS_KEEP || d->check_bad <= 0) return;
    /* It disagrees: drop it and go one rung down, never to a kernel already
     * tried, so the chain is finite (DYN_BLAS_MAX_TRIES). */
    char rej[192];
    int n = list_has(tried, cur) ? snprintf(rej, sizeof(rej), "%s", tried)
                                 : snprintf(rej, sizeof(rej), "%s%s%s", tried, *tried ? "," : "", cur);
    int lv = dyn_blas_kernel_level(cur);
    const char *next = NULL;
    if (n > 0 && (size_t)n < sizeof(rej)) next = dyn_blas_kernel_best(&in->cpu, rej, lv >= 0 ? lv : 3);
    if (next != NULL && list_count(rej) < DYN_BLAS_MAX_TRIES) {
        dyn_blas_decision keep = *d;
        if (decide_load(d, orig, rej, next)) return;
        *d = keep; /* the marker would not fit: the chain ends here */
    }
}

/* ---- applying it to this process --------------------------------------------- */

static struct {
    int decided;        /* dyn_blas_select ran in this process */
    char how[256];      /* how the kernel was chosen */
    int check_bad;      /* dyn_blas_check result for the kernel in use */
    int forced;         /* the kernel is named in DYN_BLAS_REJECT */
    int deferred;       /* check left to the re-executed process */
    double check_ms;
    /* Environment before dyn_blas_select changed it, for the undo. */
    int changed, had_core, had_mark;
    char old_core[64], old_mark[256];
    char line[768];     /* dyn_blas_describe's buffer */
} g_blas;

void dyn_blas_inputs_detect(dyn_blas_inputs *in)
{
    memset(in, 0, sizeof(*in));
    dyn_cpu_features_detect(&in->cpu);
    in->loaded = dyn_blas_kernel();
    in->coretype = getenv("OPENBLAS_CORETYPE");
    in->marker = getenv(DYN_BLAS_MARKER);
    in->reject = getenv(DYN_BLAS_REJECT);
    in->check = DYN_BLAS_UNCHECKED;
}

/* Check the loaded kernel and remember the result, as dyn_blas_decide
 * counts it. */
static int check_loaded(void)
{
    int raw = dyn_blas_check(NULL, &g_blas.check_ms);
    g_blas.check_bad = effective_bad(raw, getenv(DYN_BLAS_REJECT), dyn_blas_kernel(), &g_blas.forced);
    return g_blas.check_bad;
}

static void warn_bad(const char *why)
{
    fprintf(stderr,
            "dynapipe: warning: OpenBLAS kernel %s disagrees with a plain loop in %d of %d "
            "check products and %s; matrix products may be wrong\n",
            dyn_blas_kernel(), g_blas.check_bad, DYN_BLAS_CHECK_PRODUCTS, why);
}

/* Save a variable's value for the undo. */
static void env_save(const char *name, int *had, char *buf, size_t cap)
{
    const char *v = getenv(name);
    *had = v != NULL;
    if (v) snprintf(buf, cap, "%s", v);
}

/* Set OPENBLAS_CORETYPE and the marker for the re-execution. Returns 1, or
 * 0 if the environment could not be set (then it is as it was). */
static int request_kernel(const char *kernel, const char *mark)
{
    env_save("OPENBLAS_CORETYPE", &g_blas.had_core, g_blas.old_core, sizeof(g_blas.old_core));
    env_save(DYN_BLAS_MARKER, &g_blas.had_mark, g_blas.old_mark, sizeof(g_blas.old_mark));
    g_blas.changed = 1;
    if (setenv("OPENBLAS_CORETYPE", kernel, 1) != 0 || setenv(DYN_BLAS_MARKER, mark, 1) != 0) {
        dyn_blas_select_undo();
        return 0;
    }
    return 1;
}

int dyn_blas_select(int exec_pending)
{
    dyn_blas_inputs in;
    dyn_blas_decision d;
    dyn_blas_inputs_detect(&in);
    g_blas.decided = 1;
    g_blas.changed = 0;
    g_blas.deferred = 0;
    dyn_blas_decide(&in, &d);
    if (d.action == DYN_BLAS_CHECK) {
        snprintf(g_blas.how, sizeof(g_blas.how), "%s", d.how);
        /* The process re-executes anyway with the same BLAS environment:
         * the new process makes the check (once, not twice). */
        if (exec_pending) {
            g_blas.deferred = 1;
            return 0;
        }
        in.check = dyn_blas_check(NULL, &g_blas.check_ms);
        dyn_blas_decide(&in, &d);
    }
    if (d.action == DYN_BLAS_LOAD) return request_kernel(d.kernel, d.marker); /* 0: undone, checked */
    snprintf(g_blas.how, sizeof(g_blas.how), "%s", d.how);
    g_blas.check_bad = d.check_bad;
    g_blas.forced = d.forced;
    if (d.warn[0] != '\0') warn_bad(d.warn);
    return 0;
}

void dyn_blas_select_undo(void)
{
    if (!g_blas.changed) {
        /* Nothing to restore; make the check that was left to the new
         * process. */
        if (g_blas.deferred && check_loaded() > 0) warn_bad("no other kernel was tried");
        g_blas.deferred = 0;
        return;
    }
    if (g_blas.had_core) setenv("OPENBLAS_CORETYPE", g_blas.old_core, 1);
    else unsetenv("OPENBLAS_CORETYPE");
    if (g_blas.had_mark) setenv(DYN_BLAS_MARKER, g_blas.old_mark, 1);
    else unsetenv(DYN_BLAS_MARKER);
    g_blas.changed = 0;
    snprintf(g_blas.how, sizeof(g_blas.how),
             "kept: could not re-execute to load a better kernel");
    if (check_loaded() > 0) warn_bad("no other kernel could be loaded");
}

const char *dyn_blas_describe(void)
{
    dyn_cpu_features f;
    char feats[128], check[160];
    dyn_cpu_features_detect(&f);
    dyn_cpu_features_format(&f, feats, sizeof(feats));
    /* openblas_get_config(): "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." */
    const char *cfg = openblas_get_config();
    int vlen = 0;
    if (strncmp(cfg, "OpenBLAS ", 9) == 0) cfg += 9;
    while (cfg[vlen] != '\0' && cfg[vlen] != ' ') vlen++;
    if (!g_blas.decided)
        snprintf(check, sizeof(check), "not checked (dyn_threads_init was not called)");
    else if (g_blas.check_bad == 0)
        snprintf(check, sizeof(check), "agrees with a plain loop on %d products (%.1f ms)",
                 DYN_BLAS_CHECK_PRODUCTS, g_blas.check_ms);
    else if (g_blas.check_bad < 0)
        snprintf(check, sizeof(check), "not checked (out of memory)");
    else
        snprintf(check, sizeof(check), "DISAGREES with a plain loop on %d of %d products%s",
                 g_blas.check_bad, DYN_BLAS_CHECK_PRODUCTS,
                 g_blas.forced ? " (named in " DYN_BLAS_REJECT ")" : "");
    snprintf(g_blas.line, sizeof(g_blas.line),
             "OpenBLAS %.*s kernel %s, %s; cpu %s family %d model %d: %s; check %s", vlen, cfg,
             dyn_blas_kernel(), g_blas.decided ? g_blas.how : "as loaded",
             f.vendor[0] ? f.vendor : "unknown", f.family, f.model, feats, check);
    return g_blas.line;
}

/* ---- FMA peak --------------------------------------------------------------- */

/* Each variant runs `iters` rounds of 12 independent multiply-add chains
 * (enough to cover 4-cycle latency on two FMA ports) and returns a value
 * that depends on all of them, so nothing is optimised away. FLOP per round:
 * 12 · lanes · 2. */
#if DYN_X86
__attribute__((target("avx512f"))) static float fma_rounds_512(long iters)
{
    __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
    __m512 a[12];
    for (int k = 0; k < 12; k++) a[k] = _mm512_set1_ps(1.0f + 0.01f * k);
    for (long i = 0; i < iters; i++)
        for (int k = 0; k < 12; k++) a[k] = _mm512_fmadd_ps(a[k], m, c);
    __m512 s = a[0];
    for (int k = 1; k < 12; k++) s = _mm512_add_ps(s, a[k]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float fma_rounds_256(long iters)
{
    __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a[12];
    for (int k = 0; k < 12; k++) a[k] = _mm256_set1_ps(1.0f + 0.01f * k);
    for (long i = 0; i < iters; i++)
        for (int k = 0; k < 12; k++) a[k] = _mm256_fmadd_ps(a[k], m, c);
    __m256 s = a[0];
    for (int k = 1; k < 12; k++) s = _mm256_add_ps(s, a[k]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

static float fma_rounds_128(long iters)
{
    __m128 m = _mm_set1_ps(0.9999999f), c = _mm_set1_ps(1e-7f);
    __m128 a[12];
    for (int k = 0; k < 12; k++) a[k] = _mm_set1_ps(1.0f + 0.01f * k);
    for (long i = 0; i < iters; i++)
        for (int k = 0; k < 12; k++) a[k] = _mm_add_ps(_mm_mul_ps(a[k], m), c);
    __m128 s = a[0];
    for (int k = 1; k < 12; k++) s = _mm_add_ps(s, a[k]);
    float out[4];
    _mm_storeu_ps(out, s);
    return out[0] + out[1] + out[2] + out[3];
}
#endif

double dyn_cpu_fma_peak_gflops(double ms)
{
#if DYN_X86
    dyn_cpu_features f;
    dyn_cpu_features_detect(&f);
    float (*fn)(long) = f.avx512f ? fma_rounds_512 : f.avx2 && f.fma ? fma_rounds_256 : fma_rounds_128;
    int lanes = f.avx512f ? 16 : f.avx2 && f.fma ? 8 : 4;
    volatile float sink = 0.0f;
    if (ms < 1.0) ms = 1.0;
    /* Size one run to about ms/20 from a short one, then keep the best of
     * twenty: on a machine shared with other processes a run that short
     * often fits in one undisturbed time slice, and the fastest run is the
     * core's own speed. */
    long iters = 1 << 12;
    double t0 = dyn_time_ms();
    sink += fn(iters);
    double dt = dyn_time_ms() - t0;
    if (dt > 0.0) iters = (long)(iters * (ms / 20.0) / dt) + 1;
    double best = 0.0;
    for (int r = 0; r < 20; r++) {
        t0 = dyn_time_ms();
        sink += fn(iters);
        dt = dyn_time_ms() - t0;
        double g = dt > 0.0 ? 24.0 * lanes * (double)iters / (dt * 1e6) : 0.0;
        if (g > best) best = g;
    }
    (void)sink;
    return best;
#else
    (void)ms;
    return 0.0;
#endif
}
