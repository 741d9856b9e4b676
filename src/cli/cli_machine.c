/* cli_machine.c — `--machine auto` for the planning commands, the cache
 * folder, and the lines saying which cost model a run uses (contract in
 * cli_machine.h). The measuring and the cache file are
 * src/model/machine_auto.c. */
#include "cli/cli_machine.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "cli/cli.h"               /* defines: cli_errorf, CLI_EXIT_* */
#include "dynapipe/model_config.h" /* defines: dyn_machine_*, dyn_model_config_* */
#include "model/machine_auto.h"    /* defines: dyn_machine_auto_* */
#include "model/threads.h"         /* defines: dyn_threads_init */
#include "util/util.h"             /* defines: dyn_time_ms */

/* The last machine measured or read from the cache by this process, for the
 * header (the CLI resolves one cost model per run). */
static struct {
    int have;
    dyn_machine m; /* as measured, before any oversubscription share */
    dyn_machine_auto_info info;
    char path[1024];
} last_auto;

void cli_cache_dir(char *dir, size_t cap)
{
    const char *base = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (base && base[0]) snprintf(dir, cap, "%s/dynapipe", base);
    else if (home && home[0]) snprintf(dir, cap, "%s/.cache/dynapipe", home);
    else snprintf(dir, cap, "build/dynapipe-cache");
}

static long run_ranks(const plan_args *a)
{
    return (long)(a->opt.stages > 0 ? a->opt.stages : 1) * (a->opt.dp > 0 ? a->opt.dp : 1);
}

int cli_run_threads(const plan_args *a)
{
    if (a->threads > 0) return a->threads;
    long cores = sysconf(_SC_NPROCESSORS_ONLN), ranks = run_ranks(a);
    return cores > ranks ? (int)(cores / ranks) : 1;
}

/* The other ranks of a measurement (machine_auto.h, "Ranks beside"): child
 * processes running the same measurement over and over, for its load, until
 * killed. A child outlives neither its parent nor CORUN_MAX_S. */
#define CORUN_MAX 64
#define CORUN_MAX_S 120.0

/* Ranks that run at once on this machine: all of them, or as many as the
 * cores hold at `threads` each when the run is oversubscribed (then they
 * also take turns: dyn_machine_core_share); at most CORUN_MAX + 1, the
 * most a measurement runs beside, so that the key looked up is the key
 * written. */
static int ranks_at_once(const plan_args *a, int threads)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN), ranks = run_ranks(a);
    long fit = cores > threads ? cores / threads : 1;
    if (fit > CORUN_MAX + 1) fit = CORUN_MAX + 1;
    return (int)(ranks < fit ? ranks : fit);
}
typedef struct corun {
    pid_t pid[CORUN_MAX];
    int n;
} corun;

static void corun_child(const dyn_model_config *cfg, int threads, int ranks, dyn_machine_measure_level level,
                        pid_t parent)
{
#ifdef __linux__
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(0);
#else
    (void)parent;
#endif
    double t0 = dyn_time_ms();
    while (dyn_time_ms() - t0 < CORUN_MAX_S * 1000.0) {
        dyn_machine m;
        dyn_machine_auto_info info;
        dyn_error err;
        if (dyn_machine_measure(cfg, threads, ranks, level, NULL, &m, &info, &err) != DYN_OK) break;
    }
    _exit(0);
}

/* Start up to n children; c->n says how many started (a failed fork is
 * said on stderr and the measurement goes on beside fewer). */
static void corun_start(corun *c, int n, const char *cmd, const dyn_model_config *cfg, int threads, int ranks,
                        dyn_machine_measure_level level)
{
    c->n = 0;
    pid_t parent = getpid();
    fflush(NULL);
    for (int i = 0; i < n && i < CORUN_MAX; i++) {
        pid_t pid = fork();
        if (pid == 0) corun_child(cfg, threads, ranks, level, parent);
        if (pid < 0) {
            fprintf(stderr, "dynapipe %s: --machine auto: cannot start the other ranks' load (fork: %s); "
                            "measuring beside %d\n", cmd, strerror(errno), c->n);
            break;
        }
        c->pid[c->n++] = pid;
    }
}

