/* test_tune.c — tuned baseline knobs (dynapipe/pipeline.h, dyn_pipeline_tune):
 * every value tried is scored as the independent route (an explicit knob,
 * dyn_pipeline_plan on each batch, mean of the slowest replica's makespan)
 * scores it; the chosen value is the fastest of those tried and no slower
 * than the old default (the most that fit); values that leave a
 * data-parallel replica idle lose to those that do not; dynapipe has no
 * knob. And dynapipe's enable_packing (the default): the planner's
 * objective and the pipeline's simulated iteration are never worse than the
 * DP alone's or any document-masked packing's (1, 2, 4, 8 rows), each
 * planned on its own. And the tuned layer split (dyn_pipeline_tune_split):
 * its times are the independent route's (options with those weights,
 * dyn_pipeline_plan on each batch, mean iteration), its first round's
 * weights are those of the micro-batches planned with the default split,
 * a kept split simulates faster than the default and a split not kept
 * leaves the options' weights; the same inputs give the same result. And
 * dynapipe's tuned split is never behind a candidate baseline's own: on a
 * case where document-masked packing with its own split beats dynapipe
 * under every split of dynapipe's own rounds, the tuned dynapipe is no
 * slower than that baseline, tuned as the CLI tunes it or at each of 1, 2,
 * 4, 8 rows with its split (test_split_never_behind). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/data.h"
#include "dynapipe/model_config.h"
#include "dynapipe/pipeline.h"

#define N_BATCHES 2

typedef struct fixture {
    dyn_cost_model *cm;
    dyn_dataset ds;
    const dyn_sample *batches[N_BATCHES];
    int32_t counts[N_BATCHES];
    dyn_sampler *smp;
} fixture;

/* Model cfg on machine m, N_BATCHES global batches of batch_tokens tokens
 * of the built-in lengths (seed 3) at cfg's max_seqlen. */
static void fixture_open_on(fixture *f, const dyn_model_config *cfg, const dyn_machine *m, int64_t batch_tokens)
{
    dyn_error err;
    f->cm = dyn_cost_model_create_analytic(cfg, m, &err);
    assert_non_null(f->cm);
    assert_int_equal(dyn_dataset_synthetic_flan(3, 2000, cfg->max_seqlen, cfg->kind, &f->ds, &err), DYN_OK);
    f->smp = dyn_sampler_create(&f->ds, batch_tokens, &err);
    assert_non_null(f->smp);
    for (int b = 0; b < N_BATCHES; b++) {
        assert_int_equal(dyn_sampler_next(f->smp, &f->batches[b], &f->counts[b], &err), DYN_OK);
        assert_true(f->counts[b] > 0);
    }
}

/* The tiny model of kind with the preset's layers, or layers and
 * dec_layers when not 0, at max length 512 on the analytic cpu machine. */
static void fixture_open_layers(fixture *f, dyn_model_kind kind, int64_t batch_tokens, int32_t layers,
                                int32_t dec_layers)
{
    dyn_error err;
    dyn_model_config cfg;
    dyn_machine m;
    assert_int_equal(dyn_model_config_preset(kind == DYN_MODEL_GPT ? "gpt-tiny" : "t5-tiny", &cfg, &err),
                     DYN_OK);
    cfg.max_seqlen = 512;
    if (layers) cfg.n_layers = layers;
    if (dec_layers) cfg.n_dec_layers = dec_layers;
    assert_int_equal(dyn_machine_resolve("cpu", &m, &err), DYN_OK);
    fixture_open_on(f, &cfg, &m, batch_tokens);
}

static void fixture_open(fixture *f, dyn_model_kind kind, int64_t batch_tokens)
{
    fixture_open_layers(f, kind, batch_tokens, 0, 0);
}

static void fixture_close(fixture *f)
{
    dyn_sampler_free(f->smp);
    dyn_dataset_free(&f->ds);
    dyn_cost_model_free(f->cm);
}

static void options(dyn_plan_options *o, dyn_batching method, int32_t S, int32_t dp)
{
    dyn_plan_options_default(o);
    o->method = method;
    o->stages = S;
    o->dp = dp;
    o->max_seqlen = 512;
}

/* Independent score of one explicit knob: mean over batches of the slowest
 * replica's makespan; INFINITY if some batch is infeasible. *busy: every
 * replica had micro-batches. */
