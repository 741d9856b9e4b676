/* planner.c — planning global batches ahead on a thread (see planner.h). */
#include "runtime/planner.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dynapipe/cost.h"
#include "dynapipe/pipeline.h"
#include "runtime/alloc.h"
#include "runtime/source.h" /* defines: rt_sampler_options */
#include "runtime/work.h"
#include "util/util.h"

#define QUEUE_CAP 64
#define HIST 128 /* > QUEUE_CAP + the plans in flight to the ranks */

struct rt_planner {
    dyn_train_options o;
    dyn_cost_model *cm;
    const dyn_dataset *lengths; /* borrowed: the dataset's samples by id */
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
    int64_t replanned;  /* batches planned again after a correction */
    dyn_error fail;
    pthread_t thread;
    /* online calibration (calibrate.h): factors posted by the main thread,
     * applied by the planner thread before its next batch */
    int32_t S;              /* pipeline ranks */
    double *scale_pending;  /* [S * RT_CALIB_DIRS] */
    double *scale;          /* [S * RT_CALIB_DIRS] applied */
    int scale_posted;
    /* what the last HIST iterations' predictions carried (rt_planner_carried) */
    int64_t hist_k[HIST];
    double *hist;           /* [HIST][S * (RT_CALIB_DIRS + 1)]: factors, then optimizer ms per rank */
    double *rank_params;    /* [S] scratch: parameters per rank */
    rt_alloc *alloc;        /* the ranks' allocation, predicted (alloc.h) */
    double *rank_alloc_mb;  /* [S] scratch */
};

void rt_planned_free(rt_planned *p)
{
    if (p == NULL) return;
    rt_alloc_free(p->alloc_before);
    for (int32_t r = 0; r < p->dp; r++) free(p->msg ? p->msg[r] : NULL);
    free(p->msg);
    free(p->len);
    free(p->ids);
    free(p);
}

