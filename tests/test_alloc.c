/* test_alloc.c — the runtime's allocation model (src/runtime/alloc.c)
 * against hand-worked counts: 1F1B on 2 stages, where rank 0 keeps two
 * micro-batches in flight in two arenas and the last rank one, the pools
 * growing only (a later iteration of smaller micro-batches allocates
 * nothing more), and the per-rank time scale of the stage costs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "dynapipe/cost.h"
#include "dynapipe/model_config.h"
#include "dynapipe/pipeline.h"
#include "dynapipe/sched.h"
#include "runtime/alloc.h"

#define M 3
#define S 2

/* A replica plan of 1F1B over hand-set costs: stored[j][s], peak 5 MB
 * (stage 0) and 2 MB (stage 1), nothing sent (no slots), states 100 and 50. */
static void make_plan(dyn_replica_plan *rp, const double stored[M][S])
{
    memset(rp, 0, sizeof *rp);
    dyn_error err;
    assert_int_equal(dyn_stage_costs_alloc(&rp->costs, M, S, &err), DYN_OK);
    for (int j = 0; j < M; j++)
        for (int s = 0; s < S; s++) {
            size_t k = (size_t)j * S + (size_t)s;
            rp->costs.fwd_ms[k] = 1, rp->costs.bwd_ms[k] = 2;
            rp->costs.bwd_input_ms[k] = 1, rp->costs.bwd_weight_ms[k] = 1;
            rp->costs.stored_mb[k] = stored[j][s];
            rp->costs.peak_mb[k] = s == 0 ? 5 : 2;
        }
    rp->costs.states_mb[0] = 100, rp->costs.states_mb[1] = 50;
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = S;
    assert_int_equal(dyn_schedule_build(DYN_SCHEDULE_1F1B, &rp->costs, NULL, &o, &rp->plan, &err), DYN_OK);
    rp->n_microbatches = M;
}

static void test_alloc_1f1b_hand_worked(void **state)
{
    (void)state;
    dyn_model_config cfg;
    dyn_error err;
    assert_int_equal(dyn_model_config_preset("gpt-tiny", &cfg, &err), DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), &err);
    assert_non_null(cm);
    rt_alloc *a = rt_alloc_create(cm, S, 1, NULL, &err);
    assert_non_null(a);
    /* Rank 0 runs F0 F1 B0 F2 B1 B2: F0 takes arena A (10 + 5), F1 arena B
     * (20 + 5), B0 frees A, F2 reuses A, which grows to 30 + 5. Allocated:
     * 100 + 35 + 25 = 160 (the live peak is lower: 100 + 20 + 30 + 5 = 155,
     * the working memory is counted once per arena). Rank 1 runs F0 B0 F1
     * B1 F2 B2 in one arena of the largest, 12 + 2: 50 + 14 = 64. */
    const double big[M][S] = {{10, 4}, {20, 8}, {30, 12}};
    dyn_replica_plan rp;
    make_plan(&rp, big);
    double peak[S], live[S];
    assert_int_equal(rt_alloc_iteration(a, 0, &rp, peak, &err), DYN_OK);
    assert_true(fabs(peak[0] - 160.0) < 1e-9);
    assert_true(fabs(peak[1] - 64.0) < 1e-9);
    assert_int_equal(dyn_exec_plan_memory(&rp.plan, &rp.costs, live, &err), DYN_OK);
    assert_true(fabs(live[0] - 155.0) < 1e-9);
    dyn_exec_plan_free(&rp.plan);
    dyn_stage_costs_free(&rp.costs);
    /* a later iteration of small micro-batches: the pools keep their size */
    const double small[M][S] = {{1, 1}, {1, 1}, {1, 1}};
    make_plan(&rp, small);
    assert_int_equal(rt_alloc_iteration(a, 0, &rp, peak, &err), DYN_OK);
    assert_true(fabs(peak[0] - 160.0) < 1e-9);
    assert_true(fabs(peak[1] - 64.0) < 1e-9);
    /* an idle replica iteration leaves it as it was */
    dyn_replica_plan idle;
    memset(&idle, 0, sizeof idle);
    assert_int_equal(rt_alloc_iteration(a, 0, &idle, peak, &err), DYN_OK);
    assert_true(fabs(peak[0] - 160.0) < 1e-9);
    assert_int_equal(rt_alloc_iteration(a, 1, &rp, peak, &err), DYN_ERR_INVALID_ARG);
    dyn_exec_plan_free(&rp.plan);
    dyn_stage_costs_free(&rp.costs);
    rt_alloc_free(a);
    assert_null(rt_alloc_create(cm, 0, 1, NULL, &err));
    dyn_cost_model_free(cm);
}