static double score(const fixture *f, const dyn_plan_options *o, int64_t knob, int *busy)
{
    dyn_plan_options x = *o;
    dyn_tune_knob_set(&x, knob);
    assert_int_equal(dyn_tune_knob_get(&x), knob);
    dyn_error err;
    dyn_planner *pl = dyn_planner_create(f->cm, &x, &err);
    assert_non_null(pl);
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    dyn_pipeline *pp = dyn_pipeline_create(pl, &po, &err);
    assert_non_null(pp);
    double sum = 0.0;
    *busy = 1;
    for (int b = 0; b < N_BATCHES; b++) {
        dyn_pipeline_result r;
        dyn_status st = dyn_pipeline_plan(pp, f->batches[b], f->counts[b], &r, &err);
        if (st == DYN_ERR_INFEASIBLE) {
            sum = INFINITY;
            break;
        }
        assert_int_equal(st, DYN_OK);
        double worst = 0.0;
        for (int32_t k = 0; k < r.n_replicas; k++) {
            if (r.replicas[k].makespan_ms > worst) worst = r.replicas[k].makespan_ms;
            if (r.replicas[k].n_microbatches == 0) *busy = 0;
        }
        sum += worst;
        dyn_pipeline_result_free(&r);
    }
    dyn_pipeline_free(pp);
    dyn_planner_free(pl);
    return sum / N_BATCHES;
}

static void check_method(dyn_model_kind kind, dyn_batching method, int32_t S, int32_t dp, int64_t tokens)
{
    fixture f;
    fixture_open(&f, kind, tokens);
    dyn_plan_options o;
    options(&o, method, S, dp);
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    dyn_tune_result t;
    dyn_error err;
    dyn_status st = dyn_pipeline_tune(f.cm, &o, &po, f.batches, f.counts, N_BATCHES, &t, &err);
    if (st != DYN_OK) print_error("%s\n", err.msg);
    assert_int_equal(st, DYN_OK);
    assert_true(t.n_tried >= 2);
    int chosen_seen = 0, any_busy = 0;
    double best_busy = INFINITY;
    for (int32_t i = 0; i < t.n_tried; i++) {
        int busy;
        double ms = score(&f, &o, t.tried[i], &busy);
        if (isinf(ms)) assert_true(isinf(t.tried_ms[i]));
        else assert_true(fabs(ms - t.tried_ms[i]) <= 1e-9 * ms);
        if (isfinite(ms) && busy) {
            any_busy = 1;
            if (ms < best_busy) best_busy = ms;
        }
        chosen_seen |= t.tried[i] == t.value;
    }
    assert_true(chosen_seen);
    if (any_busy) {
        assert_true(t.all_replicas_busy);
        assert_true(t.iter_ms <= best_busy);
    }
    /* The old default (knob 0: the most that fit) is never faster. */
    int busy0;
    double old = score(&f, &o, 0, &busy0);
    if (isfinite(old) && (busy0 || !any_busy)) assert_true(t.iter_ms <= old * (1 + 1e-12));
    fixture_close(&f);
}

static void test_tune_gpt(void **state)
{
    (void)state;
    check_method(DYN_MODEL_GPT, DYN_BATCH_PADDING, 2, 1, 8192);
    check_method(DYN_MODEL_GPT, DYN_BATCH_PACKING, 2, 1, 8192);
    check_method(DYN_MODEL_GPT, DYN_BATCH_PACKING_DOCMASK, 2, 1, 8192);
    check_method(DYN_MODEL_GPT, DYN_BATCH_TOKEN, 2, 1, 8192);
}

static void test_tune_t5(void **state)
{
    (void)state;
    check_method(DYN_MODEL_T5, DYN_BATCH_PACKING, 2, 1, 8192);
    check_method(DYN_MODEL_T5, DYN_BATCH_TOKEN, 2, 1, 8192);
}

/* A small batch over two replicas: the value chosen gives both work. */
static void test_tune_dp_busy(void **state)
{
    (void)state;
    check_method(DYN_MODEL_GPT, DYN_BATCH_PACKING, 2, 2, 2048);
}

