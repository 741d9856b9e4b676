/* toy.h — a learnable toy task for the model tests and demos: reverse a
 * short string of letters. Input: the letters then DYN_TOK_SEP; target: the
 * letters reversed then DYN_TOK_EOS. A model that has learned the task
 * predicts every target token exactly, so the per-token loss falls to ~0;
 * one that only knows the letter frequencies stays near ln(alphabet). */
#ifndef DYN_MODEL_TOY_H
#define DYN_MODEL_TOY_H

#include <stdint.h>

#include "model/model.h" /* defines: dyn_token_sample, DYN_TOK_* */
#include "util/rng.h"    /* defines: dyn_rng */

/* Longest input / target a sample of at most max_len letters has. */
#define DYN_TOY_MAX_TOKENS(max_len) ((max_len) + 1)

/* Draw one sample: len uniform in [min_len, max_len] (1 <= min <= max),
 * letters uniform over the first `alphabet` (1..26) of 'a'..'z'. input and
 * target must hold DYN_TOY_MAX_TOKENS(max_len) ids each; s points at them. */
void dyn_toy_reverse_sample(dyn_rng *r, int min_len, int max_len, int alphabet, int32_t *input, int32_t *target,
                            dyn_token_sample *s);

#endif
