/* test_model_generate.c — greedy decoding (generate.c) against an
 * independent computation: the loss machinery alone. For each step t of a
 * generation, the loss of target = generated[0..t) ++ [v] is computed for
 * every vocabulary id v; the last token's cross entropy is
 * -log softmax(logits)[v], so the arg-max token is the v whose full loss
 * is smallest (the earlier tokens' losses are the same for every v). The
 * generated token must be that v, for GPT and T5, on a randomly
 * initialised model (whose arg-max is not a special token by design). */
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
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gpt), cmocka_unit_test(test_t5)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
