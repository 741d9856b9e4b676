/* test_api_null_err.c — every public function of include/dynapipe/ that
 * takes a `dyn_error *err` keeps common.h's promise that err may be NULL: it
 * is called once with an error record and once with err == NULL on an input
 * that makes it fail, and both calls fail with the same status and neither
 * crashes (issue 25: dyn_pipeline_tune read err->code through a NULL err).
 * The record's call must also leave a message. The few functions no input
 * can make fail (they fail only when memory runs out) are called with
 * err == NULL and must succeed.
 *
 * The functions are listed one by one below. So that a new public function
 * cannot be left out, the test also reads the headers themselves (the
 * folder comes from the DYN_API_INCLUDE_DIR compile definition), collects
 * every declared function with a `dyn_error *err` parameter, and requires
 * that set to equal the list's. Only the public headers are included. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/common.h"       /* defines: dyn_error, dyn_status */
#include "dynapipe/corpus.h"       /* defines: dyn_corpus_* */
#include "dynapipe/cost.h"         /* defines: dyn_cost_*, dyn_layer_kind_parse, ... */
#include "dynapipe/data.h"         /* defines: dyn_dataset_*, dyn_sampler_* */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_*, dyn_machine_* */
#include "dynapipe/pipeline.h"     /* defines: dyn_pipeline_*, dyn_batch_costs_*, ... */
#include "dynapipe/plan.h"         /* defines: dyn_planner_*, dyn_plan_batch_once, ... */
#include "dynapipe/sched.h"        /* defines: dyn_schedule_*, dyn_exec_plan_*, dyn_stage_* */
#include "dynapipe/sim.h"          /* defines: dyn_sim_*, dyn_whatif_*, dyn_order_search, ... */

#ifndef DYN_API_INCLUDE_DIR
#error "DYN_API_INCLUDE_DIR (the folder of the public headers) must be defined"
#endif

/* A path no test machine has: its folder does not exist. */
#define NO_SUCH "/nonexistent-dynapipe-dir/x"

/* Valid objects the failing calls need besides their one bad input. */
typedef struct fixture {
    dyn_model_config cfg; /* gpt-tiny, max_seqlen 512 */
    dyn_machine m;        /* "cpu" */
    dyn_cost_model *cm;
    dyn_dataset ds;       /* 64 built-in samples */
    dyn_plan_options opt; /* 2 stages */
    dyn_batch_plan bp;    /* the first 16 samples */
    dyn_planner *planner;
    dyn_pipeline *pipe;
    dyn_batch_costs *bc;  /* no batch set */
    dyn_stage_assignment asg;
    dyn_stage_costs costs;   /* 3 micro-batches, 2 stages */
    dyn_stage_costs costs4;  /* 4 micro-batches: matches no plan */
    dyn_exec_plan plan;      /* 1F1B over costs, simulated by sim */
    dyn_exec_plan plan4;     /* 1F1B over costs4, never simulated */
    dyn_sim *sim;
    dyn_sim_options simopt;
    dyn_corpus *corpus;      /* 4 built-in samples */
    dyn_layer_cost *points;  /* one point per (kind, recompute) */
    dyn_cost_grid grid;      /* 1 x 1 x 1 */
    double states[DYN_LAYER_KIND_COUNT];
} fixture;

static const int32_t k_grid_rows[1] = {1}, k_grid_enc[1] = {64}, k_grid_dec[1] = {0};

static int fixture_setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    dyn_error e;
    assert_int_equal(dyn_model_config_preset("gpt-tiny", &f->cfg, &e), DYN_OK);
    f->cfg.max_seqlen = 512;
    assert_int_equal(dyn_machine_resolve("cpu", &f->m, &e), DYN_OK);
    f->cm = dyn_cost_model_create_analytic(&f->cfg, &f->m, &e);
    assert_non_null(f->cm);
    assert_int_equal(dyn_dataset_synthetic_flan(1, 64, 512, DYN_MODEL_GPT, &f->ds, &e), DYN_OK);
    dyn_plan_options_default(&f->opt);
    f->opt.stages = 2;
    f->opt.max_seqlen = 512;
    assert_int_equal(dyn_plan_batch_once(f->cm, &f->opt, f->ds.samples, 16, &f->bp, &e), DYN_OK);
    f->planner = dyn_planner_create(f->cm, &f->opt, &e);
    assert_non_null(f->planner);
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    f->pipe = dyn_pipeline_create(f->planner, &po, &e);
    assert_non_null(f->pipe);
    f->bc = dyn_batch_costs_create(f->cm, 2, 1, NULL, &e);
    assert_non_null(f->bc);
    assert_int_equal(dyn_stage_assign_run(f->cm, 2, NULL, &f->asg, &e), DYN_OK);
    dyn_stage_costs *cs[2] = {&f->costs, &f->costs4};
    dyn_exec_plan *ps[2] = {&f->plan, &f->plan4};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(dyn_stage_costs_alloc(cs[k], 3 + k, 2, &e), DYN_OK);
        for (int32_t i = 0; i < cs[k]->n_microbatches * 2; i++) {
            cs[k]->fwd_ms[i] = 1.0;
            cs[k]->bwd_ms[i] = 2.0;
            cs[k]->bwd_input_ms[i] = cs[k]->bwd_weight_ms[i] = 1.0;
            cs[k]->stored_mb[i] = cs[k]->peak_mb[i] = 1.0;
        }
        dyn_sched_options so;
        dyn_sched_options_default(&so);
        so.n_ranks = 2;
        assert_int_equal(dyn_schedule_build(DYN_SCHEDULE_1F1B, cs[k], NULL, &so, ps[k], &e), DYN_OK);
    }
    f->sim = dyn_sim_create(&e);
    assert_non_null(f->sim);
    dyn_sim_options_from_machine(&f->simopt, &f->m, 0);
    assert_int_equal(dyn_sim_run(f->sim, &f->plan, &f->costs, &f->simopt, NULL, &e), DYN_OK);
    dyn_corpus_options co;
    dyn_corpus_options_default(&co);
    co.builtin_samples = 4;
    co.max_seqlen = 512;
    f->corpus = dyn_corpus_open("builtin", &co, &e);
    assert_non_null(f->corpus);
    f->grid = (dyn_cost_grid){1, 1, 1, k_grid_rows, k_grid_enc, k_grid_dec};
    f->points = calloc(DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT, sizeof(*f->points));
    assert_non_null(f->points);
    *state = f;
    return 0;
}

