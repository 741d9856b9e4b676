/* test_llama_model.c — the whole Llama-family model (llama.c) on tiny
 * configs: Hugging Face tensor names and shapes (tied and untied head,
 * Qwen2 biases), every tensor's gradient by finite differences on padded
 * and document-masked micro-batches, the split backward and recompute
 * bit-identical to the fused backward, per-document position ids (a
 * packed document-masked micro-batch gives each sample the loss it has
 * alone), greedy generation against the full forward's arg-max, a
 * checkpoint round trip with the HF names, configs that are refused, and
 * the profiler measuring GPT's three layer kinds on a Llama model, and the
 * layer benchmark's Llama block (what `dynapipe bench layer --model llama`
 * will run).
 * Stage splits against the whole model are in test_model_stage.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "model/layer_bench.h" /* defines: dyn_layer_bench_run */
#include "model/profile.h"  /* defines: dyn_profiler_* */
#include "model/threads.h"  /* defines: dyn_threads_init */
#include "model_testutil.h" /* defines: make_samples, loss_and_grad, model_grad_check */

static dyn_model_config tiny(int tie, int bias)
{
    /* 4 heads of 8 over 2 key/value heads; ffn 64. */
    dyn_model_config c = dyn_model_config_tiny(DYN_MODEL_LLAMA, 2, 32, 4, 64);
    c.tie_embeddings = tie;
    c.qkv_bias = bias;
    return c;
}

static dyn_model *create(const dyn_model_config *c, uint64_t seed)
{
    dyn_error err;
    dyn_model *m = dyn_model_create(c, seed, &err);
    if (m == NULL) fail_msg("create: %s", err.msg);
    return m;
}

/* Parameters larger than the 0.02 init, so attention is far from uniform
 * and every path carries gradient; norm gains near 1. */
static void scramble(dyn_model *m, uint64_t seed)
{
    dyn_rng r;
    dyn_rng_seed(&r, seed);
    for (int i = 0; i < dyn_model_num_tensors(m); i++) {
        const dyn_param_tensor *t = dyn_model_tensor(m, i);
        float *p = dyn_model_params(m) + t->offset;
        fill_uniform(p, t->numel, t->ndim == 2 ? 0.25f : 0.2f, &r);
        if (strstr(t->name, "norm")) /* input_layernorm, post_attention_layernorm, model.norm */
            for (size_t k = 0; k < t->numel; k++) p[k] += 1.0f;
    }
}

static dyn_model_microbatch *batch(int docmask, dyn_token_sample *smp, int32_t **store)
{
    dyn_error err;
    make_samples(smp, 4, 2, 9, 2, 6, 77, store);
    dyn_model_microbatch *mb;
    if (docmask) {
        int32_t rows[2] = {3, 1};
        mb = dyn_model_microbatch_create_packed(DYN_MODEL_LLAMA, smp, 4, rows, 2, 0, 0, 1, &err);
    } else {
        mb = dyn_model_microbatch_create_padded(DYN_MODEL_LLAMA, smp, 4, &err);
    }
    if (mb == NULL) fail_msg("micro-batch: %s", err.msg);
    return mb;
}

/* ---- names and shapes --------------------------------------------------- */

static void test_hf_names(void **state)
{
    (void)state;
    for (int tie = 0; tie <= 1; tie++) {
        dyn_model_config c = tiny(tie, !tie);
        dyn_model *m = create(&c, 1);
        assert_int_equal(dyn_model_num_layers(m), 4);
        const struct { const char *name; int64_t d0, d1; } want[] = {
            {"model.embed_tokens.weight", 260, 32},
            {"model.layers.0.input_layernorm.weight", 32, 0},
            {"model.layers.1.self_attn.q_proj.weight", 32, 32},
            {"model.layers.1.self_attn.k_proj.weight", 16, 32},
            {"model.layers.1.self_attn.v_proj.weight", 16, 32},
            {"model.layers.1.self_attn.o_proj.weight", 32, 32},
            {"model.layers.0.post_attention_layernorm.weight", 32, 0},
            {"model.layers.0.mlp.gate_proj.weight", 64, 32},
            {"model.layers.0.mlp.up_proj.weight", 64, 32},
            {"model.layers.1.mlp.down_proj.weight", 32, 64},
            {"model.norm.weight", 32, 0},
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const dyn_param_tensor *t = dyn_model_find_tensor(m, want[i].name);
            if (t == NULL) fail_msg("missing %s", want[i].name);
            assert_int_equal(t->shape[0], want[i].d0);
            assert_int_equal(t->shape[1], want[i].d1);
            assert_int_equal(t->hf_transposed, 0);
        }
        assert_int_equal(dyn_model_find_tensor(m, "lm_head.weight") != NULL, !tie);
        const dyn_param_tensor *qb = dyn_model_find_tensor(m, "model.layers.0.self_attn.q_proj.bias");
        const dyn_param_tensor *kb = dyn_model_find_tensor(m, "model.layers.1.self_attn.k_proj.bias");
        assert_int_equal(qb != NULL, !tie);
        if (kb) assert_int_equal(kb->shape[0], 16);
        /* Total: embedding, per layer 2 norms + q,k,v,o + 3 MLP (+ biases), norm, head. */
        int64_t per = 32 + 32 * 32 + 2 * 16 * 32 + 32 * 32 + 32 + 3 * 64 * 32 + (tie ? 0 : 32 + 16 + 16);
        int64_t total = 260 * 32 + 2 * per + 32 + (tie ? 0 : 260 * 32);
        assert_int_equal((int64_t)dyn_model_num_params(m), total);
        dyn_model_free(m);
    }
}