/* The optimizer step: the analytic model's 36 bytes per parameter over the
 * machine's memory bandwidth, or the machine's measured rate per million
 * parameters when it has one. */
static void test_optimizer_ms_analytic(void **state)
{
    (void)state;
    dyn_model_config cfg;
    dyn_error err;
    assert_int_equal(dyn_model_config_preset("gpt-tiny", &cfg, &err), DYN_OK);
    const dyn_machine *m = dyn_machine_builtin("cpu");
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, m, &err);
    assert_non_null(cm);
    double want = 2e6 * DYN_OPTIMIZER_BYTES_PER_PARAM / (m->mem_gbps * 1e9) * 1e3;
    assert_true(fabs(dyn_cost_optimizer_ms(cm, 2e6) - want) < 1e-12 * want);
    assert_true(dyn_cost_optimizer_ms(cm, 0) == 0.0);
    dyn_cost_model_free(cm);
    /* a machine that measured its step (--machine auto) is priced at that */
    dyn_machine mm = *m;
    mm.optimizer_ms_per_mparam = 4.5;
    cm = dyn_cost_model_create_analytic(&cfg, &mm, &err);
    assert_non_null(cm);
    assert_true(fabs(dyn_cost_optimizer_ms(cm, 2e6) - 9.0) < 1e-12);
    dyn_cost_model_free(cm);
    /* and a machine file carries it, negative refused */
    assert_int_equal(dyn_machine_parse("{\"base\": \"cpu\", \"optimizer_ms_per_mparam\": 4.5}", "m.json", &mm, &err),
                     DYN_OK);
    assert_true(mm.optimizer_ms_per_mparam == 4.5);
    assert_int_equal(dyn_machine_parse("{\"base\": \"cpu\", \"optimizer_ms_per_mparam\": -1}", "m.json", &mm, &err),
                     DYN_ERR_PARSE);
    assert_non_null(strstr(err.msg, "optimizer_ms_per_mparam"));
}

/* Per-rank time scales multiply each rank's stages' times, not memory. */
static void test_rank_scale(void **state)
{
    (void)state;
    dyn_model_config cfg;
    dyn_error err;
    assert_int_equal(dyn_model_config_preset("gpt-tiny", &cfg, &err), DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), &err);
    assert_non_null(cm);
    dyn_batch_costs *bc = dyn_batch_costs_create(cm, 2, 1, NULL, &err);
    assert_non_null(bc);
    dyn_plan_microbatch mbs[2];
    memset(mbs, 0, sizeof mbs);
    for (int j = 0; j < 2; j++) {
        mbs[j].n_samples = 1;
        mbs[j].first = j;
        mbs[j].shape.rows = 1 + j;
        mbs[j].shape.enc_len = 64;
    }
    dyn_batch_plan bp;
    memset(&bp, 0, sizeof bp);
    bp.n_microbatches = 2;
    bp.mbs = mbs;
    const dyn_stage_costs *c;
    assert_int_equal(dyn_batch_costs_set_batch(bc, &bp, 0, &err), DYN_OK);
    assert_int_equal(dyn_batch_costs_get(bc, 1, DYN_RECOMPUTE_NONE, &c, &err), DYN_OK);
    double f0[4], b0[4], m0[4];
    for (int k = 0; k < 4; k++) f0[k] = c->fwd_ms[k], b0[k] = c->bwd_input_ms[k], m0[k] = c->stored_mb[k];
    const double fwd[2] = {1.5, 2.0}, bwd[2] = {1.25, 3.0};
    assert_int_equal(dyn_batch_costs_set_rank_scale(bc, fwd, bwd, &err), DYN_OK);
    assert_int_equal(dyn_batch_costs_set_batch(bc, &bp, 0, &err), DYN_OK);
    assert_int_equal(dyn_batch_costs_get(bc, 1, DYN_RECOMPUTE_NONE, &c, &err), DYN_OK);
    for (int k = 0; k < 4; k++) {
        assert_true(fabs(c->fwd_ms[k] - f0[k] * fwd[k % 2]) < 1e-12 * f0[k]);
        assert_true(fabs(c->bwd_input_ms[k] - b0[k] * bwd[k % 2]) < 1e-12 * b0[k]);
        assert_true(c->stored_mb[k] == m0[k]);
    }
    const double bad[2] = {1.0, 0.0};
    assert_int_equal(dyn_batch_costs_set_rank_scale(bc, bad, bwd, &err), DYN_ERR_INVALID_ARG);
    dyn_batch_costs_free(bc);
    dyn_cost_model_free(cm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_1f1b_hand_worked),
        cmocka_unit_test(test_optimizer_ms_analytic),
        cmocka_unit_test(test_rank_scale),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