static int fixture_teardown(void **state)
{
    fixture *f = *state;
    free(f->points);
    dyn_corpus_free(f->corpus);
    dyn_sim_free(f->sim);
    dyn_exec_plan_free(&f->plan);
    dyn_exec_plan_free(&f->plan4);
    dyn_stage_costs_free(&f->costs);
    dyn_stage_costs_free(&f->costs4);
    dyn_stage_assignment_free(&f->asg);
    dyn_batch_costs_free(f->bc);
    dyn_pipeline_free(f->pipe);
    dyn_planner_free(f->planner);
    dyn_batch_plan_free(&f->bp);
    dyn_dataset_free(&f->ds);
    dyn_cost_model_free(f->cm);
    free(f);
    return 0;
}

/* ---- one failing call per function ------------------------------------------
 * Each case_<function> makes one call of <function> with err as given and
 * returns its status. For a constructor (NULL on failure) it returns DYN_OK
 * when it got a handle (freed at once), else err's code, or NULL_HANDLE when
 * err is NULL and so no code can be known. */
#define NULL_HANDLE 1000
#define HANDLE_STATUS(h, err) ((h) != NULL ? DYN_OK : (err) != NULL ? (int)(err)->code : NULL_HANDLE)

typedef int (*case_fn)(fixture *f, dyn_error *err);

/* common.h */
static int case_dyn_error_set(fixture *f, dyn_error *err)
{
    (void)f;
    return dyn_error_set(err, DYN_ERR_IO, "what: %s", "where");
}
static int case_dyn_error_prefix(fixture *f, dyn_error *err)
{
    (void)f;
    return dyn_error_prefix(err, DYN_ERR_PARSE, "file.json");
}
static int case_dyn_error_clear(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_error_clear(err);
    return err != NULL ? (int)err->code : DYN_OK;
}

/* corpus.h */
static int case_dyn_corpus_open(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_corpus *c = dyn_corpus_open(NO_SUCH ".jsonl", NULL, err);
    int st = HANDLE_STATUS(c, err);
    dyn_corpus_free(c);
    return st;
}
static int case_dyn_corpus_lengths(fixture *f, dyn_error *err)
{
    /* A built-in corpus with more samples than a dataset can index. */
    (void)f;
    dyn_corpus_options co;
    dyn_corpus_options_default(&co);
    co.builtin_samples = (int64_t)INT32_MAX + 1;
    dyn_error e;
    dyn_corpus *c = dyn_corpus_open("builtin", &co, &e);
    assert_non_null(c);
    dyn_dataset ds = {0, NULL};
    int st = dyn_corpus_lengths(c, &ds, err);
    dyn_dataset_free(&ds);
    dyn_corpus_free(c);
    return st;
}
static int case_dyn_corpus_read(fixture *f, dyn_error *err)
{
    dyn_corpus_sample s;
    return dyn_corpus_read(f->corpus, -1, &s, err);
}
static int case_dyn_corpus_write_indexed(fixture *f, dyn_error *err)
{
    return dyn_corpus_write_indexed(f->corpus, NO_SUCH, err);
}

static int case_dyn_codec_create(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_codec *k = dyn_codec_create(NO_SUCH ".json", NULL, DYN_MODEL_GPT, err);
    int st = HANDLE_STATUS(k, err);
    dyn_codec_free(k);
    return st;
}
/* A codec with a template: decoder-only text is refused. */
static int case_dyn_codec_encode_text(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_error e;
    dyn_codec *k = dyn_codec_create(NULL, "{input}:{target}", DYN_MODEL_GPT, &e);
    assert_non_null(k);
    dyn_codec_tokens t;
    int st = dyn_codec_encode_text(k, "ab", 2, &t, err);
    dyn_codec_free(k);
    return st;
}
/* Byte text of 2^62 bytes: more than a token buffer can hold. */
static int case_dyn_codec_encode_pair(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_error e;
    dyn_codec *k = dyn_codec_create(NULL, NULL, DYN_MODEL_GPT, &e);
    assert_non_null(k);
    dyn_codec_tokens t;
    int st = dyn_codec_encode_pair(k, "a", (size_t)1 << 62, "b", 1, &t, err);
    dyn_codec_free(k);
    return st;
}
static int case_dyn_codec_decode(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_error e;
    dyn_codec *k = dyn_codec_create(NULL, NULL, DYN_MODEL_GPT, &e);
    assert_non_null(k);
    const char *text;
    size_t len;
    int32_t bad = 100000;
    int st = dyn_codec_decode(k, &bad, 1, 0, &text, &len, err);
    dyn_codec_free(k);
    return st;
}

