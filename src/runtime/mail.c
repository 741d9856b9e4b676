/* mail.c — plan delivery (contract in mail.h): rank 0 sends each planned
 * iteration's work to every rank as soon as the planner thread has it;
 * every rank keeps a receive for its next work posted and advances it
 * whenever the interpreter polls. */
#include "runtime/mail.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/util.h" /* defines: dyn_calloc, dyn_time_ms */

enum { TAG_WORK_LEN = 10, TAG_WORK = 11 };

dyn_status rt_mail_init(rt_mail *m, const dyn_rt_group *g, int64_t steps, double timeout_s, dyn_error *err)
{
    memset(m, 0, sizeof *m);
    m->g = g;
    m->steps = steps;
    m->timeout_s = timeout_s;
    m->hold = -1;
    if (g->world_rank != 0) return DYN_OK;
    for (int i = 0; i < RT_MAIL_OUT_CAP; i++) {
        m->out[i].req = dyn_calloc((size_t)2 * g->world_size, sizeof(MPI_Request), "plan sends", err);
        m->out[i].len = dyn_calloc((size_t)g->world_size, sizeof(uint64_t), "plan sends", err);
        if (m->out[i].req == NULL || m->out[i].len == NULL) return DYN_ERR_NOMEM;
    }
    m->sampler_pos = dyn_calloc((size_t)steps, sizeof(int64_t), "sampler positions", err);
    return m->sampler_pos == NULL ? DYN_ERR_NOMEM : DYN_OK;
}

dyn_status rt_mail_keep_order(rt_mail *m, dyn_error *err)
{
    if (m->g->world_rank != 0) return DYN_OK;
    m->order = dyn_calloc((size_t)m->steps, sizeof(int32_t *), "sample order", err);
    m->order_n = m->order ? dyn_calloc((size_t)m->steps, sizeof(int32_t), "sample order", err) : NULL;
    return m->order_n == NULL ? DYN_ERR_NOMEM : DYN_OK;
}

void rt_mail_start_sending(rt_mail *m, rt_planner *planner, int64_t first)
{
    m->next_send = first;
    m->planner = planner;
}

void rt_mail_hold(rt_mail *m, int64_t k) { m->hold = k; }

void rt_mail_fail(rt_mail *m, dyn_status st, const dyn_error *e)
{
    if (m->fail == DYN_OK) {
        m->fail = st;
        m->err = *e;
    }
}

/* Send planned iteration pl to every rank (rank 0 included: MPI sends to
 * self like to anyone). */
static void mail_send(rt_mail *m, rt_planned *pl)
{
    const dyn_rt_group *g = m->g;
    rt_outgoing *o = NULL;
    for (int i = 0; i < RT_MAIL_OUT_CAP && o == NULL; i++)
        if (m->out[i].pl == NULL) o = &m->out[i];
    dyn_error e;
    if (o == NULL) {
        dyn_error_set(&e, DYN_ERR_INTERNAL, "more than %d iterations of plans in flight", RT_MAIL_OUT_CAP);
        rt_mail_fail(m, e.code, &e);
        rt_planned_free(pl);
        return;
    }
    o->pl = pl;
    if (m->sampler_pos) m->sampler_pos[pl->iteration] = pl->sampler_pos;
    if (m->order) { /* the sent plan is final: its samples are what trains */
        free(m->order[pl->iteration]);
        m->order[pl->iteration] = pl->ids;
        m->order_n[pl->iteration] = pl->n_ids;
        pl->ids = NULL;
    }
    for (int w = 0; w < g->world_size; w++) {
        int r = w / g->stages;
        o->len[w] = pl->len[r];
        int rc = MPI_Isend(&o->len[w], 1, MPI_UINT64_T, w, TAG_WORK_LEN, g->world, &o->req[2 * w]);
        if (rc == MPI_SUCCESS)
            rc = MPI_Isend(pl->msg[r], (int)pl->len[r], MPI_BYTE, w, TAG_WORK, g->world, &o->req[2 * w + 1]);
        if (rc != MPI_SUCCESS) {
            dyn_rt_mpi_check(rc, "MPI_Isend (plan)", &e);
            rt_mail_fail(m, e.code, &e);
            return;
        }
    }
    m->next_send = pl->iteration + 1;
}

/* Rank 0: complete finished sends; send the next planned iteration if the
 * planner has it (never waits). */
