/* mail.h — plan delivery between the planner thread on world rank 0 and
 * every rank's interpreter (`dynapipe train`).
 *
 * Rank 0's main thread sends iteration k+1's work to every rank (an 8-byte
 * length, then the payload, MPI_Isend; rank 0 sends to itself like to
 * anyone) as soon as it is planned, while iteration k trains; every rank
 * keeps a receive for its next work posted and advances it whenever the
 * interpreter polls (rt_mail_poll). A rank therefore waits for a plan only
 * when planning is slower than training (plan_wait_ms in the metrics), or
 * for the one iteration a calibrating run holds back (rt_mail_hold).
 * Errors of the non-blocking calls are kept (the first one) in fail/err
 * and returned by the next rt_mail_take. */
#ifndef DYN_RUNTIME_MAIL_H
#define DYN_RUNTIME_MAIL_H

#include <mpi.h>
#include <stdint.h>

#include "dynapipe/common.h"
#include "runtime/group.h"
#include "runtime/planner.h"

typedef struct rt_outgoing {
    rt_planned *pl;
    MPI_Request *req; /* [2 * world]: length and payload per rank */
    uint64_t *len;    /* [world] */
} rt_outgoing;

#define RT_MAIL_OUT_CAP 4 /* iterations of plans in flight at most */

typedef struct rt_mail {
    const dyn_rt_group *g;
    int64_t steps;
    double timeout_s;
    /* receiving (every rank): the next iteration's work */
    int64_t want;
    int state; /* 0 nothing posted, 1 length posted, 2 payload posted, 3 ready */
    uint64_t len;
    uint8_t *buf;
    MPI_Request req;
    dyn_status fail;
    dyn_error err;
    /* sending (rank 0) */
    rt_planner *planner;
    int64_t next_send;  /* first iteration not yet sent */
    int64_t horizon;    /* send iterations up to this one: the one training now, plus one */
    int64_t hold;       /* an iteration not sent ahead but at its own take (rt_mail_hold); -1: none */
    rt_outgoing out[RT_MAIL_OUT_CAP];
    double plan_ms_sent;
    int64_t *sampler_pos; /* rank 0, [steps]: the sampler position after each sent iteration */
    int32_t **order;      /* rank 0 with rt_mail_keep_order, [steps]: each sent iteration's
                           * samples (rt_planned.ids), else NULL */
    int32_t *order_n;     /* [steps] their counts */
} rt_mail;

/* Every rank: the state for a run of `steps` iterations whose waits end
 * after timeout_s; rank 0 also allocates its sends and the sampler
 * positions (sampler_pos[k]: the sampler after iteration k was planned,
 * for checkpoints). Free with rt_mail_free, also after a failed init. */
dyn_status rt_mail_init(rt_mail *m, const dyn_rt_group *g, int64_t steps, double timeout_s, dyn_error *err);

/* Rank 0: keep every sent iteration's sample ids (order, order_n) for
 * --dump-order. Other ranks: nothing. */
dyn_status rt_mail_keep_order(rt_mail *m, dyn_error *err);

/* Rank 0, once its planner thread runs: send from iteration `first` on. */
void rt_mail_start_sending(rt_mail *m, rt_planner *planner, int64_t first);

/* Rank 0: iteration k is not sent while iteration k-1 trains, as every
 * other is, but when rank 0 takes k, after k-1's records reached the
 * planner. With --calibrate, k is the iteration after the first warm one,
 * so that the first correction reaches the very next plan instead of
 * the one after (the other ranks wait for that one plan: plan_wait_ms). */
void rt_mail_hold(rt_mail *m, int64_t k);

/* Post the receive of iteration k's work (nothing past the last step). */
void rt_mail_post(rt_mail *m, int64_t k);

/* Advance sends (rank 0) and the posted receive; never blocks. ctx is the
 * rt_mail (the interpreter's poll callback). */
void rt_mail_poll(void *ctx);

/* Iteration k's work message (blocking, with the deadline), malloc'ed,
 * owned by the caller; then the receive of k+1 is posted. On rank 0 this
 * first makes sure iteration k was sent: waiting here for the planner is
 * the "planning not hidden" time. *wait_ms: time spent waiting. */
dyn_status rt_mail_take(rt_mail *m, int64_t k, uint8_t **buf, size_t *len, double *wait_ms, dyn_error *err);

/* Record a failure seen elsewhere (the first one is kept). */
void rt_mail_fail(rt_mail *m, dyn_status st, const dyn_error *e);

void rt_mail_free(rt_mail *m);

#endif
