/* model_test_util.h — helpers shared by the model tests: random byte
 * samples, tiny configs, loss + gradient of a micro-batch in one call. */
#ifndef DYN_TESTS_MODEL_TEST_UTIL_H
#define DYN_TESTS_MODEL_TEST_UTIL_H

#include <stdlib.h>
#include <string.h>

#include "model/model.h" /* defines: dyn_model_*, dyn_microbatch_* */
#include "util/rng.h"    /* defines: dyn_rng_* */

/* n samples with input lengths in [in_lo, in_hi] and target lengths in
 * [tg_lo, tg_hi], random byte tokens. Storage in *store (free it). */
static inline void make_samples(dyn_token_sample *s, int n, int in_lo, int in_hi, int tg_lo, int tg_hi, uint64_t seed,
                                int32_t **store)
{
    dyn_rng r;
    dyn_rng_seed(&r, seed);
    int32_t *buf = calloc((size_t)n * (size_t)(in_hi + tg_hi), sizeof(int32_t));
    *store = buf;
    for (int i = 0; i < n; i++) {
        int32_t *in = buf + (size_t)i * (in_hi + tg_hi), *tg = in + in_hi;
        s[i].input = in;
        s[i].target = tg;
        s[i].input_len = in_lo + (int)dyn_rng_below(&r, (uint64_t)(in_hi - in_lo + 1));
        s[i].target_len = tg_lo + (int)dyn_rng_below(&r, (uint64_t)(tg_hi - tg_lo + 1));
        for (int k = 0; k < s[i].input_len; k++) in[k] = (int32_t)dyn_rng_below(&r, 256);
        for (int k = 0; k < s[i].target_len; k++) tg[k] = (int32_t)dyn_rng_below(&r, 256);
    }
}

/* Zero grads, forward + backward with dloss; returns the loss sum. */
static inline double loss_and_grad(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb, float dloss,
                                   int recompute, float *sample_loss)
{
    dyn_error err;
    double loss = 0;
    if (dyn_model_forward(m, a, mb, recompute, &loss, sample_loss, &err) != DYN_OK) {
        fprintf(stderr, "forward: %s\n", err.msg);
        abort();
    }
    if (dyn_model_backward(m, a, mb, dloss, &err) != DYN_OK) {
        fprintf(stderr, "backward: %s\n", err.msg);
        abort();
    }
    return loss;
}

static inline double loss_only(dyn_model *m, dyn_model_acts *a, const dyn_model_microbatch *mb)
{
    dyn_error err;
    double loss = 0;
    if (dyn_model_forward(m, a, mb, 0, &loss, NULL, &err) != DYN_OK) {
        fprintf(stderr, "forward: %s\n", err.msg);
        abort();
    }
    return loss;
}

#endif
