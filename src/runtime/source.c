/* source.c — training samples from a token corpus, and the run's order
 * over them (see source.h). */
#include "runtime/source.h"

#include <stdlib.h>
#include <string.h>

#include "util/util.h"

struct rt_source {
    dyn_corpus *corpus;
    dyn_dataset ds;
};

rt_source *rt_source_open(const dyn_train_options *o, dyn_error *err)
{
    rt_source *s = dyn_calloc(1, sizeof *s, "training data", err);
    if (s == NULL) return NULL;
    dyn_corpus_options co;
    dyn_corpus_options_default(&co);
    co.split = o->split;
    co.builtin_samples = o->n_samples;
    co.max_seqlen = o->model.max_seqlen;
    co.kind = o->model.kind;
    co.truncate = o->truncate;
    co.vocab = o->model.vocab;
    s->corpus = dyn_corpus_open(o->data_spec, &co, err);
    if (s->corpus == NULL || dyn_corpus_lengths(s->corpus, &s->ds, err) != DYN_OK) {
        rt_source_free(s);
        return NULL;
    }
    if (s->ds.n == 0) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "--data %s: no samples", o->data_spec);
        rt_source_free(s);
        return NULL;
    }
    return s;
}

void rt_source_free(rt_source *s)
{
    if (s == NULL) return;
    dyn_corpus_free(s->corpus);
    dyn_dataset_free(&s->ds);
    free(s);
}

const dyn_dataset *rt_source_lengths(const rt_source *s) { return &s->ds; }

dyn_status rt_source_tokens(rt_source *s, int32_t id, int32_t *input, int32_t *target, dyn_error *err)
{
    if (id < 0 || id >= s->ds.n) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "sample id %d of %d", id, s->ds.n);
    dyn_corpus_sample cs;
    dyn_status st = dyn_corpus_read(s->corpus, id, &cs, err);
    if (st != DYN_OK) return st;
    const dyn_sample *l = &s->ds.samples[id];
    if (cs.input_len != l->input_len || cs.target_len != l->target_len)
        return dyn_error_set(err, DYN_ERR_INTERNAL, "sample %d: read %d+%d tokens, its lengths say %d+%d", id,
                             cs.input_len, cs.target_len, l->input_len, l->target_len);
    memcpy(input, cs.input, (size_t)cs.input_len * sizeof(int32_t));
    memcpy(target, cs.target, (size_t)cs.target_len * sizeof(int32_t));
    return DYN_OK;
}

void rt_sampler_options(const dyn_train_options *o, dyn_sampler_options *so)
{
    dyn_sampler_options_default(so);
    so->seed = o->seed;
    so->shuffle = o->shuffle != 0;
    so->epochs = o->epochs;
    so->eval_split = o->eval_split;
}

dyn_status rt_source_epoch_steps(const dyn_dataset *ds, const dyn_train_options *o, int64_t *steps, dyn_error *err)
{
    *steps = 0;
    if (o->epochs <= 0) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "epoch steps: no epoch limit");
    dyn_sampler_options so;
    rt_sampler_options(o, &so);
    dyn_sampler *s = dyn_sampler_create_ex(ds, o->global_batch_tokens, &so, err);
    if (s == NULL) return err->code;
    dyn_status st = DYN_OK;
    for (;;) {
        const dyn_sample *batch;
        int32_t n = 0;
        if ((st = dyn_sampler_next(s, &batch, &n, err)) != DYN_OK || n == 0) break;
        ++*steps;
    }
    dyn_sampler_free(s);
    return st;
}

dyn_status rt_source_per_epoch(const dyn_dataset *ds, const dyn_train_options *o, int32_t *n, dyn_error *err)
{
    *n = 0;
    dyn_sampler_options so;
    rt_sampler_options(o, &so);
    dyn_sampler *s = dyn_sampler_create_ex(ds, o->global_batch_tokens, &so, err);
    if (s == NULL) return err->code;
    *n = dyn_sampler_train_count(s);
    dyn_sampler_free(s);
    return DYN_OK;
}
