/* test_pipeline.c — the library entry point (dynapipe/pipeline.h): every
 * replica gets a valid plan of exactly its own micro-batches, traceable to
 * the planner's micro-batches and their shapes; the predicted figures
 * agree with an independent reference simulation and an independent count
 * of compute time; auto is never slower than any named schedule in the
 * planner's order; two handles on two threads give the same bytes as one
 * thread; bad arguments and idle replicas. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/data.h"         /* defines: dyn_dataset_synthetic_flan */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_preset, dyn_machine_resolve */
#include "dynapipe/pipeline.h"     /* defines: dyn_pipeline_*, dyn_replica_plan_* */
#include "sched_testlib.h"         /* defines: tl_simulate (reference simulator) */

#define LAT_MS 0.05 /* link latency; bandwidth near infinite, as tl_simulate models it */

typedef struct fixture {
    dyn_cost_model *cm;
    dyn_dataset ds;
} fixture;

/* gpt2-124m at max length 512 on the cpu machine with an ideal link. */
static void fixture_open(fixture *f, int32_t n_samples)
{
    dyn_error err;
    dyn_model_config cfg;
    dyn_machine m;
    assert_int_equal(dyn_model_config_preset("gpt2-124m", &cfg, &err), DYN_OK);
    cfg.max_seqlen = 512;
    assert_int_equal(dyn_machine_resolve("cpu", &m, &err), DYN_OK);
    m.link_latency_ms = LAT_MS;
    m.link_gbps = 1e9; /* GB/s: transfers take ~1e-12 ms, below the tests' tolerance */
    f->cm = dyn_cost_model_create_analytic(&cfg, &m, &err);
    assert_non_null(f->cm);
    assert_int_equal(dyn_dataset_synthetic_flan(7, n_samples, 512, DYN_MODEL_GPT, &f->ds, &err), DYN_OK);
}

static void fixture_close(fixture *f)
{
    dyn_dataset_free(&f->ds);
    dyn_cost_model_free(f->cm);
}

static dyn_planner *planner_new(const fixture *f, int32_t S, int32_t v, int32_t dp)
{
    dyn_plan_options po;
    dyn_plan_options_default(&po);
    po.stages = S;
    po.chunks = v;
    po.dp = dp;
    po.max_seqlen = 512;
    dyn_error err;
    dyn_planner *p = dyn_planner_create(f->cm, &po, &err);
    assert_non_null(p);
    return p;
}

static dyn_pipeline *pipeline_new(dyn_planner *pl, int32_t schedule)
{
    dyn_pipeline_options o;
    dyn_pipeline_options_default(&o);
    o.schedule = schedule;
    dyn_error err;
    dyn_pipeline *p = dyn_pipeline_create(pl, &o, &err);
    assert_non_null(p);
    return p;
}

static int shape_eq(const dyn_mb_shape *a, const dyn_mb_shape *b)
{
    return a->rows == b->rows && a->enc_len == b->enc_len && a->dec_len == b->dec_len &&
           a->enc_attn == b->enc_attn && a->dec_attn == b->dec_attn && a->cross_attn == b->cross_attn;
}

/* What every replica plan must satisfy, whatever the schedule: valid, of
 * its own replica's micro-batches (each batch micro-batch in exactly one
 * replica plan), shapes traceable through mb_index, figures equal to the
 * reference simulator and to the compute time counted from the costs. */
