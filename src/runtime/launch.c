/* launch.c — `dynapipe train` typed without mpirun: start the MPI job of
 * itself, so a user types one command (see train.h). With --hostfile the
 * ranks go over the listed hosts by slot (docs/multi-host.md); Open MPI
 * settings such as the remote-start agent or the network interfaces come
 * from the user's OMPI_MCA_* variables, which mpirun reads.
 *
 * The launcher stays mpirun's parent (below) and filters mpirun's stderr:
 * dynapipe's own lines pass unchanged; Open MPI's multi-line help blocks
 * ("MPI_ABORT was invoked ...", "Primary job terminated normally ...") and
 * its "[host:pid]" log lines are dropped, except the block that says which
 * rank died, which becomes one line "dynapipe train: rank N exited on
 * signal S; the job was stopped". So a failed run ends with the lines that
 * say what went wrong. Run under mpirun by hand to see everything. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "runtime/group.h"    /* defines: DYN_RT_LAUNCHED_ENV */
#include "runtime/hostfile.h" /* defines: rt_hostfile_read */
#include "runtime/train.h"

/* ---- supervising mpirun across hosts -----------------------------------------
 *
 * On one host MPI_Abort ends the job at once. Across hosts, after a rank's
 * deadline has fired and it called MPI_Abort, mpirun waits until it has
 * told every host's daemon, and a daemon behind a dead link answers only
 * when TCP gives up (net.ipv4.tcp_retries2: about 15 minutes by default).
 * So the launcher runs mpirun as a child instead of becoming it, passes
 * mpirun's stderr through its filter line by line, and once a
 * rank has reported its fatal error (dyn_rt_group_abort's line, starting
 * ABORT_MARK) gives mpirun LAUNCH_GRACE_S seconds to end the job before
 * killing it (SIGKILL: mpirun 4.1 stuck in an abort crashes in its own
 * clean-up on SIGTERM; the ranks of its host are gone by then, those of
 * the unreachable host end when their daemon loses mpirun). mpirun gets a
 * process group of its own and stdin from /dev/null, so a signal to the
 * launcher's group (Ctrl-C, `timeout`) reaches mpirun once, forwarded,
 * rather than twice (twice makes mpirun skip its clean-up). */

#define ABORT_MARK "dynapipe train: rank "
#define LAUNCH_GRACE_S 10
/* Ranks per slot (per core without a hostfile) started without
 * --oversubscribe-ok: the tests run 4 ranks on 2 cores; 131072 ranks on 2
 * cores (--dp 65536) swamp the machine before any rank can fail. */
#define LAUNCH_RANKS_PER_SLOT 8

static volatile sig_atomic_t launch_child = 0;
static volatile sig_atomic_t launch_signal = 0; /* the first signal the launcher got, 0: none */

/* SIGINT / SIGTERM / SIGHUP to the launcher go on to mpirun (kill is
 * async-signal-safe). */
/* With checkpoints (--save DIR) the first SIGINT/SIGTERM asks for a stop at
 * the next step boundary: mpirun gets SIGUSR1, which it passes on to every
 * rank without ending the job (it ends the job soon after forwarding
 * SIGTERM, which a slow step would not survive); the ranks save and exit.
 * A second signal is forwarded as it is. */
static int launch_soft_stop = 0;
static volatile sig_atomic_t launch_stops = 0;

static void launch_forward(int sig)
{
    if (launch_signal == 0) launch_signal = sig;
    if (launch_child <= 0) return;
    if (launch_soft_stop && (sig == SIGINT || sig == SIGTERM) && launch_stops++ == 0) {
        kill((pid_t)launch_child, SIGUSR1);
        return;
    }
    kill((pid_t)launch_child, sig);
}

static double launch_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The stderr filter's state: the line being read, and the Open MPI help
 * block it is inside of (between two lines of dashes). */
typedef struct launch_filter {
    char line[4096];
    size_t len;
    int in_block;
    char block[8192];
    size_t blen;
    int passed;        /* lines passed on (dynapipe's own) */
    char first[512];   /* the first help block Open MPI wrote, on one line */
} launch_filter;

static void launch_write(const char *s, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(2, s + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return; /* stderr gone: keep supervising anyway */
        off += (size_t)w;
    }
}