static void corun_stop(corun *c)
{
    for (int i = 0; i < c->n; i++) {
        if (kill(c->pid[i], SIGKILL) != 0 && errno != ESRCH) continue; /* not ours to wait for */
        while (waitpid(c->pid[i], NULL, 0) < 0 && errno == EINTR) {
        }
    }
    c->n = 0;
}

int cli_machine_auto(const char *cmd, const plan_args *a, const dyn_model_config *cfg, dyn_machine *out)
{
    /* the kernel is part of the key: select it before looking (done
     * already by cli_machine_auto_prepare; a second call does nothing) */
    dyn_threads_init();
    int threads = cli_run_threads(a), ranks = ranks_at_once(a, threads);
    const char *lv = getenv("DYN_MACHINE_MEASURE");
    dyn_machine_measure_level level =
        lv != NULL && strcmp(lv, "tiny") == 0 ? DYN_MACHINE_MEASURE_TINY : DYN_MACHINE_MEASURE_FULL;
    char dir[512];
    cli_cache_dir(dir, sizeof dir);
    dyn_error err;
    dyn_machine m;
    dyn_machine_auto_info info;
    char path[1024];
    fflush(stderr);
    dyn_status st = dyn_machine_auto_get(dir, cfg, threads, ranks, level, 0, NULL, &m, &info, path, sizeof path, &err);
    if (st == DYN_ERR_IO) { /* not cached (or not readable): measure, beside the other ranks' load */
        corun c;
        corun_start(&c, ranks - 1, cmd, cfg, threads, ranks, level);
        st = dyn_machine_auto_get(dir, cfg, threads, c.n + 1, level, 1, stderr, &m, &info, path, sizeof path,
                                  &err);
        corun_stop(&c);
    }
    if (st != DYN_OK) {
        cli_errorf(cmd, "--machine auto: %s", err.msg);
        return CLI_EXIT_FAIL;
    }
    last_auto.have = 1;
    last_auto.m = m;
    last_auto.info = info;
    snprintf(last_auto.path, sizeof last_auto.path, "%s", path);
    *out = m;
    dyn_machine_share_cores(out, dyn_machine_core_share(run_ranks(a), threads, sysconf(_SC_NPROCESSORS_ONLN)));
    return 0;
}

void cli_machine_auto_prepare(void)
{
    dyn_threads_init();
}

void cli_machine_auto_say(const char *cmd, const plan_args *a, const plan_inputs *in)
{
    static int said;
    if (said || a->cost_quiet || !in->machine_auto || !last_auto.have || last_auto.info.cached) return;
    char line[2048];
    cli_cost_describe(a, in, line, sizeof line);
    fprintf(stderr, "dynapipe %s: %s\n", cmd, line);
    said = 1;
}