/* cost.h */
static int case_dyn_cost_model_create_analytic(fixture *f, dyn_error *err)
{
    dyn_model_config bad = f->cfg;
    bad.hidden = 0;
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&bad, &f->m, err);
    int st = HANDLE_STATUS(cm, err);
    dyn_cost_model_free(cm);
    return st;
}
static int case_dyn_cost_model_load_table(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_cost_model *cm = dyn_cost_model_load_table(NO_SUCH ".table", err);
    int st = HANDLE_STATUS(cm, err);
    dyn_cost_model_free(cm);
    return st;
}
static int case_dyn_cost_layer(fixture *f, dyn_error *err)
{
    dyn_mb_shape mb = {1, 64, 0, 64 * 64, 0, 0};
    dyn_layer_cost out;
    return dyn_cost_layer(f->cm, DYN_LAYER_DECODER, &mb, DYN_RECOMPUTE_NONE, &out, err); /* GPT has none */
}
static int case_dyn_layer_kind_parse(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_layer_kind k;
    return dyn_layer_kind_parse("no-such-kind", &k, err);
}
static int case_dyn_recompute_parse(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_recompute rc;
    return dyn_recompute_parse("no-such-mode", &rc, err);
}
static int case_dyn_cost_table_write(fixture *f, dyn_error *err)
{
    return dyn_cost_table_write(NO_SUCH, &f->cfg, &f->m, f->states, &f->grid, f->points, err);
}
static int case_dyn_cost_table_write_from_model(fixture *f, dyn_error *err)
{
    return dyn_cost_table_write_from_model(NO_SUCH, f->cm, &f->grid, err);
}
static int case_dyn_cost_model_set_time_scale(fixture *f, dyn_error *err)
{
    return dyn_cost_model_set_time_scale(f->cm, DYN_LAYER_ENCODER, -1.0, 1.0, err);
}
static int case_dyn_cost_table_write_profile(fixture *f, dyn_error *err)
{
    return dyn_cost_table_write_profile(NO_SUCH, &f->cfg, &f->m, f->states, &f->grid, f->points, NULL, err);
}
static int case_dyn_cost_model_check_shape(fixture *f, dyn_error *err)
{
    dyn_model_config other = f->cfg;
    other.n_layers += 1;
    return dyn_cost_model_check_shape(f->cm, &other, err);
}
static int case_dyn_cost_points_make_monotone(fixture *f, dyn_error *err)
{
    /* Fails only when memory runs out: a valid call must succeed. */
    return dyn_cost_points_make_monotone(&f->cfg, &f->grid, f->points, err);
}

/* data.h */
static int case_dyn_dataset_synthetic_flan(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_dataset ds = {0, NULL};
    int st = dyn_dataset_synthetic_flan(1, -1, 512, DYN_MODEL_GPT, &ds, err);
    dyn_dataset_free(&ds);
    return st;
}
static int case_dyn_dataset_read_tsv(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_dataset ds = {0, NULL};
    int st = dyn_dataset_read_tsv(NO_SUCH ".tsv", 512, DYN_MODEL_GPT, 0, &ds, err);
    dyn_dataset_free(&ds);
    return st;
}
static int case_dyn_sampler_create(fixture *f, dyn_error *err)
{
    dyn_sampler *s = dyn_sampler_create(&f->ds, 0, err);
    int st = HANDLE_STATUS(s, err);
    dyn_sampler_free(s);
    return st;
}
static int case_dyn_sampler_next(fixture *f, dyn_error *err)
{
    /* A budget of one token: the first sample alone exceeds it. */
    dyn_error e;
    dyn_sampler *s = dyn_sampler_create(&f->ds, 1, &e);
    assert_non_null(s);
    const dyn_sample *batch;
    int32_t n;
    int st = dyn_sampler_next(s, &batch, &n, err);
    dyn_sampler_free(s);
    return st;
}
static int case_dyn_sampler_create_ex(fixture *f, dyn_error *err)
{
    dyn_sampler_options o;
    dyn_sampler_options_default(&o);
    o.eval_split = 1.5;
    dyn_sampler *s = dyn_sampler_create_ex(&f->ds, 4096, &o, err);
    int st = HANDLE_STATUS(s, err);
    dyn_sampler_free(s);
    return st;
}
static int case_dyn_eval_split(fixture *f, dyn_error *err)
{
    (void)f;
    uint8_t held[4];
    int32_t n;
    return dyn_eval_split(4, -1.0, held, &n, err);
}
static int case_dyn_sampler_seek(fixture *f, dyn_error *err)
{
    dyn_error e;
    dyn_sampler *s = dyn_sampler_create(&f->ds, 4096, &e);
    assert_non_null(s);
    int st = dyn_sampler_seek(s, -1, err);
    dyn_sampler_free(s);
    return st;
}

/* model_config.h */
static int case_dyn_model_config_preset(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_model_config c;
    return dyn_model_config_preset("no-such-preset", &c, err);
}
static int case_dyn_model_config_load(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_model_config c;
    return dyn_model_config_load(NO_SUCH ".json", &c, err);
}
static int case_dyn_model_config_parse(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_model_config c;
    return dyn_model_config_parse("{\"kind\": ", "inline", &c, err);
}
static int case_dyn_model_config_validate(fixture *f, dyn_error *err)
{
    dyn_model_config c = f->cfg;
    c.heads = 0;
    return dyn_model_config_validate(&c, err);
}
static int case_dyn_model_kind_parse(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_model_kind k;
    return dyn_model_kind_parse("no-such-kind", &k, err);
}
static int case_dyn_machine_load(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_machine m;
    return dyn_machine_load(NO_SUCH ".json", &m, err);
}
static int case_dyn_machine_parse(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_machine m;
    return dyn_machine_parse("[1, 2", "inline", &m, err);
}
static int case_dyn_machine_validate(fixture *f, dyn_error *err)
{
    dyn_machine m = f->m;
    m.device_memory_mb = -1.0;
    return dyn_machine_validate(&m, err);
}
static int case_dyn_machine_resolve(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_machine m;
    return dyn_machine_resolve(NO_SUCH ".json", &m, err);
}

