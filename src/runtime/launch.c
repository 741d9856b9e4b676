/* launch.c — `dynapipe train` typed without mpirun: start the MPI job of
 * itself, so a user types one command (see train.h).
 *
 * The launcher stays the parent of mpirun: it forwards SIGINT, SIGTERM and
 * SIGHUP to it (so `timeout` or Ctrl-C stop the whole job), passes stdout
 * through, and filters mpirun's stderr. dynapipe's own lines pass
 * unchanged; Open MPI's multi-line help blocks ("MPI_ABORT was invoked
 * ...", "Primary job terminated normally ...") and its internal log lines
 * are dropped, except the one that says which rank died, which becomes one
 * line "dynapipe train: rank N ... exited on signal S". So a failed run
 * ends with the lines that say what went wrong, not three screens of
 * launcher boilerplate. Run under mpirun by hand to see everything. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "runtime/train.h"

static volatile sig_atomic_t g_child = 0;

static void forward_signal(int sig)
{
    if (g_child > 0) kill((pid_t)g_child, sig);
}

/* Build mpirun's argument vector (NULL-terminated, strings borrowed). */
static char **mpirun_argv(const dyn_train_options *o, const char *hostfile, const char *exe, char *np, int argc,
                          char **argv)
{
    char **av = calloc((size_t)argc + 16, sizeof *av);
    if (av == NULL) return NULL;
    int64_t n = (int64_t)o->plan.stages * o->plan.dp;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(np, 32, "%lld", (long long)n);
    int k = 0;
    av[k++] = "mpirun";
    if (geteuid() == 0) {
        /* Open MPI refuses root unless told twice: flag and variables. */
        av[k++] = "--allow-run-as-root";
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
    if (hostfile != NULL) {
        av[k++] = "--hostfile";
        av[k++] = (char *)hostfile;
    } else if (cores > 0 && n > cores) {
        av[k++] = "--oversubscribe";
    }
    /* Each rank sets its own thread count; Open MPI's default binding (a
     * core per rank) would squeeze a rank's threads onto one core. */
    av[k++] = "--bind-to";
    av[k++] = "none";
    av[k++] = "-np";
    av[k++] = np;
    av[k++] = (char *)exe;
    for (int i = 1; i < argc; i++) av[k++] = argv[i];
    av[k] = NULL;
    return av;
}

static int is_dash_line(const char *s)
{
    int n = 0;
    while (s[n] == '-') n++;
    return n >= 20 && (s[n] == '\n' || s[n] == '\0');
}

/* An Open MPI log line "[host:pid] ..." (ORTE_ERROR_LOG, help aggregation). */
static int is_ompi_log(const char *s)
{
    if (s[0] != '[') return 0;
    const char *e = strchr(s, ']');
    return e != NULL && strchr(s, ':') != NULL && strchr(s, ':') < e;
}

/* Copy mpirun's stderr to ours, filtered (see the top of the file). */
static void filter_stderr(FILE *in)
{
    char line[4096], block[8192];
    int in_block = 0;
    size_t blen = 0;
    while (fgets(line, sizeof line, in) != NULL) {
        if (is_dash_line(line)) {
            if (in_block) {
                const char *p = strstr(block, "mpirun noticed that process rank ");
                if (p != NULL) {
                    int rank = -1;
                    char how[256] = "";
                    const char *q = strstr(p, "exited on ");
                    sscanf(p, "mpirun noticed that process rank %d", &rank);
                    if (q) sscanf(q, "exited on %255[^\n]", how);
                    char *dot = strrchr(how, '.');
                    if (dot && dot[1] == '\0') *dot = '\0';
                    fprintf(stderr, "dynapipe train: rank %d exited on %s; the job was stopped\n", rank, how);
                }
            }
            in_block = !in_block;
            blen = 0;
            block[0] = '\0';
            continue;
        }
        if (in_block) {
            size_t l = strlen(line);
            if (blen + l < sizeof block) {
                memcpy(block + blen, line, l + 1);
                blen += l;
            }
            continue;
        }
        if (is_ompi_log(line)) continue;
        fputs(line, stderr);
    }
}

int dyn_train_launch(const dyn_train_options *o, const char *hostfile, int argc, char **argv)
{
    char exe[PATH_MAX], np[32];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        fprintf(stderr, "dynapipe train: cannot find this program's path (/proc/self/exe)\n");
        return 1;
    }
    exe[len] = '\0';
    char **av = mpirun_argv(o, hostfile, exe, np, argc, argv);
    int fd[2];
    if (av == NULL || pipe(fd) != 0) {
        fprintf(stderr, "dynapipe train: cannot start mpirun: %s\n", av ? strerror(errno) : "out of memory");
        free(av);
        return 1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "dynapipe train: cannot start mpirun: %s\n", strerror(errno));
        free(av);
        return 1;
    }
    if (pid == 0) {
        /* mpirun in its own process group: a terminal's Ctrl-C or timeout's
         * group-wide signal then reaches it once, through forward_signal (a
         * second SIGINT/SIGTERM makes mpirun abort the job at once, before
         * the ranks' signal-stop checkpoint); and it dies with the launcher
         * (after a kill -9 of the launcher's group no job is left behind). */
        setpgid(0, 0);
        /* a background group may not read the terminal (SIGTTIN would stop
         * mpirun); training reads no stdin */
        int null_fd = open("/dev/null", O_RDONLY);
        if (null_fd >= 0) {
            dup2(null_fd, 0);
            close(null_fd);
        }
#ifdef __linux__
        prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
        close(fd[0]);
        dup2(fd[1], 2);
        close(fd[1]);
        execvp("mpirun", av);
        fprintf(stderr, "dynapipe train: cannot start mpirun (install openmpi-bin): %s\n", strerror(errno));
        _exit(127);
    }
    free(av);
    close(fd[1]);
    g_child = pid;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    FILE *in = fdopen(fd[0], "r");
    if (in != NULL) {
        filter_stderr(in);
        fclose(in);
    } else {
        close(fd[0]);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) {
        fprintf(stderr, "dynapipe train: mpirun ended by signal %d\n", WTERMSIG(status));
        return 128 + WTERMSIG(status);
    }
    return 1;
}