static int is_dash_line(const char *s)
{
    int n = 0;
    while (s[n] == '-') n++;
    return n >= 20 && s[n] == '\0';
}

/* An Open MPI log line "[host:pid] ..." (ORTE_ERROR_LOG, help aggregation). */
static int is_ompi_log(const char *s)
{
    const char *e = strchr(s, ']'), *c = strchr(s, ':');
    return s[0] == '[' && e != NULL && c != NULL && c < e;
}

/* A help block ended: keep only what it says about a dead rank, and the
 * first block's text (what mpirun refused, when no rank ever started). */
static void launch_block_end(launch_filter *f)
{
    if (f->first[0] == '\0') {
        size_t o = 0;
        int space = 0;
        for (const char *c = f->block; *c && o + 1 < sizeof f->first; c++) {
            if (*c == ' ' || *c == '\n' || *c == '\t') {
                space = o > 0;
                continue;
            }
            if (space && o + 2 < sizeof f->first) f->first[o++] = ' ';
            space = 0;
            f->first[o++] = (unsigned char)*c < 0x20 ? '?' : *c;
        }
        f->first[o] = '\0';
    }
    const char *p = strstr(f->block, "mpirun noticed that process rank ");
    if (p == NULL) return;
    int rank = -1;
    char how[256] = "";
    sscanf(p, "mpirun noticed that process rank %d", &rank);
    const char *q = strstr(p, "exited on ");
    if (q) sscanf(q, "exited on %255[^\n]", how);
    size_t hl = strlen(how);
    if (hl > 0 && how[hl - 1] == '.') how[hl - 1] = '\0';
    char out[400];
    int n = snprintf(out, sizeof out, "dynapipe train: rank %d exited on %s; the job was stopped\n", rank, how);
    if (n > 0) launch_write(out, (size_t)n < sizeof out ? (size_t)n : sizeof out - 1);
}

/* One complete line of mpirun's stderr (no newline); 1 when it is a
 * rank's fatal error (starts with ABORT_MARK). */
static int launch_line(launch_filter *f, const char *line)
{
    if (is_dash_line(line)) {
        if (f->in_block) launch_block_end(f);
        f->in_block = !f->in_block;
        f->blen = 0;
        f->block[0] = '\0';
        return 0;
    }
    if (f->in_block) {
        size_t l = strlen(line);
        if (f->blen + l + 2 < sizeof f->block) {
            memcpy(f->block + f->blen, line, l);
            f->blen += l;
            f->block[f->blen++] = '\n';
            f->block[f->blen] = '\0';
        }
        return 0;
    }
    if (is_ompi_log(line)) return 0;
    f->passed++;
    launch_write(line, strlen(line));
    launch_write("\n", 1);
    return strncmp(line, ABORT_MARK, strlen(ABORT_MARK)) == 0;
}

/* Filter n bytes of mpirun's stderr; 1 when a rank reported its fatal
 * error in them. Over-long lines are cut (the rest of them dropped). */
static int launch_pass(launch_filter *f, const char *buf, size_t n)
{
    int seen = 0;
    for (size_t i = 0; i < n; i++) {
        if (buf[i] == '\n') {
            f->line[f->len] = '\0';
            seen |= launch_line(f, f->line);
            f->len = 0;
        } else if (f->len < sizeof f->line - 1) {
            f->line[f->len++] = buf[i];
        }
    }
    return seen;
}

/* Run mpirun (av) as a child, its stderr through a pipe; returns the exit
 * status for the shell: mpirun's own, 128 + signal, or 1 when it had to
 * be killed (after one line saying so). */
/* Start mpirun av as a child in its own process group, its stderr into
 * the pipe fds (the parent keeps fds[0]); its pid, or -1 after a message. */