static void check_result(const dyn_pipeline_result *res, int32_t S, int32_t dp)
{
    dyn_error err;
    const dyn_batch_plan *bp = &res->batch;
    assert_int_equal(res->n_replicas, dp);
    int32_t *seen = calloc((size_t)bp->n_microbatches, sizeof(int32_t));
    assert_non_null(seen);
    for (int32_t r = 0; r < dp; r++) {
        const dyn_replica_plan *rp = &res->replicas[r];
        int32_t own = 0;
        for (int32_t i = 0; i < bp->n_microbatches; i++) own += bp->mbs[i].replica == r;
        assert_int_equal(rp->replica, r);
        assert_int_equal(rp->n_microbatches, own);
        if (own == 0) continue;
        assert_int_equal(dyn_exec_plan_validate(&rp->plan, &err), DYN_OK);
        assert_int_equal(rp->plan.replica, r);
        assert_int_equal(rp->plan.n_ranks, S);
        assert_int_equal(rp->plan.n_stages, S * rp->chunks);
        assert_int_equal(rp->plan.n_microbatches, own);
        assert_int_equal(rp->costs.n_microbatches, own);
        assert_int_equal(rp->costs.n_stages, rp->plan.n_stages);
        for (int32_t j = 0; j < own; j++) {
            int32_t k = rp->mb_index[j];
            assert_true(k >= 0 && k < bp->n_microbatches);
            assert_int_equal(bp->mbs[k].replica, r);
            assert_true(shape_eq(&rp->plan.mb_shape[j], &bp->mbs[k].shape));
            seen[k]++;
        }
        double ref = tl_simulate(&rp->plan, &rp->costs, LAT_MS);
        assert_true(ref > 0);
        assert_true(fabs(rp->makespan_ms - ref) <= 1e-9 * ref);
        /* Busy time per rank: the compute of the stages it holds. */
        double max_peak = 0;
        for (int32_t q = 0; q < S; q++) {
            double busy = 0;
            for (int32_t m = 0; m < own; m++)
                for (int32_t s = 0; s < rp->plan.n_stages; s++) {
                    if (rp->plan.stage_rank[s] != q) continue;
                    size_t i = (size_t)m * rp->plan.n_stages + s;
                    busy += rp->schedule == DYN_SCHEDULE_ZB ? rp->costs.fwd_ms[i] + rp->costs.bwd_input_ms[i] +
                                                               rp->costs.bwd_weight_ms[i]
                                                         : rp->costs.fwd_ms[i] + rp->costs.bwd_ms[i];
                }
            assert_true(fabs(rp->rank_busy_ms[q] - busy) <= 1e-9 * busy);
            if (rp->rank_peak_mb[q] > max_peak) max_peak = rp->rank_peak_mb[q];
        }
        assert_true(max_peak == rp->max_peak_mb);
    }
    for (int32_t i = 0; i < bp->n_microbatches; i++) assert_int_equal(seen[i], 1);
    free(seen);
}

static void test_named_schedule_every_replica(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 96);
    dyn_planner *pl = planner_new(&f, 4, 1, 2);
    dyn_pipeline *pp = pipeline_new(pl, DYN_SCHEDULE_1F1B);
    dyn_pipeline_result res;
    dyn_error err;
    assert_int_equal(dyn_pipeline_plan(pp, f.ds.samples, f.ds.n, &res, &err), DYN_OK);
    assert_int_equal(res.batch.n_samples, f.ds.n);
    check_result(&res, 4, 2);
    for (int32_t r = 0; r < 2; r++) {
        const dyn_replica_plan *rp = &res.replicas[r];
        assert_true(rp->n_microbatches > 0);
        assert_int_equal(rp->schedule, DYN_SCHEDULE_1F1B);
        assert_int_equal(rp->recompute, DYN_RECOMPUTE_NONE);
        assert_int_equal(rp->chunks, 1);
        /* A named schedule keeps the planner's order. */
        for (int32_t j = 1; j < rp->n_microbatches; j++) assert_true(rp->mb_index[j] > rp->mb_index[j - 1]);
    }
    dyn_pipeline_result_free(&res);
    dyn_pipeline_free(pp);
    dyn_planner_free(pl);
    fixture_close(&f);
}

/* Auto: a valid, traceable plan in some order of the replica's own
 * micro-batches, never slower than any named schedule in the planner's
 * order (phase 1 of auto tries each of them). */
