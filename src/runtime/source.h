/* source.h — the samples a training run reads: their lengths (for the
 * sampler and the planner) and their tokens (for the model), by dataset
 * index, from a token corpus (include/dynapipe/corpus.h: the built-in
 * multi-task dataset, JSONL, Megatron indexed datasets). Every rank opens
 * its own source with the same options and sees the same samples, so only
 * sample ids travel in the work messages. */
#ifndef DYN_RUNTIME_SOURCE_H
#define DYN_RUNTIME_SOURCE_H

#include "dynapipe/corpus.h"
#include "dynapipe/data.h"
#include "runtime/train.h"

typedef struct rt_source rt_source;

/* The corpus o->data_spec (split, limits and vocabulary from o). */
rt_source *rt_source_open(const dyn_train_options *o, dyn_error *err);
void rt_source_free(rt_source *s);
/* Lengths of every sample (borrowed; samples[i].id == i). */
const dyn_dataset *rt_source_lengths(const rt_source *s);
/* Tokens of sample id into input[input_len] and target[target_len] (the
 * lengths of rt_source_lengths). Not thread-safe (one handle per thread). */
dyn_status rt_source_tokens(rt_source *s, int32_t id, int32_t *input, int32_t *target, dyn_error *err);

/* The run's training order (data.h dyn_sampler_options) from o: its seed,
 * shuffle, epochs and held-out fraction. The planner, the step count of
 * --epochs and the evaluation's held-out set all take it from here. */
void rt_sampler_options(const dyn_train_options *o, dyn_sampler_options *so);

/* Samples per epoch of o's order over ds: ds less the held-out split. */
dyn_status rt_source_per_epoch(const dyn_dataset *ds, const dyn_train_options *o, int32_t *n, dyn_error *err);

/* The global batches (of budget_tokens) that o->epochs passes over ds
 * take in the order of o: a pure function of the lengths, so every process
 * computes the same count before training. DYN_ERR_INVALID_ARG when
 * o->epochs is 0 (no end), DYN_ERR_INFEASIBLE for a sample over the budget. */
dyn_status rt_source_epoch_steps(const dyn_dataset *ds, const dyn_train_options *o, int64_t *steps, dyn_error *err);

#endif
