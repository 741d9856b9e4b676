/* group.h — who this MPI rank is: everything about the process group in one
 * small struct (llm.c's multi-process setup), with an _init / _free pair.
 *
 * Rank layout. World size = stages S x replicas D. World rank
 *     w = replica * S + stage_rank
 * so the S stages of one data-parallel replica are consecutive ranks: on a
 * host list filled rank by rank (mpirun's default "by slot" mapping), the
 * pipeline neighbours that exchange activations every micro-batch share a
 * host, and only the once-per-iteration gradient allreduce crosses hosts
 * (docs/multi-host.md; the launcher asks mpirun for that mapping with
 * --map-by slot). Two communicators split the world:
 *     pipe  — the S ranks of one replica (rank in it = stage_rank);
 *     dpc   — the D ranks holding the same stage (rank in it = replica). */
#ifndef DYN_RUNTIME_GROUP_H
#define DYN_RUNTIME_GROUP_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "dynapipe/common.h"

/* Bytes of a host name, NUL included; longer names are cut. Names are
 * reduced to letters, digits, '.', '-' and '_' (others become '_'), so they
 * go into JSON and log lines without escaping. */
#define DYN_RT_HOST_LEN 64

typedef struct dyn_rt_group {
    int world_rank, world_size;
    int stages;     /* S: pipeline ranks per replica */
    int dp;         /* D: data-parallel replicas */
    int stage_rank; /* this rank's position in its pipeline, 0..S-1 */
    int replica;    /* this rank's replica, 0..D-1 */
    MPI_Comm world; /* MPI_COMM_WORLD */
    MPI_Comm pipe;  /* the ranks of this replica */
    MPI_Comm dpc;   /* the ranks of this stage rank across replicas */
    char host[DYN_RT_HOST_LEN];   /* this rank's host name */
    char (*hosts)[DYN_RT_HOST_LEN]; /* [world_size]: every rank's host name, gathered at init */
} dyn_rt_group;

/* MPI_Init_thread (FUNNELED: only the main thread calls MPI), the two
 * communicators and every rank's host name (g->hosts, MPI_Allgather).
 * Fails when the world size is not stages * dp. Errors of MPI calls
 * return DYN_ERR_INTERNAL naming the call (MPI_ERRORS_RETURN is set on the
 * communicators so that a failing call returns instead of aborting). */
dyn_status dyn_rt_group_init(dyn_rt_group *g, int *argc, char ***argv, int stages, int dp,
                             dyn_error *err);
/* Free the communicators and the host list, and MPI_Finalize. */
void dyn_rt_group_free(dyn_rt_group *g);
/* End the whole job now with exit code `code` (MPI_Abort), after printing
 * msg (one line) on stderr prefixed with this rank. Never returns. */
_Noreturn void dyn_rt_group_abort(const dyn_rt_group *g, int code, const char *msg);

/* World rank of (replica, stage_rank). */
static inline int dyn_rt_world_rank(const dyn_rt_group *g, int replica, int stage_rank)
{
    return replica * g->stages + stage_rank;
}

/* "h0 (ranks 0-1), h1 (ranks 2-3)": every host with its runs of
 * consecutive world ranks, into buf (cut to size, always NUL-terminated). */
void dyn_rt_group_hosts_describe(const dyn_rt_group *g, char *buf, size_t size);

/* The first replica whose S stages are not all on one host (its activations
 * then cross the network), or -1 when every pipeline stays on its host. */
int dyn_rt_group_split_replica(const dyn_rt_group *g);

/* An MPI return code as a dyn_error: DYN_OK for MPI_SUCCESS, else
 * DYN_ERR_INTERNAL "<what>: <MPI error string>". */
dyn_status dyn_rt_mpi_check(int rc, const char *what, dyn_error *err);

/* What dyn_rt_gather_bytes leaves on the root (rank 0 of the
 * communicator); all zero elsewhere. */
typedef struct dyn_rt_gathered {
    char *data;     /* every rank's bytes, rank 0's first, then one NUL byte (malloc'ed) */
    size_t total;   /* bytes in data, the NUL not counted */
    int n;          /* ranks of the communicator */
    int *counts;    /* [n]: bytes from rank r */
    int *displs;    /* [n]: where rank r's bytes start in data */
} dyn_rt_gathered;

/* Gather len bytes of buf from every rank of comm onto its rank 0: the
 * counts first (MPI_Igather), then the bytes (MPI_Igatherv), each wait
 * with the deadline timeout_s; `what` names the gather in the messages.
 * Collective over comm: every rank calls it, also after a failure of its
 * own (then with len 0), so that no peer waits for it. The root's *out is
 * filled (free with dyn_rt_gathered_free, also on failure); a total over
 * INT_MAX bytes is refused (MPI displacements are int). */
dyn_status dyn_rt_gather_bytes(MPI_Comm comm, const void *buf, int len, double timeout_s, const char *what,
                               dyn_rt_gathered *out, dyn_error *err);
void dyn_rt_gathered_free(dyn_rt_gathered *g);

/* 1 when this process was started by mpirun / mpiexec (Open MPI or a PMIx
 * launcher), 0 when started by hand. */
int dyn_rt_under_mpirun(void);

/* 1 when this process speaks for the job: its notes about the inputs (a
 * tuned knob, a length past a cost table's grid) reach the user once per
 * job. That is a process started by hand (it parses the flags, then
 * dyn_train_launch starts the ranks), or, in a job started with mpirun by
 * hand, world rank 0; 0 in the ranks dyn_train_launch started (the
 * launcher already spoke) and in every other rank. Reads the environment
 * only, so it may be called before MPI_Init. */
int dyn_rt_speaks_for_job(void);

/* The variable dyn_train_launch sets for its ranks (mpirun -x). */
#define DYN_RT_LAUNCHED_ENV "DYN_RT_LAUNCHED"

#endif
