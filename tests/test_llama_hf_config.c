/* test_llama_hf_config.c — Hugging Face config.json read into
 * dyn_model_config (model/hf_config.h): the published configs of Llama 3.1
 * 8B, Qwen2 0.5B, Mistral 7B v0.1, GPT-2 and T5 v1.1 base, field by field;
 * the refusals (unknown architecture, rope_scaling other than llama3,
 * biases Llama does not have, a sliding window shorter than the run,
 * missing and mistyped fields, bad JSON), each one line naming the file and
 * the field; and dyn_hf_config_llama_json read back into the same config. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/hf_config.h" /* defines: dyn_hf_config_* */
#include "model/model.h"     /* defines: dyn_model_create */

static dyn_model_config parse_ok(const char *text, int32_t max_len)
{
    dyn_model_config c;
    dyn_error err;
    if (dyn_hf_config_parse(text, strlen(text), "t/config.json", max_len, &c, &err) != DYN_OK)
        fail_msg("refused: %s", err.msg);
    return c;
}

/* Refused, with a message holding `needle` and the file name. */
static void parse_refused(const char *text, int32_t max_len, const char *needle)
{
    dyn_model_config c;
    dyn_error err;
    assert_int_not_equal(dyn_hf_config_parse(text, strlen(text), "t/config.json", max_len, &c, &err), DYN_OK);
    if (strstr(err.msg, needle) == NULL || strstr(err.msg, "t/config.json") == NULL)
        fail_msg("message '%s' lacks '%s'", err.msg, needle);
    assert_null(strchr(err.msg, '\n'));
}

static const char *LLAMA31_8B =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 128000, \"eos_token_id\": 128001, \"hidden_act\": \"silu\", \"hidden_size\": 4096,"
    " \"initializer_range\": 0.02, \"intermediate_size\": 14336, \"max_position_embeddings\": 131072,"
    " \"mlp_bias\": false, \"model_type\": \"llama\", \"num_attention_heads\": 32, \"num_hidden_layers\": 32,"
    " \"num_key_value_heads\": 8, \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05,"
    " \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
    " \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}, \"rope_theta\": 500000.0,"
    " \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.43.0.dev0\","
    " \"use_cache\": true, \"vocab_size\": 128256}";

static void test_llama31(void **state)
{
    (void)state;
    dyn_model_config c = parse_ok(LLAMA31_8B, 4096);
    assert_int_equal(c.kind, DYN_MODEL_LLAMA);
    assert_int_equal(c.hidden, 4096);
    assert_int_equal(c.ffn, 14336);
    assert_int_equal(c.n_layers, 32);
    assert_int_equal(c.n_dec_layers, 0);
    assert_int_equal(c.heads, 32);
    assert_int_equal(c.kv_heads, 8);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.vocab, 128256);
    assert_int_equal(c.max_seqlen, 4096); /* the run's limit */
    assert_true(c.rms_eps == 1e-5);
    assert_true(c.rope_theta == 500000.0);
    assert_int_equal(c.rope_scaling, DYN_ROPE_LLAMA3);
    assert_true(c.rope_factor == 8.0 && c.rope_low_freq == 1.0 && c.rope_high_freq == 4.0);
    assert_int_equal(c.rope_orig_ctx, 8192);
    assert_int_equal(c.tie_embeddings, 0);
    assert_int_equal(c.qkv_bias, 0);
    /* 0: the model's own limit. */
    assert_int_equal(parse_ok(LLAMA31_8B, 0).max_seqlen, 131072);
}

