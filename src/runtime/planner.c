/* planner.c — planning global batches ahead on a thread (see planner.h). */
#include "runtime/planner.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dynapipe/cost.h"
#include "dynapipe/sim.h"
#include "runtime/work.h"
#include "util/util.h"

#define QUEUE_CAP 64

struct rt_planner {
    dyn_train_options o;
    dyn_cost_model *cm;
    dyn_planner *planner;
    dyn_sampler *sampler;
    dyn_batch_costs *bc;
    dyn_sim *sim;
    /* the queue: iterations next_take .. next_take+count-1 */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rt_planned *q[QUEUE_CAP];
    int head, count;
    int stop, done, failed, started;
    dyn_error fail;
    pthread_t thread;
};

void rt_planned_free(rt_planned *p)
{
    if (p == NULL) return;
    for (int32_t r = 0; r < p->dp; r++) free(p->msg ? p->msg[r] : NULL);
    free(p->msg);
    free(p->len);
    free(p);
}

rt_planner *rt_planner_create(const dyn_train_options *o, const dyn_dataset *lengths, dyn_error *err)
{
    rt_planner *p = dyn_calloc(1, sizeof *p, "planner", err);
    if (p == NULL) return NULL;
    p->o = *o;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->cm = o->cost_table ? dyn_cost_model_load_table(o->cost_table, err)
                          : dyn_cost_model_create_analytic(&o->model, &o->machine, err);
    if (p->cm != NULL) p->planner = dyn_planner_create(p->cm, &o->plan, err);
    if (p->planner != NULL) p->sampler = dyn_sampler_create(lengths, o->global_batch_tokens, err);
    int32_t v = o->schedule == DYN_SCHED_INTERLEAVED ? o->plan.chunks : 1;
    if (p->sampler != NULL) p->bc = dyn_batch_costs_create(p->cm, o->plan.stages, v, err);
    if (p->bc != NULL) p->sim = dyn_sim_create(err);
    if (p->sim == NULL) {
        rt_planner_free(p);
        return NULL;
    }
    return p;
}

/* ---- one global batch ------------------------------------------------------ */

/* The replica's micro-batches, as indices into bp->mbs, in plan order. */
static int32_t replica_mbs(const dyn_batch_plan *bp, int32_t replica, int32_t *idx)
{
    int32_t n = 0;
    for (int32_t i = 0; i < bp->n_microbatches; i++)
        if (bp->mbs[i].replica == replica) idx[n++] = i;
    return n;
}

/* Build, validate and simulate replica r's plan; fill w (plan, costs,
 * samples). order[j] = index (among the replica's micro-batches) of the
 * plan's micro-batch j. */