static void test_tune_no_knob(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, DYN_MODEL_GPT, 4096);
    dyn_plan_options o;
    options(&o, DYN_BATCH_DYNAPIPE, 2, 1);
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    dyn_tune_result t;
    dyn_error err;
    assert_int_equal(dyn_pipeline_tune(f.cm, &o, &po, f.batches, f.counts, N_BATCHES, &t, &err),
                     DYN_ERR_INVALID_ARG);
    assert_null(dyn_tune_knob_name(DYN_BATCH_DYNAPIPE));
    assert_string_equal(dyn_tune_knob_name(DYN_BATCH_PACKING_DOCMASK), "pack-rows");
    fixture_close(&f);
}

/* Plan one batch with options o through a fresh pipeline: objective and
 * slowest replica's makespan. */
static void plan_one(const fixture *f, const dyn_plan_options *o, const dyn_sample *b, int32_t n, double *obj,
                     double *ms)
{
    dyn_error err;
    dyn_planner *pl = dyn_planner_create(f->cm, o, &err);
    assert_non_null(pl);
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    dyn_pipeline *pp = dyn_pipeline_create(pl, &po, &err);
    assert_non_null(pp);
    dyn_pipeline_result r;
    assert_int_equal(dyn_pipeline_plan(pp, b, n, &r, &err), DYN_OK);
    /* every sample exactly once */
    int32_t *seen = calloc((size_t)n, sizeof *seen);
    assert_non_null(seen);
    assert_int_equal(r.batch.n_samples, n);
    for (int32_t i = 0; i < n; i++) seen[r.batch.sample_ids[i] - b[0].id]++;
    for (int32_t i = 0; i < n; i++) assert_int_equal(seen[i], 1);
    free(seen);
    *obj = r.batch.objective_ms;
    *ms = 0.0;
    for (int32_t k = 0; k < r.n_replicas; k++)
        if (r.replicas[k].makespan_ms > *ms) *ms = r.replicas[k].makespan_ms;
    dyn_pipeline_result_free(&r);
    dyn_pipeline_free(pp);
    dyn_planner_free(pl);
}

static void check_packing_option(dyn_model_kind kind)
{
    fixture f;
    fixture_open(&f, kind, 8192);
    for (int b = 0; b < N_BATCHES; b++) {
        dyn_plan_options o;
        options(&o, DYN_BATCH_DYNAPIPE, 2, 1);
        o.enable_packing = 0; /* the DP alone */
        double dp_obj, dp_ms;
        plan_one(&f, &o, f.batches[b], f.counts[b], &dp_obj, &dp_ms);
        double best_obj = dp_obj, best_ms = dp_ms;
        for (int32_t rows = 1; rows <= 8; rows *= 2) {
            dyn_plan_options q;
            options(&q, DYN_BATCH_PACKING_DOCMASK, 2, 1);
            q.pack_rows = rows;
            double obj, ms;
            plan_one(&f, &q, f.batches[b], f.counts[b], &obj, &ms);
            if (obj < best_obj) best_obj = obj;
            if (ms < best_ms) best_ms = ms;
        }
        o.enable_packing = 1;
        double obj, ms;
        plan_one(&f, &o, f.batches[b], f.counts[b], &obj, &ms);
        assert_true(ms <= best_ms * (1 + 1e-12)); /* (padding and token are candidates too:
                                                     test_never_behind.c) */
        /* the planner alone (no simulation) keeps the lower objective */
        dyn_error err;
        dyn_batch_plan bp;
        assert_int_equal(dyn_plan_batch_once(f.cm, &o, f.batches[b], f.counts[b], &bp, &err), DYN_OK);
        assert_true(bp.objective_ms <= dp_obj * (1 + 1e-12));
        assert_true(bp.objective_ms <= best_obj * (1 + 1e-12));
        dyn_batch_plan_free(&bp);
    }
    fixture_close(&f);
}

static void test_dp_packing_gpt(void **state)
{
    (void)state;
    check_packing_option(DYN_MODEL_GPT);
}

static void test_dp_packing_t5(void **state)
{
    (void)state;
    check_packing_option(DYN_MODEL_T5);
}

/* Independent route: the batches planned with o (its split weights
 * included), the mean of their iterations (ms; INFINITY if one does not
 * fit), and into w (if not NULL) each layer kind's fwd + bwd over every
 * planned micro-batch, under its replica's recompute mode. */
