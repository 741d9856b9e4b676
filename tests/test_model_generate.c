/* test_model_generate.c — greedy decoding (generate.c) against an
 * independent computation: the loss machinery alone. For each step t of a
 * generation, the loss of target = generated[0..t) ++ [v] is computed for
 * every vocabulary id v; the last token's cross entropy is
 * -log softmax(logits)[v], so the arg-max token is the v whose full loss
 * is smallest (the earlier tokens' losses are the same for every v). The
 * generated token must be that v, for GPT and T5, on a randomly
 * initialised model (whose arg-max is not a special token by design).
 * And the special ids are the model's own (check_specials). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "model/model.h"

static void check_kind(dyn_model_kind kind)
{
    dyn_error err;
    dyn_model_config cfg = dyn_model_config_tiny(kind, 2, 32, 2, 64);
    dyn_model *m = dyn_model_create(&cfg, 11, &err);
    assert_non_null(m);
    dyn_model_acts *a = dyn_model_acts_create(&err);
    assert_non_null(a);
    int32_t prompt[9] = {'s', 'o', 'r', 't', ' ', 'c', 'b', 'a', DYN_TOK_SEP};
    enum { STEPS = 3 };
    int32_t out[STEPS], n = 0;
    assert_int_equal(dyn_model_generate_greedy(m, a, prompt, 9, STEPS, out, &n, &err), DYN_OK);
    assert_true(n >= 1 && n <= STEPS);
    for (int32_t t = 0; t < n; t++) {
        int32_t tgt[STEPS];
        memcpy(tgt, out, (size_t)t * sizeof(int32_t));
        double best = 1e300;
        int32_t best_v = -1;
        for (int32_t v = 0; v < cfg.vocab; v++) {
            tgt[t] = v;
            dyn_token_sample s = {prompt, 9, tgt, t + 1};
            dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(kind, &s, 1, &err);
            assert_non_null(mb);
            double loss = 0;
            assert_int_equal(dyn_model_forward(m, a, mb, 0, &loss, NULL, &err), DYN_OK);
            dyn_model_microbatch_free(mb);
            if (loss < best) {
                best = loss;
                best_v = v;
            }
        }
        if (best_v != out[t]) fail_msg("%s step %d: generated %d, the smallest loss is at %d", kind == DYN_MODEL_GPT ? "gpt" : "t5", t, out[t], best_v);
    }
    /* a stage model cannot generate; a prompt over max_seqlen is refused */
    int32_t big[65] = {0};
    assert_int_equal(dyn_model_generate_greedy(m, a, big, 65, 2, out, &n, &err), DYN_ERR_INVALID_ARG);
    /* GPT: a prompt of max_seqlen tokens leaves no room (an empty answer
     * was returned as success); one token less leaves room for one. T5's
     * decoder has its own max_seqlen. */
    int32_t full[64] = {0};
    dyn_status want = kind == DYN_MODEL_GPT ? DYN_ERR_INVALID_ARG : DYN_OK;
    assert_int_equal(dyn_model_generate_greedy(m, a, full, 64, 2, out, &n, &err), want);
    if (want != DYN_OK) {
        assert_non_null(strstr(err.msg, "a prompt of 64 tokens leaves no room to generate"));
        assert_non_null(strstr(err.msg, "at most 63 prompt tokens"));
        assert_int_equal(dyn_model_generate_greedy(m, a, full, 63, 2, out, &n, &err), DYN_OK);
        assert_int_equal(n, 1);
    }
    assert_int_equal(dyn_model_generate_greedy(m, a, prompt, 9, 0, out, &n, &err), DYN_ERR_INVALID_ARG);
    dyn_model *st = dyn_model_create_stage(&cfg, 11, 0, 1, &err);
    assert_non_null(st);
    assert_int_equal(dyn_model_generate_greedy(st, a, prompt, 9, 2, out, &n, &err), DYN_ERR_INVALID_ARG);
    dyn_model_free(st);
    dyn_model_acts_free(a);
    dyn_model_free(m);
}