/* pipeline.h */
static int case_dyn_batch_costs_create(fixture *f, dyn_error *err)
{
    dyn_batch_costs *bc = dyn_batch_costs_create(f->cm, 0, 1, NULL, err);
    int st = HANDLE_STATUS(bc, err);
    dyn_batch_costs_free(bc);
    return st;
}
static int case_dyn_batch_costs_set_batch(fixture *f, dyn_error *err)
{
    dyn_error e;
    dyn_batch_costs *bc = dyn_batch_costs_create(f->cm, 2, 1, NULL, &e);
    assert_non_null(bc);
    int st = dyn_batch_costs_set_batch(bc, &f->bp, 99, err); /* one replica: 0 */
    dyn_batch_costs_free(bc);
    return st;
}
static int case_dyn_batch_costs_get(fixture *f, dyn_error *err)
{
    const dyn_stage_costs *out;
    return dyn_batch_costs_get(f->bc, 1, DYN_RECOMPUTE_NONE, &out, err); /* no batch set */
}
static int case_dyn_batch_costs_set_rank_scale(fixture *f, dyn_error *err)
{
    const double fwd[2] = {-1.0, 1.0}, bwd[2] = {1.0, 1.0};
    return dyn_batch_costs_set_rank_scale(f->bc, fwd, bwd, err);
}
static int case_dyn_pipeline_create(fixture *f, dyn_error *err)
{
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    po.order_groups = 0;
    dyn_pipeline *p = dyn_pipeline_create(f->planner, &po, err);
    int st = HANDLE_STATUS(p, err);
    dyn_pipeline_free(p);
    return st;
}
static int case_dyn_pipeline_set_rank_scale(fixture *f, dyn_error *err)
{
    const double fwd[2] = {1.0, 1.0}, bwd[2] = {NAN, 1.0};
    return dyn_pipeline_set_rank_scale(f->pipe, fwd, bwd, err);
}
static int case_dyn_pipeline_plan(fixture *f, dyn_error *err)
{
    dyn_sample s = {0, -1, 4096, 4096}; /* longer than max_seqlen 512 */
    dyn_pipeline_result res;
    int st = dyn_pipeline_plan(f->pipe, &s, 1, &res, err);
    if (st == DYN_OK) dyn_pipeline_result_free(&res);
    return st;
}
static int case_dyn_pipeline_plan_replica(fixture *f, dyn_error *err)
{
    dyn_replica_plan rp;
    int st = dyn_pipeline_plan_replica(f->pipe, &f->bp, 99, DYN_SCHEDULE_1F1B, &rp, err);
    if (st == DYN_OK) dyn_replica_plan_free(&rp);
    return st;
}
static int case_dyn_replica_plan_from_costs(fixture *f, dyn_error *err)
{
    dyn_replica_request rq;
    memset(&rq, 0, sizeof(rq));
    rq.schedule = DYN_SCHEDULE_1F1B;
    rq.n_ranks = 0; /* no ranks */
    rq.chunks = rq.auto_chunks = 1;
    rq.order_groups = 1;
    dyn_replica_plan rp;
    int st = dyn_replica_plan_from_costs(f->sim, &rq, dyn_batch_costs_get, f->bc, NULL, &f->simopt, &rp, err);
    if (st == DYN_OK) dyn_replica_plan_free(&rp);
    return st;
}
static int case_dyn_pipeline_tune(fixture *f, dyn_error *err)
{
    /* Issue 25's call: no stages, so the planner cannot be made. */
    dyn_plan_options o = f->opt;
    o.method = DYN_BATCH_PADDING;
    o.stages = 0;
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    const dyn_sample *batches[1] = {f->ds.samples};
    const int32_t counts[1] = {16};
    dyn_tune_result tr;
    return dyn_pipeline_tune(f->cm, &o, &po, batches, counts, 1, &tr, err);
}
static int case_dyn_pipeline_tune_split(fixture *f, dyn_error *err)
{
    dyn_plan_options o = f->opt;
    o.stages = 0; /* the planner cannot be made */
    dyn_pipeline_options po;
    dyn_pipeline_options_default(&po);
    const dyn_sample *batches[1] = {f->ds.samples};
    const int32_t counts[1] = {16};
    dyn_split_tune_result tr;
    return dyn_pipeline_tune_split(f->cm, &o, &po, batches, counts, 1, &tr, err);
}

/* plan.h */
static int case_dyn_planner_create(fixture *f, dyn_error *err)
{
    dyn_plan_options o = f->opt;
    o.stages = 0;
    dyn_planner *p = dyn_planner_create(f->cm, &o, err);
    int st = HANDLE_STATUS(p, err);
    dyn_planner_free(p);
    return st;
}

/* A micro-batch cost function that always fails, as a cost source may. */
static dyn_status failing_cost(void *ctx, const dyn_mb_shape *mb, dyn_mb_cost *out, dyn_error *err)
{
    (void)ctx;
    (void)mb;
    (void)out;
    return dyn_error_set(err, DYN_ERR_IO, "cost source: unreadable");
}
static int case_dyn_planner_create_custom(fixture *f, dyn_error *err)
{
    dyn_plan_options o = f->opt;
    o.dp = 0;
    dyn_planner *p = dyn_planner_create_custom(DYN_MODEL_GPT, failing_cost, NULL, 0.0, &o, err);
    int st = HANDLE_STATUS(p, err);
    dyn_planner_free(p);
    return st;
}
static int case_dyn_planner_plan(fixture *f, dyn_error *err)
{
    dyn_sample s = {0, -1, 4096, 4096}; /* longer than max_seqlen 512 */
    dyn_batch_plan bp;
    int st = dyn_planner_plan(f->planner, &s, 1, &bp, err);
    if (st == DYN_OK) dyn_batch_plan_free(&bp);
    return st;
}
static int case_dyn_planner_plan_as(fixture *f, dyn_error *err)
{
    dyn_sample s = {0, -1, 4096, 4096}; /* longer than max_seqlen 512 */
    dyn_batch_plan bp;
    int st = dyn_planner_plan_as(f->planner, DYN_BATCH_PACKING_DOCMASK, 0, &s, 1, &bp, err);
    if (st == DYN_OK) dyn_batch_plan_free(&bp);
    return st;
}
static int case_dyn_ideal_bound_of(fixture *f, dyn_error *err)
{
    dyn_sample s = {0, -1, 64, 8};
    dyn_ideal_bound b;
    return dyn_ideal_bound_of(f->cm, &s, 1, 0, 1, &b, err); /* stages 0 */
}
static int case_dyn_mb_useful_fraction(fixture *f, dyn_error *err)
{
    dyn_sample s = {0, -1, 64, 8};
    dyn_mb_shape sh = {0, 72, 0, 0, 0, 0}; /* rows 0 */
    double frac;
    return dyn_mb_useful_fraction(f->cm, &sh, &s, 1, &frac, err);
}
static int case_dyn_planner_fit_rows(fixture *f, dyn_error *err)
{
    dyn_error e;
    dyn_planner *p = dyn_planner_create_custom(DYN_MODEL_GPT, failing_cost, NULL, 0.0, &f->opt, &e);
    assert_non_null(p);
    int32_t rows = -1;
    int st = dyn_planner_fit_rows(p, &rows, err);
    dyn_planner_free(p);
    return st;
}
static int case_dyn_planner_set_stage_layout(fixture *f, dyn_error *err)
{
    (void)f;
    int32_t kind[1] = {0}, first[2] = {0, 1};
    return dyn_planner_set_stage_layout(NULL, 1, 1, kind, first, err); /* no planner */
}
static int case_dyn_plan_batch_once(fixture *f, dyn_error *err)
{
    dyn_plan_options o = f->opt;
    o.max_seqlen = 0;
    dyn_batch_plan bp;
    int st = dyn_plan_batch_once(f->cm, &o, f->ds.samples, 16, &bp, err);
    if (st == DYN_OK) dyn_batch_plan_free(&bp);
    return st;
}
static int case_dyn_batching_parse(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_batching b;
    return dyn_batching_parse("no-such-method", &b, err);
}