/* ---- gradients ----------------------------------------------------------- */

static void grad_case(int tie, int bias, int docmask, int split)
{
    dyn_model_config c = tiny(tie, bias);
    dyn_model *m = create(&c, 3);
    scramble(m, 4);
    dyn_token_sample smp[4];
    int32_t *store;
    dyn_model_microbatch *mb = batch(docmask, smp, &store);
    char what[64];
    snprintf(what, sizeof what, "llama tie %d bias %d docmask %d split %d", tie, bias, docmask, split);
    assert_int_equal(model_grad_check(m, mb, what, split), 0);
    dyn_model_microbatch_free(mb);
    free(store);
    dyn_model_free(m);
}

static void test_grad_untied_padded(void **state) { (void)state; grad_case(0, 0, 0, 0); }
static void test_grad_tied_docmask(void **state) { (void)state; grad_case(1, 0, 1, 0); }
static void test_grad_bias_docmask_split(void **state) { (void)state; grad_case(0, 1, 1, 1); }

/* ---- split backward and recompute, bit for bit ------------------------------ */

static void test_split_and_recompute_bitwise(void **state)
{
    (void)state;
    for (int tie = 0; tie <= 1; tie++) {
        dyn_model_config c = tiny(tie, 1);
        dyn_model *m = create(&c, 5);
        scramble(m, 6);
        dyn_token_sample smp[4];
        int32_t *store;
        dyn_model_microbatch *mb = batch(1, smp, &store);
        size_t np = dyn_model_num_params(m);
        dyn_model_acts *a = dyn_model_acts_create(NULL);
        dyn_model_zero_grad(m);
        double l0 = loss_and_grad(m, a, mb, 0.1f, 0, NULL);
        float *ref = malloc(np * 4);
        memcpy(ref, dyn_model_grads(m), np * 4);
        for (int mode = 0; mode < 3; mode++) { /* recompute; split; split + recompute */
            dyn_model_zero_grad(m);
            double l = mode == 0 ? loss_and_grad(m, a, mb, 0.1f, 1, NULL) : split_loss_and_grad(m, a, mb, 0.1f, mode == 2);
            assert_true(l == l0);
            assert_memory_equal(dyn_model_grads(m), ref, np * 4);
        }
        free(ref);
        dyn_model_acts_free(a);
        dyn_model_microbatch_free(mb);
        free(store);
        dyn_model_free(m);
    }
}

/* ---- documents: each sample's loss as alone --------------------------------- */

static void test_docmask_losses_match_alone(void **state)
{
    (void)state;
    dyn_model_config c = tiny(0, 0);
    dyn_model *m = create(&c, 7);
    scramble(m, 8);
    dyn_token_sample smp[4];
    int32_t *store;
    dyn_model_microbatch *mb = batch(1, smp, &store);
    dyn_model_acts *a = dyn_model_acts_create(NULL);
    float packed[4];
    dyn_error err;
    double total = 0;
    assert_int_equal(dyn_model_forward(m, a, mb, 0, &total, packed, &err), DYN_OK);
    for (int i = 0; i < 4; i++) {
        dyn_model_microbatch *one = dyn_model_microbatch_create_padded(DYN_MODEL_LLAMA, &smp[i], 1, &err);
        assert_non_null(one);
        float alone;
        double l;
        assert_int_equal(dyn_model_forward(m, a, one, 0, &l, &alone, &err), DYN_OK);
        if (fabsf(alone - packed[i]) > 1e-5f * fabsf(alone) + 1e-6f)
            fail_msg("sample %d: packed loss %.7g, alone %.7g", i, packed[i], alone);
        dyn_model_microbatch_free(one);
    }
    dyn_model_acts_free(a);
    dyn_model_microbatch_free(mb);
    free(store);
    dyn_model_free(m);
}

/* ---- generation -------------------------------------------------------------- */