/* The vocabulary's special ids are the model's (dyn_model_specials), not
 * the byte vocabulary's: generation stops after the model's eos, whatever
 * id that is; a micro-batch pads with the given pad id and starts T5's
 * decoder input with the given decoder start. Independent: the run with no
 * eos (-1) generates max_new tokens; naming its k-th token the eos must cut
 * the same generation right after the first occurrence of that id. */
static void check_specials(dyn_model_kind kind)
{
    dyn_error err;
    dyn_model_config cfg = dyn_model_config_tiny(kind, 2, 32, 2, 64);
    dyn_model *m = dyn_model_create(&cfg, 11, &err);
    assert_non_null(m);
    dyn_model_acts *a = dyn_model_acts_create(&err);
    assert_non_null(a);
    const dyn_model_specials *def = dyn_model_specials_of(m);
    assert_int_equal(def->pad, DYN_TOK_PAD);
    assert_int_equal(def->eos, DYN_TOK_EOS);
    assert_int_equal(def->decoder_start, DYN_TOK_BOS);
    int32_t prompt[4] = {'a', 'b', 'c', DYN_TOK_SEP};
    enum { N = 6 };
    int32_t full[N], cut[N], n = 0, nc = 0;
    dyn_model_specials sp = {.pad = 3, .bos = -1, .eos = -1, .decoder_start = 5};
    dyn_model_set_specials(m, &sp);
    assert_int_equal(dyn_model_generate_greedy(m, a, prompt, 4, N, full, &n, &err), DYN_OK);
    assert_int_equal(n, N);
    sp.eos = full[2];
    dyn_model_set_specials(m, &sp);
    assert_int_equal(dyn_model_generate_greedy(m, a, prompt, 4, N, cut, &nc, &err), DYN_OK);
    int32_t first = 0;
    while (full[first] != sp.eos) first++;
    assert_int_equal(nc, first + 1);
    assert_memory_equal(cut, full, (size_t)nc * sizeof(int32_t));
    /* micro-batch: padding and the decoder start of sp */
    int32_t tgt[2] = {7, 8};
    dyn_token_sample s[2] = {{prompt, 4, tgt, 2}, {prompt, 2, tgt, 1}};
    dyn_model_microbatch *mb = dyn_model_microbatch_create_ex(&sp, kind, s, 2, NULL, 0, 0, 0, 0, &err);
    assert_non_null(mb);
    int32_t T = mb->lay->T;
    if (kind == DYN_MODEL_GPT) {
        assert_int_equal(T, 6);
        for (int32_t p = 3; p < T; p++) assert_int_equal(mb->tokens[T + p], 3); /* row 1 holds 3 tokens */
    } else {
        assert_int_equal(T, 4);
        assert_int_equal(mb->tokens[T + 2], 3);
        assert_int_equal(mb->tokens[T + 3], 3);
        int32_t Td = mb->dec_lay->T;
        assert_int_equal(mb->dec_tokens[0], 5);
        assert_int_equal(mb->dec_tokens[1], 7);
        assert_int_equal(mb->dec_tokens[Td], 5);
        assert_int_equal(mb->dec_tokens[Td + 1], 3);
    }
    dyn_model_microbatch_free(mb);
    dyn_model_acts_free(a);
    dyn_model_free(m);
}

static void test_specials(void **state)
{
    (void)state;
    check_specials(DYN_MODEL_GPT);
    check_specials(DYN_MODEL_T5);
}

static void test_gpt(void **state)
{
    (void)state;
    check_kind(DYN_MODEL_GPT);
}

static void test_t5(void **state)
{
    (void)state;
    check_kind(DYN_MODEL_T5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gpt), cmocka_unit_test(test_t5),
                                       cmocka_unit_test(test_specials)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