static void test_qwen2_and_mistral(void **state)
{
    (void)state;
    const char *qwen =
        "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643,"
        " \"eos_token_id\": 151643, \"hidden_act\": \"silu\", \"hidden_size\": 896, \"initializer_range\": 0.02,"
        " \"intermediate_size\": 4864, \"max_position_embeddings\": 32768, \"max_window_layers\": 24,"
        " \"model_type\": \"qwen2\", \"num_attention_heads\": 14, \"num_hidden_layers\": 24,"
        " \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 32768,"
        " \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", \"use_cache\": true,"
        " \"use_sliding_window\": false, \"vocab_size\": 151936}";
    dyn_model_config c = parse_ok(qwen, 2048);
    assert_int_equal(c.kind, DYN_MODEL_LLAMA);
    assert_int_equal(c.qkv_bias, 1);
    assert_int_equal(c.tie_embeddings, 1);
    assert_int_equal(c.heads, 14);
    assert_int_equal(c.kv_heads, 2);
    assert_int_equal(c.head_dim, 64);
    assert_true(c.rms_eps == 1e-6);
    assert_int_equal(c.rope_scaling, DYN_ROPE_NONE);
    const char *mistral =
        "{\"architectures\": [\"MistralForCausalLM\"], \"bos_token_id\": 1, \"eos_token_id\": 2,"
        " \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 14336,"
        " \"max_position_embeddings\": 32768, \"model_type\": \"mistral\", \"num_attention_heads\": 32,"
        " \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0,"
        " \"sliding_window\": 4096, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\","
        " \"use_cache\": true, \"vocab_size\": 32000}";
    c = parse_ok(mistral, 4096); /* the window covers every sequence */
    assert_int_equal(c.kv_heads, 8);
    assert_int_equal(c.qkv_bias, 0);
    assert_int_equal(c.vocab, 32000);
    parse_refused(mistral, 8192, "sliding_window = 4096");
    parse_refused(mistral, 0, "sliding_window"); /* 0: the model's 32768 positions */
}

static void test_gpt2_and_t5(void **state)
{
    (void)state;
    const char *gpt2 =
        "{\"activation_function\": \"gelu_new\", \"architectures\": [\"GPT2LMHeadModel\"], \"attn_pdrop\": 0.1,"
        " \"bos_token_id\": 50256, \"embd_pdrop\": 0.1, \"eos_token_id\": 50256, \"initializer_range\": 0.02,"
        " \"layer_norm_epsilon\": 1e-05, \"model_type\": \"gpt2\", \"n_ctx\": 1024, \"n_embd\": 768,"
        " \"n_head\": 12, \"n_layer\": 12, \"n_positions\": 1024, \"resid_pdrop\": 0.1, \"vocab_size\": 50257}";
    dyn_model_config c = parse_ok(gpt2, 0);
    assert_int_equal(c.kind, DYN_MODEL_GPT);
    assert_int_equal(c.hidden, 768);
    assert_int_equal(c.ffn, 3072);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.max_seqlen, 1024);
    assert_int_equal(c.vocab, 50257);
    parse_refused(gpt2, 2048, "n_positions");
    const char *t5 =
        "{\"architectures\": [\"T5ForConditionalGeneration\"], \"d_ff\": 2048, \"d_kv\": 64, \"d_model\": 768,"
        " \"decoder_start_token_id\": 0, \"dropout_rate\": 0.1, \"eos_token_id\": 1,"
        " \"feed_forward_proj\": \"gated-gelu\", \"initializer_factor\": 1.0, \"is_encoder_decoder\": true,"
        " \"layer_norm_epsilon\": 1e-06, \"model_type\": \"t5\", \"num_decoder_layers\": 12, \"num_heads\": 12,"
        " \"num_layers\": 12, \"output_past\": true, \"pad_token_id\": 0, \"relative_attention_num_buckets\": 32,"
        " \"tie_word_embeddings\": false, \"vocab_size\": 32128}";
    c = parse_ok(t5, 512);
    assert_int_equal(c.kind, DYN_MODEL_T5);
    assert_int_equal(c.n_layers, 12);
    assert_int_equal(c.n_dec_layers, 12);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.ffn, 2048);
    assert_int_equal(c.max_seqlen, 512);
    parse_refused(t5, 0, "max length");
}