/* Arg-max of the head on hidden row h, in double: model.norm then lm_head. */
static int32_t argmax_ref(dyn_model *m, const float *h)
{
    const dyn_model_config *c = dyn_model_cfg(m);
    const float *nw = dyn_model_params(m) + dyn_model_find_tensor(m, "model.norm.weight")->offset;
    const dyn_param_tensor *ht = dyn_model_find_tensor(m, c->tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
    const float *w = dyn_model_params(m) + ht->offset;
    double ss = 0, x[64];
    for (int i = 0; i < c->hidden; i++) ss += (double)h[i] * h[i];
    double r = 1.0 / sqrt(ss / c->hidden + c->rms_eps);
    for (int i = 0; i < c->hidden; i++) x[i] = h[i] * r * nw[i];
    int32_t best = 0;
    double bv = -INFINITY;
    for (int v = 0; v < c->vocab; v++) {
        double s = 0;
        for (int i = 0; i < c->hidden; i++) s += w[(size_t)v * c->hidden + i] * x[i];
        if (s > bv) bv = s, best = v;
    }
    return best;
}

static void test_generate_greedy(void **state)
{
    (void)state;
    dyn_model_config c = tiny(1, 0);
    dyn_model *m = create(&c, 9);
    scramble(m, 10);
    const int32_t prompt[5] = {72, 101, 108, 108, 111};
    int32_t out[6], n = 0;
    dyn_model_acts *a = dyn_model_acts_create(NULL);
    dyn_error err;
    assert_int_equal(dyn_model_generate_greedy(m, a, prompt, 5, 6, out, &n, &err), DYN_OK);
    assert_true(n >= 1);
    /* Each generated token is the arg-max after the prompt and the tokens
     * before it, by a forward of layers [0, L-1) and the head in double. */
    int32_t seq[16];
    memcpy(seq, prompt, sizeof prompt);
    for (int t = 0; t < n; t++) {
        int32_t dummy = 0;
        dyn_token_sample s = {seq, 5 + t, &dummy, 1};
        dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(DYN_MODEL_LLAMA, &s, 1, &err);
        assert_non_null(mb);
        int L = dyn_model_num_layers(m);
        float *hid = calloc(dyn_model_boundary_floats(m, L - 1, mb), 4);
        assert_int_equal(dyn_model_stage_forward(m, a, mb, 0, L - 1, NULL, hid, 0, NULL, NULL, &err), DYN_OK);
        assert_int_equal(out[t], argmax_ref(m, hid + (size_t)(4 + t) * c.hidden));
        seq[5 + t] = out[t];
        free(hid);
        dyn_model_microbatch_free(mb);
    }
    dyn_model_acts_free(a);
    dyn_model_free(m);
}

/* ---- checkpoint round trip ---------------------------------------------------- */

static void test_checkpoint_round_trip(void **state)
{
    (void)state;
    char path[] = "/tmp/dyn_llama_ckpt_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    for (int tie = 0; tie <= 1; tie++) {
        dyn_model_config c = tiny(tie, 1);
        dyn_model *a = create(&c, 11), *b = create(&c, 12);
        dyn_error err;
        assert_int_equal(dyn_model_save(a, path, &err), DYN_OK);
        assert_int_equal(dyn_model_load(b, path, &err), DYN_OK);
        assert_memory_equal(dyn_model_params(a), dyn_model_params(b), dyn_model_num_params(a) * 4);
        /* Another shape (GQA off) does not load. */
        dyn_model_config o = c;
        o.kv_heads = 4;
        dyn_model *x = create(&o, 13);
        assert_int_not_equal(dyn_model_load(x, path, &err), DYN_OK);
        dyn_model_free(x);
        dyn_model_free(a);
        dyn_model_free(b);
    }
    unlink(path);
}

/* ---- refused configs ------------------------------------------------------------ */

static void test_bad_configs(void **state)
{
    (void)state;
    dyn_error err;
    dyn_model_config c;
    c = tiny(0, 0);
    c.kv_heads = 3; /* does not divide 4 */
    assert_null(dyn_model_create(&c, 1, &err));
    assert_non_null(strstr(err.msg, "num_key_value_heads"));
    c = tiny(0, 0);
    c.rope_scaling = 7; /* e.g. yarn, dynamic: not computed here */
    assert_null(dyn_model_create(&c, 1, &err));
    assert_non_null(strstr(err.msg, "rope_scaling"));
    c = tiny(0, 0);
    c.rope_scaling = DYN_ROPE_LLAMA3; /* factors missing */
    assert_null(dyn_model_create(&c, 1, &err));
    assert_non_null(strstr(err.msg, "llama3"));
    c = tiny(0, 0);
    c.rms_eps = 0;
    assert_null(dyn_model_create(&c, 1, &err));
    c = tiny(0, 0);
    c.head_dim = 7;
    assert_null(dyn_model_create(&c, 1, &err));
    /* A Llama micro-batch position beyond max_seqlen is refused. */
    c = tiny(0, 0);
    c.max_seqlen = 8;
    dyn_model *m = create(&c, 1);
    dyn_token_sample smp[4];
    int32_t *store;
    dyn_model_microbatch *mb = batch(0, smp, &store);
    dyn_model_acts *a = dyn_model_acts_create(NULL);
    double l;
    assert_int_not_equal(dyn_model_forward(m, a, mb, 0, &l, NULL, &err), DYN_OK);
    assert_non_null(strstr(err.msg, "max_seqlen"));
    dyn_model_acts_free(a);
    dyn_model_microbatch_free(mb);
    free(store);
    dyn_model_free(m);
}