static pid_t launch_spawn(char **av, int fds[2])
{
    if (pipe(fds) != 0) {
        fprintf(stderr, "dynapipe train: pipe: %s\n", strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "dynapipe train: fork: %s\n", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        int null_fd = open("/dev/null", O_RDONLY);
        if (setpgid(0, 0) != 0 || null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(fds[1], 2) < 0) _exit(127);
#ifdef __linux__
        /* it dies with the launcher: after a kill -9 of the launcher no job
         * is left behind writing checkpoints */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
        close(null_fd);
        close(fds[1]);
        execvp("mpirun", av);
        fprintf(stderr, "dynapipe train: cannot start mpirun (install openmpi-bin): %s\n", strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    return pid;
}

/* SIGINT, SIGTERM and SIGHUP go to the child (launch_forward); SIGPIPE is
 * ignored, so that a closed stderr does not end the supervision. */
static void launch_forward_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = launch_forward;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* After mpirun's end: what it wrote last (without waiting for other
 * holders of the pipe), and a last line without its newline. */
static void launch_drain(launch_filter *f, int fd, int open_fd)
{
    char buf[4096];
    for (int more = open_fd; more;) {
        struct pollfd pf = {fd, POLLIN, 0};
        ssize_t got = poll(&pf, 1, 0) > 0 ? read(fd, buf, sizeof buf) : 0;
        if (got > 0)
            launch_pass(f, buf, (size_t)got);
        else
            more = 0;
    }
    if (f->len > 0) {
        f->line[f->len] = '\0';
        launch_line(f, f->line);
    }
}

/* mpirun ended with rc: an interrupt says so (exit 128 + the signal), and
 * a failure before any rank wrote a line says what mpirun refused (its
 * first help block, which the filter dropped). The exit status. */
static int launch_outcome(const launch_filter *f, int rc)
{
    if (launch_signal != 0 && !launch_soft_stop) {
        /* the ranks' outputs are written at the end of a run that ends
         * well: an interrupted run wrote none */
        fprintf(stderr, "dynapipe train: interrupted by %s; the run stopped before its end, no output written\n",
                launch_signal == SIGINT ? "SIGINT" : launch_signal == SIGTERM ? "SIGTERM" : "SIGHUP");
        return 128 + launch_signal;
    }
    if (rc != 0 && f->passed == 0 && launch_signal == 0) {
        if (f->first[0] != '\0') fprintf(stderr, "dynapipe train: mpirun refused the job: %s\n", f->first);
        else fprintf(stderr, "dynapipe train: mpirun exited %d before any rank started\n", rc);
    }
    return rc;
}

static int launch_supervise(char **av)
{
    int fds[2];
    pid_t pid = launch_spawn(av, fds);
    if (pid < 0) return 1;
    launch_child = pid;
    launch_forward_signals();
    char buf[4096];
    static launch_filter filter; /* 12 KB: not on the stack */
    memset(&filter, 0, sizeof filter);
    double stop_at = 0; /* 0: no rank has failed yet */
    int status = 0, open_fd = 1, stopped = 0;
    for (;;) {
        /* mpirun's end, not the pipe's: remote-start agents it spawned
         * can keep the pipe open after it has gone */
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) {
            fprintf(stderr, "dynapipe train: waitpid: %s\n", strerror(errno));
            status = 1 << 8;
            break;
        }
        if (stop_at > 0 && launch_now_s() >= stop_at && !stopped) {
            fprintf(stderr, "dynapipe train: the job did not end %d s after a rank failed (a host unreachable?); "
                            "killing mpirun\n", LAUNCH_GRACE_S);
            kill(pid, SIGKILL);
            stopped = 1;
        }
        struct pollfd pf = {fds[0], POLLIN, 0};
        int pr = poll(&pf, open_fd ? 1 : 0, 200);
        if (pr > 0 && open_fd) {
            ssize_t got = read(fds[0], buf, sizeof buf);
            if (got > 0) {
                if (launch_pass(&filter, buf, (size_t)got) && stop_at == 0)
                    stop_at = launch_now_s() + LAUNCH_GRACE_S;
            } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
                open_fd = 0;
            }
        }
    }
    launch_child = 0;
    launch_drain(&filter, fds[0], open_fd);
    close(fds[0]);
    if (stopped) return 1;
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
    return launch_outcome(&filter, rc);
}

/* The hostfile read and checked, and the rank count against the room the
 * hosts have: n ranks on at most LAUNCH_RANKS_PER_SLOT per core on this
 * machine without a hostfile, or a hostfile's slots exactly (as mpirun
 * places them without --oversubscribe), unless --oversubscribe-ok.
 * 0, or an exit code after one line (nothing started): 1 for a bad
 * hostfile, 2 for too many ranks (a usage error). */
