/* test_hf_load.c — model/hf_load.h below the command line: fp16 and bf16
 * to fp32 against an independent formula (every fp16 bit pattern), a stage
 * model loaded from a folder holds exactly the whole model's values of its
 * tensors, and config.json's defaults (Hugging Face's, which for T5 mean
 * v1.0) are refused where dynapipe computes something else; the Llama family
 * (Llama, Qwen2 with q/k/v biases, tied heads) read back and loaded stage by
 * stage, and Mistral's sliding window refused when shorter than the run.
 * tests/hf_init_check.py covers the command (folders written by an
 * independent writer, bad folders, the round trip). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/hf_load.h" /* defines: dyn_hf_* */
#include "model/model.h"
#include "util/util.h" /* defines: dyn_file_write_atomic */

/* fp16 by its definition: (-1)^s * 2^(e-15) * (1 + m/1024), subnormal
 * 2^-14 * m/1024. */
static double f16_reference(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m / 1024.0, -14) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1.0 + m / 1024.0, e - 15);
    return s ? -v : v;
}

static void f16_every_pattern(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float got = dyn_hf_f16_to_f32((uint16_t)h);
        double want = f16_reference((uint16_t)h);
        if (isnan(want)) {
            assert_true(isnan(got));
        } else if ((double)got != want || !signbit(got) != !signbit(want)) {
            fail_msg("fp16 0x%04x: got %.9g, want %.9g", h, (double)got, want);
        }
    }
}

static void bf16_is_the_high_half(void **state)
{
    (void)state;
    assert_true(dyn_hf_bf16_to_f32(0x3f80) == 1.0f);
    assert_true(dyn_hf_bf16_to_f32(0xc000) == -2.0f);
    assert_true(dyn_hf_bf16_to_f32(0x0001) == ldexpf(1.0f, -133)); /* smallest subnormal */
    assert_true(isinf(dyn_hf_bf16_to_f32(0x7f80)));
}

static char dir[] = "/tmp/dyn_test_hf_XXXXXX";

static void write_text(const char *name, const char *text)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    assert_int_equal(dyn_file_write_atomic(p, text, strlen(text), NULL), DYN_OK);
}

/* A whole GPT model saved as dir/model.safetensors (F32, HF names): each
 * stage model of a 2-way split loads exactly its tensors' values. */
static void stage_loads_its_tensors(void **state)
{
    (void)state;
    dyn_model_config cfg = dyn_model_config_tiny(DYN_MODEL_GPT, 3, 32, 2, 16);
    dyn_error err;
    dyn_model *full = dyn_model_create(&cfg, 5, &err);
    assert_non_null(full);
    char p[256];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_int_equal(dyn_model_save(full, p, &err), DYN_OK);
    write_text("config.json", "{\"architectures\": [\"GPT2LMHeadModel\"], \"vocab_size\": 260, \"n_positions\": 16,"
                              " \"n_embd\": 32, \"n_layer\": 3, \"n_head\": 2}");
    dyn_hf_folder *f = dyn_hf_open(dir, 0, &err);
    assert_non_null(f);
    assert_int_equal(dyn_hf_folder_config(f)->model.n_layers, 3);
    assert_int_equal(dyn_hf_folder_config(f)->model.max_seqlen, 16);
    assert_int_equal(dyn_hf_check(f, &cfg, &err), DYN_OK);
    int L = dyn_model_num_layers(full), cut = L / 2;
    for (int s = 0; s < 2; s++) {
        dyn_model *m = dyn_model_create_stage(&cfg, 99, s ? cut : 0, s ? L : cut, &err); /* another seed */
        assert_non_null(m);
        assert_int_equal(dyn_hf_load(f, m, &err), DYN_OK);
        for (int i = 0; i < dyn_model_num_tensors(m); i++) {
            const dyn_param_tensor *t = dyn_model_tensor(m, i);
            const dyn_param_tensor *u = dyn_model_find_tensor(full, t->name);
            assert_non_null(u);
            if (memcmp(dyn_model_params(m) + t->offset, dyn_model_params(full) + u->offset, t->numel * sizeof(float)))
                fail_msg("stage %d: tensor %s differs from the saved model's", s, t->name);
        }
        dyn_model_free(m);
    }
    /* A shape of another width: refused, naming the tensor and the file. */
    dyn_model_config wide = cfg;
    wide.hidden = 64;
    wide.head_dim = 32;
    wide.ffn = 256;
    assert_int_not_equal(dyn_hf_check(f, &wide, &err), DYN_OK);
    assert_non_null(strstr(err.msg, "wte.weight"));
    assert_non_null(strstr(err.msg, "model.safetensors"));
    dyn_hf_close(f);
    dyn_model_free(full);
}

/* Hugging Face's T5Config defaults are v1.0's (feed_forward_proj relu,
 * tied embeddings): a config.json that leaves them out is refused. */