/* sched.h */
static int case_dyn_schedule_build(fixture *f, dyn_error *err)
{
    dyn_sched_options so;
    dyn_sched_options_default(&so);
    so.n_ranks = 3; /* the costs have 2 stages */
    dyn_exec_plan p;
    int st = dyn_schedule_build(DYN_SCHEDULE_1F1B, &f->costs, NULL, &so, &p, err);
    if (st == DYN_OK) dyn_exec_plan_free(&p);
    return st;
}
static int case_dyn_schedule_parse(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_schedule s;
    return dyn_schedule_parse("no-such-schedule", &s, err);
}
static int case_dyn_exec_plan_memory(fixture *f, dyn_error *err)
{
    double peak[2];
    return dyn_exec_plan_memory(&f->plan, &f->costs4, peak, err); /* 3 micro-batches against 4 */
}
static int case_dyn_stage_costs_alloc(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_stage_costs c;
    int st = dyn_stage_costs_alloc(&c, 0, 2, err);
    dyn_stage_costs_free(&c);
    return st;
}
static int case_dyn_stage_split(fixture *f, dyn_error *err)
{
    (void)f;
    const double block_ms[2] = {1.0, 1.0};
    int32_t first[4];
    double worst;
    return dyn_stage_split(block_ms, 2, 3, 0.0, 0.0, first, &worst, err); /* 3 stages, 2 blocks */
}
static int case_dyn_stage_assign(fixture *f, dyn_error *err)
{
    dyn_mb_shape ref = {1, 64, 0, 64 * 64, 0, 0};
    dyn_stage_assignment a;
    memset(&a, 0, sizeof(a));
    int st = dyn_stage_assign(f->cm, 100, &ref, DYN_RECOMPUTE_NONE, &a, err); /* 2 layers */
    dyn_stage_assignment_free(&a);
    return st;
}
static int case_dyn_stage_weights_of_shapes(fixture *f, dyn_error *err)
{
    double w[DYN_LAYER_KIND_COUNT];
    dyn_mb_shape one = {.rows = 1, .enc_len = 8, .dec_len = 0};
    return dyn_stage_weights_of_shapes(f->cm, &one, 0, DYN_RECOMPUTE_NONE, w, err); /* no shapes */
}
static int case_dyn_stage_assign_weights(fixture *f, dyn_error *err)
{
    double w[DYN_LAYER_KIND_COUNT] = {1, -1, 0, 1, 0}; /* a negative weight */
    dyn_stage_assignment a;
    int st = dyn_stage_assign_weights(f->cm, 2, w, &a, err);
    dyn_stage_assignment_free(&a);
    return st;
}
static int case_dyn_stage_assign_run(fixture *f, dyn_error *err)
{
    dyn_stage_assignment a;
    memset(&a, 0, sizeof(a));
    int st = dyn_stage_assign_run(f->cm, 100, NULL, &a, err);
    dyn_stage_assignment_free(&a);
    return st;
}
static int case_dyn_stage_costs_build(fixture *f, dyn_error *err)
{
    dyn_mb_shape bad = {0, 64, 0, 0, 0, 0}; /* no rows */
    dyn_stage_costs c;
    memset(&c, 0, sizeof(c));
    int st = dyn_stage_costs_build(f->cm, &f->asg, &bad, 1, DYN_RECOMPUTE_NONE, &c, err);
    dyn_stage_costs_free(&c);
    return st;
}
static int case_dyn_stage_costs_from_batch(fixture *f, dyn_error *err)
{
    dyn_stage_costs c;
    memset(&c, 0, sizeof(c));
    int st = dyn_stage_costs_from_batch(f->cm, &f->asg, &f->bp, 99, DYN_RECOMPUTE_NONE, &c, NULL, err);
    dyn_stage_costs_free(&c);
    return st;
}
static int case_dyn_exec_plan_validate(fixture *f, dyn_error *err)
{
    /* The plan with rank 0's last instruction dropped. */
    dyn_exec_plan p = f->plan;
    dyn_rank_plan ranks[2] = {f->plan.ranks[0], f->plan.ranks[1]};
    ranks[0].n_instrs--;
    p.ranks = ranks;
    return dyn_exec_plan_validate(&p, err);
}
static int case_dyn_exec_plan_serialize(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_exec_plan empty;
    memset(&empty, 0, sizeof(empty));
    uint8_t *buf = NULL;
    size_t len = 0;
    int st = dyn_exec_plan_serialize(&empty, &buf, &len, err);
    free(buf);
    return st;
}
static int case_dyn_exec_plan_deserialize(fixture *f, dyn_error *err)
{
    (void)f;
    static const uint8_t junk[16] = "not a plan at 0";
    dyn_exec_plan p;
    int st = dyn_exec_plan_deserialize(junk, sizeof(junk), &p, err);
    if (st == DYN_OK) dyn_exec_plan_free(&p);
    return st;
}