static int launch_check_room(const dyn_train_options *o, const char *hostfile, int64_t n)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (hostfile != NULL) {
        rt_hostfile_info info;
        dyn_error e;
        if (rt_hostfile_read(hostfile, &info, &e) != DYN_OK) {
            fprintf(stderr, "dynapipe train: --hostfile %s\n", e.msg);
            return 1; /* a bad input file, as an unreadable --data */
        }
        /* slots -1: a host without slots=, whose cores mpirun counts */
        if (o->oversubscribe_ok || info.slots < 0 || n <= info.slots) return 0;
        fprintf(stderr,
                "dynapipe train: --stages %d x --dp %d = %lld ranks, but the hostfile %s has %lld slot%s: give "
                "--oversubscribe-ok to start more ranks than slots\n",
                o->plan.stages, o->plan.dp, (long long)n, hostfile, (long long)info.slots, info.slots == 1 ? "" : "s");
        return 2;
    }
    int64_t limit = (int64_t)cores * LAUNCH_RANKS_PER_SLOT;
    if (o->oversubscribe_ok || cores <= 0 || n <= limit) return 0;
    fprintf(stderr,
            "dynapipe train: --stages %d x --dp %d = %lld ranks is more than %lld (%d per core, %ld cores here): "
            "give --oversubscribe-ok to start them anyway\n",
            o->plan.stages, o->plan.dp, (long long)n, (long long)limit, LAUNCH_RANKS_PER_SLOT, cores);
    return 2;
}

/* mpirun's placement flags into av from av[k] on: the hostfile's slots
 * filled in order (more ranks than slots only with --oversubscribe-ok),
 * or oversubscription when n ranks exceed this host's cores. The next
 * free index (the hostfile was checked: launch_check_room). */
static int launch_placement(char **av, int k, const char *hostfile, int64_t n, int oversubscribe_ok)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (hostfile != NULL) {
        /* Fill each host's slots with consecutive ranks before the next
         * host: rank w = replica * S + stage, so a host with a multiple of
         * S slots holds whole pipelines and only the gradient allreduce
         * crosses hosts (group.h). Open MPI 4.1 already places nodes this
         * way by default; asking keeps it so whatever the defaults. */
        av[k++] = "--hostfile";
        av[k++] = (char *)hostfile;
        av[k++] = "--map-by";
        av[k++] = "slot";
        if (oversubscribe_ok) av[k++] = "--oversubscribe";
    } else if (cores > 0 && n > cores) {
        av[k++] = "--oversubscribe";
    }
    return k;
}

int dyn_train_launch_check(const dyn_train_options *o, const char *hostfile)
{
    return launch_check_room(o, hostfile, (int64_t)o->plan.stages * o->plan.dp);
}

int dyn_train_launch(const dyn_train_options *o, const char *hostfile, int argc, char **argv)
{
    int64_t n = (int64_t)o->plan.stages * o->plan.dp;
    int room = launch_check_room(o, hostfile, n);
    if (room != 0) return room;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        fprintf(stderr, "dynapipe train: cannot find this program's path (/proc/self/exe)\n");
        return 1;
    }
    exe[len] = '\0';
    char np[32];
    snprintf(np, sizeof np, "%lld", (long long)n);
    /* mpirun + its flags + exe + our arguments after argv[0] + NULL */
    char **av = calloc((size_t)argc + 16, sizeof *av);
    if (av == NULL) {
        fprintf(stderr, "dynapipe train: out of memory\n");
        return 1;
    }
    int k = 0;
    av[k++] = "mpirun";
    if (geteuid() == 0) {
        /* Open MPI refuses root unless told twice: flag and variables. */
        av[k++] = "--allow-run-as-root";
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
    k = launch_placement(av, k, hostfile, n, o->oversubscribe_ok);
    /* Each rank sets its own thread count; Open MPI's default binding (a
     * core per rank) would squeeze a rank's threads onto one core. */
    av[k++] = "--bind-to";
    av[k++] = "none";
    /* The ranks stay quiet about what this process already said
     * (dyn_rt_speaks_for_job), on every host. */
    av[k++] = "-x";
    av[k++] = DYN_RT_LAUNCHED_ENV "=1";
    av[k++] = "-np";
    av[k++] = np;
    av[k++] = exe;
    for (int i = 1; i < argc; i++) av[k++] = argv[i];
    av[k] = NULL;
    fflush(NULL);
    launch_soft_stop = o->save_dir != NULL;
    int rc = launch_supervise(av);
    free(av);
    return rc;
}
