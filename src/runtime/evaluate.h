/* evaluate.h — the loss and per-task exact-match accuracy of a whole
 * model (`dynapipe eval`, and `dynapipe train --eval-every` on rank 0).
 * No MPI: one process, the whole model (checkpoint.h assembles it from a
 * checkpoint's shards). */
#ifndef DYN_RUNTIME_EVALUATE_H
#define DYN_RUNTIME_EVALUATE_H

#include <stdint.h>

#include "dynapipe/corpus.h"
#include "model/model.h"

#define RT_EVAL_MAX_TASKS 16

typedef struct rt_eval_task {
    char name[32];        /* the corpus's task name; "all" for a file without tasks */
    int64_t samples;
    int64_t target_tokens;
    double loss_sum;      /* nats over the task's target tokens */
    int64_t exact;        /* samples whose greedy generation equals the target (accuracy only) */
} rt_eval_task;

typedef struct rt_eval_result {
    int32_t n_tasks;
    rt_eval_task task[RT_EVAL_MAX_TASKS];
    int64_t samples, target_tokens, exact;
    double loss;          /* mean nats per target token over all samples */
} rt_eval_result;

/* Evaluate m on n samples of corpus c: ids[0..n) (corpus indices), or with
 * ids NULL samples [0, n) (n is cut to the corpus's count): each sample
 * alone in a padded micro-batch for the loss; with accuracy != 0 also the
 * greedy generation of target_len tokens (the target ends in eos, so the
 * first target_len tokens decide an exact match). */
dyn_status rt_eval_run(dyn_model *m, dyn_corpus *c, const int64_t *ids, int64_t n, int accuracy, rt_eval_result *r,
                       dyn_error *err);

#endif
