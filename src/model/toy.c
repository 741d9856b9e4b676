/* toy.c — the string-reversal toy task (see toy.h). */
#include "model/toy.h"

void dyn_toy_reverse_sample(dyn_rng *r, int min_len, int max_len, int alphabet, int32_t *input, int32_t *target,
                            dyn_token_sample *s)
{
    int len = min_len + (int)dyn_rng_below(r, (uint64_t)(max_len - min_len + 1));
    for (int i = 0; i < len; i++) input[i] = 'a' + (int32_t)dyn_rng_below(r, (uint64_t)alphabet);
    input[len] = DYN_TOK_SEP;
    for (int i = 0; i < len; i++) target[i] = input[len - 1 - i];
    target[len] = DYN_TOK_EOS;
    s->input = input;
    s->input_len = len + 1;
    s->target = target;
    s->target_len = len + 1;
}
