/* group.c — MPI start-up and the pipeline / data-parallel communicators
 * (see group.h). The only file besides comm.c and the launcher that calls
 * MPI set-up functions. */
#include "runtime/group.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/util.h"

dyn_status dyn_rt_mpi_check(int rc, const char *what, dyn_error *err)
{
    if (rc == MPI_SUCCESS) return DYN_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
    return dyn_error_set(err, DYN_ERR_INTERNAL, "%s: %s", what, msg);
}

int dyn_rt_under_mpirun(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMIX_RANK") != NULL ||
           getenv("PMI_RANK") != NULL;
}

dyn_status dyn_rt_group_init(dyn_rt_group *g, int *argc, char ***argv, int stages, int dp,
                             dyn_error *err)
{
    memset(g, 0, sizeof *g);
    g->pipe = g->dpc = MPI_COMM_NULL;
    int provided = 0;
    dyn_status st = dyn_rt_mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided),
                                     "MPI_Init_thread", err);
    if (st != DYN_OK) return st;
    g->world = MPI_COMM_WORLD;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g->world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g->world_size);
    if (gethostname(g->host, sizeof g->host - 1) != 0) snprintf(g->host, sizeof g->host, "?");
    if (provided < MPI_THREAD_FUNNELED)
        return dyn_error_set(err, DYN_ERR_INTERNAL, "MPI provides thread level %d, dynapipe needs FUNNELED",
                             provided);
    if (stages < 1 || dp < 1 || (int64_t)stages * dp != g->world_size)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "--stages %d x --dp %d needs %lld MPI ranks, the job has %d", stages, dp,
                             (long long)stages * dp, g->world_size);
    g->stages = stages;
    g->dp = dp;
    g->replica = g->world_rank / stages;
    g->stage_rank = g->world_rank % stages;
    st = dyn_rt_mpi_check(MPI_Comm_split(MPI_COMM_WORLD, g->replica, g->stage_rank, &g->pipe),
                          "MPI_Comm_split (pipeline)", err);
    if (st == DYN_OK)
        st = dyn_rt_mpi_check(MPI_Comm_split(MPI_COMM_WORLD, g->stage_rank, g->replica, &g->dpc),
                              "MPI_Comm_split (data parallel)", err);
    if (st != DYN_OK) return st;
    MPI_Comm_set_errhandler(g->pipe, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(g->dpc, MPI_ERRORS_RETURN);
    return DYN_OK;
}

void dyn_rt_group_free(dyn_rt_group *g)
{
    if (g->pipe != MPI_COMM_NULL) MPI_Comm_free(&g->pipe);
    if (g->dpc != MPI_COMM_NULL) MPI_Comm_free(&g->dpc);
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Finalize();
}

_Noreturn void dyn_rt_group_abort(const dyn_rt_group *g, int code, const char *msg)
{
    fprintf(stderr, "dynapipe train: rank %d (stage %d, replica %d, %s): %s\n", g->world_rank,
            g->stage_rank, g->replica, g->host, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    _exit(code); /* MPI_Abort does not return; keep the compiler and readers sure */
}
