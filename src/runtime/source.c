/* source.c — training samples: FLAN-like lengths (src/data) with tokens of
 * a learnable synthetic task, generated from (seed, id) so any rank can
 * produce any sample without reading the ones before it.
 *
 * The task: the input is random letters ending in DYN_TOK_SEP; the target is
 * the input's letters reversed (repeated when the target is longer), ending
 * in DYN_TOK_EOS. A model must attend back across the input to predict each
 * target token, so the loss falls only when attention works. */
#include "runtime/source.h"

#include <stdlib.h>

#include "util/rng.h"
#include "util/util.h"

struct rt_source {
    dyn_dataset ds;
    uint64_t seed;
};

rt_source *rt_source_open(const dyn_train_options *o, dyn_error *err)
{
    rt_source *s = dyn_calloc(1, sizeof *s, "training data", err);
    if (s == NULL) return NULL;
    s->seed = o->data_seed;
    if (dyn_dataset_synthetic_flan(o->data_seed, o->n_samples, o->model.max_seqlen, o->model.kind, &s->ds,
                                   err) != DYN_OK) {
        free(s);
        return NULL;
    }
    return s;
}

void rt_source_free(rt_source *s)
{
    if (s == NULL) return;
    dyn_dataset_free(&s->ds);
    free(s);
}

const dyn_dataset *rt_source_lengths(const rt_source *s) { return &s->ds; }

dyn_status rt_source_tokens(const rt_source *s, int32_t id, int32_t *input, int32_t *target, dyn_error *err)
{
    if (id < 0 || id >= s->ds.n) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "sample id %d of %d", id, s->ds.n);
    const dyn_sample *smp = &s->ds.samples[id];
    dyn_rng r;
    dyn_rng_seed(&r, s->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(id + 1)));
    int32_t nl = smp->input_len - 1; /* letters before SEP */
    for (int32_t i = 0; i < nl; i++) input[i] = 'a' + (int32_t)dyn_rng_below(&r, 26);
    input[smp->input_len - 1] = DYN_TOK_SEP;
    for (int32_t i = 0; i < smp->target_len - 1; i++)
        target[i] = nl > 0 ? input[nl - 1 - (i % nl)] : 'a';
    target[smp->target_len - 1] = DYN_TOK_EOS;
    return DYN_OK;
}