/* ---- the profiler ---------------------------------------------------------------
 * A Llama model has GPT's layer kinds (embedding, block, head); the block
 * stores more than its input without recompute and only its input with. */
static void test_profiler_kinds(void **state)
{
    (void)state;
    dyn_model_config c = tiny(1, 0);
    dyn_error err;
    dyn_profiler *p = dyn_profiler_create(&c, 1, 1, 0, &err);
    if (p == NULL) fail_msg("profiler: %s", err.msg);
    dyn_layer_cost none, full;
    const dyn_layer_kind kinds[3] = {DYN_LAYER_EMBED, DYN_LAYER_ENCODER, DYN_LAYER_LM_HEAD};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(dyn_profiler_measure(p, kinds[k], DYN_RECOMPUTE_NONE, 2, 16, 0, &none, &err), DYN_OK);
        assert_true(none.fwd_ms >= 0 && none.bwd_ms >= 0 && none.stored_mb >= 0);
    }
    assert_int_equal(dyn_profiler_measure(p, DYN_LAYER_ENCODER, DYN_RECOMPUTE_FULL, 2, 16, 0, &full, &err), DYN_OK);
    assert_int_equal(dyn_profiler_measure(p, DYN_LAYER_ENCODER, DYN_RECOMPUTE_NONE, 2, 16, 0, &none, &err), DYN_OK);
    assert_true(full.stored_mb > 0 && full.stored_mb < none.stored_mb);
    /* 2 rows x 16 tokens x 32 floats: the block input, in MB (2^20 bytes). */
    assert_true(fabs(full.stored_mb - 2.0 * 16 * 32 * 4 / 1048576.0) < 1e-9);
    assert_int_not_equal(dyn_profiler_measure(p, DYN_LAYER_DECODER, DYN_RECOMPUTE_NONE, 2, 16, 8, &none, &err), DYN_OK);
    dyn_profiler_free(p);
}

static void test_layer_bench_llama(void **state)
{
    (void)state;
    dyn_layer_bench_cfg cfg = {DYN_MODEL_LLAMA, 32, 8, 2, 16, 0, 1, 1};
    dyn_layer_bench_result r;
    dyn_error err;
    assert_int_equal(dyn_layer_bench_run(&cfg, &r, &err), DYN_OK);
    assert_true(r.ms > 0 && r.gflops > 0);
    /* 8 heads over 2 key/value heads of 4, SwiGLU 8*32/3 -> 128 */
    dyn_llama_dims d = dyn_layer_bench_llama_dims(32, 8, 1);
    assert_int_equal(d.KVH, 2);
    assert_int_equal(d.b.F, 128);
    assert_true(fabs(r.gflop - dyn_llama_block_flops(d, 2, 16) * 1e-9) < 1e-12);
    /* QKV = 32 + 2*8 = 48: 3 x (2*32*32*48 + 2*32*32*32 + 6*32*32*128 + 4*2*16*16*32) */
    assert_true(dyn_llama_block_flops(d, 2, 16) == 3.0 * (2.0 * 32 * 32 * 48 + 2.0 * 32 * 32 * 32 + 6.0 * 32 * 32 * 128 +
                                                           4.0 * 2 * 16 * 16 * 32));
    cfg.hidden = 36, cfg.heads = 4; /* head dim 9: no rotary pairs */
    assert_int_equal(dyn_layer_bench_run(&cfg, &r, &err), DYN_ERR_INVALID_ARG);
}

int main(void)
{
    dyn_threads_init(); /* the selected BLAS kernel, checked (threads.h); may re-execute */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_names),
        cmocka_unit_test(test_grad_untied_padded),
        cmocka_unit_test(test_grad_tied_docmask),
        cmocka_unit_test(test_grad_bias_docmask_split),
        cmocka_unit_test(test_split_and_recompute_bitwise),
        cmocka_unit_test(test_docmask_losses_match_alone),
        cmocka_unit_test(test_generate_greedy),
        cmocka_unit_test(test_checkpoint_round_trip),
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_profiler_kinds),
        cmocka_unit_test(test_layer_bench_llama),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