static void mail_progress_send(rt_mail *m)
{
    for (int i = 0; i < RT_MAIL_OUT_CAP; i++) {
        rt_outgoing *o = &m->out[i];
        if (o->pl == NULL) continue;
        int done = 0;
        MPI_Testall(2 * m->g->world_size, o->req, &done, MPI_STATUSES_IGNORE);
        if (done) {
            rt_planned_free(o->pl);
            o->pl = NULL;
        }
    }
    if (m->fail != DYN_OK || m->next_send >= m->steps || m->next_send > m->horizon) return;
    if (m->next_send == m->hold && m->horizon <= m->hold) return; /* sent by its own take */
    rt_planned *pl = NULL;
    dyn_error e;
    dyn_status st = rt_planner_take(m->planner, m->next_send, 0, 0, &pl, &e);
    if (st != DYN_OK) rt_mail_fail(m, st, &e);
    else if (pl != NULL) mail_send(m, pl);
}

static void mail_progress_recv(rt_mail *m)
{
    dyn_error e;
    for (;;) {
        if (m->state == 1 || m->state == 2) {
            int done = 0;
            int rc = MPI_Test(&m->req, &done, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) {
                dyn_rt_mpi_check(rc, "MPI_Test (plan)", &e);
                rt_mail_fail(m, e.code, &e);
                return;
            }
            if (!done) return;
            if (m->state == 2) {
                m->state = 3;
                return;
            }
            free(m->buf);
            m->buf = malloc(m->len ? m->len : 1);
            if (m->buf == NULL) {
                dyn_error_set(&e, DYN_ERR_NOMEM, "out of memory for a %llu-byte plan", (unsigned long long)m->len);
                rt_mail_fail(m, e.code, &e);
                return;
            }
            rc = MPI_Irecv(m->buf, (int)m->len, MPI_BYTE, 0, TAG_WORK, m->g->world, &m->req);
            if (rc != MPI_SUCCESS) {
                dyn_rt_mpi_check(rc, "MPI_Irecv (plan)", &e);
                rt_mail_fail(m, e.code, &e);
                return;
            }
            m->state = 2;
            continue;
        }
        return;
    }
}

void rt_mail_post(rt_mail *m, int64_t k)
{
    if (k >= m->steps) return;
    m->want = k;
    int rc = MPI_Irecv(&m->len, 1, MPI_UINT64_T, 0, TAG_WORK_LEN, m->g->world, &m->req);
    if (rc != MPI_SUCCESS) {
        dyn_error e;
        dyn_rt_mpi_check(rc, "MPI_Irecv (plan length)", &e);
        rt_mail_fail(m, e.code, &e);
        return;
    }
    m->state = 1;
}

void rt_mail_poll(void *ctx)
{
    rt_mail *m = ctx;
    if (m->planner) mail_progress_send(m);
    mail_progress_recv(m);
}

/* Iteration k's work message (blocking, with the deadline). On rank 0 this
 * first makes sure iteration k was sent: waiting here for the planner is
 * the "planning not hidden" time. *wait_ms: time spent waiting. */
dyn_status rt_mail_take(rt_mail *m, int64_t k, uint8_t **buf, size_t *len, double *wait_ms, dyn_error *err)
{
    double t0 = dyn_time_ms();
    m->horizon = k + 1;
    if (m->planner && m->next_send <= k) {
        rt_planned *pl = NULL;
        dyn_status st = rt_planner_take(m->planner, k, 1, m->timeout_s, &pl, err);
        if (st != DYN_OK) return st;
        mail_send(m, pl);
    }
    double deadline = t0 + m->timeout_s * 1e3;
    while (m->state != 3) {
        if (m->fail != DYN_OK) {
            *err = m->err;
            return m->fail;
        }
        rt_mail_poll(m);
        if (m->state == 3) break;
        if (dyn_time_ms() > deadline)
            return dyn_error_set(err, DYN_ERR_INTERNAL, "timeout after %.0f s waiting for the plan of iteration %lld "
                                 "from rank 0", m->timeout_s, (long long)k);
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
    if (m->fail != DYN_OK) {
        *err = m->err;
        return m->fail;
    }
    *buf = m->buf;
    *len = m->len;
    m->buf = NULL;
    m->state = 0;
    *wait_ms = dyn_time_ms() - t0;
    rt_mail_post(m, k + 1);
    return DYN_OK;
}

void rt_mail_free(rt_mail *m)
{
    if (m->state == 1 || m->state == 2) {
        MPI_Cancel(&m->req);
        MPI_Request_free(&m->req);
    }
    free(m->buf);
    for (int i = 0; i < RT_MAIL_OUT_CAP; i++) {
        rt_planned_free(m->out[i].pl);
        free(m->out[i].req);
        free(m->out[i].len);
    }
    free(m->sampler_pos);
    for (int64_t k = 0; m->order && k < m->steps; k++) free(m->order[k]);
    free(m->order);
    free(m->order_n);
}
