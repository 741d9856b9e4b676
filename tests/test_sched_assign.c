/* test_sched_assign.c — layer-to-stage assignment: the DP split against brute
 * force over every contiguous split (value and lexicographic tie-break),
 * "stages more than layers" errors, GPT and T5 assignments from the analytic
 * cost model (embedding first, head last, balanced against brute force over
 * the real layer costs), stage costs built from them feeding a valid
 * plan, and the weighted split (per-layer-kind weights, as a run tuned for
 * its micro-batches uses): against brute force over every contiguous split
 * of the flattened layers, and one shape's weights giving exactly the
 * reference-shape assignment, which is the run's default. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/model_config.h" /* defines: dyn_model_config_preset */
#include "sched_testlib.h"         /* defines: tl_simulate */

/* Enumerate every split of n blocks into S non-empty runs in lexicographic
 * order of boundaries; return the first with the smallest slowest stage. */
static double brute(const double *w, int n, int S, double e0, double e1, int *best)
{
    int cut[16]; /* cut[0]=0 < cut[1] < ... < cut[S]=n */
    double best_v = INFINITY;
    cut[0] = 0;
    cut[S] = n;
    for (int s = 1; s < S; s++) cut[s] = s;
    for (;;) {
        double worst = 0;
        for (int s = 0; s < S; s++) {
            double t = (s == 0 ? e0 : 0) + (s == S - 1 ? e1 : 0);
            for (int b = cut[s]; b < cut[s + 1]; b++) t += w[b];
            if (t > worst) worst = t;
        }
        if (worst < best_v) {
            best_v = worst;
            memcpy(best, cut, sizeof(int) * (size_t)(S + 1));
        }
        /* next combination of cut[1..S-1] in lexicographic order */
        int s = S - 1;
        while (s >= 1 && cut[s] == n - (S - s)) s--;
        if (s < 1) break;
        cut[s]++;
        for (int t = s + 1; t < S; t++) cut[t] = cut[t - 1] + 1;
    }
    return best_v;
}

static void test_split_matches_brute_force(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 42);
    for (int iter = 0; iter < 500; iter++) {
        int n = 1 + (int)dyn_rng_below(&rng, 9);
        int S = 1 + (int)dyn_rng_below(&rng, (uint64_t)n);
        double w[16];
        /* small integers: sums are exact, so ties are real ties */
        for (int b = 0; b < n; b++) w[b] = (double)(1 + dyn_rng_below(&rng, 6));
        double e0 = (double)dyn_rng_below(&rng, 4), e1 = (double)dyn_rng_below(&rng, 4);
        int want[16];
        int32_t got[17];
        double v = brute(w, n, S, e0, e1, want), gv = -1;
        assert_int_equal(dyn_stage_split(w, n, S, e0, e1, got, &gv, NULL), DYN_OK);
        assert_true(gv == v);
        for (int s = 0; s <= S; s++) assert_int_equal(got[s], want[s]);
    }
}

static void test_stages_more_than_layers(void **state)
{
    (void)state;
    double w[3] = {1, 1, 1};
    int32_t first[8];
    dyn_error err;
    assert_int_equal(dyn_stage_split(w, 3, 4, 0, 0, first, NULL, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "stages more than layers"));

    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("gpt-tiny", &cfg, NULL), DYN_OK); /* 2 layers */
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), &err);
    assert_non_null(cm);
    dyn_mb_shape ref = {4, 128, 0, 0, 0, 0};
    dyn_stage_assignment a;
    assert_int_equal(dyn_stage_assign(cm, 3, &ref, DYN_RECOMPUTE_NONE, &a, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "stages more than layers"));
    dyn_cost_model_free(cm);
}

/* Assign, then check structure and balance against brute force on the same
 * layer costs, and that per-stage costs sum back to the objective. */