static dyn_status plan_replica(rt_planner *p, const dyn_batch_plan *bp, int32_t r, int64_t real_tokens,
                               dyn_rt_work *w, int32_t *schedule, dyn_error *err)
{
    const dyn_train_options *o = &p->o;
    dyn_status st = dyn_batch_costs_set_batch(p->bc, bp, r, err);
    if (st != DYN_OK) return st;
    int32_t M = 0;
    const dyn_mb_shape *shapes = dyn_batch_costs_shapes(p->bc, &M);
    if (M == 0) return DYN_OK; /* nothing for this replica (w->n_mb = 0) */
    int32_t *order = dyn_calloc((size_t)M, sizeof(int32_t), "plan order", err);
    int32_t *idx = dyn_calloc((size_t)bp->n_microbatches, sizeof(int32_t), "plan order", err);
    if (order == NULL || idx == NULL) {
        free(order);
        free(idx);
        return DYN_ERR_NOMEM;
    }
    dyn_sim_options simopt;
    dyn_sim_options_from_machine(&simopt, &o->machine, real_tokens);
    simopt.skip_events = 1;
    const dyn_stage_costs *costs = NULL;
    dyn_stage_costs own;
    memset(&own, 0, sizeof own);
    if (o->schedule == DYN_TRAIN_SCHED_AUTO) {
        dyn_auto_options ao;
        memset(&ao, 0, sizeof ao);
        ao.n_ranks = o->plan.stages;
        ao.chunks = 1; /* the layer assignment is fixed for a run: no interleaving in auto */
        ao.memory_limit_mb = dyn_planner_options(p->planner)->memory_limit_mb;
        ao.order_groups = o->order_groups;
        ao.replica = r;
        dyn_auto_choice choice;
        memset(&choice, 0, sizeof choice);
        choice.order = order;
        st = dyn_schedule_auto(p->sim, dyn_batch_costs_get, p->bc, shapes, &ao, &simopt, &choice, &w->plan,
                               &own, err);
        costs = &own;
        *schedule = choice.schedule;
    } else {
        int32_t v = o->schedule == DYN_SCHED_INTERLEAVED ? o->plan.chunks : 1;
        st = dyn_batch_costs_get(p->bc, v, o->plan.recompute, &costs, err);
        dyn_sched_options so;
        dyn_sched_options_default(&so);
        so.n_ranks = o->plan.stages;
        so.chunks = v;
        so.memory_limit_mb = dyn_planner_options(p->planner)->memory_limit_mb;
        so.recompute = o->plan.recompute;
        so.replica = r;
        if (st == DYN_OK) st = dyn_schedule_build((dyn_schedule)o->schedule, costs, shapes, &so, &w->plan, err);
        for (int32_t j = 0; j < M; j++) order[j] = j;
        *schedule = o->schedule;
    }
    if (st == DYN_OK) st = dyn_exec_plan_validate(&w->plan, err);
    const dyn_sim_result *res = NULL;
    if (st == DYN_OK) st = dyn_sim_run(p->sim, &w->plan, costs, &simopt, &res, err);
    /* fill the message */
    int32_t n_idx = replica_mbs(bp, r, idx);
    if (st == DYN_OK && n_idx != M)
        st = dyn_error_set(err, DYN_ERR_INTERNAL, "planner: replica %d has %d micro-batches, its costs %d", r,
                           n_idx, M);
    if (st == DYN_OK) {
        w->predicted_ms = res->makespan_ms;
        w->n_mb = M;
        w->n_stages = w->plan.n_stages;
        w->n_ranks = w->plan.n_ranks;
        size_t nc = (size_t)M * (size_t)w->n_stages;
        w->mb_first = dyn_calloc((size_t)M + 1, sizeof(int32_t), "work", err);
        w->fwd_ms = dyn_calloc(nc, sizeof(double), "work", err);
        w->bwd_ms = dyn_calloc(nc, sizeof(double), "work", err);
        w->peak_mb = dyn_calloc((size_t)w->n_ranks, sizeof(double), "work", err);
        if (!w->mb_first || !w->fwd_ms || !w->bwd_ms || !w->peak_mb) st = DYN_ERR_NOMEM;
    }
    if (st == DYN_OK) st = dyn_exec_plan_memory(&w->plan, costs, w->peak_mb, err);
    if (st == DYN_OK) {
        memcpy(w->fwd_ms, costs->fwd_ms, (size_t)M * (size_t)w->n_stages * sizeof(double));
        memcpy(w->bwd_ms, costs->bwd_ms, (size_t)M * (size_t)w->n_stages * sizeof(double));
        int32_t n = 0;
        for (int32_t j = 0; j < M; j++) {
            const dyn_plan_microbatch *mb = &bp->mbs[idx[order[j]]];
            if (memcmp(&mb->shape, &w->plan.mb_shape[j], sizeof mb->shape) != 0) {
                st = dyn_error_set(err, DYN_ERR_INTERNAL,
                                   "planner: plan micro-batch %d does not have the shape of its samples", j);
                break;
            }
            n += mb->n_samples;
            w->mb_first[j + 1] = n;
        }
        w->n_samples = n;
        if (st == DYN_OK) w->samples = dyn_calloc((size_t)n, sizeof(dyn_rt_sample), "work", err);
        if (st == DYN_OK && w->samples == NULL) st = DYN_ERR_NOMEM;
        for (int32_t j = 0; st == DYN_OK && j < M; j++) {
            const dyn_plan_microbatch *mb = &bp->mbs[idx[order[j]]];
            for (int32_t k = 0; k < mb->n_samples; k++) {
                int32_t q = mb->first + k;
                dyn_rt_sample *s = &w->samples[w->mb_first[j] + k];
                s->id = bp->sample_ids[q];
                s->row = bp->sample_row[q];
                s->offset = bp->sample_offset[q];
                s->dec_offset = bp->sample_dec_offset ? bp->sample_dec_offset[q] : 0;
            }
        }
    }
    dyn_stage_costs_free(&own);
    free(order);
    free(idx);
    return st;
}

