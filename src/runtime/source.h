/* source.h — the samples a training run reads: their lengths (for the
 * sampler and the planner) and their tokens (for the model), by dataset
 * index. Every rank opens its own source with the same options and gets the
 * same samples, so only sample ids travel in the work messages. */
#ifndef DYN_RUNTIME_SOURCE_H
#define DYN_RUNTIME_SOURCE_H

#include "dynapipe/data.h"
#include "model/model.h" /* defines: dyn_token_sample, DYN_TOK_* */
#include "runtime/train.h"

typedef struct rt_source rt_source;

rt_source *rt_source_open(const dyn_train_options *o, dyn_error *err);
void rt_source_free(rt_source *s);
/* Lengths of every sample (borrowed; samples[i].id == i). */
const dyn_dataset *rt_source_lengths(const rt_source *s);
/* Tokens of sample id into input[input_len] and target[target_len] (the
 * lengths of rt_source_lengths). */
dyn_status rt_source_tokens(const rt_source *s, int32_t id, int32_t *input, int32_t *target, dyn_error *err);

#endif
