/* test_model_checkpoint.c — model weights as Hugging Face safetensors:
 * round trip, the exact HF names and shapes (lists written out by hand from
 * transformers' modeling_gpt2.py / modeling_t5.py), Conv1D transposition,
 * all-or-nothing loading of bad files, and the optimizer/training-position
 * companion file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/safetensors.h" /* defines: dyn_safetensors_* */
#include "model_testutil.h"   /* defines: make_samples, loss_and_grad */
#include "util/util.h"         /* defines: dyn_file_read_all, dyn_file_write_atomic */
#include "model/threads.h" /* defines: dyn_threads_init */

static void tmp_path(char *buf, size_t cap, const char *tag)
{
    snprintf(buf, cap, "/tmp/dyn_test_ckpt_%ld_%s.safetensors", (long)getpid(), tag);
}

typedef struct expect {
    char name[128];
    int ndim;
    int64_t shape[2];
} expect;

static int add(expect *e, int n, const char *name, int ndim, int64_t a, int64_t b)
{
    snprintf(e[n].name, sizeof e[n].name, "%s", name);
    e[n].ndim = ndim;
    e[n].shape[0] = a;
    e[n].shape[1] = b;
    return n + 1;
}

/* The file at path holds exactly the tensors of e, F32, with those shapes. */
static void check_names(const char *path, const expect *e, int n)
{
    dyn_error err;
    dyn_safetensors *st = dyn_safetensors_open(path, &err);
    assert_non_null(st);
    assert_int_equal(dyn_safetensors_count(st), n);
    for (int i = 0; i < n; i++) {
        int64_t shape[4];
        const char *dt;
        int nd = dyn_safetensors_shape(st, e[i].name, shape, &dt);
        if (nd < 0) fail_msg("tensor %s missing from the file", e[i].name);
        assert_string_equal(dt, "F32");
        assert_int_equal(nd, e[i].ndim);
        for (int d = 0; d < nd; d++)
            if (shape[d] != e[i].shape[d]) fail_msg("%s: dim %d is %lld, HF has %lld", e[i].name, d, (long long)shape[d], (long long)e[i].shape[d]);
    }
    assert_string_equal(dyn_safetensors_meta(st, "format"), "pt");
    dyn_safetensors_free(st);
}

static void test_gpt_file_has_hf_names_and_shapes(void **state)
{
    (void)state;
    const int C = 16, V = DYN_VOCAB_BYTES, P = 32;
    dyn_model_config c = dyn_model_config_tiny(DYN_MODEL_GPT, 2, C, 2, P);
    dyn_model *m = dyn_model_create(&c, 1, NULL);
    char path[256];
    tmp_path(path, sizeof path, "gptnames");
    dyn_error err;
    assert_int_equal(dyn_model_save(m, path, &err), DYN_OK);
    expect e[64];
    int n = 0;
    n = add(e, n, "wte.weight", 2, V, C);
    n = add(e, n, "wpe.weight", 2, P, C);
    for (int i = 0; i < 2; i++) {
        char b[96];
#define H(suffix, nd, a, bb) (snprintf(b, sizeof b, "h.%d." suffix, i), n = add(e, n, b, nd, a, bb))
        H("ln_1.weight", 1, C, 0);
        H("ln_1.bias", 1, C, 0);
        H("attn.c_attn.weight", 2, C, 3 * C); /* Conv1D: (in, out) */
        H("attn.c_attn.bias", 1, 3 * C, 0);
        H("attn.c_proj.weight", 2, C, C);
        H("attn.c_proj.bias", 1, C, 0);
        H("ln_2.weight", 1, C, 0);
        H("ln_2.bias", 1, C, 0);
        H("mlp.c_fc.weight", 2, C, 4 * C);
        H("mlp.c_fc.bias", 1, 4 * C, 0);
        H("mlp.c_proj.weight", 2, 4 * C, C);
        H("mlp.c_proj.bias", 1, C, 0);
#undef H
    }
    n = add(e, n, "ln_f.weight", 1, C, 0);
    n = add(e, n, "ln_f.bias", 1, C, 0);
    check_names(path, e, n);

    /* Conv1D transposition: file c_attn[in][out] = our qkv_w[out][in]. */
    dyn_safetensors *st = dyn_safetensors_open(path, &err);
    float *file = malloc((size_t)C * 3 * C * sizeof(float));
    int64_t shape[2] = {C, 3 * C};
    assert_int_equal(dyn_safetensors_read(st, "h.1.attn.c_attn.weight", 2, shape, file, &err), DYN_OK);
    const dyn_param_tensor *t = dyn_model_find_tensor(m, "h.1.attn.c_attn.weight");
    assert_int_equal(t->shape[0], 3 * C);
    const float *ours = dyn_model_params(m) + t->offset;
    for (int in = 0; in < C; in++)
        for (int out = 0; out < 3 * C; out++) assert_true(file[in * 3 * C + out] == ours[out * C + in]);
    free(file);
    dyn_safetensors_free(st);
    unlink(path);
    dyn_model_free(m);
}