static double iteration_mean(const fixture *f, const dyn_plan_options *o, double *w)
{
    dyn_error err;
    dyn_planner *pl = dyn_planner_create(f->cm, o, &err);
    assert_non_null(pl);
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    dyn_pipeline *pp = dyn_pipeline_create(pl, &po, &err);
    assert_non_null(pp);
    double sum = 0.0;
    if (w) memset(w, 0, DYN_LAYER_KIND_COUNT * sizeof(double));
    for (int b = 0; b < N_BATCHES; b++) {
        dyn_pipeline_result r;
        dyn_status st = dyn_pipeline_plan(pp, f->batches[b], f->counts[b], &r, &err);
        if (st == DYN_ERR_INFEASIBLE) {
            sum = INFINITY;
            break;
        }
        assert_int_equal(st, DYN_OK);
        sum += r.iteration_ms;
        for (int32_t i = 0; w && i < r.batch.n_microbatches; i++)
            for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
                if (!dyn_cost_kind_present(dyn_cost_model_config(f->cm), (dyn_layer_kind)k)) continue;
                dyn_layer_cost lc;
                dyn_recompute rc = r.replicas[r.batch.mbs[i].replica].recompute;
                assert_int_equal(dyn_cost_layer(f->cm, (dyn_layer_kind)k, &r.batch.mbs[i].shape, rc, &lc, &err),
                                 DYN_OK);
                w[k] += lc.fwd_ms + lc.bwd_ms;
            }
        dyn_pipeline_result_free(&r);
    }
    dyn_pipeline_free(pp);
    dyn_planner_free(pl);
    return sum / N_BATCHES;
}

static int close_to(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fabs(b);
}

/* Tune the split for method (knob: its value; 0 for dynapipe) on S stages
 * of the tiny model with `layers` (+ dec_layers; 0: the preset's) and
 * check it as the file's comment says. *kept: whether it was kept;
 * *rounds: tuned splits simulated. */
static void check_split(dyn_model_kind kind, int32_t layers, int32_t dec_layers, dyn_batching method, int64_t knob,
                        int32_t S, int *kept, int *rounds)
{
    fixture f;
    fixture_open_layers(&f, kind, 4096, layers, dec_layers);
    dyn_plan_options o;
    options(&o, method, S, 1);
    dyn_tune_knob_set(&o, knob);
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    dyn_split_tune_result r, again;
    dyn_error err;
    dyn_status st = dyn_pipeline_tune_split(f.cm, &o, &po, f.batches, f.counts, N_BATCHES, &r, &err);
    if (st != DYN_OK) print_error("%s\n", err.msg);
    assert_int_equal(st, DYN_OK);
    assert_int_equal(dyn_pipeline_tune_split(f.cm, &o, &po, f.batches, f.counts, N_BATCHES, &again, &err), DYN_OK);
    assert_memory_equal(&r, &again, sizeof r); /* deterministic, bit for bit */
    double w_base[DYN_LAYER_KIND_COUNT];
    double base = iteration_mean(&f, &o, w_base);
    assert_true(close_to(r.base_ms, base));
    assert_true(r.n_rounds >= 0 && r.n_rounds <= DYN_SPLIT_TUNE_ROUNDS);
    *kept = r.kept;
    *rounds = r.n_rounds;
    if (r.kept) {
        assert_true(r.n_rounds >= 1);
        assert_true(r.tuned_ms < r.base_ms);
        dyn_plan_options t = o;
        memcpy(t.split_weight, r.weight, sizeof r.weight);
        assert_true(close_to(iteration_mean(&f, &t, NULL), r.tuned_ms));
        if (r.n_rounds == 1 && r.source == method) /* round 1's weights: the default split's micro-batches' */
            for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) assert_true(close_to(r.weight[k], w_base[k]));
    } else {
        double zero[DYN_LAYER_KIND_COUNT] = {0};
        assert_memory_equal(r.weight, zero, sizeof zero);
        assert_true(r.n_rounds == 0 || !(r.tuned_ms < r.base_ms));
    }
    if (r.n_rounds >= 1) { /* round 1 is the default split's micro-batches' split, whatever is kept */
        dyn_plan_options t = o;
        memcpy(t.split_weight, w_base, sizeof w_base);
        assert_true(iteration_mean(&f, &t, NULL) >= r.tuned_ms * (1 - 1e-12));
    }
    fixture_close(&f);
}