static void check_model(const char *preset, int S, dyn_mb_shape ref)
{
    dyn_model_config cfg;
    dyn_error err;
    assert_int_equal(dyn_model_config_preset(preset, &cfg, NULL), DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("a100"), &err);
    if (cm == NULL) fail_msg("%s", err.msg);
    dyn_stage_assignment a;
    if (dyn_stage_assign(cm, S, &ref, DYN_RECOMPUTE_NONE, &a, &err) != DYN_OK) fail_msg("%s", err.msg);
    int t5 = cfg.kind == DYN_MODEL_T5, ne = cfg.n_layers;
    int nb = ne + (t5 ? cfg.n_dec_layers : 0), nl = nb + 2 + t5;
    assert_int_equal(a.n_layers, nl);
    assert_int_equal(a.layer_kind[0], DYN_LAYER_EMBED);
    assert_int_equal(a.layer_kind[nl - 1], DYN_LAYER_LM_HEAD);
    for (int l = 1; l < nl - 1; l++) /* T5: [embed, encoders, bridge, decoders, head] */
        assert_int_equal(a.layer_kind[l], l <= ne ? DYN_LAYER_ENCODER
                                          : t5 && l == ne + 1 ? DYN_LAYER_BRIDGE
                                                              : t5 ? DYN_LAYER_DECODER : DYN_LAYER_ENCODER);
    assert_int_equal(a.stage_first[0], 0);
    assert_int_equal(a.stage_first[S], nl);
    for (int s = 0; s < S; s++) {
        assert_true(a.stage_first[s + 1] > a.stage_first[s] + (s == 0));
        /* the bridge never begins a stage: it runs with the last encoder block */
        assert_true(!t5 || a.stage_first[s] != ne + 1);
    }

    /* brute force over the same block costs */
    double w[64], e[DYN_LAYER_KIND_COUNT];
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        dyn_layer_cost lc;
        e[k] = 0;
        if (!dyn_cost_kind_present(&cfg, (dyn_layer_kind)k)) continue;
        assert_int_equal(dyn_cost_layer(cm, (dyn_layer_kind)k, &ref, DYN_RECOMPUTE_NONE, &lc, NULL), DYN_OK);
        e[k] = lc.fwd_ms + lc.bwd_ms;
    }
    for (int b = 0; b < nb; b++) w[b] = b < cfg.n_layers ? e[DYN_LAYER_ENCODER] : e[DYN_LAYER_DECODER];
    w[ne - 1] += e[DYN_LAYER_BRIDGE]; /* 0 for GPT */
    int cut[16];
    double v = brute(w, nb, S, e[DYN_LAYER_EMBED], e[DYN_LAYER_LM_HEAD], cut);
    assert_true(fabs(a.max_stage_ms - v) <= 1e-9 * v);

    /* stage costs on the reference shape reproduce the objective */
    dyn_stage_costs c;
    assert_int_equal(dyn_stage_costs_build(cm, &a, &ref, 1, DYN_RECOMPUTE_NONE, &c, &err), DYN_OK);
    double worst = 0;
    for (int s = 0; s < S; s++) {
        double t = c.fwd_ms[s] + c.bwd_ms[s];
        if (t > worst) worst = t;
        assert_true(fabs(c.bwd_input_ms[s] + c.bwd_weight_ms[s] - c.bwd_ms[s]) <= 1e-6 * c.bwd_ms[s]);
        assert_true(c.states_mb[s] > 0);
        assert_true(s == S - 1 ? c.send_mb[s] == 0 : c.send_mb[s] > 0);
    }
    assert_true(fabs(worst - a.max_stage_ms) <= 1e-9 * worst);
    dyn_stage_costs_free(&c);
    dyn_stage_assignment_free(&a);
    dyn_cost_model_free(cm);
}

static void test_gpt_and_t5_balanced(void **state)
{
    (void)state;
    check_model("gpt2-124m", 4, (dyn_mb_shape){4, 512, 0, 0, 0, 0});
    check_model("gpt2-124m", 5, (dyn_mb_shape){2, 1024, 0, 0, 0, 0});
    check_model("t5-base", 4, (dyn_mb_shape){8, 512, 128, 0, 0, 0});
    check_model("t5-base", 7, (dyn_mb_shape){8, 256, 256, 0, 0, 0});
}

