/* evaluate.c — the loss and exact-match accuracy of a model on samples of a corpus (see evaluate.h). */
#include "runtime/evaluate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h" /* defines: dyn_calloc */

static rt_eval_task *task_of(rt_eval_result *r, const dyn_corpus *c, int32_t task)
{
    int32_t t = task >= 0 && task < RT_EVAL_MAX_TASKS ? task : 0;
    for (int32_t i = r->n_tasks; i <= t; i++) {
        const char *nm = dyn_corpus_task_name(c, i);
        snprintf(r->task[i].name, sizeof r->task[i].name, "%s", nm ? nm : "all");
    }
    if (r->n_tasks <= t) r->n_tasks = t + 1;
    return &r->task[t];
}

dyn_status rt_eval_run(dyn_model *m, dyn_corpus *c, const int64_t *ids, int64_t n, int accuracy, rt_eval_result *r,
                       dyn_error *err)
{
    memset(r, 0, sizeof *r);
    if (ids == NULL && n > dyn_corpus_count(c)) n = dyn_corpus_count(c);
    dyn_model_acts *a = dyn_model_acts_create(err);
    if (a == NULL) return err ? err->code : DYN_ERR_NOMEM;
    int32_t cap = dyn_model_cfg(m)->max_seqlen + 1;
    int32_t *gen = dyn_calloc((size_t)cap, sizeof(int32_t), "generation", err);
    dyn_status st = gen ? DYN_OK : DYN_ERR_NOMEM;
    double loss_all = 0;
    for (int64_t i = 0; st == DYN_OK && i < n; i++) {
        dyn_corpus_sample s;
        if ((st = dyn_corpus_read(c, ids ? ids[i] : i, &s, err)) != DYN_OK) break;
        dyn_token_sample ts = {s.input, s.input_len, s.target, s.target_len};
        dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(dyn_model_cfg(m)->kind, &ts, 1, err);
        if (mb == NULL) {
            st = err ? err->code : DYN_ERR_NOMEM;
            break;
        }
        double loss = 0;
        st = dyn_model_forward(m, a, mb, 0, &loss, NULL, err);
        dyn_model_microbatch_free(mb);
        if (st != DYN_OK) break;
        rt_eval_task *t = task_of(r, c, s.task);
        t->samples++;
        t->target_tokens += s.target_len;
        t->loss_sum += loss;
        loss_all += loss;
        r->samples++;
        r->target_tokens += s.target_len;
        if (!accuracy) continue;
        /* s's storage stays valid: nothing reads the corpus until the next sample */
        int32_t ng = 0;
        st = dyn_model_generate_greedy(m, a, s.input, s.input_len, s.target_len, gen, &ng, err);
        if (st == DYN_OK && ng == s.target_len && memcmp(gen, s.target, (size_t)ng * sizeof(int32_t)) == 0) {
            t->exact++;
            r->exact++;
        }
    }
    r->loss = r->target_tokens > 0 ? loss_all / (double)r->target_tokens : 0;
    free(gen);
    dyn_model_acts_free(a);
    return st;
}