static void test_auto_traceable_and_never_slower(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 96);
    dyn_planner *pl = planner_new(&f, 4, 2, 2);
    dyn_pipeline *pp = pipeline_new(pl, DYN_SCHEDULE_AUTO);
    assert_int_equal(dyn_pipeline_chunks(pp), 2);
    dyn_pipeline_result res;
    dyn_error err;
    assert_int_equal(dyn_pipeline_plan(pp, f.ds.samples, f.ds.n, &res, &err), DYN_OK);
    check_result(&res, 4, 2);
    for (int32_t r = 0; r < 2; r++) {
        const dyn_replica_plan *rp = &res.replicas[r];
        for (int32_t k = 0; k < DYN_SCHEDULE_COUNT; k++) {
            dyn_replica_plan named;
            assert_int_equal(dyn_pipeline_plan_replica(pp, &res.batch, r, k, &named, &err), DYN_OK);
            assert_int_equal(named.schedule, k);
            assert_true(rp->makespan_ms <= named.makespan_ms * (1 + 1e-12));
            dyn_replica_plan_free(&named);
        }
    }
    dyn_pipeline_result_free(&res);
    dyn_pipeline_free(pp);
    dyn_planner_free(pl);
    fixture_close(&f);
}

/* Two handles (each with its own planner, one shared cost model) planning
 * the same batch on two threads at once give the bytes one thread gives. */
typedef struct job {
    const fixture *f;
    uint8_t *bytes[2];
    size_t len[2];
    double makespan[2];
    int ok;
} job;

static void *job_run(void *arg)
{
    job *j = arg;
    dyn_error err;
    dyn_plan_options po;
    dyn_plan_options_default(&po);
    po.stages = 4;
    po.chunks = 2;
    po.dp = 2;
    po.max_seqlen = 512;
    dyn_planner *pl = dyn_planner_create(j->f->cm, &po, &err);
    dyn_pipeline_options o;
    dyn_pipeline_options_default(&o);
    dyn_pipeline *pp = pl ? dyn_pipeline_create(pl, &o, &err) : NULL;
    dyn_pipeline_result res;
    j->ok = pp != NULL && dyn_pipeline_plan(pp, j->f->ds.samples, j->f->ds.n, &res, &err) == DYN_OK;
    for (int32_t r = 0; j->ok && r < 2; r++) {
        j->ok = dyn_exec_plan_serialize(&res.replicas[r].plan, &j->bytes[r], &j->len[r], &err) == DYN_OK;
        j->makespan[r] = res.replicas[r].makespan_ms;
    }
    if (pp) dyn_pipeline_result_free(&res);
    dyn_pipeline_free(pp);
    dyn_planner_free(pl);
    return NULL;
}

static void test_deterministic_across_threads(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 64);
    job alone = {.f = &f}, a = {.f = &f}, b = {.f = &f};
    job_run(&alone);
    assert_true(alone.ok);
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, job_run, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, job_run, &b), 0);
    assert_int_equal(pthread_join(ta, NULL), 0);
    assert_int_equal(pthread_join(tb, NULL), 0);
    assert_true(a.ok && b.ok);
    for (int r = 0; r < 2; r++) {
        const job *js[2] = {&a, &b};
        for (int k = 0; k < 2; k++) {
            assert_int_equal(js[k]->len[r], alone.len[r]);
            assert_memory_equal(js[k]->bytes[r], alone.bytes[r], alone.len[r]);
            assert_true(js[k]->makespan[r] == alone.makespan[r]);
            free(js[k]->bytes[r]);
        }
        free(alone.bytes[r]);
    }
    fixture_close(&f);
}

/* Fewer micro-batches than replicas: the others are idle (n_microbatches
 * 0), not an error. */
