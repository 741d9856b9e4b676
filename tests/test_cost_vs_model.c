/* test_cost_vs_model.c — the cost model's parameter counts agree with the
 * models src/model actually builds, so memory planning counts the states the
 * runtime will hold. Two independent counts: the cost model's formulas and
 * the model's tensor table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "dynapipe/model_config.h" /* defines: dyn_model_config_params */
#include "model/model.h"           /* defines: dyn_model_create, dyn_model_num_params */
#include "model/threads.h" /* defines: dyn_threads_init */

static void check_counts_match(const dyn_model_config *cfg)
{
    dyn_error err;
    dyn_model *m = dyn_model_create(cfg, 1, &err);
    assert_non_null(m);
    assert_int_equal((int64_t)dyn_model_num_params(m), dyn_model_config_params(cfg));
    dyn_model_free(m);
}

static void test_gpt_counts_match_built_model(void **state)
{
    (void)state;
    dyn_model_config cfg = {.kind = DYN_MODEL_GPT, .n_layers = 3, .n_dec_layers = 0, .hidden = 32, .heads = 4,
                            .head_dim = 8, .ffn = 128, .vocab = 260, .max_seqlen = 64};
    check_counts_match(&cfg);
}

static void test_t5_counts_match_built_model(void **state)
{
    (void)state;
    /* head_dim * heads != hidden on purpose: T5's d_kv is independent. */
    dyn_model_config cfg = {.kind = DYN_MODEL_T5, .n_layers = 2, .n_dec_layers = 3, .hidden = 32, .heads = 4,
                            .head_dim = 12, .ffn = 96, .vocab = 260, .max_seqlen = 64};
    check_counts_match(&cfg);
}

/* Llama: grouped-query heads, head_dim other than hidden / heads (Llama
 * allows it), each of tied/untied head and with/without Qwen2's q/k/v
 * biases. */
static void test_llama_counts_match_built_model(void **state)
{
    (void)state;
    for (int tied = 0; tied < 2; tied++)
        for (int bias = 0; bias < 2; bias++) {
            dyn_model_config cfg = dyn_model_config_tiny(DYN_MODEL_LLAMA, 3, 32, 4, 64);
            cfg.head_dim = 10;
            cfg.ffn = 88;
            cfg.vocab = 300;
            cfg.tie_embeddings = tied;
            cfg.qkv_bias = bias;
            assert_int_equal(dyn_model_config_validate(&cfg, NULL), DYN_OK);
            check_counts_match(&cfg);
        }
    dyn_model_config mini;
    assert_int_equal(dyn_model_config_preset("llama-mini", &mini, NULL), DYN_OK);
    check_counts_match(&mini);
}

int main(void)
{
    dyn_threads_init(); /* the selected BLAS kernel, checked (threads.h); may re-execute */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_counts_match_built_model),
        cmocka_unit_test(test_t5_counts_match_built_model),
        cmocka_unit_test(test_llama_counts_match_built_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