/* sim.h */
static int case_dyn_sim_create(fixture *f, dyn_error *err)
{
    /* Fails only when memory runs out: must succeed. */
    (void)f;
    dyn_sim *s = dyn_sim_create(err);
    int st = HANDLE_STATUS(s, err);
    dyn_sim_free(s);
    return st;
}
static int case_dyn_sim_run(fixture *f, dyn_error *err)
{
    dyn_error e;
    dyn_sim *s = dyn_sim_create(&e);
    assert_non_null(s);
    int st = dyn_sim_run(s, &f->plan, &f->costs4, &f->simopt, NULL, err); /* costs of another plan */
    dyn_sim_free(s);
    return st;
}
static int case_dyn_sim_write_trace(fixture *f, dyn_error *err)
{
    return dyn_sim_write_trace(f->sim, &f->plan, NO_SUCH ".json", err);
}
static int case_dyn_sim_trace_to_stream(fixture *f, dyn_error *err)
{
    FILE *fp = tmpfile();
    assert_non_null(fp);
    int st = dyn_sim_trace_to_stream(f->sim, &f->plan4, fp, err); /* not the plan simulated */
    fclose(fp);
    return st;
}
static int case_dyn_sim_write_svg(fixture *f, dyn_error *err)
{
    return dyn_sim_write_svg(f->sim, &f->plan, "t", NO_SUCH ".svg", err);
}
static int case_dyn_sim_svg_to_stream(fixture *f, dyn_error *err)
{
    FILE *fp = tmpfile();
    assert_non_null(fp);
    int st = dyn_sim_svg_to_stream(f->sim, &f->plan4, NULL, fp, err); /* not the plan simulated */
    fclose(fp);
    return st;
}
static int case_dyn_whatif_load(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_stage_costs c;
    int64_t tokens;
    memset(&c, 0, sizeof(c));
    int st = dyn_whatif_load(NO_SUCH ".tsv", &c, &tokens, err);
    dyn_stage_costs_free(&c);
    return st;
}
static int case_dyn_whatif_parse(fixture *f, dyn_error *err)
{
    (void)f;
    dyn_stage_costs c;
    int64_t tokens;
    memset(&c, 0, sizeof(c));
    int st = dyn_whatif_parse("inline", "mb stage fwd_ms bwd_ms\n0 0 one 2\n", &c, &tokens, err);
    dyn_stage_costs_free(&c);
    return st;
}

/* A schedule generator for the order search: 1F1B over 2 ranks. */
static dyn_status gen_build(void *ctx, const dyn_stage_costs *costs, const int32_t *order, dyn_exec_plan *out,
                            dyn_error *err)
{
    (void)ctx;
    (void)order;
    dyn_sched_options so;
    dyn_sched_options_default(&so);
    so.n_ranks = 2;
    return dyn_schedule_build(DYN_SCHEDULE_1F1B, costs, NULL, &so, out, err);
}
static void gen_free(void *ctx, dyn_exec_plan *plan)
{
    (void)ctx;
    dyn_exec_plan_free(plan);
}
static int case_dyn_order_search(fixture *f, dyn_error *err)
{
    dyn_sched_gen gen = {gen_build, gen_free, NULL};
    int32_t order[3];
    dyn_order_result res = {order, 0, 0, 0, 0, 0};
    /* A memory limit no plan fits. */
    return dyn_order_search(f->sim, &gen, &f->costs, &f->simopt, 2, 1e-9, &res, NULL, NULL, err);
}
static int case_dyn_schedule_search(fixture *f, dyn_error *err)
{
    dyn_sched_options so;
    dyn_sched_options_default(&so);
    so.n_ranks = 2;
    so.memory_limit_mb = 1e-9; /* nothing fits */
    int32_t order[3];
    dyn_order_result res = {order, 0, 0, 0, 0, 0};
    return dyn_schedule_search(f->sim, DYN_SCHEDULE_1F1B, &f->costs, NULL, &so, &f->simopt, 2, &res, NULL, NULL,
                               err);
}
static int case_dyn_schedule_auto(fixture *f, dyn_error *err)
{
    dyn_auto_options ao;
    memset(&ao, 0, sizeof(ao));
    ao.n_ranks = 2;
    ao.chunks = 1;
    ao.order_groups = 2;
    int32_t order[16];
    dyn_auto_choice ch;
    memset(&ch, 0, sizeof(ch));
    ch.order = order;
    /* The cost source has no batch: its error comes back through auto. */
    return dyn_schedule_auto(f->sim, dyn_batch_costs_get, f->bc, NULL, &ao, &f->simopt, &ch, NULL, NULL, err);
}

/* ---- the list ------------------------------------------------------------------ */

typedef struct api_case {
    const char *name;
    case_fn fn;
    int fails; /* 1: the input makes it fail; 0: no input can (it fails only out of memory) */
} api_case;

#define FAILS(f) {#f, case_##f, 1}
#define SUCCEEDS(f) {#f, case_##f, 0}

