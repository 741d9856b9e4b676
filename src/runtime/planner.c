/* planner.c — planning global batches ahead on a thread (see planner.h). */
#include "runtime/planner.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dynapipe/cost.h"
#include "dynapipe/pipeline.h"
#include "runtime/work.h"
#include "util/util.h"

#define QUEUE_CAP 64

struct rt_planner {
    dyn_train_options o;
    dyn_cost_model *cm;
    dyn_planner *planner;
    dyn_sampler *sampler;
    dyn_pipeline *pipeline;
    /* the queue: iterations next_take .. next_take+count-1 */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rt_planned *q[QUEUE_CAP];
    int head, count;
    int64_t first_step; /* the first iteration the thread plans (resume) */
    int stop, done, failed, started;
    dyn_error fail;
    pthread_t thread;
    /* online calibration (calibrate.h): a factor posted by the main thread,
     * applied by the planner thread before its next batch */
    double scale_pending[2];
    int scale_posted;
    int64_t scale_first; /* first iteration planned with the current factor */
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
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    po.schedule = o->schedule;
    po.order_groups = o->order_groups;
    if (p->sampler != NULL) p->pipeline = dyn_pipeline_create(p->planner, &po, err);
    if (p->pipeline == NULL) {
        rt_planner_free(p);
        return NULL;
    }
    return p;
}

/* ---- one global batch ------------------------------------------------------ */

/* Replica r's work message from its planned replica plan rp. */
static dyn_status replica_work(const dyn_batch_plan *bp, const dyn_replica_plan *rp, dyn_rt_work *w,
                               dyn_error *err)
{
    int32_t M = rp->n_microbatches;
    if (M == 0) return DYN_OK; /* an idle replica this iteration */
    w->plan = rp->plan;        /* borrowed for packing; not freed through w */
    w->predicted_ms = rp->makespan_ms;
    w->n_mb = M;
    w->n_stages = rp->plan.n_stages;
    w->n_ranks = rp->plan.n_ranks;
    size_t nc = (size_t)M * (size_t)w->n_stages;
    w->mb_first = dyn_calloc((size_t)M + 1, sizeof(int32_t), "work", err);
    w->fwd_ms = dyn_calloc(nc, sizeof(double), "work", err);
    w->bwd_ms = dyn_calloc(nc, sizeof(double), "work", err);
    w->peak_mb = dyn_calloc((size_t)w->n_ranks, sizeof(double), "work", err);
    if (!w->mb_first || !w->fwd_ms || !w->bwd_ms || !w->peak_mb) return DYN_ERR_NOMEM;
    memcpy(w->fwd_ms, rp->costs.fwd_ms, nc * sizeof(double));
    memcpy(w->bwd_ms, rp->costs.bwd_ms, nc * sizeof(double));
    memcpy(w->peak_mb, rp->rank_peak_mb, (size_t)w->n_ranks * sizeof(double));
    int32_t n = 0;
    for (int32_t j = 0; j < M; j++) {
        n += bp->mbs[rp->mb_index[j]].n_samples;
        w->mb_first[j + 1] = n;
    }
    w->n_samples = n;
    if ((w->samples = dyn_calloc((size_t)n, sizeof(dyn_rt_sample), "work", err)) == NULL) return DYN_ERR_NOMEM;
    for (int32_t j = 0; j < M; j++) {
        const dyn_plan_microbatch *mb = &bp->mbs[rp->mb_index[j]];
        for (int32_t k = 0; k < mb->n_samples; k++) {
            int32_t q = mb->first + k;
            dyn_rt_sample *s = &w->samples[w->mb_first[j] + k];
            s->id = bp->sample_ids[q];
            s->row = bp->sample_row[q];
            s->offset = bp->sample_offset[q];
            s->dec_offset = bp->sample_dec_offset ? bp->sample_dec_offset[q] : 0;
        }
    }
    return DYN_OK;
}

void rt_planner_set_time_scale(rt_planner *p, const double factor[2])
{
    pthread_mutex_lock(&p->mu);
    p->scale_pending[0] = factor[0];
    p->scale_pending[1] = factor[1];
    p->scale_posted = 1;
    pthread_mutex_unlock(&p->mu);
}

int64_t rt_planner_scale_first(rt_planner *p)
{
    pthread_mutex_lock(&p->mu);
    int64_t k = p->scale_first;
    pthread_mutex_unlock(&p->mu);
    return k;
}