static void test_split_t5(void **state)
{
    (void)state;
    int kept, rounds;
    /* t5-tiny's 2 + 2 blocks on 2 stages, FLAN-like short targets: the
     * max-length row's split puts the decoder alone on stage 1, and the
     * micro-batches' split moves an encoder block over (the analytic cpu
     * machine; what is asserted is the model's own arithmetic) */
    check_split(DYN_MODEL_T5, 0, 0, DYN_BATCH_DYNAPIPE, 0, 2, &kept, &rounds);
    assert_true(kept);
    check_split(DYN_MODEL_T5, 0, 0, DYN_BATCH_PADDING, 1, 2, &kept, &rounds);
    assert_true(kept);
    check_split(DYN_MODEL_T5, 0, 0, DYN_BATCH_TOKEN, 512, 3, &kept, &rounds);
    /* the micro-batches' split is tried and simulates slower: not kept */
    check_split(DYN_MODEL_T5, 2, 3, DYN_BATCH_PACKING_DOCMASK, 4, 2, &kept, &rounds);
    assert_true(rounds >= 1);
    assert_false(kept);
    /* the same split as the max-length row's: nothing to simulate */
    check_split(DYN_MODEL_T5, 0, 0, DYN_BATCH_PACKING_DOCMASK, 2, 2, &kept, &rounds);
    assert_int_equal(rounds, 0);
}

static void test_split_gpt(void **state)
{
    (void)state;
    int kept, rounds;
    check_split(DYN_MODEL_GPT, 0, 0, DYN_BATCH_DYNAPIPE, 0, 2, &kept, &rounds);
    check_split(DYN_MODEL_GPT, 5, 0, DYN_BATCH_PACKING_DOCMASK, 2, 4, &kept, &rounds);
    check_split(DYN_MODEL_GPT, 8, 0, DYN_BATCH_TOKEN, 1024, 3, &kept, &rounds);
}

/* ---- never behind a baseline's own split ----------------------------------- */

/* dynapipe's own rounds, computed independently (iteration_mean's weights):
 * the best mean over o's split, the split of its micro-batches, and the
 * split of that split's micro-batches. */
static double own_rounds_ms(const fixture *f, dyn_plan_options o)
{
    double w[DYN_LAYER_KIND_COUNT], next[DYN_LAYER_KIND_COUNT];
    double best = iteration_mean(f, &o, w);
    for (int r = 0; r < DYN_SPLIT_TUNE_ROUNDS && isfinite(best); r++) {
        memcpy(o.split_weight, w, sizeof w);
        double ms = iteration_mean(f, &o, next);
        if (ms < best) best = ms;
        if (!isfinite(ms)) break;
        memcpy(w, next, sizeof w);
    }
    return best;
}

/* A baseline (o: its method, knob 0) tuned as the CLI tunes it
 * (src/cli/plan_args.c): the knob, the split at that knob, the knob again
 * under a new split; its mean iteration by iteration_mean. */
static double baseline_tuned_ms(const fixture *f, dyn_plan_options o)
{
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    dyn_tune_result t;
    dyn_split_tune_result s;
    dyn_error err;
    assert_int_equal(dyn_pipeline_tune(f->cm, &o, &po, f->batches, f->counts, N_BATCHES, &t, &err), DYN_OK);
    dyn_tune_knob_set(&o, t.value);
    assert_int_equal(dyn_pipeline_tune_split(f->cm, &o, &po, f->batches, f->counts, N_BATCHES, &s, &err), DYN_OK);
    if (s.kept) {
        memcpy(o.split_weight, s.weight, sizeof s.weight);
        assert_int_equal(dyn_pipeline_tune(f->cm, &o, &po, f->batches, f->counts, N_BATCHES, &t, &err), DYN_OK);
        dyn_tune_knob_set(&o, t.value);
    }
    return iteration_mean(f, &o, NULL);
}

/* A baseline at an explicit knob value with the split tuned for it (as
 * scripts/cluster_sim.sh sweeps it); INFINITY if it does not fit. */