static void t5_defaults_are_v10(void **state)
{
    (void)state;
    dyn_hf_config c;
    dyn_error err;
    const char *base = "{\"architectures\": [\"T5ForConditionalGeneration\"], \"vocab_size\": 300, \"d_model\": 32,"
                       " \"d_kv\": 8, \"d_ff\": 64, \"num_layers\": 2, \"num_heads\": 4%s}";
    char text[512];
    snprintf(text, sizeof text, base, "");
    write_text("config.json", text);
    assert_int_not_equal(dyn_hf_config_read(dir, 128, &c, &err), DYN_OK);
    assert_non_null(strstr(err.msg, "feed_forward_proj"));
    snprintf(text, sizeof text, base, ", \"feed_forward_proj\": \"gated-gelu\"");
    write_text("config.json", text);
    assert_int_not_equal(dyn_hf_config_read(dir, 128, &c, &err), DYN_OK);
    assert_non_null(strstr(err.msg, "tie_word_embeddings"));
    snprintf(text, sizeof text, base, ", \"feed_forward_proj\": \"gated-gelu\", \"tie_word_embeddings\": false");
    write_text("config.json", text);
    assert_int_equal(dyn_hf_config_read(dir, 128, &c, &err), DYN_OK);
    assert_int_equal(c.model.n_dec_layers, 2); /* num_decoder_layers defaults to num_layers */
    assert_int_equal(c.model.head_dim, 8);
    assert_int_equal(c.fixed_seqlen, 0);
}

/* A Llama-family model saved by dynapipe with the config.json
 * dyn_hf_config_llama_json writes: read back through the one table to the
 * same shape (Qwen2 when qkv_bias, tied or not), the folder checks, and each
 * stage of a 2-way split loads exactly the saved values. The rotary
 * inv_freq buffers older files carry are accepted; an unknown tensor is
 * not. */
static void llama_family_loads(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        dyn_model_config cfg = dyn_model_config_tiny(DYN_MODEL_LLAMA, 3, 32, 4, 64);
        cfg.qkv_bias = k;
        cfg.tie_embeddings = k;
        dyn_error err;
        dyn_model *full = dyn_model_create(&cfg, 9, &err);
        assert_non_null(full);
        char p[256];
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        assert_int_equal(dyn_model_save(full, p, &err), DYN_OK);
        char *text = dyn_hf_config_llama_json(&cfg, NULL, &err);
        assert_non_null(text);
        write_text("config.json", text);
        free(text);
        dyn_hf_folder *f = dyn_hf_open(dir, 48, &err);
        if (f == NULL) fail_msg("%s", err.msg);
        const dyn_hf_config *h = dyn_hf_folder_config(f);
        assert_string_equal(h->arch, k ? "Qwen2ForCausalLM" : "LlamaForCausalLM");
        assert_int_equal(h->model.kv_heads, 2);
        assert_int_equal(h->model.qkv_bias, k);
        assert_int_equal(h->model.tie_embeddings, k);
        assert_int_equal(h->model.max_seqlen, 48); /* the run's, not max_position_embeddings */
        assert_int_equal(h->positions, 64);
        assert_int_equal(h->eos_id, DYN_TOK_EOS);
        dyn_model_config run = h->model;
        if (dyn_hf_check(f, &run, &err) != DYN_OK) fail_msg("%s", err.msg);
        int L = dyn_model_num_layers(full), cut = 2;
        for (int s = 0; s < 2; s++) {
            dyn_model *m = dyn_model_create_stage(&run, 99, s ? cut : 0, s ? L : cut, &err);
            assert_non_null(m);
            assert_int_equal(dyn_hf_load(f, m, &err), DYN_OK);
            for (int i = 0; i < dyn_model_num_tensors(m); i++) {
                const dyn_param_tensor *t = dyn_model_tensor(m, i);
                const dyn_param_tensor *u = dyn_model_find_tensor(full, t->name);
                assert_non_null(u);
                if (memcmp(dyn_model_params(m) + t->offset, dyn_model_params(full) + u->offset,
                           t->numel * sizeof(float)))
                    fail_msg("Llama stage %d: tensor %s differs from the saved model's", s, t->name);
            }
            dyn_model_free(m);
        }
        dyn_hf_close(f);
        dyn_model_free(full);
    }
}

/* Mistral's sliding window: accepted when it covers the run's length,
 * refused in one line naming the file and the field when shorter. */
static void mistral_sliding_window(void **state)
{
    (void)state;
    const char *base = "{\"architectures\": [\"MistralForCausalLM\"], \"vocab_size\": 300, \"hidden_size\": 32,"
                       " \"intermediate_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                       " \"num_key_value_heads\": 2, \"max_position_embeddings\": 4096, \"sliding_window\": 256}";
    write_text("config.json", base);
    dyn_hf_config c;
    dyn_error err;
    assert_int_equal(dyn_hf_config_read(dir, 256, &c, &err), DYN_OK);
    assert_int_equal(c.model.kind, DYN_MODEL_LLAMA);
    assert_int_not_equal(dyn_hf_config_read(dir, 512, &c, &err), DYN_OK);
    assert_non_null(strstr(err.msg, "config.json"));
    assert_non_null(strstr(err.msg, "sliding_window = 256"));
    assert_non_null(strstr(err.msg, "512"));
    assert_null(strchr(err.msg, '\n'));
    /* An architecture outside the table names what is supported. */
    write_text("config.json", "{\"architectures\": [\"GemmaForCausalLM\"], \"vocab_size\": 300}");
    assert_int_not_equal(dyn_hf_config_read(dir, 256, &c, &err), DYN_OK);
    assert_non_null(strstr(err.msg, "GemmaForCausalLM"));
    assert_non_null(strstr(err.msg, "Qwen2ForCausalLM"));
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(f16_every_pattern),
        cmocka_unit_test(bf16_is_the_high_half),
        cmocka_unit_test(stage_loads_its_tensors),
        cmocka_unit_test(t5_defaults_are_v10),
        cmocka_unit_test(llama_family_loads),
        cmocka_unit_test(mistral_sliding_window),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