/* From a batch plan (two replicas) to costs to a validated plan. */
static void test_costs_from_batch_to_plan(void **state)
{
    (void)state;
    dyn_model_config cfg;
    dyn_error err;
    assert_int_equal(dyn_model_config_preset("t5-base", &cfg, NULL), DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("a100"), &err);
    assert_non_null(cm);
    dyn_plan_microbatch mbs[5];
    memset(mbs, 0, sizeof mbs);
    for (int i = 0; i < 5; i++) {
        mbs[i].replica = i % 2;
        mbs[i].shape = (dyn_mb_shape){2 + i, 128 * (i + 1), 32 * (i + 1), 0, 0, 0};
    }
    dyn_batch_plan bp;
    memset(&bp, 0, sizeof bp);
    bp.n_microbatches = 5;
    bp.mbs = mbs;
    dyn_stage_assignment a;
    assert_int_equal(dyn_stage_assign(cm, 4, &mbs[2].shape, DYN_RECOMPUTE_SELECTIVE, &a, &err), DYN_OK);
    dyn_stage_costs c;
    dyn_mb_shape *shapes = NULL;
    assert_int_equal(dyn_stage_costs_from_batch(cm, &a, &bp, 0, DYN_RECOMPUTE_SELECTIVE, &c, &shapes, &err), DYN_OK);
    assert_int_equal(c.n_microbatches, 3); /* micro-batches 0, 2, 4 */
    assert_int_equal(shapes[1].rows, mbs[2].shape.rows);
    /* bigger micro-batches cost more on every stage */
    for (int s = 0; s < 4; s++) assert_true(c.fwd_ms[2 * 4 + s] > c.fwd_ms[0 * 4 + s]);
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 4;
    o.recompute = DYN_RECOMPUTE_SELECTIVE;
    for (int k = 0; k < DYN_SCHEDULE_COUNT; k++) {
        dyn_exec_plan p;
        if (dyn_schedule_build((dyn_schedule)k, &c, shapes, &o, &p, &err) != DYN_OK) fail_msg("%s", err.msg);
        if (dyn_exec_plan_validate(&p, &err) != DYN_OK) fail_msg("%s", err.msg);
        assert_int_equal(p.mb_shape[2].enc_len, mbs[4].shape.enc_len);
        assert_true(tl_simulate(&p, &c, 0.01) > 0);
        dyn_exec_plan_free(&p);
    }
    assert_int_equal(dyn_stage_costs_from_batch(cm, &a, &bp, 7, DYN_RECOMPUTE_NONE, &c, NULL, &err),
                     DYN_ERR_INVALID_ARG);
    free(shapes);
    dyn_stage_costs_free(&c);
    dyn_stage_assignment_free(&a);
    dyn_cost_model_free(cm);
}

/* Brute force over the flattened layers [EMBED, ENC.., (BRIDGE, DEC..), HEAD]:
 * every choice of stage starts (stage 0 at 0) that gives each stage a
 * transformer block and never starts a stage at the bridge, in
 * lexicographic order; the first with the smallest slowest stage, each
 * layer weighing w[its kind]. */
static double brute_layers(const int *kind, int nl, int S, const double *w, int *best)
{
    int cut[20];
    double best_v = INFINITY;
    cut[0] = 0;
    cut[S] = nl;
    for (int s = 1; s < S; s++) cut[s] = s;
    for (;;) {
        int ok = 1;
        double worst = 0;
        for (int s = 0; s < S && ok; s++) {
            int blocks = 0;
            double t = 0;
            for (int l = cut[s]; l < cut[s + 1]; l++) {
                t += w[kind[l]];
                blocks += kind[l] == DYN_LAYER_ENCODER || kind[l] == DYN_LAYER_DECODER;
            }
            ok = blocks > 0 && (s == 0 || kind[cut[s]] != DYN_LAYER_BRIDGE);
            if (t > worst) worst = t;
        }
        if (ok && worst < best_v) {
            best_v = worst;
            memcpy(best, cut, sizeof(int) * (size_t)(S + 1));
        }
        int s = S - 1;
        while (s >= 1 && cut[s] == nl - (S - s)) s--;
        if (s < 1) break;
        cut[s]++;
        for (int t = s + 1; t < S; t++) cut[t] = cut[t - 1] + 1;
    }
    return best_v;
}

