/* link.c — the two-rank ping-pong behind `dynapipe profile --link`
 * (contract in link.h). Blocking-free: every send and receive is
 * non-blocking and waited for with the runtime's deadline (rt_wait), so a
 * missing peer ends in one clear error instead of a hang. */
#include "runtime/link.h"

#include <stdlib.h>

#include "runtime/exec.h"  /* defines: rt_wait */
#include "runtime/group.h" /* defines: dyn_rt_mpi_check */
#include "util/util.h"     /* defines: dyn_calloc, dyn_time_ms, dyn_median */

/* One round trip of n bytes: rank 0 sends then receives, rank 1 the
 * reverse. */
static dyn_status round_trip(MPI_Comm comm, int rank, char *buf, int n, double timeout_s, dyn_error *err)
{
    MPI_Request rq;
    dyn_status st;
    for (int leg = 0; leg < 2; leg++) {
        int send = (rank == 0) == (leg == 0);
        st = dyn_rt_mpi_check(send ? MPI_Isend(buf, n, MPI_CHAR, 1 - rank, 77, comm, &rq)
                                   : MPI_Irecv(buf, n, MPI_CHAR, 1 - rank, 77, comm, &rq),
                              send ? "MPI_Isend (link)" : "MPI_Irecv (link)", err);
        if (st == DYN_OK) st = rt_wait(&rq, timeout_s, NULL, NULL, "the link ping-pong peer", err);
        if (st != DYN_OK) return st;
    }
    return DYN_OK;
}

dyn_status rt_link_measure(MPI_Comm comm, int n_sizes, int reps, double timeout_s, rt_link_point *pts,
                           double *latency_ms, double *gbps, dyn_error *err)
{
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if (size < 2 || n_sizes < 2 || n_sizes > 12 || reps < 1)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "link: need 2 ranks, 2..12 sizes and reps >= 1 (got %d ranks)",
                             size);
    int64_t max_bytes = (int64_t)8 << (2 * (n_sizes - 1));
    char *buf = dyn_calloc((size_t)max_bytes, 1, "link buffer", err);
    double *t = dyn_calloc((size_t)reps, sizeof *t, "link times", err);
    dyn_status st = buf && t ? DYN_OK : DYN_ERR_NOMEM;
    for (int s = 0; s < n_sizes && st == DYN_OK && rank < 2; s++) {
        int n = (int)((int64_t)8 << (2 * s));
        for (int r = -2; r < reps && st == DYN_OK; r++) {
            double t0 = dyn_time_ms();
            st = round_trip(comm, rank, buf, n, timeout_s, err);
            if (r >= 0) t[r] = dyn_time_ms() - t0;
        }
        if (st == DYN_OK && rank == 0) pts[s] = (rt_link_point){n, dyn_median(t, reps) / 2.0};
    }
    free(buf);
    free(t);
    int ok = st == DYN_OK, all = 0;
    int rc = MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
    if (st == DYN_OK && rc != MPI_SUCCESS) st = dyn_rt_mpi_check(rc, "MPI_Allreduce (link)", err);
    if (st == DYN_OK && !all) st = dyn_error_set(err, DYN_ERR_INTERNAL, "link: the peer rank failed");
    if (st == DYN_OK && rank == 0) {
        *latency_ms = pts[0].one_way_ms;
        double dt = pts[n_sizes - 1].one_way_ms - *latency_ms;
        *gbps = dt > 0 ? (double)pts[n_sizes - 1].bytes / (dt * 1e-3) * 1e-9 : 0.0;
    }
    return st;
}