static void test_t5_file_has_hf_names_and_shapes(void **state)
{
    (void)state;
    const int C = 16, V = DYN_VOCAB_BYTES, NH = 2, HD = 8, F = 32, I = NH * HD;
    dyn_model_config c = dyn_model_config_tiny(DYN_MODEL_T5, 2, C, NH, 32);
    assert_int_equal(c.ffn, F);
    dyn_model *m = dyn_model_create(&c, 1, NULL);
    char path[256];
    tmp_path(path, sizeof path, "t5names");
    dyn_error err;
    assert_int_equal(dyn_model_save(m, path, &err), DYN_OK);
    expect e[96];
    int n = 0;
    char b[128];
    n = add(e, n, "shared.weight", 2, V, C);
    const char *stacks[2] = {"encoder", "decoder"};
    for (int s = 0; s < 2; s++) {
        snprintf(b, sizeof b, "%s.block.0.layer.0.SelfAttention.relative_attention_bias.weight", stacks[s]);
        n = add(e, n, b, 2, 32, NH); /* Embedding(num_buckets, heads) */
        for (int i = 0; i < 2; i++) {
#define T(suffix, nd, a, bb) (snprintf(b, sizeof b, "%s.block.%d." suffix, stacks[s], i), n = add(e, n, b, nd, a, bb))
            T("layer.0.layer_norm.weight", 1, C, 0);
            T("layer.0.SelfAttention.q.weight", 2, I, C); /* Linear: (out, in) */
            T("layer.0.SelfAttention.k.weight", 2, I, C);
            T("layer.0.SelfAttention.v.weight", 2, I, C);
            T("layer.0.SelfAttention.o.weight", 2, C, I);
            T("layer.1.layer_norm.weight", 1, C, 0);
            if (s == 0) {
                T("layer.1.DenseReluDense.wi_0.weight", 2, F, C);
                T("layer.1.DenseReluDense.wi_1.weight", 2, F, C);
                T("layer.1.DenseReluDense.wo.weight", 2, C, F);
            } else {
                T("layer.1.EncDecAttention.q.weight", 2, I, C);
                T("layer.1.EncDecAttention.k.weight", 2, I, C);
                T("layer.1.EncDecAttention.v.weight", 2, I, C);
                T("layer.1.EncDecAttention.o.weight", 2, C, I);
                T("layer.2.layer_norm.weight", 1, C, 0);
                T("layer.2.DenseReluDense.wi_0.weight", 2, F, C);
                T("layer.2.DenseReluDense.wi_1.weight", 2, F, C);
                T("layer.2.DenseReluDense.wo.weight", 2, C, F);
            }
#undef T
        }
        snprintf(b, sizeof b, "%s.final_layer_norm.weight", stacks[s]);
        n = add(e, n, b, 1, C, 0);
    }
    n = add(e, n, "lm_head.weight", 2, V, C);
    check_names(path, e, n);
    unlink(path);
    dyn_model_free(m);
}