static void test_weighted_split_matches_brute_force(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 7);
    for (int iter = 0; iter < 400; iter++) {
        int t5 = iter % 2;
        dyn_model_config cfg;
        assert_int_equal(dyn_model_config_preset(t5 ? "t5-tiny" : "gpt-tiny", &cfg, NULL), DYN_OK);
        cfg.n_layers = 1 + (int32_t)dyn_rng_below(&rng, t5 ? 5 : 9);
        if (t5) cfg.n_dec_layers = 1 + (int32_t)dyn_rng_below(&rng, 5);
        dyn_error err;
        dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), &err);
        if (cm == NULL) fail_msg("%s", err.msg);
        int nb = cfg.n_layers + (t5 ? cfg.n_dec_layers : 0), nl = nb + 2 + t5;
        int S = 1 + (int)dyn_rng_below(&rng, (uint64_t)nb);
        /* small integers, zero included: sums are exact, ties are real */
        double w[DYN_LAYER_KIND_COUNT];
        for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) w[k] = (double)dyn_rng_below(&rng, 6);
        if (!t5) w[DYN_LAYER_DECODER] = w[DYN_LAYER_BRIDGE] = 0; /* GPT has neither */
        int kind[20];
        kind[0] = DYN_LAYER_EMBED;
        for (int l = 1; l <= cfg.n_layers; l++) kind[l] = DYN_LAYER_ENCODER;
        if (t5) {
            kind[cfg.n_layers + 1] = DYN_LAYER_BRIDGE;
            for (int l = cfg.n_layers + 2; l < nl - 1; l++) kind[l] = DYN_LAYER_DECODER;
        }
        kind[nl - 1] = DYN_LAYER_LM_HEAD;
        int want[20];
        double v = brute_layers(kind, nl, S, w, want);
        dyn_stage_assignment a;
        if (dyn_stage_assign_weights(cm, S, w, &a, &err) != DYN_OK) fail_msg("%s", err.msg);
        assert_int_equal(a.n_layers, nl);
        for (int l = 0; l < nl; l++) assert_int_equal(a.layer_kind[l], kind[l]);
        assert_true(a.max_stage_ms == v);
        for (int s = 0; s <= S; s++) assert_int_equal(a.stage_first[s], want[s]);
        dyn_stage_assignment_free(&a);
        dyn_cost_model_free(cm);
    }
}

/* Two assignments are the same split, bit for bit. */
static void expect_same_assignment(const dyn_stage_assignment *x, const dyn_stage_assignment *y)
{
    assert_int_equal(x->n_stages, y->n_stages);
    assert_int_equal(x->n_layers, y->n_layers);
    assert_memory_equal(x->stage_first, y->stage_first, ((size_t)x->n_stages + 1) * sizeof(int32_t));
    assert_memory_equal(x->layer_kind, y->layer_kind, (size_t)x->n_layers * sizeof(int32_t));
    assert_memory_equal(&x->max_stage_ms, &y->max_stage_ms, sizeof(double));
}

/* The weights of shapes are each kind's fwd + bwd summed over them; one
 * shape's weights give exactly dyn_stage_assign's split for that shape,
 * and no weights (NULL or all 0) the run's default: one row of max_seqlen
 * tokens. Scaling every weight by 2 (exact) changes no boundary. */