void cli_cost_describe(const plan_args *a, const plan_inputs *in, char *buf, size_t cap)
{
    size_t n = 0;
#define ADDF(...)                                                                                              \
    do {                                                                                                       \
        if (n < cap) {                                                                                         \
            int w_ = snprintf(buf + n, cap - n, __VA_ARGS__);                                                  \
            if (w_ > 0) n += (size_t)w_;                                                                       \
        }                                                                                                      \
    } while (0)
    buf[0] = '\0';
    if (strcmp(a->cost_model, "analytic") != 0) {
        dyn_profile_meta meta;
        ADDF("cost model: profile table %s", a->cost_model);
        if (in->cm != NULL && dyn_cost_model_profile_meta(in->cm, &meta))
            ADDF(" (measured on %s, %s, %d thread%s)", meta.host, meta.cpu, meta.threads,
                 meta.threads == 1 ? "" : "s");
    } else if (in->machine_auto && last_auto.have) {
        char d[768];
        dyn_machine_auto_describe(&last_auto.m, &last_auto.info, d, sizeof d);
        ADDF("cost model: analytic, machine auto: this machine, %s (cache %s)", d, last_auto.path);
    } else if (dyn_machine_builtin(a->machine) != NULL) {
        ADDF("cost model: analytic, machine %s: a built-in description of %s, not measured here "
             "(the default --machine auto measures this one)",
             a->machine,
             strcmp(a->machine, "cpu") == 0 ? "one core of an Intel Xeon with AVX-512 (OpenBLAS SkylakeX)"
                                            : "an A100 40 GB in bf16");
    } else if (a->machine[0] == '{') {
        ADDF("cost model: analytic, machine %s given inline", in->machine.name);
    } else {
        ADDF("cost model: analytic, machine %s from the file %s", in->machine.name, a->machine);
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN), ranks = run_ranks(a);
    int threads = cli_run_threads(a);
    double share = dyn_machine_core_share(ranks, threads, cores);
    if (share < 1)
        ADDF("; OVERSUBSCRIBED: %ld ranks x %d thread%s on %ld cores, %s", ranks, threads, threads == 1 ? "" : "s",
             cores,
             in->machine_auto ? "rates scaled to the share of a core each thread gets, but waiting ranks take "
                                "cores too: measured times can be several times the predictions"
                              : "predictions assume a core per thread and do not hold");
#undef ADDF
}

void cli_train_header(char *buf, size_t cap, const plan_args *a, const plan_inputs *in,
                      const cli_train_defaults *d)
{
    char line[2048];
    cli_cost_describe(a, in, line, sizeof line);
    int w = snprintf(buf, cap, "dynapipe train: %s\n", line);
    if (w < 0 || (size_t)w >= cap) return;
    snprintf(buf + w, cap - (size_t)w,
            "dynapipe train: model %s%s (%s, %d layers, hidden %d), max length %d%s, %lld tokens per global "
            "batch%s, %d stage%s%s x %d replica%s\n",
            a->model_config ? a->model_config : a->default_config[a->kind], d->model_config ? " (default)" : "",
            dyn_model_kind_name(in->model.kind), in->model.n_layers, in->model.hidden, a->opt.max_seqlen,
            d->max_seqlen ? " (default)" : "", (long long)a->global_batch_tokens,
            d->global_batch_tokens ? " (default)" : "", a->opt.stages, a->opt.stages == 1 ? "" : "s",
            d->stages ? " (default)" : "", a->opt.dp > 0 ? a->opt.dp : 1, a->opt.dp > 1 ? "s" : "");
}

char **cli_rank_argv(int argc, char **argv, const dyn_machine *m, int measured, int *argc_out)
{
    *argc_out = argc;
    if (!measured) return argv;
    static char json[1024];
    int w = snprintf(json, sizeof json,
                     "{\"name\": \"%s\", \"matmul_gflops\": %.17g, \"attn_gflops\": %.17g, \"mem_gbps\": %.17g, "
                     "\"bytes_per_elem\": %d, \"device_memory_mb\": %.17g, \"link_latency_ms\": %.17g, "
                     "\"link_gbps\": %.17g, \"dp_link_gbps\": %.17g, \"gemm_n_half\": %.17g, "
                     "\"layer_overhead_ms\": %.17g, \"optimizer_ms_per_mparam\": %.17g}",
                     m->name, m->matmul_gflops, m->attn_gflops, m->mem_gbps, m->bytes_per_elem, m->device_memory_mb,
                     m->link_latency_ms, m->link_gbps, m->dp_link_gbps, m->gemm_n_half, m->layer_overhead_ms,
                     m->optimizer_ms_per_mparam);
    if (w < 0 || (size_t)w >= sizeof json) return NULL;
    char **av = calloc((size_t)argc + 3, sizeof *av);
    if (av == NULL) return NULL;
    memcpy(av, argv, (size_t)argc * sizeof *av);
    av[argc] = "--machine";
    av[argc + 1] = json;
    av[argc + 2] = NULL;
    *argc_out = argc + 2;
    return av;
}

void cli_rank_argv_free(char **av, char **argv)
{
    if (av != argv) free(av);
}