static const api_case k_cases[] = {
    FAILS(dyn_error_set),
    FAILS(dyn_error_prefix),
    SUCCEEDS(dyn_error_clear),
    FAILS(dyn_corpus_open),
    FAILS(dyn_corpus_lengths),
    FAILS(dyn_corpus_read),
    FAILS(dyn_corpus_write_indexed),
    FAILS(dyn_codec_create),
    FAILS(dyn_codec_encode_pair),
    FAILS(dyn_codec_encode_text),
    FAILS(dyn_codec_decode),
    FAILS(dyn_cost_model_create_analytic),
    FAILS(dyn_cost_model_load_table),
    FAILS(dyn_cost_layer),
    FAILS(dyn_layer_kind_parse),
    FAILS(dyn_recompute_parse),
    FAILS(dyn_cost_table_write),
    FAILS(dyn_cost_table_write_from_model),
    FAILS(dyn_cost_model_set_time_scale),
    FAILS(dyn_cost_table_write_profile),
    FAILS(dyn_cost_model_check_shape),
    SUCCEEDS(dyn_cost_points_make_monotone),
    FAILS(dyn_dataset_synthetic_flan),
    FAILS(dyn_dataset_read_tsv),
    FAILS(dyn_sampler_create),
    FAILS(dyn_sampler_next),
    FAILS(dyn_sampler_seek),
    FAILS(dyn_sampler_create_ex),
    FAILS(dyn_eval_split),
    FAILS(dyn_model_config_preset),
    FAILS(dyn_model_config_load),
    FAILS(dyn_model_config_parse),
    FAILS(dyn_model_config_validate),
    FAILS(dyn_model_kind_parse),
    FAILS(dyn_machine_load),
    FAILS(dyn_machine_parse),
    FAILS(dyn_machine_validate),
    FAILS(dyn_machine_resolve),
    FAILS(dyn_batch_costs_create),
    FAILS(dyn_batch_costs_set_batch),
    FAILS(dyn_batch_costs_get),
    FAILS(dyn_batch_costs_set_rank_scale),
    FAILS(dyn_pipeline_create),
    FAILS(dyn_pipeline_set_rank_scale),
    FAILS(dyn_pipeline_plan),
    FAILS(dyn_pipeline_plan_replica),
    FAILS(dyn_replica_plan_from_costs),
    FAILS(dyn_pipeline_tune),
    FAILS(dyn_pipeline_tune_split),
    FAILS(dyn_planner_create),
    FAILS(dyn_planner_create_custom),
    FAILS(dyn_planner_plan),
    FAILS(dyn_planner_plan_as),
    FAILS(dyn_ideal_bound_of),
    FAILS(dyn_mb_useful_fraction),
    FAILS(dyn_planner_fit_rows),
    FAILS(dyn_planner_set_stage_layout),
    FAILS(dyn_plan_batch_once),
    FAILS(dyn_batching_parse),
    FAILS(dyn_schedule_build),
    FAILS(dyn_schedule_parse),
    FAILS(dyn_exec_plan_memory),
    FAILS(dyn_stage_costs_alloc),
    FAILS(dyn_stage_split),
    FAILS(dyn_stage_assign),
    FAILS(dyn_stage_assign_run),
    FAILS(dyn_stage_weights_of_shapes),
    FAILS(dyn_stage_assign_weights),
    FAILS(dyn_stage_costs_build),
    FAILS(dyn_stage_costs_from_batch),
    FAILS(dyn_exec_plan_validate),
    FAILS(dyn_exec_plan_serialize),
    FAILS(dyn_exec_plan_deserialize),
    SUCCEEDS(dyn_sim_create),
    FAILS(dyn_sim_run),
    FAILS(dyn_sim_write_trace),
    FAILS(dyn_sim_trace_to_stream),
    FAILS(dyn_sim_write_svg),
    FAILS(dyn_sim_svg_to_stream),
    FAILS(dyn_whatif_load),
    FAILS(dyn_whatif_parse),
    FAILS(dyn_order_search),
    FAILS(dyn_schedule_search),
    FAILS(dyn_schedule_auto),
};
#define N_CASES (sizeof(k_cases) / sizeof(k_cases[0]))

static void test_null_err_fails_cleanly(void **state)
{
    fixture *f = *state;
    for (size_t i = 0; i < N_CASES; i++) {
        const api_case *c = &k_cases[i];
        print_message("%s\n", c->name);
        dyn_error e;
        memset(&e, 0, sizeof(e));
        if (c->fails) {
            /* With a record: a failure, the same code in it, a message. */
            int with = c->fn(f, &e);
            assert_int_not_equal(with, DYN_OK);
            assert_int_equal((int)e.code, with);
            assert_true(e.msg[0] != '\0');
            /* Without: the same failure, and no crash. */
            int without = c->fn(f, NULL);
            assert_int_not_equal(without, DYN_OK);
            if (without != NULL_HANDLE) assert_int_equal(without, with);
        } else {
            assert_int_equal(c->fn(f, &e), DYN_OK);
            assert_int_equal(c->fn(f, NULL), DYN_OK);
        }
    }
}

/* ---- the list against the headers ------------------------------------------------ */

/* Text of one header with comments, `#ifdef __cplusplus ... #endif` blocks
 * and other preprocessor lines (with their continuations) blanked out,
 * then everything inside braces (struct and enum bodies) dropped. */
static char *header_declarations(const char *path)
{
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, 0, SEEK_END), 0);
    long size = ftell(fp);
    assert_true(size >= 0);
    rewind(fp);
    char *t = malloc((size_t)size + 1);
    assert_non_null(t);
    assert_int_equal(fread(t, 1, (size_t)size, fp), (size_t)size);
    t[size] = '\0';
    fclose(fp);
    /* Comments. */
    for (char *p = t; *p != '\0'; p++) {
        if (p[0] == '/' && p[1] == '*') {
            char *end = strstr(p + 2, "*/");
            assert_non_null(end);
            memset(p, ' ', (size_t)(end + 2 - p));
        } else if (p[0] == '/' && p[1] == '/') {
            while (*p != '\0' && *p != '\n') *p++ = ' ';
        }
    }
    /* Preprocessor lines; the C++ guard's block as a whole. */
    int in_cpp_guard = 0;
    for (char *line = t; *line != '\0';) {
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        int directive = *p == '#';
        if (directive && strstr(p, "__cplusplus") != NULL && strncmp(p, "#if", 3) == 0) in_cpp_guard = 1;
        int blank = directive || in_cpp_guard;
        if (in_cpp_guard && strncmp(p, "#endif", 6) == 0) in_cpp_guard = 0;
        char *q = line;
        for (;;) {
            char *nl = strchr(q, '\n');
            char *stop = nl != NULL ? nl : q + strlen(q);
            int cont = directive && stop > q && stop[-1] == '\\';
            if (blank) memset(q, ' ', (size_t)(stop - q));
            q = nl != NULL ? nl + 1 : stop;
            if (!cont || nl == NULL) break;
        }
        line = q;
    }
    /* Brace bodies. */
    size_t o = 0;
    int depth = 0;
    for (size_t i = 0; t[i] != '\0'; i++) {
        if (t[i] == '{') depth++;
        else if (t[i] == '}') depth--;
        else if (depth == 0) t[o++] = t[i];
        assert_true(depth >= 0);
    }
    t[o] = '\0';
    return t;
}

