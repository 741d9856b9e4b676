/* test_model_causal.c — what a model may see: GPT's self-attention and the
 * T5 decoder's are causal, GPT predicts the next token of its target, and the
 * T5 decoder reads BOS followed by the targets shifted right.
 *
 * Causality is checked from outside: change one token at position p and
 * require every result that belongs to an earlier position (the loss of the
 * predictions before p, GPT's hidden states before p) to stay bit-identical,
 * while those at p change (so the test can fail). A model without its causal
 * mask, or a decoder fed its own targets, fails these; a training run would
 * not notice (it only gets a lower loss). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model_testutil.h" /* defines: xcalloc */

/* Loss summed over the counted predictions at positions < p of row 0 only:
 * later weights are zeroed on a copy of the weights. */
static double loss_before(dyn_model *m, dyn_model_microbatch *mb, int32_t n_pred, int32_t p)
{
    float *saved = xcalloc((size_t)n_pred, sizeof(float));
    memcpy(saved, mb->weights, (size_t)n_pred * sizeof(float));
    for (int32_t i = p; i < n_pred; i++) mb->weights[i] = 0.0f;
    dyn_error err;
    dyn_model_acts *a = dyn_model_acts_create(&err);
    assert_non_null(a);
    double loss = 0;
    assert_int_equal(dyn_model_forward(m, a, mb, 0, &loss, NULL, &err), DYN_OK);
    dyn_model_acts_free(a);
    memcpy(mb->weights, saved, (size_t)n_pred * sizeof(float));
    free(saved);
    return loss;
}

/* GPT hidden states entering the LM head, (T, C) for one row. */
static float *gpt_hidden(dyn_model *m, const dyn_model_microbatch *mb)
{
    int L = dyn_model_num_layers(m);
    size_t n = dyn_model_boundary_floats(m, L - 1, mb);
    float *out = xcalloc(n, sizeof(float));
    dyn_error err;
    dyn_model_acts *a = dyn_model_acts_create(&err);
    assert_non_null(a);
    assert_int_equal(dyn_model_stage_forward(m, a, mb, 0, L - 1, NULL, out, 0, NULL, NULL, &err), DYN_OK);
    dyn_model_acts_free(a);
    return out;
}

static void test_gpt_is_causal(void **state)
{
    (void)state;
    dyn_error err;
    dyn_model_config c = dyn_model_config_tiny(DYN_MODEL_GPT, 2, 16, 2, 32);
    dyn_model *m = dyn_model_create(&c, 3, &err);
    assert_non_null(m);
    int32_t in[5] = {10, 20, 30, 40, 50}, tg[6] = {60, 70, 80, 90, 100, 110};
    dyn_token_sample s = {in, 5, tg, 6};
    dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(DYN_MODEL_GPT, &s, 1, &err);
    assert_non_null(mb);
    const int32_t T = 11, C = c.hidden, p = 8; /* sequence position 8 = target[3] */
    assert_int_equal(mb->tokens[p], 90);
    double before = loss_before(m, mb, T, p), with_p = loss_before(m, mb, T, p + 1);
    float *h0 = gpt_hidden(m, mb);
    mb->tokens[p] = 200; /* a later token changes ... */
    double after = loss_before(m, mb, T, p);
    float *h1 = gpt_hidden(m, mb);
    /* ... nothing at earlier positions: bit-identical */
    assert_true(before == after);
    assert_memory_equal(h0, h1, (size_t)p * C * sizeof(float));
    /* ... and the position itself does change (the test can fail) */
    assert_true(memcmp(h0 + (size_t)p * C, h1 + (size_t)p * C, (size_t)C * sizeof(float)) != 0);
    assert_true(loss_before(m, mb, T, p + 1) != with_p);
    free(h0);
    free(h1);
    dyn_model_microbatch_free(mb);
    dyn_model_free(m);
}

/* GPT's targets: the sequence is input ++ target; position q predicts
 * token q+1, counted only for target tokens (q = in-1 .. len-2). */
static void test_gpt_target_alignment(void **state)
{
    (void)state;
    dyn_error err;
    int32_t in[3] = {1, 2, 3}, tg[4] = {4, 5, 6, 7};
    dyn_token_sample s = {in, 3, tg, 4};
    dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(DYN_MODEL_GPT, &s, 1, &err);
    assert_non_null(mb);
    const int32_t seq[7] = {1, 2, 3, 4, 5, 6, 7};
    for (int q = 0; q < 7; q++) {
        assert_int_equal(mb->tokens[q], seq[q]);
        int counted = q >= 2 && q <= 5;
        assert_true(mb->weights[q] == (counted ? 1.0f : 0.0f));
        if (counted) assert_int_equal(mb->targets[q], seq[q + 1]);
    }
    assert_int_equal(mb->n_target_tokens, 4);
    dyn_model_microbatch_free(mb);
}

/* T5: the decoder reads [BOS] + target[:-1] and position q predicts
 * target[q]; the encoder reads the input. */
static void test_t5_decoder_input_is_shifted_targets(void **state)
{
    (void)state;
    dyn_error err;
    int32_t in[3] = {11, 12, 13}, tg[4] = {21, 22, 23, 24};
    dyn_token_sample s = {in, 3, tg, 4};
    dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(DYN_MODEL_T5, &s, 1, &err);
    assert_non_null(mb);
    for (int q = 0; q < 3; q++) assert_int_equal(mb->tokens[q], in[q]);
    assert_int_equal(mb->dec_tokens[0], DYN_TOK_BOS);
    for (int q = 1; q < 4; q++) assert_int_equal(mb->dec_tokens[q], tg[q - 1]);
    for (int q = 0; q < 4; q++) {
        assert_int_equal(mb->targets[q], tg[q]);
        assert_true(mb->weights[q] == 1.0f);
    }
    dyn_model_microbatch_free(mb);
}

static void test_t5_decoder_is_causal(void **state)
{
    (void)state;
    dyn_error err;
    dyn_model_config c = dyn_model_config_tiny(DYN_MODEL_T5, 2, 16, 2, 32);
    dyn_model *m = dyn_model_create(&c, 5, &err);
    assert_non_null(m);
    int32_t in[4] = {31, 32, 33, 34}, tg[7] = {41, 42, 43, 44, 45, 46, 47};
    dyn_token_sample s = {in, 4, tg, 7};
    dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(DYN_MODEL_T5, &s, 1, &err);
    assert_non_null(mb);
    const int32_t Td = 7, p = 4;
    double before = loss_before(m, mb, Td, p);
    double with_p = loss_before(m, mb, Td, p + 1);
    mb->dec_tokens[p] = 99; /* a later decoder input changes ... */
    assert_true(loss_before(m, mb, Td, p) == before); /* ... not the earlier predictions */
    assert_true(loss_before(m, mb, Td, p + 1) != with_p); /* ... but its own */
    /* The encoder is bidirectional: a change at its end reaches position 0. */
    mb->dec_tokens[p] = tg[p - 1];
    double first = loss_before(m, mb, Td, 1);
    mb->tokens[3] = 77;
    assert_true(loss_before(m, mb, Td, 1) != first);
    dyn_model_microbatch_free(mb);
    dyn_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_is_causal),
        cmocka_unit_test(test_gpt_target_alignment),
        cmocka_unit_test(test_t5_decoder_input_is_shifted_targets),
        cmocka_unit_test(test_t5_decoder_is_causal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
