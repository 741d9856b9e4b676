/* stage.c — stage-only models: a model holding one pipeline stage's layer
 * range (its own tensors plus copies of the shared tensors it uses), the
 * list of which stages of a split hold the same tensor, the stage's state
 * bytes, and the optimizer pieces a pipeline of stage models needs (the
 * owned gradient norm, a step with an outside norm). Contract in model.h
 * ("stage-only models"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_impl.h"
#include "util/util.h" /* defines: dyn_calloc */

/* Does a layer of [first, last) use tensor `name` that it does not own? */
static int range_borrows(const dyn_model_config *c, int first, int last, const char *name)
{
    for (int l = first; l < last; l++) {
        const char *names[2];
        int n = model_arch_of(c->kind)->borrows(c, l, names);
        for (int k = 0; k < n; k++)
            if (strcmp(names[k], name) == 0) return 1;
    }
    return 0;
}

/* Copy tensor i of tmpl into m's table (at m's next offset). */
static dyn_status table_copy(dyn_model *m, const dyn_model *tmpl, int i, int shared_copy, dyn_error *err)
{
    const dyn_param_tensor *t = &tmpl->tensors[i];
    dyn_status st = model_add_tensor(m, t->name, t->ndim, t->shape[0], t->shape[1], t->hf_transposed, t->decay,
                                     tmpl->init_std[i], t->layer, err);
    if (st == DYN_OK) m->tensors[m->n_tensors - 1].shared_copy = shared_copy;
    return st;
}

dyn_model *dyn_model_create_stage(const dyn_model_config *cfg, uint64_t seed, int first, int last, dyn_error *err)
{
    dyn_model *tmpl = model_table_create(cfg, err);
    if (tmpl == NULL) return NULL;
    if (first < 0 || last > tmpl->L || first >= last) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "stage model: bad layer range [%d, %d) of %d layers", first, last,
                      tmpl->L);
        dyn_model_free(tmpl);
        return NULL;
    }
    dyn_model *m = dyn_calloc(1, sizeof *m, "stage model", err);
    dyn_status st = m ? DYN_OK : DYN_ERR_NOMEM;
    if (st == DYN_OK) {
        m->cfg = tmpl->cfg;
        m->sp = tmpl->sp;
        m->dims = tmpl->dims;
        m->L = tmpl->L;
        m->first = first;
        m->last = last;
    }
    /* Owned tensors first, in layer order, so they stay one slice. */
    for (int i = 0; i < tmpl->n_tensors && st == DYN_OK; i++) {
        int layer = tmpl->tensors[i].layer;
        if (layer >= first && layer < last) st = table_copy(m, tmpl, i, 0, err);
    }
    if (st == DYN_OK) m->n_owned = m->n_params;
    for (int i = 0; i < tmpl->n_tensors && st == DYN_OK; i++) {
        int layer = tmpl->tensors[i].layer;
        if ((layer < first || layer >= last) && range_borrows(cfg, first, last, tmpl->tensors[i].name))
            st = table_copy(m, tmpl, i, 1, err);
    }
    if (st == DYN_OK) st = model_alloc_bind(m, err);
    if (st == DYN_OK) model_init(m, tmpl, seed);
    dyn_model_free(tmpl);
    if (st != DYN_OK) {
        dyn_model_free(m);
        return NULL;
    }
    return m;
}

void dyn_model_stage_range(const dyn_model *m, int *first, int *last)
{
    *first = m->first;
    *last = m->last;
}

size_t dyn_model_state_bytes(const dyn_model *m, size_t *shared_bytes)
{
    if (shared_bytes) *shared_bytes = 4 * (m->n_params - m->n_owned) * sizeof(float);
    return 4 * m->n_params * sizeof(float);
}

void dyn_model_shared_tensors_free(dyn_shared_tensor *s, int n)
{
    if (s == NULL) return;
    for (int i = 0; i < n; i++) free(s[i].holders);
    free(s);
}

dyn_shared_tensor *dyn_model_shared_tensors(const dyn_model_config *cfg, const int32_t *cuts, int n_stages,
                                            int *n_out, dyn_error *err)
{
    *n_out = 0;
    dyn_model *tmpl = model_table_create(cfg, err);
    if (tmpl == NULL) return NULL;
    int ok = n_stages >= 1 && cuts[0] == 0 && cuts[n_stages] == tmpl->L;
    for (int s = 0; ok && s < n_stages; s++) ok = cuts[s] < cuts[s + 1];
    if (!ok) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG,
                      "shared tensors: stage cuts must rise strictly from 0 to the %d layers of the model", tmpl->L);
        dyn_model_free(tmpl);
        return NULL;
    }
    dyn_shared_tensor *out = dyn_calloc((size_t)tmpl->n_tensors, sizeof *out, "shared-tensor list", err);
    int32_t *holders = dyn_calloc((size_t)n_stages, sizeof *holders, "shared-tensor holders", err);
    dyn_status st = out && holders ? DYN_OK : DYN_ERR_NOMEM;
    int n = 0;
    for (int i = 0; i < tmpl->n_tensors && st == DYN_OK; i++) {
        const dyn_param_tensor *t = &tmpl->tensors[i];
        int nh = 0, owner = -1;
        for (int s = 0; s < n_stages; s++) {
            int owns = t->layer >= cuts[s] && t->layer < cuts[s + 1];
            if (owns) owner = s;
            if (owns || range_borrows(cfg, cuts[s], cuts[s + 1], t->name)) holders[nh++] = s;
        }
        if (nh < 2) continue;
        dyn_shared_tensor *g = &out[n];
        snprintf(g->name, sizeof g->name, "%s", t->name);
        g->owner = owner;
        g->n_holders = nh;
        g->holders = dyn_calloc((size_t)nh, sizeof *g->holders, "shared-tensor holders", err);
        if (g->holders == NULL) {
            st = DYN_ERR_NOMEM;
            break;
        }
        memcpy(g->holders, holders, (size_t)nh * sizeof *holders);
        n++;
    }
    free(holders);
    dyn_model_free(tmpl);
    if (st != DYN_OK) {
        dyn_model_shared_tensors_free(out, n);
        return NULL;
    }
    *n_out = n;
    return out;
}

double dyn_model_grad_sqnorm_owned(const dyn_model *m)
{
    double s = 0.0;
    for (size_t i = 0; i < m->n_owned; i++) s += (double)m->grads[i] * (double)m->grads[i];
    return s;
}

void dyn_model_adamw_step_norm(dyn_model *m, float lr, const dyn_adamw_config *cfg, double norm, double max_norm)
{
    if (max_norm > 0 && norm > max_norm) {
        float scale = (float)(max_norm / norm);
        for (size_t i = 0; i < m->n_params; i++) m->grads[i] *= scale;
    }
    m->step++;
    for (int i = 0; i < m->n_tensors; i++) {
        const dyn_param_tensor *t = &m->tensors[i];
        dyn_adamw_update(m->params + t->offset, m->grads + t->offset, m->m1 + t->offset, m->m2 + t->offset, t->numel,
                         m->step, lr, cfg, t->decay);
    }
}