static void test_round_trip_restores_every_weight(void **state)
{
    (void)state;
    for (int kind = 0; kind < 2; kind++) {
        dyn_model_config c = dyn_model_config_tiny((dyn_model_kind)kind, 2, 16, 2, 32);
        dyn_model *a = dyn_model_create(&c, 1, NULL), *b = dyn_model_create(&c, 2, NULL);
        char path[256];
        tmp_path(path, sizeof path, "rt");
        dyn_error err;
        assert_int_equal(dyn_model_save(a, path, &err), DYN_OK);
        assert_int_equal(dyn_model_load(b, path, &err), DYN_OK);
        assert_memory_equal(dyn_model_params(a), dyn_model_params(b), dyn_model_num_params(a) * sizeof(float));
        unlink(path);
        dyn_model_free(a);
        dyn_model_free(b);
    }
}

/* Loading path must fail with a message containing needle and leave the
 * model's parameters exactly as they were. */
static void expect_load_fails(dyn_model *m, const char *path, const char *needle)
{
    size_t np = dyn_model_num_params(m);
    float *before = malloc(np * sizeof(float));
    memcpy(before, dyn_model_params(m), np * sizeof(float));
    dyn_error err;
    dyn_error_clear(&err);
    assert_int_not_equal(dyn_model_load(m, path, &err), DYN_OK);
    if (strstr(err.msg, needle) == NULL) fail_msg("message '%s' lacks '%s'", err.msg, needle);
    assert_memory_equal(before, dyn_model_params(m), np * sizeof(float));
    free(before);
}

/* Write the tensors of `src` except `skip`, optionally with one reshaped. */
static void write_variant(const dyn_model *src, const char *path, const char *skip, const char *reshape)
{
    int n = dyn_model_num_tensors(src), k = 0;
    dyn_st_entry *e = calloc((size_t)n, sizeof *e);
    float *p = dyn_model_params((dyn_model *)src);
    for (int i = 0; i < n; i++) {
        const dyn_param_tensor *t = dyn_model_tensor(src, i);
        if (skip && strcmp(t->name, skip) == 0) continue;
        e[k].name = t->name;
        e[k].ndim = t->ndim;
        e[k].shape[0] = t->hf_transposed ? t->shape[1] : t->shape[0];
        e[k].shape[1] = t->hf_transposed ? t->shape[0] : t->shape[1];
        if (reshape && strcmp(t->name, reshape) == 0) { /* same bytes, other shape */
            e[k].shape[0] = e[k].shape[0] * e[k].shape[1];
            e[k].ndim = 1;
        }
        e[k].data = p + t->offset; /* values irrelevant here */
        k++;
    }
    dyn_error err;
    assert_int_equal(dyn_safetensors_write(path, e, k, NULL, 0, &err), DYN_OK);
    free(e);
}

/* The sharded-weights index: dyn_model_index_write's file is the Hub's
 * layout (exact bytes of a one-entry index written by hand), and a model
 * saved to one shard loads back through the index it wrote. */