/* Whether the parameter list from `open` (at its '(') has a parameter
 * `dyn_error *err`, spaces aside. */
static int has_err_param(const char *open)
{
    for (const char *p = strstr(open, "dyn_error"); p != NULL; p = strstr(p + 1, "dyn_error")) {
        if (p > open && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) continue;
        const char *q = p + 9;
        while (isspace((unsigned char)*q)) q++;
        if (*q++ != '*') continue;
        while (isspace((unsigned char)*q)) q++;
        if (strncmp(q, "err", 3) != 0) continue;
        q += 3;
        while (isspace((unsigned char)*q)) q++;
        if (*q == ',' || *q == ')') return 1;
    }
    return 0;
}

/* Add to names (a "\n"-separated list) every function declared in `decls`
 * that takes `dyn_error *err`; typedefs (function pointer types) are not
 * functions. Returns how many were added. */
static int collect_err_functions(char *decls, char *names, size_t cap)
{
    int n = 0;
    for (char *st = strtok(decls, ";"); st != NULL; st = strtok(NULL, ";")) {
        while (isspace((unsigned char)*st)) st++;
        if (strncmp(st, "typedef", 7) == 0) continue;
        char *open = strchr(st, '(');
        if (open == NULL || !has_err_param(open)) continue;
        char *end = open;
        while (end > st && isspace((unsigned char)end[-1])) end--;
        char *start = end;
        while (start > st && (isalnum((unsigned char)start[-1]) || start[-1] == '_')) start--;
        assert_true(end > start);
        size_t used = strlen(names);
        int w = snprintf(names + used, cap - used, "%.*s\n", (int)(end - start), start);
        assert_true(w > 0 && (size_t)w < cap - used);
        n++;
    }
    return n;
}

static int names_have(const char *names, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = names; (p = strstr(p, name)) != NULL; p++)
        if ((p == names || p[-1] == '\n') && p[n] == '\n') return 1;
    return 0;
}

static void test_list_covers_every_public_function(void **state)
{
    (void)state;
    DIR *d = opendir(DYN_API_INCLUDE_DIR);
    assert_non_null(d);
    static char names[16384];
    names[0] = '\0';
    int headers = 0, found = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        size_t len = strlen(de->d_name);
        if (len < 3 || strcmp(de->d_name + len - 2, ".h") != 0) continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", DYN_API_INCLUDE_DIR, de->d_name);
        char *decls = header_declarations(path);
        found += collect_err_functions(decls, names, sizeof(names));
        free(decls);
        headers++;
    }
    closedir(d);
    assert_true(headers > 0);
    /* Every declared function is in the list... */
    for (char *p = names; *p != '\0';) {
        char *nl = strchr(p, '\n');
        *nl = '\0';
        int listed = 0;
        for (size_t i = 0; i < N_CASES && !listed; i++) listed = strcmp(k_cases[i].name, p) == 0;
        if (!listed) print_error("%s takes dyn_error *err but has no case here\n", p);
        assert_true(listed);
        *nl = '\n';
        p = nl + 1;
    }
    /* ... and every listed function is declared (once). */
    for (size_t i = 0; i < N_CASES; i++) {
        if (!names_have(names, k_cases[i].name)) print_error("%s is not declared\n", k_cases[i].name);
        assert_true(names_have(names, k_cases[i].name));
    }
    assert_int_equal(found, (int)N_CASES);
}

/* The header reader itself, on text with each thing it must see past. */
static void test_header_reader(void **state)
{
    (void)state;
    char path[] = "/tmp/dyn_api_null_err_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *fp = fdopen(fd, "w");
    assert_non_null(fp);
    fputs("/* dyn_status dyn_in_comment(dyn_error *err); */\n"
          "#define DYN_MACRO(x) \\\n"
          "    dyn_status dyn_in_macro(dyn_error *err);\n"
          "#ifdef __cplusplus\n"
          "extern \"C\" {\n"
          "#endif\n"
          "typedef dyn_status (*dyn_fn_type)(void *ctx, dyn_error *err);\n"
          "typedef struct s { dyn_status (*member)(dyn_error *err); } s;\n"
          "dyn_status dyn_one(int a,\n"
          "                   dyn_error  *  err);\n"
          "dyn_thing *dyn_two(dyn_error *err) __attribute__((x(1)));\n"
          "dyn_status dyn_other_name(dyn_error *error);\n"
          "dyn_status dyn_three(const my_dyn_error *err, dyn_error *err2);\n"
          "void dyn_four(int x); // dyn_error *err\n"
          "#ifdef __cplusplus\n"
          "}\n"
          "#endif\n",
          fp);
    assert_int_equal(fclose(fp), 0);
    char *decls = header_declarations(path);
    remove(path);
    char names[256] = "";
    assert_int_equal(collect_err_functions(decls, names, sizeof(names)), 2);
    free(decls);
    assert_string_equal(names, "dyn_one\ndyn_two\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_reader),
        cmocka_unit_test(test_list_covers_every_public_function),
        cmocka_unit_test_setup_teardown(test_null_err_fails_cleanly, fixture_setup, fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