static void test_idle_replica(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 8);
    dyn_planner *pl = planner_new(&f, 2, 1, 3);
    dyn_pipeline *pp = pipeline_new(pl, DYN_SCHEDULE_ZB);
    dyn_pipeline_result res;
    dyn_error err;
    assert_int_equal(dyn_pipeline_plan(pp, f.ds.samples, 1, &res, &err), DYN_OK);
    assert_int_equal(res.batch.n_microbatches, 1);
    check_result(&res, 2, 3);
    int32_t idle = 0;
    for (int32_t r = 0; r < 3; r++) idle += res.replicas[r].n_microbatches == 0;
    assert_int_equal(idle, 2);
    dyn_pipeline_result_free(&res);
    dyn_pipeline_free(pp);
    dyn_planner_free(pl);
    fixture_close(&f);
}

static dyn_status cost_one(void *ctx, const dyn_mb_shape *mb, dyn_mb_cost *out, dyn_error *err)
{
    (void)ctx;
    (void)err;
    out->time_ms = mb->rows * mb->enc_len * 0.01;
    out->stored_mb = out->peak_mb = mb->rows;
    return DYN_OK;
}

static void test_bad_arguments(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 8);
    dyn_planner *pl = planner_new(&f, 2, 1, 1);
    dyn_pipeline_options o;
    dyn_error err;
    dyn_pipeline_options_default(&o);
    o.order_groups = 0;
    assert_null(dyn_pipeline_create(pl, &o, &err));
    assert_int_equal(err.code, DYN_ERR_INVALID_ARG);
    dyn_pipeline_options_default(&o);
    o.schedule = DYN_SCHEDULE_AUTO + 1;
    assert_null(dyn_pipeline_create(pl, &o, &err));
    assert_int_equal(err.code, DYN_ERR_INVALID_ARG);
    dyn_pipeline_options_default(&o);
    assert_null(dyn_pipeline_create(NULL, &o, &err));
    assert_int_equal(err.code, DYN_ERR_INVALID_ARG);
    /* A custom planner has no cost model to build stage costs from. */
    dyn_plan_options po;
    dyn_plan_options_default(&po);
    po.max_seqlen = 512;
    dyn_planner *custom = dyn_planner_create_custom(DYN_MODEL_GPT, cost_one, NULL, 0, &po, &err);
    assert_non_null(custom);
    assert_null(dyn_pipeline_create(custom, &o, &err));
    assert_int_equal(err.code, DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "custom planner"));
    /* Schedule names, auto included. */
    dyn_schedule k = DYN_SCHEDULE_1F1B;
    assert_int_equal(dyn_schedule_parse("auto", &k, &err), DYN_OK);
    assert_int_equal(k, DYN_SCHEDULE_AUTO);
    assert_string_equal(dyn_schedule_name(k), "auto");
    assert_int_equal(dyn_schedule_parse("zb", &k, &err), DYN_OK);
    assert_int_equal(k, DYN_SCHEDULE_ZB);
    assert_string_equal(dyn_schedule_name(k), "zb");
    assert_int_not_equal(dyn_schedule_parse("fastest", &k, &err), DYN_OK);
    /* A replica out of range. */
    dyn_pipeline *pp = dyn_pipeline_create(pl, &o, &err);
    assert_non_null(pp);
    dyn_pipeline_result res;
    assert_int_equal(dyn_pipeline_plan(pp, f.ds.samples, f.ds.n, &res, &err), DYN_OK);
    dyn_replica_plan rp;
    assert_int_equal(dyn_pipeline_plan_replica(pp, &res.batch, 1, DYN_SCHEDULE_1F1B, &rp, &err), DYN_ERR_INVALID_ARG);
    dyn_replica_plan_free(&rp);
    dyn_pipeline_result_free(&res);
    dyn_pipeline_free(pp);
    dyn_planner_free(custom);
    dyn_planner_free(pl);
    fixture_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_named_schedule_every_replica),
        cmocka_unit_test(test_auto_traceable_and_never_slower),
        cmocka_unit_test(test_deterministic_across_threads),
        cmocka_unit_test(test_idle_replica),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