static void test_one_shape_weights_are_the_reference(void **state)
{
    (void)state;
    const char *presets[] = {"gpt-mini", "t5-mini", "t5-base", "gpt2-124m"};
    for (int p = 0; p < 4; p++) {
        dyn_model_config cfg;
        dyn_error err;
        assert_int_equal(dyn_model_config_preset(presets[p], &cfg, NULL), DYN_OK);
        cfg.max_seqlen = 1024;
        dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), &err);
        if (cm == NULL) fail_msg("%s", err.msg);
        int t5 = cfg.kind == DYN_MODEL_T5;
        dyn_mb_shape row = {1, 1024, t5 ? 1024 : 0, 0, 0, 0};
        dyn_mb_shape shapes[3] = {{4, 256, t5 ? 32 : 0, 0, 0, 0}, {1, 1024, t5 ? 8 : 0, 0, 0, 0},
                                  {16, 64, t5 ? 16 : 0, 0, 0, 0}};
        /* each kind's weight, from the cost model directly */
        double w1[DYN_LAYER_KIND_COUNT], w3[DYN_LAYER_KIND_COUNT], want1[DYN_LAYER_KIND_COUNT] = {0},
               want3[DYN_LAYER_KIND_COUNT] = {0};
        for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
            if (!dyn_cost_kind_present(&cfg, (dyn_layer_kind)k)) continue;
            dyn_layer_cost lc;
            assert_int_equal(dyn_cost_layer(cm, (dyn_layer_kind)k, &row, DYN_RECOMPUTE_NONE, &lc, NULL), DYN_OK);
            want1[k] = lc.fwd_ms + lc.bwd_ms;
            for (int m = 0; m < 3; m++) {
                assert_int_equal(dyn_cost_layer(cm, (dyn_layer_kind)k, &shapes[m], DYN_RECOMPUTE_SELECTIVE, &lc, NULL),
                                 DYN_OK);
                want3[k] += lc.fwd_ms + lc.bwd_ms;
            }
        }
        assert_int_equal(dyn_stage_weights_of_shapes(cm, &row, 1, DYN_RECOMPUTE_NONE, w1, &err), DYN_OK);
        assert_int_equal(dyn_stage_weights_of_shapes(cm, shapes, 3, DYN_RECOMPUTE_SELECTIVE, w3, &err), DYN_OK);
        assert_memory_equal(w1, want1, sizeof w1);
        assert_memory_equal(w3, want3, sizeof w3);
        assert_true(t5 || (w3[DYN_LAYER_DECODER] == 0 && w3[DYN_LAYER_BRIDGE] == 0));
        for (int32_t S = 1; S <= 4; S++) {
            dyn_stage_assignment ref, by_null, by_zero, by_w, by_2w;
            double zero[DYN_LAYER_KIND_COUNT] = {0}, w2[DYN_LAYER_KIND_COUNT];
            for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) w2[k] = 2 * w1[k];
            assert_int_equal(dyn_stage_assign(cm, S, &row, DYN_RECOMPUTE_NONE, &ref, &err), DYN_OK);
            assert_int_equal(dyn_stage_assign_run(cm, S, NULL, &by_null, &err), DYN_OK);
            assert_int_equal(dyn_stage_assign_run(cm, S, zero, &by_zero, &err), DYN_OK);
            assert_int_equal(dyn_stage_assign_run(cm, S, w1, &by_w, &err), DYN_OK);
            assert_int_equal(dyn_stage_assign_weights(cm, S, w2, &by_2w, &err), DYN_OK);
            expect_same_assignment(&ref, &by_null);
            expect_same_assignment(&ref, &by_zero);
            expect_same_assignment(&ref, &by_w);
            assert_memory_equal(ref.stage_first, by_2w.stage_first, ((size_t)S + 1) * sizeof(int32_t));
            assert_true(by_2w.max_stage_ms == 2 * ref.max_stage_ms);
            dyn_stage_assignment_free(&ref);
            dyn_stage_assignment_free(&by_null);
            dyn_stage_assignment_free(&by_zero);
            dyn_stage_assignment_free(&by_w);
            dyn_stage_assignment_free(&by_2w);
        }
        /* bad weights and no shapes: one clear error each */
        double bad[DYN_LAYER_KIND_COUNT] = {1, NAN, 1, 1, 1};
        dyn_stage_assignment a;
        assert_int_equal(dyn_stage_assign_weights(cm, 2, bad, &a, &err), DYN_ERR_INVALID_ARG);
        assert_non_null(strstr(err.msg, "weight of layer kind 1"));
        bad[1] = -1;
        assert_int_equal(dyn_stage_assign_run(cm, 2, bad, &a, &err), DYN_ERR_INVALID_ARG);
        assert_int_equal(dyn_stage_weights_of_shapes(cm, shapes, 0, DYN_RECOMPUTE_NONE, w1, &err), DYN_ERR_INVALID_ARG);
        dyn_cost_model_free(cm);
    }
}

/* Short targets: the decoder blocks weigh less, so balanced for such
 * micro-batches a T5 split gives the last stage more decoder blocks than
 * the max-length row's split does. */
static void test_t5_short_targets_move_the_boundary(void **state)
{
    (void)state;
    dyn_model_config cfg;
    dyn_error err;
    assert_int_equal(dyn_model_config_preset("t5-mini", &cfg, NULL), DYN_OK);
    cfg.max_seqlen = 2048;
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), &err);
    assert_non_null(cm);
    dyn_mb_shape shapes[2] = {{8, 512, 32, 0, 0, 0}, {2, 2048, 64, 0, 0, 0}};
    double w[DYN_LAYER_KIND_COUNT];
    assert_int_equal(dyn_stage_weights_of_shapes(cm, shapes, 2, DYN_RECOMPUTE_NONE, w, &err), DYN_OK);
    dyn_stage_assignment maxrow, tuned;
    assert_int_equal(dyn_stage_assign_run(cm, 2, NULL, &maxrow, &err), DYN_OK);
    assert_int_equal(dyn_stage_assign_run(cm, 2, w, &tuned, &err), DYN_OK);
    assert_true(tuned.stage_first[1] < maxrow.stage_first[1]); /* stage 0 gives layers to the decoder stage */
    dyn_stage_assignment_free(&maxrow);
    dyn_stage_assignment_free(&tuned);
    dyn_cost_model_free(cm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_matches_brute_force),
        cmocka_unit_test(test_stages_more_than_layers),
        cmocka_unit_test(test_gpt_and_t5_balanced),
        cmocka_unit_test(test_costs_from_batch_to_plan),
        cmocka_unit_test(test_weighted_split_matches_brute_force),
        cmocka_unit_test(test_one_shape_weights_are_the_reference),
        cmocka_unit_test(test_t5_short_targets_move_the_boundary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