rt_planner *rt_planner_create(const dyn_train_options *o, const dyn_dataset *lengths, dyn_error *err)
{
    rt_planner *p = dyn_calloc(1, sizeof *p, "planner", err);
    if (p == NULL) return NULL;
    p->o = *o;
    p->lengths = lengths;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->S = o->plan.stages > 0 ? o->plan.stages : 1;
    size_t cells = (size_t)p->S * RT_CALIB_DIRS;
    p->scale_pending = dyn_calloc(cells, sizeof(double), "calibration factors", err);
    p->scale = dyn_calloc(cells, sizeof(double), "calibration factors", err);
    p->hist = dyn_calloc((size_t)HIST * (size_t)p->S * (RT_CALIB_DIRS + 1), sizeof(double), "calibration", err);
    p->rank_params = dyn_calloc((size_t)p->S, sizeof(double), "calibration", err);
    if (!p->scale_pending || !p->scale || !p->hist || !p->rank_params) {
        rt_planner_free(p);
        return NULL;
    }
    for (size_t i = 0; i < cells; i++) p->scale[i] = 1.0;
    for (int i = 0; i < HIST; i++) p->hist_k[i] = -1;
    p->cm = o->cost_table ? dyn_cost_model_load_table(o->cost_table, err)
                          : dyn_cost_model_create_analytic(&o->model, &o->machine, err);
    if (p->cm != NULL) p->planner = dyn_planner_create(p->cm, &o->plan, err);
    if (p->planner != NULL &&
        ((p->alloc = rt_alloc_create(p->cm, p->S, o->plan.dp > 0 ? o->plan.dp : 1, err)) == NULL ||
         (p->rank_alloc_mb = dyn_calloc((size_t)p->S, sizeof(double), "allocation model", err)) == NULL)) {
        rt_planner_free(p);
        return NULL;
    }
    dyn_sampler_options so;
    rt_sampler_options(o, &so);
    if (p->planner != NULL) p->sampler = dyn_sampler_create_ex(lengths, o->global_batch_tokens, &so, err);
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

/* Replica r's work message from its planned replica plan rp; step_ms: the
 * optimizer step that follows the plan (predicted_ms = makespan + it). */
/* Micro-batch j's useful fraction (pipeline.h dyn_mb_useful_fraction)
 * into w->useful[j], from its samples' lengths in ds. */
static dyn_status useful_fractions(const dyn_cost_model *cm, const dyn_dataset *ds, const dyn_replica_plan *rp,
                                   dyn_rt_work *w, dyn_error *err)
{
    int32_t most = 0;
    for (int32_t j = 0; j < w->n_mb; j++)
        if (w->mb_first[j + 1] - w->mb_first[j] > most) most = w->mb_first[j + 1] - w->mb_first[j];
    dyn_sample *xs = dyn_calloc((size_t)most + 1, sizeof *xs, "work", err);
    if (xs == NULL) return DYN_ERR_NOMEM;
    dyn_status st = DYN_OK;
    for (int32_t j = 0; st == DYN_OK && j < w->n_mb; j++) {
        int32_t n = w->mb_first[j + 1] - w->mb_first[j];
        for (int32_t k = 0; k < n; k++) xs[k] = ds->samples[w->samples[w->mb_first[j] + k].id];
        st = dyn_mb_useful_fraction(cm, &rp->plan.mb_shape[j], xs, n, &w->useful[j], err);
    }
    free(xs);
    return st;
}

static dyn_status replica_work(const dyn_cost_model *cm, const dyn_dataset *ds, const dyn_batch_plan *bp,
                               const dyn_replica_plan *rp, double step_ms, const double *alloc_mb, dyn_rt_work *w,
                               dyn_error *err)
{
    int32_t M = rp->n_microbatches;
    if (M == 0) return DYN_OK; /* an idle replica this iteration */
    w->plan = rp->plan;        /* borrowed for packing; not freed through w */
    w->predicted_ms = rp->makespan_ms + step_ms;
    w->n_mb = M;
    w->n_stages = rp->plan.n_stages;
    w->n_ranks = rp->plan.n_ranks;
    size_t nc = (size_t)M * (size_t)w->n_stages;
    w->mb_first = dyn_calloc((size_t)M + 1, sizeof(int32_t), "work", err);
    w->fwd_ms = dyn_calloc(nc, sizeof(double), "work", err);
    w->bwd_ms = dyn_calloc(nc, sizeof(double), "work", err);
    w->peak_mb = dyn_calloc((size_t)w->n_ranks, sizeof(double), "work", err);
    w->useful = dyn_calloc((size_t)M, sizeof(double), "work", err);
    if (!w->mb_first || !w->fwd_ms || !w->bwd_ms || !w->peak_mb || !w->useful) return DYN_ERR_NOMEM;
    memcpy(w->fwd_ms, rp->costs.fwd_ms, nc * sizeof(double));
    memcpy(w->bwd_ms, rp->costs.bwd_ms, nc * sizeof(double));
    memcpy(w->peak_mb, alloc_mb, (size_t)w->n_ranks * sizeof(double));
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
    return useful_fractions(cm, ds, rp, w, err);
}

void rt_planner_set_time_scale(rt_planner *p, const double *factor)
{
    pthread_mutex_lock(&p->mu);
    memcpy(p->scale_pending, factor, (size_t)p->S * RT_CALIB_DIRS * sizeof(double));
    p->scale_posted = 1;
    pthread_cond_broadcast(&p->cv); /* a thread waiting on a full queue re-plans it */
    pthread_mutex_unlock(&p->mu);
}

int32_t rt_planner_queued(rt_planner *p)
{
    pthread_mutex_lock(&p->mu);
    int32_t n = p->count;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int64_t rt_planner_replanned(rt_planner *p)
{
    pthread_mutex_lock(&p->mu);
    int64_t n = p->replanned;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int rt_planner_carried(rt_planner *p, int64_t k, double *factor, double *opt_ms)
{
    size_t cells = (size_t)p->S * RT_CALIB_DIRS, row = cells + (size_t)p->S;
    pthread_mutex_lock(&p->mu);
    int ok = k >= 0 && p->hist_k[k % HIST] == k;
    if (ok) {
        const double *h = p->hist + (size_t)(k % HIST) * row;
        memcpy(factor, h, cells * sizeof(double));
        memcpy(opt_ms, h + cells, (size_t)p->S * sizeof(double));
    }
    pthread_mutex_unlock(&p->mu);
    return ok;
}

double rt_planner_step_ms(rt_planner *p, int64_t k)
{
    size_t cells = (size_t)p->S * RT_CALIB_DIRS, row = cells + (size_t)p->S;
    double worst = 0;
    pthread_mutex_lock(&p->mu);
    if (k >= 0 && p->hist_k[k % HIST] == k)
        for (int32_t r = 0; r < p->S; r++) {
            double ms = p->hist[(size_t)(k % HIST) * row + cells + (size_t)r];
            if (ms > worst) worst = ms;
        }
    pthread_mutex_unlock(&p->mu);
    return worst;
}

/* The optimizer step after iteration k's plan rp, ms per pipeline rank
 * (opt_ms[S], each rank's parameters from the plan's states per stage,
 * 16 bytes per parameter, times the rank's calibration factor), recorded
 * for rt_planner_carried with the factors carried; returns the slowest
 * rank's, which ends the iteration. */
static double step_predict(rt_planner *p, int64_t k, const dyn_replica_plan *rp)
{
    int32_t S = p->S;
    for (int32_t r = 0; r < S; r++) p->rank_params[r] = 0;
    if (rp != NULL && rp->costs.states_mb != NULL)
        for (int32_t s = 0; s < rp->costs.n_stages; s++)
            p->rank_params[s % S] += rp->costs.states_mb[s] * (1024.0 * 1024.0) / 16.0;
    size_t cells = (size_t)S * RT_CALIB_DIRS, row = cells + (size_t)S;
    pthread_mutex_lock(&p->mu);
    double *h = p->hist + (size_t)(k % HIST) * row, worst = 0;
    memcpy(h, p->scale, cells * sizeof(double));
    for (int32_t r = 0; r < S; r++) {
        double ms = dyn_cost_optimizer_ms(p->cm, p->rank_params[r]) * p->scale[(size_t)r * RT_CALIB_DIRS + RT_CALIB_OPT];
        h[cells + (size_t)r] = ms;
        if (ms > worst) worst = ms;
    }
    p->hist_k[k % HIST] = k;
    pthread_mutex_unlock(&p->mu);
    return worst;
}

/* Posted factors: the cost model's layer kinds take the mean over ranks
 * per direction (the planner and pipeline, whose cost caches hold the old
 * times, are rebuilt), the pipeline's stage costs each rank's factor over
 * that mean. Counted in the batch's plan_ms. */
static dyn_status scale_apply(rt_planner *p, int64_t k, dyn_error *err)
{
    (void)k;
    size_t cells = (size_t)p->S * RT_CALIB_DIRS;
    pthread_mutex_lock(&p->mu);
    int posted = p->scale_posted;
    if (posted) memcpy(p->scale, p->scale_pending, cells * sizeof(double));
    p->scale_posted = 0;
    pthread_mutex_unlock(&p->mu);
    if (!posted) return DYN_OK;
    double mean[2] = {0, 0};
    for (int32_t r = 0; r < p->S; r++)
        for (int d = 0; d < 2; d++) mean[d] += p->scale[(size_t)r * RT_CALIB_DIRS + (size_t)d] / p->S;
    dyn_status st = DYN_OK;
    for (int kind = 0; kind < DYN_LAYER_KIND_COUNT && st == DYN_OK; kind++)
        st = dyn_cost_model_set_time_scale(p->cm, (dyn_layer_kind)kind, mean[0], mean[1], err);
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
    double *rel = dyn_calloc(2 * (size_t)p->S, sizeof(double), "calibration factors", err);
    if (rel == NULL) st = DYN_ERR_NOMEM;
    for (int32_t r = 0; st == DYN_OK && r < p->S; r++) {
        rel[r] = p->scale[(size_t)r * RT_CALIB_DIRS + RT_CALIB_FWD] / mean[0];
        rel[p->S + r] = p->scale[(size_t)r * RT_CALIB_DIRS + RT_CALIB_BWD] / mean[1];
    }
    if (st == DYN_OK) st = dyn_pipeline_set_rank_scale(pp, rel, rel + p->S, err);
    free(rel);
    if (st != DYN_OK) {
        dyn_pipeline_free(pp);
        dyn_planner_free(pl);
        return st;
    }
    dyn_pipeline_free(p->pipeline);
    dyn_planner_free(p->planner);
    p->pipeline = pp;
    p->planner = pl;
    return DYN_OK;
}

/* The sampler's next global batch of iteration k. Without an epoch limit
 * the order goes on epoch after epoch (a new permutation each); with one,
 * the command ended the run at the last batch (rt_source_epoch_steps), so
 * running out is a bug, said as such. */
static dyn_status next_batch(rt_planner *p, int64_t k, const dyn_sample **batch, int32_t *n, dyn_error *err)
{
    dyn_status st = dyn_sampler_next(p->sampler, batch, n, err);
    if (st == DYN_OK && *n == 0 && dyn_sampler_train_count(p->sampler) == 0)
        st = dyn_error_set(err, DYN_ERR_INVALID_ARG, "planner: the dataset has no samples");
    else if (st == DYN_OK && *n == 0)
        st = dyn_error_set(err, DYN_ERR_INTERNAL, "planner: the data ended after %lld epochs, before iteration %lld",
                           (long long)p->o.epochs, (long long)k);
    return st;
}

int32_t rt_planner_train_count(const rt_planner *p) { return dyn_sampler_train_count(p->sampler); }

/* An empty planned iteration for dp replicas; NULL when out of memory. */
static rt_planned *planned_create(int32_t dp, dyn_error *err)
{
    rt_planned *pl = dyn_calloc(1, sizeof *pl, "planned iteration", err);
    if (pl == NULL) return NULL;
    pl->msg = dyn_calloc((size_t)dp, sizeof(uint8_t *), "planned iteration", err);
    pl->len = dyn_calloc((size_t)dp, sizeof(size_t), "planned iteration", err);
    if (pl->msg == NULL || pl->len == NULL) {
        rt_planned_free(pl); /* dp still 0: no message to free */
        return NULL;
    }
    pl->dp = dp;
    return pl;
}

/* Every replica's work message of iteration k into pl->msg / pl->len,
 * from the pipeline's result res of a batch of tgt target and real input
 * + target tokens. */
static dyn_status pack_replicas(rt_planner *p, int64_t k, dyn_pipeline_result *res, int64_t tgt, int64_t real,
                                rt_planned *pl, dyn_error *err)
{
    /* every replica holds the same layers: the states of any busy one */
    const dyn_replica_plan *busy = NULL;
    for (int32_t r = 0; r < pl->dp && busy == NULL; r++)
        if (res->replicas[r].n_microbatches > 0) busy = &res->replicas[r];
    double step_ms = step_predict(p, k, busy);
    dyn_status st = DYN_OK;
    for (int32_t r = 0; st == DYN_OK && r < pl->dp; r++) {
        dyn_rt_work w;
        memset(&w, 0, sizeof w);
        w.iteration = k;
        w.replica = r;
        w.method = res->batch.method; /* dynapipe's winning candidate may be a baseline's plan */
        w.global_target_tokens = tgt;
        w.global_real_tokens = real;
        w.plan_ms = pl->plan_ms;
        w.ideal_ms = res->ideal.bound_ms;
        w.ideal_compute_ms = res->ideal.compute_ms;
        /* the ranks' allocation after this iteration (the interpreter's
         * pools, which only grow), not the plan's live peak */
        st = rt_alloc_iteration(p->alloc, r, &res->replicas[r], p->rank_alloc_mb, err);
        if (st == DYN_OK) st = replica_work(p->cm, p->lengths, &res->batch, &res->replicas[r], step_ms, p->rank_alloc_mb, &w,
                                              err);
        if (st == DYN_OK) st = dyn_rt_work_pack(&w, &pl->msg[r], &pl->len[r], err);
        memset(&w.plan, 0, sizeof w.plan); /* the result owns it */
        dyn_rt_work_free(&w);
    }
    return st;
}

dyn_status rt_planner_plan_one(rt_planner *p, int64_t k, rt_planned **out, dyn_error *err)
{
    *out = NULL;
    double t0 = dyn_time_ms();
    dyn_status st = scale_apply(p, k, err);
    if (st != DYN_OK) return st;
    /* where this batch starts, to plan it again after a correction */
    int64_t sampler_before = dyn_sampler_position(p->sampler);
    rt_alloc *alloc_before = NULL;
    if (p->o.calibrate && (alloc_before = rt_alloc_copy(p->alloc, err)) == NULL) return err->code;
    const dyn_sample *batch = NULL;
    int32_t n = 0;
    dyn_pipeline_result res;
    if ((st = next_batch(p, k, &batch, &n, err)) != DYN_OK ||
        (st = dyn_pipeline_plan(p->pipeline, batch, n, &res, err)) != DYN_OK) {
        rt_alloc_free(alloc_before);
        return st;
    }
    int64_t tgt = 0, real = 0;
    for (int32_t i = 0; i < n; i++) {
        tgt += batch[i].target_len;
        real += batch[i].input_len + batch[i].target_len;
    }
    double plan_ms = dyn_time_ms() - t0;
    rt_planned *pl = planned_create(res.n_replicas, err);
    if (pl == NULL) {
        rt_alloc_free(alloc_before);
        dyn_pipeline_result_free(&res);
        return DYN_ERR_NOMEM;
    }
    pl->sampler_before = sampler_before;
    pl->alloc_before = alloc_before;
    pl->iteration = k;
    pl->n_mb = res.batch.n_microbatches;
    pl->schedule = res.replicas[0].n_microbatches > 0 ? (int32_t)res.replicas[0].schedule : -1;
    pl->plan_ms = plan_ms;
    pl->sampler_pos = dyn_sampler_position(p->sampler);
    /* the batch's samples in training order (--dump-order) */
    st = (pl->ids = dyn_calloc((size_t)n, sizeof(int32_t), "planned iteration", err)) ? DYN_OK : DYN_ERR_NOMEM;
    for (int32_t i = 0; st == DYN_OK && i < n; i++) pl->ids[i] = batch[i].id;
    pl->n_ids = n;
    if (st == DYN_OK) st = pack_replicas(p, k, &res, tgt, real, pl, err);
    dyn_pipeline_result_free(&res);
    if (st != DYN_OK) {
        rt_planned_free(pl);
        return st;
    }
    *out = pl;
    return DYN_OK;
}

/* ---- the thread ------------------------------------------------------------ */

/* Do queued plans wait to be planned again with posted factors? Only with
 * --calibrate, whose plans keep the state to go back to (requeue). With the
 * mutex held. */
static int replan_pending(const rt_planner *p)
{
    return p->o.calibrate && p->scale_posted && p->count > 0;
}

/* New factors are posted and batches wait in the queue, planned with the
 * old ones and not taken by the main thread yet: drop them and go back to
 * the planner's state before the first of them (the sampler's position,
 * the allocation model's pools), so they are planned again, the same
 * samples with the new factors. Called with the mutex held; returns the
 * iteration to plan next. */
static int64_t requeue(rt_planner *p)
{
    rt_planned *first = p->q[p->head];
    int64_t k = first->iteration;
    dyn_error e;
    if (dyn_sampler_seek(p->sampler, first->sampler_before, &e) != DYN_OK)
        return k + p->count; /* a position the sampler itself gave: cannot fail; keep the queue */
    rt_alloc_free(p->alloc);
    p->alloc = first->alloc_before;
    first->alloc_before = NULL;
    while (p->count > 0) {
        rt_planned_free(p->q[p->head]);
        p->head = (p->head + 1) % QUEUE_CAP;
        p->count--;
        p->replanned++;
    }
    return k;
}

/* Plans iterations first_step..steps-1 in order, at most plan_ahead
 * queued. Past the last one the thread stays until stopped: factors posted
 * while the last batches wait in the queue still re-plan them. */
static void *planner_thread(void *arg)
{
    rt_planner *p = arg;
    for (int64_t k = p->first_step;; k++) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && (p->count >= p->o.plan_ahead || k >= p->o.steps) && !replan_pending(p))
            pthread_cond_wait(&p->cv, &p->mu);
        int stop = p->stop;
        if (!stop && replan_pending(p)) k = requeue(p);
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
    if (k >= p->o.steps)
        return dyn_error_set(err, DYN_ERR_INTERNAL, "planner: iteration %lld is past the last step (%lld)",
                             (long long)k, (long long)p->o.steps - 1);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)timeout_s;
    pthread_mutex_lock(&p->mu);
    dyn_status st = DYN_OK;
    for (;;) {
        /* queued plans about to be planned again with posted factors
         * (requeue): wait for the new ones */
        int replan = replan_pending(p) && !p->done && !p->failed && !p->stop;
        if (p->count > 0 && !replan) {
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
    free(p->scale_pending);
    free(p->scale);
    free(p->hist);
    free(p->rank_params);
    rt_alloc_free(p->alloc);
    free(p->rank_alloc_mb);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}