static void test_index_write_round_trip(void **state)
{
    (void)state;
    char dir[256], p[512];
    snprintf(dir, sizeof dir, "/tmp/dyn_test_ckpt_%ld_index", (long)getpid());
    assert_int_equal(mkdir(dir, 0777), 0);
    dyn_error err;
    dyn_index_entry one = {"x", "f.safetensors", 4};
    assert_int_equal(dyn_model_index_write(dir, &one, 1, &err), DYN_OK);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    char *text = NULL;
    assert_int_equal(dyn_file_read_all(p, &text, NULL, &err), DYN_OK);
    assert_string_equal(text, "{\n\t\"metadata\":\t{\n\t\t\"total_size\":\t4,\n\t\t\"format\":\t\"pt\"\n\t},\n"
                              "\t\"weight_map\":\t{\n\t\t\"x\":\t\"f.safetensors\"\n\t}\n}\n");
    free(text);
    dyn_model_config c = dyn_model_config_tiny(DYN_MODEL_T5, 2, 16, 2, 32);
    dyn_model *a = dyn_model_create(&c, 1, NULL), *b = dyn_model_create(&c, 2, NULL);
    assert_non_null(a);
    assert_non_null(b);
    snprintf(p, sizeof p, "%s/w.safetensors", dir);
    assert_int_equal(dyn_model_save(a, p, &err), DYN_OK);
    int n = dyn_model_num_tensors(a);
    dyn_index_entry *e = calloc((size_t)n, sizeof *e);
    assert_non_null(e);
    for (int i = 0; i < n; i++) {
        const dyn_param_tensor *t = dyn_model_tensor(a, i);
        e[i] = (dyn_index_entry){t->name, "w.safetensors", t->numel * sizeof(float)};
    }
    assert_int_equal(dyn_model_index_write(dir, e, n, &err), DYN_OK);
    if (dyn_model_load_index(b, dir, &err) != DYN_OK) fail_msg("%s", err.msg);
    assert_memory_equal(dyn_model_params(a), dyn_model_params(b), dyn_model_num_params(a) * sizeof(float));
    free(e);
    dyn_model_free(a);
    dyn_model_free(b);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_bad_checkpoints_load_nothing(void **state)
{
    (void)state;
    dyn_model_config c = dyn_model_config_tiny(DYN_MODEL_T5, 1, 16, 2, 32);
    dyn_model *src = dyn_model_create(&c, 1, NULL), *m = dyn_model_create(&c, 2, NULL);
    char path[256], good[256];
    tmp_path(path, sizeof path, "bad");
    tmp_path(good, sizeof good, "good");
    dyn_error err;
    assert_int_equal(dyn_model_save(src, good, &err), DYN_OK);

    write_variant(src, path, "encoder.block.0.layer.1.DenseReluDense.wo.weight", NULL);
    expect_load_fails(m, path, "tensor 'encoder.block.0.layer.1.DenseReluDense.wo.weight' missing (expected F32 [16, 32])");

    write_variant(src, path, NULL, "decoder.block.0.layer.1.EncDecAttention.q.weight");
    expect_load_fails(m, path, "tensor 'decoder.block.0.layer.1.EncDecAttention.q.weight' has shape [256], expected [16, 16]");

    /* A model with two layers has tensors this one-layer model lacks. */
    dyn_model_config c2 = dyn_model_config_tiny(DYN_MODEL_T5, 2, 16, 2, 32);
    dyn_model *big = dyn_model_create(&c2, 1, NULL);
    assert_int_equal(dyn_model_save(big, path, &err), DYN_OK);
    expect_load_fails(m, path, "is not part of this model");
    dyn_model_free(big);

    char *raw = NULL;
    size_t len = 0;
    assert_int_equal(dyn_file_read_all(good, &raw, &len, &err), DYN_OK);

    /* wrong dtype: same byte size (I32), so only the dtype check catches it */
    char *dt = strstr(raw + 8, "\"dtype\":\"F32\"");
    assert_non_null(dt);
    memcpy(dt, "\"dtype\":\"I32\"", 13);
    assert_int_equal(dyn_file_write_atomic(path, raw, len, &err), DYN_OK);
    expect_load_fails(m, path, "has dtype I32, expected F32");
    memcpy(dt, "\"dtype\":\"F32\"", 13);

    /* truncated: the last 100 bytes cut off */
    assert_int_equal(dyn_file_write_atomic(path, raw, len - 100, &err), DYN_OK);
    expect_load_fails(m, path, "beyond the");

    /* corrupted header: a brace replaced */
    raw[8] = '[';
    assert_int_equal(dyn_file_write_atomic(path, raw, len, &err), DYN_OK);
    expect_load_fails(m, path, "not a valid JSON object");
    free(raw);

    expect_load_fails(m, "/nonexistent/dir/x.safetensors", "cannot open");

    /* and the good file still loads */
    assert_int_equal(dyn_model_load(m, good, &err), DYN_OK);
    assert_memory_equal(dyn_model_params(src), dyn_model_params(m), dyn_model_num_params(m) * sizeof(float));
    unlink(path);
    unlink(good);
    dyn_model_free(src);
    dyn_model_free(m);
}

static void test_train_state_round_trip(void **state)
{
    (void)state;
    dyn_error err;
    dyn_model_config c = dyn_model_config_tiny(DYN_MODEL_GPT, 1, 16, 2, 32);
    dyn_model *m = dyn_model_create(&c, 1, &err);
    dyn_model_acts *a = dyn_model_acts_create(&err);
    dyn_token_sample s[2];
    int32_t *store;
    make_samples(s, 2, 2, 5, 2, 5, 3, &store);
    dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(DYN_MODEL_GPT, s, 2, &err);
    dyn_adamw_config ac = dyn_adamw_default();
    for (int step = 0; step < 3; step++) {
        dyn_model_zero_grad(m);
        loss_and_grad(m, a, mb, 0.1f, 0, NULL);
        dyn_model_adamw_step(m, 1e-3f, &ac, 1.0);
    }
    dyn_train_state ts = {.data_cursor = 1234};
    dyn_rng_seed(&ts.rng, 77);
    dyn_rng_next_u64(&ts.rng);
    char path[256];
    tmp_path(path, sizeof path, "opt");
    assert_int_equal(dyn_model_save_train_state(m, &ts, path, &err), DYN_OK);

    dyn_model *r = dyn_model_create(&c, 9, &err);
    dyn_train_state back;
    memset(&back, 0, sizeof back);
    assert_int_equal(dyn_model_load_train_state(r, &back, path, &err), DYN_OK);
    size_t np = dyn_model_num_params(m);
    assert_int_equal(dyn_model_step_count(r), 3);
    assert_int_equal(back.data_cursor, 1234);
    assert_memory_equal(&back.rng, &ts.rng, sizeof ts.rng);
    assert_memory_equal(dyn_model_moment1(r), dyn_model_moment1(m), np * sizeof(float));
    assert_memory_equal(dyn_model_moment2(r), dyn_model_moment2(m), np * sizeof(float));

    /* a different model refuses it and keeps its state */
    dyn_model_config c2 = dyn_model_config_tiny(DYN_MODEL_GPT, 2, 16, 2, 32);
    dyn_model *other = dyn_model_create(&c2, 1, &err);
    assert_int_equal(dyn_model_load_train_state(other, &back, path, &err), DYN_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "optimizer state for"));
    assert_int_equal(dyn_model_step_count(other), 0);
    /* a weights file is not a train-state file */
    assert_int_equal(dyn_model_save(m, path, &err), DYN_OK);
    assert_int_equal(dyn_model_load_train_state(r, &back, path, &err), DYN_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "metadata 'dynapipe.step' missing"));
    unlink(path);
    free(store);
    dyn_model_microbatch_free(mb);
    dyn_model_acts_free(a);
    dyn_model_free(m);
    dyn_model_free(r);
    dyn_model_free(other);
}

int main(void)
{
    dyn_threads_init(); /* the selected BLAS kernel, checked (threads.h); may re-execute */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_file_has_hf_names_and_shapes),
        cmocka_unit_test(test_t5_file_has_hf_names_and_shapes),
        cmocka_unit_test(test_round_trip_restores_every_weight),
        cmocka_unit_test(test_bad_checkpoints_load_nothing),
        cmocka_unit_test(test_index_write_round_trip),
        cmocka_unit_test(test_train_state_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
