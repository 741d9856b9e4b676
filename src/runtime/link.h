/* link.h — point-to-point latency and bandwidth between two MPI ranks, for
 * the cost model's link terms (dyn_machine.link_latency_ms, link_gbps):
 * `dynapipe profile --link`. */
#ifndef DYN_RUNTIME_LINK_H
#define DYN_RUNTIME_LINK_H

#include <mpi.h>

#include "dynapipe/common.h"

/* One size of the ping-pong. */
typedef struct rt_link_point {
    int64_t bytes;
    double one_way_ms; /* median round trip / 2 */
} rt_link_point;

/* Ping-pong between ranks 0 and 1 of comm (others wait at the end) for
 * n_sizes message sizes 8 B .. 8 B * 4^(n_sizes-1), `reps` timed round trips
 * each after 2 untimed. Rank 0 gets pts[n_sizes], *latency_ms (the one-way
 * time of the smallest message) and *gbps (the largest message's bytes over
 * its one-way time less the latency, 1e9 bytes/s). Every wait has
 * timeout_s. */
dyn_status rt_link_measure(MPI_Comm comm, int n_sizes, int reps, double timeout_s, rt_link_point *pts,
                           double *latency_ms, double *gbps, dyn_error *err);

#endif