dyn_status rt_planner_plan_one(rt_planner *p, int64_t k, rt_planned **out, dyn_error *err)
{
    *out = NULL;
    double t0 = dyn_time_ms();
    const dyn_sample *batch = NULL;
    int32_t n = 0;
    dyn_status st = dyn_sampler_next(p->sampler, &batch, &n, err);
    if (st == DYN_OK && n == 0) { /* end of the data: the next epoch */
        dyn_sampler_reset(p->sampler);
        st = dyn_sampler_next(p->sampler, &batch, &n, err);
    }
    if (st != DYN_OK) return st;
    if (n == 0) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "planner: the dataset has no samples");
    int64_t tgt = 0, real = 0;
    for (int32_t i = 0; i < n; i++) {
        tgt += batch[i].target_len;
        real += batch[i].input_len + batch[i].target_len;
    }
    dyn_batch_plan bp;
    memset(&bp, 0, sizeof bp);
    if ((st = dyn_planner_plan(p->planner, batch, n, &bp, err)) != DYN_OK) return st;
    int32_t dp = p->o.plan.dp;
    rt_planned *pl = dyn_calloc(1, sizeof *pl, "planned iteration", err);
    if (pl != NULL) {
        pl->msg = dyn_calloc((size_t)dp, sizeof(uint8_t *), "planned iteration", err);
        pl->len = dyn_calloc((size_t)dp, sizeof(size_t), "planned iteration", err);
    }
    if (pl == NULL || pl->msg == NULL || pl->len == NULL) {
        if (pl) pl->dp = 0;
        rt_planned_free(pl);
        dyn_batch_plan_free(&bp);
        return DYN_ERR_NOMEM;
    }
    pl->iteration = k;
    pl->dp = dp;
    pl->n_mb = bp.n_microbatches;
    for (int32_t r = 0; st == DYN_OK && r < dp; r++) {
        dyn_rt_work w;
        memset(&w, 0, sizeof w);
        w.iteration = k;
        w.replica = r;
        w.method = p->o.plan.method;
        w.global_target_tokens = tgt;
        w.global_real_tokens = real;
        int32_t sched = -1;
        st = plan_replica(p, &bp, r, real, &w, &sched, err);
        if (r == 0) pl->schedule = sched;
        w.plan_ms = dyn_time_ms() - t0;
        if (st == DYN_OK) st = dyn_rt_work_pack(&w, &pl->msg[r], &pl->len[r], err);
        dyn_rt_work_free(&w);
    }
    dyn_batch_plan_free(&bp);
    pl->plan_ms = dyn_time_ms() - t0;
    if (st != DYN_OK) {
        rt_planned_free(pl);
        return st;
    }
    *out = pl;
    return DYN_OK;
}

/* ---- the thread ------------------------------------------------------------ */

static void *planner_thread(void *arg)
{
    rt_planner *p = arg;
    for (int64_t k = 0; k < p->o.steps; k++) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && p->count >= p->o.plan_ahead) pthread_cond_wait(&p->cv, &p->mu);
        int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        rt_planned *pl = NULL;
        dyn_error e;
        dyn_status st = rt_planner_plan_one(p, k, &pl, &e);
        pthread_mutex_lock(&p->mu);
        if (st != DYN_OK) {
            p->failed = 1;
            p->fail = e;
        } else {
            p->q[(p->head + p->count) % QUEUE_CAP] = pl;
            p->count++;
        }
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        if (st != DYN_OK) break;
    }
    pthread_mutex_lock(&p->mu);
    p->done = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

dyn_status rt_planner_start(rt_planner *p, dyn_error *err)
{
    if (p->o.plan_ahead < 1 || p->o.plan_ahead > QUEUE_CAP)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "--plan-ahead %d must be in 1..%d", p->o.plan_ahead,
                             QUEUE_CAP);
    if (pthread_create(&p->thread, NULL, planner_thread, p) != 0)
        return dyn_error_set(err, DYN_ERR_INTERNAL, "cannot start the planner thread");
    p->started = 1;
    return DYN_OK;
}

dyn_status rt_planner_take(rt_planner *p, int64_t k, int block, double timeout_s, rt_planned **out,
                           dyn_error *err)
{
    *out = NULL;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)timeout_s;
    pthread_mutex_lock(&p->mu);
    dyn_status st = DYN_OK;
    for (;;) {
        if (p->count > 0) {
            rt_planned *pl = p->q[p->head];
            if (pl->iteration != k) {
                st = dyn_error_set(err, DYN_ERR_INTERNAL, "planner: iteration %lld taken, %lld expected",
                                   (long long)pl->iteration, (long long)k);
                break;
            }
            p->head = (p->head + 1) % QUEUE_CAP;
            p->count--;
            *out = pl;
            pthread_cond_broadcast(&p->cv);
            break;
        }
        if (p->failed) {
            *err = p->fail;
            st = p->fail.code;
            break;
        }
        if (p->done) {
            st = dyn_error_set(err, DYN_ERR_INTERNAL, "planner: no plan for iteration %lld", (long long)k);
            break;
        }
        if (!block) break;
        if (pthread_cond_timedwait(&p->cv, &p->mu, &until) == ETIMEDOUT) {
            st = dyn_error_set(err, DYN_ERR_INTERNAL, "planner: no plan for iteration %lld after %.0f s",
                               (long long)k, timeout_s);
            break;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

void rt_planner_free(rt_planner *p)
{
    if (p == NULL) return;
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->stop = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
    }
    while (p->count > 0) {
        rt_planned_free(p->q[p->head]);
        p->head = (p->head + 1) % QUEUE_CAP;
        p->count--;
    }
    dyn_sim_free(p->sim);
    dyn_batch_costs_free(p->bc);
    dyn_sampler_free(p->sampler);
    dyn_planner_free(p->planner);
    dyn_cost_model_free(p->cm);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}