static void test_refusals(void **state)
{
    (void)state;
    parse_refused("{\"architectures\": [\"BertForMaskedLM\"], \"hidden_size\": 8}", 64, "BertForMaskedLM");
    parse_refused("{\"architectures\": [\"BertForMaskedLM\"]}", 64, "LlamaForCausalLM"); /* lists what is supported */
    const char *base = "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128,"
                       " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 300,"
                       " \"max_position_embeddings\": 128%s}";
    char buf[1024];
    snprintf(buf, sizeof buf, base, ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}");
    parse_refused(buf, 64, "rope_scaling type yarn");
    snprintf(buf, sizeof buf, base, ", \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}");
    parse_refused(buf, 64, "dynamic");
    snprintf(buf, sizeof buf, base, ", \"attention_bias\": true");
    parse_refused(buf, 64, "attention_bias");
    snprintf(buf, sizeof buf, base, ", \"hidden_act\": \"gelu\"");
    parse_refused(buf, 64, "hidden_act gelu");
    snprintf(buf, sizeof buf, base, ", \"num_key_value_heads\": 2.5");
    parse_refused(buf, 64, "num_key_value_heads");
    snprintf(buf, sizeof buf, base, ", \"rms_norm_eps\": \"small\"");
    parse_refused(buf, 64, "rms_norm_eps");
    parse_refused("{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64}", 64, "intermediate_size");
    parse_refused("{\"architectures\": [\"LlamaForCausalLM\"], ", 64, "t/config.json");
    /* Parsed, then refused by the model with the field's name. */
    snprintf(buf, sizeof buf, base, ", \"num_key_value_heads\": 3");
    dyn_model_config c = parse_ok(buf, 64);
    dyn_error err;
    assert_null(dyn_model_create(&c, 1, &err));
    assert_non_null(strstr(err.msg, "num_key_value_heads = 3"));
    /* A good one builds. */
    snprintf(buf, sizeof buf, base, ", \"num_key_value_heads\": 2, \"tie_word_embeddings\": true");
    c = parse_ok(buf, 64);
    dyn_model *m = dyn_model_create(&c, 1, &err);
    if (m == NULL) fail_msg("%s", err.msg);
    assert_null(dyn_model_find_tensor(m, "lm_head.weight"));
    dyn_model_free(m);
}

/* Field by field (the struct has padding). */
static int same_config(const dyn_model_config *a, const dyn_model_config *b)
{
    return a->kind == b->kind && a->n_layers == b->n_layers && a->n_dec_layers == b->n_dec_layers &&
           a->hidden == b->hidden && a->heads == b->heads && a->head_dim == b->head_dim && a->ffn == b->ffn &&
           a->vocab == b->vocab && a->max_seqlen == b->max_seqlen && a->kv_heads == b->kv_heads &&
           a->tie_embeddings == b->tie_embeddings && a->qkv_bias == b->qkv_bias && a->rope_scaling == b->rope_scaling &&
           a->rope_theta == b->rope_theta && a->rms_eps == b->rms_eps && a->rope_factor == b->rope_factor &&
           a->rope_low_freq == b->rope_low_freq && a->rope_high_freq == b->rope_high_freq &&
           a->rope_orig_ctx == b->rope_orig_ctx;
}

static void test_write_read_back(void **state)
{
    (void)state;
    dyn_model_config c;
    dyn_error err;
    for (int k = 0; k < 2; k++) {
        c = k == 0 ? parse_ok(LLAMA31_8B, 4096) : dyn_model_config_tiny(DYN_MODEL_LLAMA, 2, 32, 4, 64);
        if (k == 1) {
            c.qkv_bias = 1; /* written as Qwen2 */
            c.tie_embeddings = 1;
        }
        char *text = dyn_hf_config_llama_json(&c, NULL, &err);
        assert_non_null(text);
        assert_non_null(strstr(text, k == 0 ? "\"LlamaForCausalLM\"" : "\"Qwen2ForCausalLM\""));
        dyn_model_config back = parse_ok(text, 0);
        assert_true(same_config(&back, &c));
        free(text);
    }
    c = dyn_model_config_tiny(DYN_MODEL_GPT, 2, 32, 4, 64);
    assert_null(dyn_hf_config_llama_json(&c, NULL, &err));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama31),        cmocka_unit_test(test_qwen2_and_mistral),
        cmocka_unit_test(test_gpt2_and_t5),    cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_write_read_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
