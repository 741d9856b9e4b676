/* group.c — MPI start-up and the pipeline / data-parallel communicators
 * (see group.h). The only file besides comm.c and the launcher that calls
 * MPI set-up functions. */
#include "runtime/group.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/exec.h" /* defines: rt_wait */
#include "util/util.h"

/* gethostname, cut to DYN_RT_HOST_LEN - 1 bytes, with every byte outside
 * [A-Za-z0-9._-] replaced by '_' so that the name needs no JSON escaping. */
static void host_name_read(char name[DYN_RT_HOST_LEN])
{
    char raw[256] = {0};
    if (gethostname(raw, sizeof raw - 1) != 0 || raw[0] == '\0') snprintf(raw, sizeof raw, "unknown");
    size_t i = 0;
    for (; raw[i] != '\0' && i < DYN_RT_HOST_LEN - 1; i++) {
        char c = raw[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
                 c == '_';
        name[i] = ok ? c : '_';
    }
    name[i] = '\0';
}

static int host_rank_count(const dyn_rt_group *g, int w)
{
    int n = 0;
    for (int v = 0; v < g->world_size; v++) n += strcmp(g->hosts[v], g->hosts[w]) == 0;
    return n;
}

dyn_status dyn_rt_mpi_check(int rc, const char *what, dyn_error *err)
{
    if (rc == MPI_SUCCESS) return DYN_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
    return dyn_error_set(err, DYN_ERR_INTERNAL, "%s: %s", what, msg);
}

dyn_status dyn_rt_gather_bytes(MPI_Comm comm, const void *buf, int len, double timeout_s, const char *what,
                               dyn_rt_gathered *out, dyn_error *err)
{
    memset(out, 0, sizeof *out);
    int me = 0;
    dyn_status st = dyn_rt_mpi_check(MPI_Comm_rank(comm, &me), "MPI_Comm_rank", err);
    if (st == DYN_OK) st = dyn_rt_mpi_check(MPI_Comm_size(comm, &out->n), "MPI_Comm_size", err);
    if (st == DYN_OK && me == 0) {
        out->counts = dyn_calloc((size_t)out->n, sizeof(int), what, err);
        out->displs = dyn_calloc((size_t)out->n, sizeof(int), what, err);
        if (out->counts == NULL || out->displs == NULL) st = DYN_ERR_NOMEM;
    }
    MPI_Request req;
    if (st == DYN_OK)
        st = dyn_rt_mpi_check(MPI_Igather(&len, 1, MPI_INT, out->counts, 1, MPI_INT, 0, comm, &req), "MPI_Igather",
                              err);
    if (st == DYN_OK) st = rt_wait(&req, timeout_s, NULL, NULL, what, err);
    if (st == DYN_OK && me == 0) {
        for (int r = 0; r < out->n; r++) {
            out->displs[r] = (int)out->total;
            out->total += (size_t)out->counts[r];
        }
        if (out->total > (size_t)INT_MAX || (out->data = malloc(out->total + 1)) == NULL)
            st = dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for %zu bytes of %s", out->total, what);
        else out->data[out->total] = '\0';
    }
    if (st == DYN_OK)
        st = dyn_rt_mpi_check(MPI_Igatherv(buf, len, MPI_BYTE, out->data, out->counts, out->displs, MPI_BYTE, 0, comm,
                                           &req),
                              "MPI_Igatherv", err);
    if (st == DYN_OK) st = rt_wait(&req, timeout_s, NULL, NULL, what, err);
    return st;
}

void dyn_rt_gathered_free(dyn_rt_gathered *g)
{
    free(g->data);
    free(g->counts);
    free(g->displs);
    memset(g, 0, sizeof *g);
}

int dyn_rt_under_mpirun(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMIX_RANK") != NULL ||
           getenv("PMI_RANK") != NULL;
}

int dyn_rt_speaks_for_job(void)
{
    if (!dyn_rt_under_mpirun()) return 1;
    if (getenv(DYN_RT_LAUNCHED_ENV) != NULL) return 0;
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (rank == NULL) rank = getenv("PMIX_RANK");
    if (rank == NULL) rank = getenv("PMI_RANK");
    return rank != NULL && strcmp(rank, "0") == 0;
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
    host_name_read(g->host);
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
    g->hosts = dyn_calloc((size_t)g->world_size, sizeof *g->hosts, "host names", err);
    if (g->hosts == NULL) return DYN_ERR_NOMEM;
    /* blocking, like the splits above: every rank is at start-up here */
    return dyn_rt_mpi_check(MPI_Allgather(g->host, DYN_RT_HOST_LEN, MPI_CHAR, g->hosts, DYN_RT_HOST_LEN, MPI_CHAR,
                                          MPI_COMM_WORLD),
                            "MPI_Allgather (host names)", err);
}

void dyn_rt_group_hosts_describe(const dyn_rt_group *g, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    /* each host once, in order of its first rank; its ranks as runs a-b */
    for (int w = 0; w < g->world_size && used + 1 < size; w++) {
        int seen = 0;
        for (int v = 0; v < w && !seen; v++) seen = strcmp(g->hosts[v], g->hosts[w]) == 0;
        if (seen) continue;
        int n = snprintf(buf + used, size - used, "%s%s (rank%s", used ? ", " : "", g->hosts[w],
                         host_rank_count(g, w) > 1 ? "s" : "");
        used += n > 0 ? (size_t)n : 0;
        const char *sep = " ";
        for (int a = w; a < g->world_size && used + 1 < size; a++) {
            if (strcmp(g->hosts[a], g->hosts[w]) != 0) continue;
            int b = a;
            while (b + 1 < g->world_size && strcmp(g->hosts[b + 1], g->hosts[w]) == 0) b++;
            n = a == b ? snprintf(buf + used, size - used, "%s%d", sep, a)
                       : snprintf(buf + used, size - used, "%s%d-%d", sep, a, b);
            used += n > 0 ? (size_t)n : 0;
            sep = ",";
            a = b;
        }
        if (used + 1 < size) {
            n = snprintf(buf + used, size - used, ")");
            used += n > 0 ? (size_t)n : 0;
        }
    }
    if (used >= size) used = size - 1;
    buf[used] = '\0';
}

int dyn_rt_group_split_replica(const dyn_rt_group *g)
{
    for (int d = 0; d < g->dp; d++)
        for (int s = 1; s < g->stages; s++)
            if (strcmp(g->hosts[dyn_rt_world_rank(g, d, s)], g->hosts[dyn_rt_world_rank(g, d, 0)]) != 0) return d;
    return -1;
}

void dyn_rt_group_free(dyn_rt_group *g)
{
    free(g->hosts);
    g->hosts = NULL;
    if (g->pipe != MPI_COMM_NULL) MPI_Comm_free(&g->pipe);
    if (g->dpc != MPI_COMM_NULL) MPI_Comm_free(&g->dpc);
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Finalize();
}

_Noreturn void dyn_rt_group_abort(const dyn_rt_group *g, int code, const char *msg)
{
    /* launch.c's supervisor watches mpirun's stderr for this line's start
     * ("dynapipe train: rank "): keep the two in step */
    fprintf(stderr, "dynapipe train: rank %d (stage %d, replica %d, %s): %s\n", g->world_rank,
            g->stage_rank, g->replica, g->host, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    _exit(code); /* MPI_Abort does not return; keep the compiler and readers sure */
}