static double baseline_at_ms(const fixture *f, dyn_plan_options o, int64_t knob)
{
    dyn_tune_knob_set(&o, knob);
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    dyn_split_tune_result s;
    dyn_error err;
    dyn_status st = dyn_pipeline_tune_split(f->cm, &o, &po, f->batches, f->counts, N_BATCHES, &s, &err);
    if (st == DYN_ERR_INFEASIBLE) return INFINITY;
    assert_int_equal(st, DYN_OK);
    if (s.kept) memcpy(o.split_weight, s.weight, sizeof s.weight);
    return iteration_mean(f, &o, NULL);
}

/* gpt-6.7b on A100s (80 GB), 8 stages, max length L, batches of `tokens`:
 * document-masked packing with its own tuned split beats dynapipe under
 * every split of dynapipe's own rounds (the configuration's point, found
 * by search, as scripts/cluster_sim.sh's 0.98x row); dynapipe's tuned split
 * must still leave it no slower than that baseline tuned either way, and
 * the split kept must be the baseline's. */
static void check_split_never_behind(int32_t L, int64_t tokens, int32_t dp)
{
    dyn_model_config cfg;
    dyn_machine m;
    dyn_error err;
    assert_int_equal(dyn_model_config_preset("gpt-6.7b", &cfg, &err), DYN_OK);
    cfg.max_seqlen = L;
    assert_int_equal(dyn_machine_resolve("a100", &m, &err), DYN_OK);
    m.device_memory_mb = 81920;
    fixture f;
    fixture_open_on(&f, &cfg, &m, tokens);
    dyn_plan_options o, b;
    options(&o, DYN_BATCH_DYNAPIPE, 8, dp);
    o.max_seqlen = L;
    options(&b, DYN_BATCH_PACKING_DOCMASK, 8, dp);
    b.max_seqlen = L;
    double own = own_rounds_ms(&f, o);
    double base = baseline_tuned_ms(&f, b);
    for (int64_t rows = 1; rows <= 8; rows *= 2) {
        double ms = baseline_at_ms(&f, b, rows);
        if (ms < base) base = ms;
    }
    assert_true(base < own * (1 - 1e-9));
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    dyn_split_tune_result r;
    assert_int_equal(dyn_pipeline_tune_split(f.cm, &o, &po, f.batches, f.counts, N_BATCHES, &r, &err), DYN_OK);
    dyn_plan_options t = o;
    memcpy(t.split_weight, r.weight, sizeof r.weight);
    double dyn = iteration_mean(&f, &t, NULL);
    assert_true(close_to(dyn, r.kept ? r.tuned_ms : r.base_ms));
    assert_true(dyn <= base * (1 + 1e-12));
    /* and it got there with a baseline's split */
    assert_true(r.kept);
    assert_true(r.n_candidate_splits >= 1);
    assert_true(r.source != DYN_BATCH_DYNAPIPE);
    assert_true(r.source_knob > 0);
    fixture_close(&f);
}

static void test_split_never_behind(void **state)
{
    (void)state;
    check_split_never_behind(512, 16384, 1);
}

/* Bad input: no batches, and a bad weight in the options. */
static void test_split_bad_input(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, DYN_MODEL_T5, 4096);
    dyn_plan_options o;
    options(&o, DYN_BATCH_DYNAPIPE, 2, 1);
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    dyn_split_tune_result r;
    dyn_error err;
    assert_int_equal(dyn_pipeline_tune_split(f.cm, &o, &po, f.batches, f.counts, 0, &r, &err), DYN_ERR_INVALID_ARG);
    o.split_weight[DYN_LAYER_DECODER] = -1;
    assert_int_equal(dyn_pipeline_tune_split(f.cm, &o, &po, f.batches, f.counts, N_BATCHES, &r, &err),
                     DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "split_weight[2]"));
    fixture_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tune_gpt),
        cmocka_unit_test(test_tune_t5),
        cmocka_unit_test(test_tune_dp_busy),
        cmocka_unit_test(test_tune_no_knob),
        cmocka_unit_test(test_dp_packing_gpt),
        cmocka_unit_test(test_dp_packing_t5),
        cmocka_unit_test(test_split_t5),
        cmocka_unit_test(test_split_gpt),
        cmocka_unit_test(test_split_never_behind),
        cmocka_unit_test(test_split_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