/* A posted factor: scale every layer kind of the cost model and rebuild the
 * planner and pipeline, whose cost caches hold the old times. Counted in
 * the batch's plan_ms. */
static dyn_status scale_apply(rt_planner *p, int64_t k, dyn_error *err)
{
    pthread_mutex_lock(&p->mu);
    int posted = p->scale_posted;
    double f[2] = {p->scale_pending[0], p->scale_pending[1]};
    p->scale_posted = 0;
    pthread_mutex_unlock(&p->mu);
    if (!posted) return DYN_OK;
    dyn_status st = DYN_OK;
    for (int kind = 0; kind < DYN_LAYER_KIND_COUNT && st == DYN_OK; kind++)
        st = dyn_cost_model_set_time_scale(p->cm, (dyn_layer_kind)kind, f[0], f[1], err);
    if (st != DYN_OK) return st;
    dyn_planner *pl = dyn_planner_create(p->cm, &p->o.plan, err);
    if (pl == NULL) return err->code;
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    po.schedule = p->o.schedule;
    po.order_groups = p->o.order_groups;
    dyn_pipeline *pp = dyn_pipeline_create(pl, &po, err);
    if (pp == NULL) {
        dyn_planner_free(pl);
        return err->code;
    }
    dyn_pipeline_free(p->pipeline);
    dyn_planner_free(p->planner);
    p->pipeline = pp;
    p->planner = pl;
    pthread_mutex_lock(&p->mu);
    p->scale_first = k;
    pthread_mutex_unlock(&p->mu);
    return DYN_OK;
}

dyn_status rt_planner_plan_one(rt_planner *p, int64_t k, rt_planned **out, dyn_error *err)
{
    *out = NULL;
    double t0 = dyn_time_ms();
    dyn_status sst = scale_apply(p, k, err);
    if (sst != DYN_OK) return sst;
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
    dyn_pipeline_result res;
    if ((st = dyn_pipeline_plan(p->pipeline, batch, n, &res, err)) != DYN_OK) return st;
    double plan_ms = dyn_time_ms() - t0;
    int32_t dp = res.n_replicas;
    rt_planned *pl = dyn_calloc(1, sizeof *pl, "planned iteration", err);
    if (pl != NULL) {
        pl->msg = dyn_calloc((size_t)dp, sizeof(uint8_t *), "planned iteration", err);
        pl->len = dyn_calloc((size_t)dp, sizeof(size_t), "planned iteration", err);
    }
    if (pl == NULL || pl->msg == NULL || pl->len == NULL) {
        if (pl) pl->dp = 0;
        rt_planned_free(pl);
        dyn_pipeline_result_free(&res);
        return DYN_ERR_NOMEM;
    }
    pl->iteration = k;
    pl->dp = dp;
    pl->n_mb = res.batch.n_microbatches;
    pl->schedule = res.replicas[0].n_microbatches > 0 ? (int32_t)res.replicas[0].schedule : -1;
    pl->plan_ms = plan_ms;
    pl->sampler_pos = dyn_sampler_position(p->sampler);
    for (int32_t r = 0; st == DYN_OK && r < dp; r++) {
        dyn_rt_work w;
        memset(&w, 0, sizeof w);
        w.iteration = k;
        w.replica = r;
        w.method = p->o.plan.method;
        w.global_target_tokens = tgt;
        w.global_real_tokens = real;
        w.plan_ms = plan_ms;
        st = replica_work(&res.batch, &res.replicas[r], &w, err);
        if (st == DYN_OK) st = dyn_rt_work_pack(&w, &pl->msg[r], &pl->len[r], err);
        memset(&w.plan, 0, sizeof w.plan); /* the result owns it */
        dyn_rt_work_free(&w);
    }
    dyn_pipeline_result_free(&res);
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
    for (int64_t k = p->first_step; k < p->o.steps; k++) {
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

dyn_status rt_planner_seek(rt_planner *p, int64_t first_step, int64_t pos, dyn_error *err)
{
    if (p->started) return dyn_error_set(err, DYN_ERR_INTERNAL, "planner: seek after start");
    dyn_status st = dyn_sampler_seek(p->sampler, pos, err);
    if (st == DYN_OK) p->first_step = first_step;
    return st;
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
    dyn_pipeline_free(p->pipeline);
    dyn_sampler_free(p->sampler);
    dyn_planner_free(p->planner);
    dyn_cost_model_free(p->cm);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}
