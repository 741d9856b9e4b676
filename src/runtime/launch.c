/* launch.c — `dynapipe train` typed without mpirun: start the MPI job of
 * itself, so a user types one command (see train.h). With --hostfile the
 * ranks go over the listed hosts by slot (docs/multi-host.md); Open MPI
 * settings such as the remote-start agent or the network interfaces come
 * from the user's OMPI_MCA_* variables, which mpirun reads. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/train.h"

int dyn_train_launch(const dyn_train_options *o, const char *hostfile, int argc, char **argv)
{
    int64_t n = (int64_t)o->plan.stages * o->plan.dp;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
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
    if (hostfile != NULL) {
        /* mpirun's own message for a missing file is a boxed page */
        if (access(hostfile, R_OK) != 0) {
            fprintf(stderr, "dynapipe train: --hostfile %s: %s\n", hostfile, strerror(errno));
            free(av);
            return 1;
        }
        /* Fill each host's slots with consecutive ranks before the next
         * host: rank w = replica * S + stage, so a host with a multiple of
         * S slots holds whole pipelines and only the gradient allreduce
         * crosses hosts (group.h). Open MPI 4.1 already places nodes this
         * way by default; asking keeps it so whatever the defaults. */
        av[k++] = "--hostfile";
        av[k++] = (char *)hostfile;
        av[k++] = "--map-by";
        av[k++] = "slot";
    } else if (cores > 0 && n > cores) {
        av[k++] = "--oversubscribe";
    }
    /* Each rank sets its own thread count; Open MPI's default binding (a
     * core per rank) would squeeze a rank's threads onto one core. */
    av[k++] = "--bind-to";
    av[k++] = "none";
    av[k++] = "-np";
    av[k++] = np;
    av[k++] = exe;
    for (int i = 1; i < argc; i++) av[k++] = argv[i];
    av[k] = NULL;
    fflush(NULL);
    execvp("mpirun", av);
    fprintf(stderr, "dynapipe train: cannot start mpirun (install openmpi-bin): %s\n", strerror(errno));
    free(av);
    return 1;
}
