/* sampler.c — the global-batch sampler: consecutive samples until the next
 * one would push the batch over its token budget (input + target tokens).
 * Consecutive, not shuffled: the order of the dataset is the order of
 * training, and a sampler that reorders would hide that choice here. */
#include "dynapipe/data.h"

#include <stdlib.h>

#include "util/util.h" /* defines: dyn_calloc */

struct dyn_sampler {
    const dyn_dataset *ds;
    int64_t budget; /* tokens per global batch */
    int32_t pos;    /* next sample to hand out */
};

dyn_sampler *dyn_sampler_create(const dyn_dataset *ds, int64_t budget_tokens, dyn_error *err)
{
    if (ds == NULL || (ds->n > 0 && ds->samples == NULL)) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "sampler: no dataset");
        return NULL;
    }
    if (budget_tokens <= 0) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "sampler: token budget %lld must be positive",
                      (long long)budget_tokens);
        return NULL;
    }
    dyn_sampler *s = dyn_calloc(1, sizeof *s, "sampler", err);
    if (s == NULL) return NULL;
    s->ds = ds;
    s->budget = budget_tokens;
    return s;
}

dyn_status dyn_sampler_next(dyn_sampler *s, const dyn_sample **batch, int32_t *n, dyn_error *err)
{
    *batch = NULL;
    *n = 0;
    if (s->pos >= s->ds->n) return DYN_OK;
    const dyn_sample *first = &s->ds->samples[s->pos];
    int64_t tokens = 0;
    int32_t end = s->pos;
    while (end < s->ds->n) {
        const dyn_sample *x = &s->ds->samples[end];
        int64_t t = (int64_t)x->input_len + x->target_len;
        if (tokens + t > s->budget) break;
        tokens += t;
        end++;
    }
    if (end == s->pos)
        return dyn_error_set(err, DYN_ERR_INFEASIBLE,
                             "sampler: sample %d alone has %lld tokens (input %d + target %d), over "
                             "the global-batch budget of %lld tokens",
                             first->id, (long long)first->input_len + first->target_len,
                             first->input_len, first->target_len, (long long)s->budget);
    *batch = first;
    *n = end - s->pos;
    s->pos = end;
    return DYN_OK;
}

void dyn_sampler_reset(dyn_sampler *s)
{
    s->pos = 0;
}

int64_t dyn_sampler_position(const dyn_sampler *s)
{
    return s->pos;
}

dyn_status dyn_sampler_seek(dyn_sampler *s, int64_t pos, dyn_error *err)
{
    if (pos < 0 || pos > s->ds->n)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "sampler: position %lld outside the dataset's %d samples",
                             (long long)pos, s->ds->n);
    s->pos = (int32_t)pos;
    return DYN_OK;
}

void dyn_sampler_free(dyn_sampler *s)
{
    free(s);
}
