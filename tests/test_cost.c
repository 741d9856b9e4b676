/* test_cost.c — the analytic cost model (GPT, T5, Llama) against FLOP counts worked by hand,
 * its monotonicity and recompute trade-offs, document-masked attention, the
 * table model against a known multilinear function (inside and outside the
 * grid, clamping), table round trips and malformed tables, machine and model
 * JSON files and presets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dynapipe/cost.h"         /* defines: dyn_cost_*, dyn_machine_builtin */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_*, dyn_machine_* */
#include "util/util.h"                /* defines: dyn_file_read_all */

static char g_dir[] = "/tmp/dyn_test_cost_XXXXXX";

static int setup_dir(void **state)
{
    (void)state;
    return mkdtemp(g_dir) == NULL ? -1 : 0;
}

static int teardown_dir(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp_path(const char *name)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    return path;
}

static const char *write_file(const char *name, const char *text)
{
    const char *path = tmp_path(name);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(text, 1, strlen(text), fp), strlen(text));
    assert_int_equal(fclose(fp), 0);
    return path;
}

static void assert_close(double got, double want, double rel)
{
    double tol = rel * fmax(fabs(want), 1e-300);
    if (fabs(got - want) > tol) fail_msg("got %.17g, want %.17g (rel tol %g)", got, want, rel);
}

/* A machine that isolates one kind of work: the rate under test is 1 GFLOP/s
 * (or 1 GB/s), so 1 ms = 1e6 FLOPs (bytes); the others are 1e15x faster, and
 * the small-size terms are off (pure FLOP counts). */
static dyn_machine probe_machine(int which)
{
    dyn_machine m = *dyn_machine_builtin("cpu");
    double fast = 1e15;
    m.matmul_gflops = which == 0 ? 1.0 : fast;
    m.attn_gflops = which == 1 ? 1.0 : fast;
    m.mem_gbps = which == 2 ? 1.0 : fast;
    m.gemm_n_half = 0.0;
    m.layer_overhead_ms = 0.0;
    return m;
}

static dyn_layer_cost layer(const dyn_cost_model *cm, dyn_layer_kind k, dyn_mb_shape mb, dyn_recompute rc)
{
    dyn_layer_cost c;
    dyn_error err;
    dyn_status st = dyn_cost_layer(cm, k, &mb, rc, &c, &err);
    if (st != DYN_OK) fail_msg("dyn_cost_layer: %s", err.msg);
    return c;
}

/* gpt-tiny: h = 64, 4 heads of 16, ffn 256, vocab 512. Micro-batch 2 x 32. */
static void test_gpt_block_flops_hand_worked(void **state)
{
    (void)state;
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("gpt-tiny", &cfg, NULL), DYN_OK);
    dyn_mb_shape mb = {.rows = 2, .enc_len = 32};
    /* matrix products over 64 tokens:
     *   QKV 2*64*64*192 = 1572864, out 2*64*64*64 = 524288,
     *   fc1 2*64*64*256 = 2097152, fc2 2*64*256*64 = 2097152 */
    double mm = 1572864.0 + 524288.0 + 2097152.0 + 2097152.0; /* 6291456 */
    /* attention: QK^T 2*32*32*16 per row and head = 32768, x 4 heads x 2 rows
     * = 262144; PV the same; causal halves the total */
    double attn = (262144.0 + 262144.0) * 0.5;
    dyn_machine m0 = probe_machine(0), m1 = probe_machine(1);
    dyn_cost_model *c0 = dyn_cost_model_create_analytic(&cfg, &m0, NULL);
    dyn_cost_model *c1 = dyn_cost_model_create_analytic(&cfg, &m1, NULL);
    assert_non_null(c0);
    assert_non_null(c1);
    dyn_layer_cost a = layer(c0, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_NONE);
    assert_close(a.fwd_ms, mm / 1e6, 1e-9);
    assert_close(a.bwd_weight_ms, mm / 1e6, 1e-9);
    assert_close(a.bwd_input_ms, mm / 1e6, 1e-9);
    assert_close(a.bwd_ms, 2 * mm / 1e6, 1e-9);
    dyn_layer_cost b = layer(c1, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_NONE);
    assert_close(b.fwd_ms, attn / 1e6, 1e-6);
    assert_close(b.bwd_input_ms, 2 * attn / 1e6, 1e-6); /* attention backward = 2x */
    /* selective adds the attention forward to the backward; full the whole forward */
    dyn_layer_cost bs = layer(c1, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_SELECTIVE);
    assert_close(bs.bwd_input_ms, 3 * attn / 1e6, 1e-6);
    dyn_layer_cost af = layer(c0, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_FULL);
    assert_close(af.bwd_ms, 3 * mm / 1e6, 1e-9);
    /* document mask: each row holds two 16-token documents, so 2 * (256 + 256)
     * attended pairs instead of 2 * 1024: half the attention work */
    dyn_mb_shape dm = mb;
    dm.enc_attn = 2 * (16 * 16 + 16 * 16);
    dyn_layer_cost bd = layer(c1, DYN_LAYER_ENCODER, dm, DYN_RECOMPUTE_NONE);
    assert_close(bd.fwd_ms, attn / 2 / 1e6, 1e-6);
    /* LM head: 2 * 64 tokens * 64 * 512 = 4194304 FLOPs */
    dyn_layer_cost lm = layer(c0, DYN_LAYER_LM_HEAD, mb, DYN_RECOMPUTE_NONE);
    assert_close(lm.fwd_ms, 4194304.0 / 1e6, 1e-9);
    dyn_cost_model_free(c0);
    dyn_cost_model_free(c1);
}

/* t5-tiny: h = 64, 4 heads of 16, ffn 128. One row, 8 input, 4 target tokens. */
static void test_t5_decoder_flops_hand_worked(void **state)
{
    (void)state;
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("t5-tiny", &cfg, NULL), DYN_OK);
    dyn_mb_shape mb = {.rows = 1, .enc_len = 8, .dec_len = 4};
    /* self QKV + out on 4 tokens: 2*4*(4*64*64) = 131072
     * cross Q + out on 4 tokens:  2*4*(2*64*64) = 65536
     * cross K V on 8 encoder tokens: 2*8*(2*64*64) = 131072
     * gated FFN, 3 matrices on 4 tokens: 2*4*3*64*128 = 196608 */
    double mm = 131072.0 + 65536.0 + 131072.0 + 196608.0;
    /* self attention: 16 pairs * 4 * 64 * 0.5 (causal) = 2048;
     * cross attention: 32 pairs * 4 * 64 = 8192 */
    double attn = 2048.0 + 8192.0;
    /* encoder block on 8 tokens: 2*8*(4*64*64) + 2*8*3*64*128 = 262144 + 393216,
     * bidirectional attention 64 pairs * 4 * 64 = 16384 */
    double enc_mm = 262144.0 + 393216.0, enc_attn = 16384.0;
    dyn_machine m0 = probe_machine(0), m1 = probe_machine(1);
    dyn_cost_model *c0 = dyn_cost_model_create_analytic(&cfg, &m0, NULL);
    dyn_cost_model *c1 = dyn_cost_model_create_analytic(&cfg, &m1, NULL);
    assert_non_null(c0);
    assert_non_null(c1);
    assert_close(layer(c0, DYN_LAYER_DECODER, mb, DYN_RECOMPUTE_NONE).fwd_ms, mm / 1e6, 1e-9);
    assert_close(layer(c1, DYN_LAYER_DECODER, mb, DYN_RECOMPUTE_NONE).fwd_ms, attn / 1e6, 1e-6);
    assert_close(layer(c0, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_NONE).fwd_ms, enc_mm / 1e6, 1e-9);
    assert_close(layer(c1, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_NONE).fwd_ms, enc_attn / 1e6, 1e-6);
    /* LM head over the 4 decoder tokens: 2*4*64*512 */
    assert_close(layer(c0, DYN_LAYER_LM_HEAD, mb, DYN_RECOMPUTE_NONE).fwd_ms, 262144.0 / 1e6, 1e-9);
    dyn_cost_model_free(c0);
    dyn_cost_model_free(c1);
}

/* The small-size terms by hand: matmul 1 GFLOP/s (1e6 FLOP per ms), every
 * other rate 1e15x faster, gemm_n_half = 16 rows, 0.25 ms per layer per pass.
 * Each pass's products cost the time of 16 extra token rows; forward,
 * input-gradient and weight-gradient passes pay 0.25 ms each. */
static void test_small_size_terms_hand_worked(void **state)
{
    (void)state;
    dyn_machine m = probe_machine(0);
    m.gemm_n_half = 16.0;
    m.layer_overhead_ms = 0.25;
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("gpt-tiny", &cfg, NULL), DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, &m, NULL);
    assert_non_null(cm);
    dyn_mb_shape mb = {.rows = 2, .enc_len = 32};
    /* GPT block, h = 64, f = 256: products QKV (64 x 192), out (64 x 64),
     * fc1 (64 x 256), fc2 (256 x 64): 2 K N summed = 2 * (12288 + 4096 +
     * 16384 + 16384) = 98304 FLOPs per row. 64 rows + 16 = 80 rows:
     * 80 * 98304 = 7864320 FLOPs = 7.86432 ms, + 0.25 ms = 8.11432 ms a pass. */
    double pass = 80.0 * 98304.0 / 1e6 + 0.25;
    dyn_layer_cost c = layer(cm, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_NONE);
    assert_close(c.fwd_ms, pass, 1e-9);
    assert_close(c.bwd_input_ms, pass, 1e-9);
    assert_close(c.bwd_weight_ms, pass, 1e-9);
    assert_close(c.bwd_ms, 2 * pass, 1e-9);
    /* full recompute adds one whole forward pass, overhead included */
    assert_close(layer(cm, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_FULL).bwd_input_ms, 2 * pass, 1e-9);
    /* one row of 8 tokens: 24 rows' worth of products, 2.359296 + 0.25 ms */
    dyn_mb_shape tiny = {.rows = 1, .enc_len = 8};
    assert_close(layer(cm, DYN_LAYER_ENCODER, tiny, DYN_RECOMPUTE_NONE).fwd_ms, 24.0 * 98304.0 / 1e6 + 0.25,
                 1e-9);
    /* LM head: one product 64 x 512, 2 K N = 65536; (64 + 16) rows */
    assert_close(layer(cm, DYN_LAYER_LM_HEAD, mb, DYN_RECOMPUTE_NONE).fwd_ms, 80.0 * 65536.0 / 1e6 + 0.25, 1e-9);
    /* embedding: no products; forward and weight-gradient (scatter) passes
     * pay the overhead, there is no input-gradient pass */
    dyn_layer_cost e = layer(cm, DYN_LAYER_EMBED, mb, DYN_RECOMPUTE_NONE);
    assert_close(e.fwd_ms, 0.25, 1e-9);
    assert_true(e.bwd_input_ms == 0.0);
    assert_close(e.bwd_weight_ms, 0.25, 1e-9);
    dyn_cost_model_free(cm);

    /* T5 decoder, t5-tiny (h = a = 64, f = 128), 1 row of 8 input and 4
     * target tokens: FLOPs 524288 (as in the hand-worked count above) plus
     * 16 rows of every product -- self QKV + out 4ha, cross Q + out 2ha,
     * cross K V 2ha, gated FFN 3hf: 2 K N = 2 * (8 * 4096 + 3 * 8192) =
     * 114688 per row. */
    assert_int_equal(dyn_model_config_preset("t5-tiny", &cfg, NULL), DYN_OK);
    cm = dyn_cost_model_create_analytic(&cfg, &m, NULL);
    assert_non_null(cm);
    dyn_mb_shape t5 = {.rows = 1, .enc_len = 8, .dec_len = 4};
    assert_close(layer(cm, DYN_LAYER_DECODER, t5, DYN_RECOMPUTE_NONE).fwd_ms,
                 (524288.0 + 16.0 * 114688.0) / 1e6 + 0.25, 1e-9);
    dyn_cost_model_free(cm);
}

/* Stored activations of a GPT block, tensor by tensor (fp32, no recompute):
 * 64 tokens x (4h + 4a + 2f) = 64 x 1024 floats, LayerNorm statistics
 * 64 x 4 floats, probabilities 4 heads x 2 rows x 32 x 32 floats. */
static void test_gpt_block_memory_hand_worked(void **state)
{
    (void)state;
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("gpt-tiny", &cfg, NULL), DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), NULL);
    assert_non_null(cm);
    dyn_mb_shape mb = {.rows = 2, .enc_len = 32};
    double MB = 1024.0 * 1024.0;
    double probs = 4.0 * 4 * 2 * 32 * 32;
    double none = 4.0 * 64 * (4 * 64 + 4 * 64 + 2 * 256) + 4.0 * 64 * 4 + probs;
    assert_close(layer(cm, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_NONE).stored_mb, none / MB, 1e-12);
    assert_close(layer(cm, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_SELECTIVE).stored_mb, (none - probs) / MB, 1e-12);
    assert_close(layer(cm, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_FULL).stored_mb, 4.0 * 64 * 64 / MB, 1e-12);
    assert_close(layer(cm, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_NONE).output_mb, 4.0 * 64 * 64 / MB, 1e-12);
    /* LM head keeps the b x s x V probabilities */
    assert_true(layer(cm, DYN_LAYER_LM_HEAD, mb, DYN_RECOMPUTE_NONE).stored_mb >= 4.0 * 64 * 512 / MB);
    /* model states: GPT block params 2h + 3h^2 + 3h + h^2 + h + 2h + hf + f + fh + h
     * = 128 + 12288 + 192 + 4096 + 64 + 128 + 16384 + 256 + 16384 + 64 = 49984,
     * 16 bytes each */
    assert_close(dyn_cost_layer_states_mb(cm, DYN_LAYER_ENCODER), 49984.0 * 16 / MB, 1e-12);
    assert_true(dyn_cost_layer_states_mb(cm, DYN_LAYER_DECODER) == 0.0);
    dyn_cost_model_free(cm);
}

/* T5 decoder block, t5-tiny (h = a = 64, H = 4, f = 128), fp32, 1 row of 8
 * input and 4 target tokens: per decoder token 6h + 6a + 4f = 1280 floats,
 * per encoder token the cross K and V (2a = 128 floats), three RMS-norm
 * statistics per decoder token, probabilities 4 heads x (16 self + 32 cross). */
static void test_t5_decoder_memory_hand_worked(void **state)
{
    (void)state;
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("t5-tiny", &cfg, NULL), DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), NULL);
    assert_non_null(cm);
    dyn_mb_shape mb = {.rows = 1, .enc_len = 8, .dec_len = 4};
    double MB = 1024.0 * 1024.0;
    double probs = 4.0 * 4 * (16 + 32);                                       /* 768 */
    double none = 4.0 * 4 * 1280 + 4.0 * 8 * 128 + 4.0 * 4 * 3 + probs;      /* 25392 */
    assert_close(layer(cm, DYN_LAYER_DECODER, mb, DYN_RECOMPUTE_NONE).stored_mb, none / MB, 1e-12);
    assert_close(layer(cm, DYN_LAYER_DECODER, mb, DYN_RECOMPUTE_SELECTIVE).stored_mb, (none - probs) / MB, 1e-12);
    assert_close(layer(cm, DYN_LAYER_DECODER, mb, DYN_RECOMPUTE_FULL).stored_mb, 4.0 * 4 * 64 / MB, 1e-12);
    /* the decoder stream and the encoder output cross the boundary: 12 x 64 floats */
    assert_close(layer(cm, DYN_LAYER_DECODER, mb, DYN_RECOMPUTE_NONE).output_mb, 4.0 * 12 * 64 / MB, 1e-12);
    /* decoder params 3h + 8ha + 3hf = 192 + 32768 + 24576 = 57536 */
    assert_close(dyn_cost_layer_states_mb(cm, DYN_LAYER_DECODER), 57536.0 * 16 / MB, 1e-12);
    dyn_cost_model_free(cm);
}

/* llama-tiny: h = 64, 4 query heads of 16 (a = 64), 2 key/value heads (g =
 * 32), ffn 176, vocab 512, untied. Micro-batch 2 x 32 = 64 tokens. Counted
 * here from the Llama block's definition, not from analytic.c. */
static void test_llama_block_flops_hand_worked(void **state)
{
    (void)state;
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("llama-tiny", &cfg, NULL), DYN_OK);
    assert_int_equal(cfg.kv_heads, 2);
    dyn_mb_shape mb = {.rows = 2, .enc_len = 32};
    /* matrix products over 64 tokens:
     *   Q 2*64*64*64 = 524288, K and V 2*64*64*32 = 262144 each,
     *   O 2*64*64*64 = 524288, gate and up 2*64*64*176 = 1441792 each,
     *   down 2*64*176*64 = 1441792 */
    double mm = 524288.0 + 2 * 262144.0 + 524288.0 + 3 * 1441792.0; /* 5898240 */
    /* attention: every one of the 4 query heads scores its row (a shared
     * k/v head costs no less): QK^T 2*32*32*16 = 32768 per row and head, x
     * 4 x 2 = 262144; PV the same; causal halves the total */
    double attn = (262144.0 + 262144.0) * 0.5;
    /* elementwise bytes (fp32): two RMS norms read and write h (2 * 128),
     * two residual adds read 2h and write h (2 * 192), the rotation reads
     * and writes q and k (2 * (64 + 32)), SwiGLU reads gate and up and
     * writes their product (3 * 176): 1360 floats a token; softmax reads
     * and writes the causal half of 4 x 2 x 32 x 32 scores */
    double ew = 4.0 * 64 * 1360, softmax = 4.0 * 2 * (4 * 2 * 32 * 32) * 0.5;
    dyn_machine m0 = probe_machine(0), m1 = probe_machine(1), m2 = probe_machine(2);
    dyn_cost_model *c0 = dyn_cost_model_create_analytic(&cfg, &m0, NULL);
    dyn_cost_model *c1 = dyn_cost_model_create_analytic(&cfg, &m1, NULL);
    dyn_cost_model *c2 = dyn_cost_model_create_analytic(&cfg, &m2, NULL);
    assert_non_null(c0);
    assert_non_null(c1);
    assert_non_null(c2);
    dyn_layer_cost a = layer(c0, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_NONE);
    assert_close(a.fwd_ms, mm / 1e6, 1e-9);
    assert_close(a.bwd_input_ms, mm / 1e6, 1e-9);
    assert_close(a.bwd_weight_ms, mm / 1e6, 1e-9);
    dyn_layer_cost b = layer(c1, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_NONE);
    assert_close(b.fwd_ms, attn / 1e6, 1e-6);
    assert_close(b.bwd_input_ms, 2 * attn / 1e6, 1e-6);
    assert_close(layer(c2, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_NONE).fwd_ms, (ew + softmax) / 1e6, 1e-6);
    /* LM head over all 64 positions with the real vocabulary: 2*64*64*512 */
    assert_close(layer(c0, DYN_LAYER_LM_HEAD, mb, DYN_RECOMPUTE_NONE).fwd_ms, 4194304.0 / 1e6, 1e-9);
    /* embedding: a gather (read and write h a token), no learned positions */
    assert_close(layer(c2, DYN_LAYER_EMBED, mb, DYN_RECOMPUTE_NONE).fwd_ms, 4.0 * 64 * 2 * 64 / 1e6, 1e-6);
    /* Grouped-query attention saves K and V projection work only: with 4
     * key/value heads the products grow by K and V's 2 * 2*64*64*32 and
     * attention stays the same. */
    dyn_model_config mha = cfg;
    mha.kv_heads = 4;
    dyn_cost_model *d0 = dyn_cost_model_create_analytic(&mha, &m0, NULL);
    dyn_cost_model *d1 = dyn_cost_model_create_analytic(&mha, &m1, NULL);
    assert_non_null(d0);
    assert_non_null(d1);
    assert_close(layer(d0, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_NONE).fwd_ms, (mm + 2 * 262144.0) / 1e6, 1e-9);
    assert_close(layer(d1, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_NONE).fwd_ms, attn / 1e6, 1e-6);
    dyn_cost_model_free(d0);
    dyn_cost_model_free(d1);
    dyn_cost_model_free(c0);
    dyn_cost_model_free(c1);
    dyn_cost_model_free(c2);
}

/* Stored activations and states of a llama-tiny block (fp32, 2 x 32
 * tokens): per token norm1 in and out, Q (64), K and V (32 each), context
 * (64), norm2 in and out, gate, up and product (176 each) = 4*64 + 2*64 +
 * 2*32 + 3*176 = 976 floats; one RMS statistic per norm and token; the
 * probabilities 4 heads x 2 rows x 32 x 32. */
static void test_llama_block_memory_hand_worked(void **state)
{
    (void)state;
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("llama-tiny", &cfg, NULL), DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), NULL);
    assert_non_null(cm);
    dyn_mb_shape mb = {.rows = 2, .enc_len = 32};
    double MB = 1024.0 * 1024.0;
    double probs = 4.0 * 4 * 2 * 32 * 32;
    double none = 4.0 * 64 * 976 + 4.0 * 64 * 2 + probs;
    assert_close(layer(cm, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_NONE).stored_mb, none / MB, 1e-12);
    assert_close(layer(cm, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_SELECTIVE).stored_mb, (none - probs) / MB, 1e-12);
    assert_close(layer(cm, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_FULL).stored_mb, 4.0 * 64 * 64 / MB, 1e-12);
    assert_close(layer(cm, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_NONE).output_mb, 4.0 * 64 * 64 / MB, 1e-12);
    /* LM head: norm in and out, the b x s x V probabilities, one statistic */
    assert_close(layer(cm, DYN_LAYER_LM_HEAD, mb, DYN_RECOMPUTE_NONE).stored_mb,
                 (4.0 * 64 * (2 * 64 + 512) + 4.0 * 64) / MB, 1e-12);
    /* states, 16 bytes a parameter: block h + ha + 2hg + ah + h + 3hf =
     * 64 + 4096 + 4096 + 4096 + 64 + 33792 = 46208; embedding V h = 32768
     * (no positions); head norm + table h + V h = 32832 */
    assert_close(dyn_cost_layer_states_mb(cm, DYN_LAYER_ENCODER), 46208.0 * 16 / MB, 1e-12);
    assert_close(dyn_cost_layer_states_mb(cm, DYN_LAYER_EMBED), 32768.0 * 16 / MB, 1e-12);
    assert_close(dyn_cost_layer_states_mb(cm, DYN_LAYER_LM_HEAD), 32832.0 * 16 / MB, 1e-12);
    assert_true(dyn_cost_layer_states_mb(cm, DYN_LAYER_DECODER) == 0.0);
    assert_true(dyn_cost_layer_states_mb(cm, DYN_LAYER_BRIDGE) == 0.0);
    /* whole model, untied: 32768 + 2 * 46208 + 32832; tied: the table once;
     * Qwen2's q/k/v biases: a + 2g = 128 more a layer */
    assert_int_equal(dyn_model_config_params(&cfg), 158016);
    cfg.tie_embeddings = 1;
    assert_int_equal(dyn_model_config_params(&cfg), 158016 - 32768);
    cfg.qkv_bias = 1;
    assert_int_equal(dyn_model_config_params(&cfg), 158016 - 32768 + 2 * 128);
    dyn_cost_model_free(cm);
}

static void test_param_counts_match_published(void **state)
{
    (void)state;
    dyn_model_config cfg;
    /* GPT-2 small has 124,439,808 parameters with the LM head tied to the
     * embedding. */
    assert_int_equal(dyn_model_config_preset("gpt2-124m", &cfg, NULL), DYN_OK);
    assert_int_equal(dyn_model_config_params(&cfg), 124439808);
    assert_int_equal(dyn_model_config_preset("t5-11b", &cfg, NULL), DYN_OK);
    assert_int_equal(cfg.n_layers, 24);
    assert_int_equal(cfg.n_dec_layers, 24);
    assert_int_equal(cfg.heads * cfg.head_dim, 16384);
    /* Published T5-11B: 11,307,321,344 parameters (ReLU FFN with 2
     * matrices, LM head tied, relative-position biases 2 x 32 x 128, an
     * encoder final norm). This T5 v1.1-style model differs by: + a third
     * FFN matrix per layer (gated GELU, 48 x h x f), + an untied head (V x h). */
    int64_t want = 11307321344LL + 48LL * 1024 * 65536 + 32128LL * 1024;
    assert_int_equal(dyn_model_config_params(&cfg), want);
    /* Llama 3 8B: 8,030,261,248 parameters (untied head); Llama 3.2 1B:
     * 1,235,814,400 (tied), as their model cards and safetensors say. */
    assert_int_equal(dyn_model_config_preset("llama3-8b", &cfg, NULL), DYN_OK);
    assert_int_equal(dyn_model_config_params(&cfg), 8030261248LL);
    assert_int_equal(dyn_model_config_preset("llama3.2-1b", &cfg, NULL), DYN_OK);
    assert_int_equal(dyn_model_config_params(&cfg), 1235814400LL);
    /* SmolLM2-135M from its config.json by hand: embedding 49152 x 576 =
     * 28,311,552 (tied), 30 layers of 2 x 576 + 2 x 576^2 (Q, O) + 2 x 576 x
     * 192 (K, V) + 3 x 576 x 1536 = 3,540,096, final norm 576 */
    assert_int_equal(dyn_model_config_preset("smollm2-135m", &cfg, NULL), DYN_OK);
    assert_int_equal(dyn_model_config_params(&cfg), 28311552LL + 30LL * 3540096 + 576);
    for (int32_t i = 0; dyn_model_config_preset_name(i); i++) {
        assert_int_equal(dyn_model_config_preset(dyn_model_config_preset_name(i), &cfg, NULL), DYN_OK);
        assert_int_equal(dyn_model_config_validate(&cfg, NULL), DYN_OK);
    }
    dyn_error err;
    assert_int_equal(dyn_model_config_preset("gpt-7b", &cfg, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "gpt-7b"));
}

/* Every output is non-decreasing in rows, enc_len and dec_len. */
static void test_analytic_monotone_in_each_dimension(void **state)
{
    (void)state;
    const char *models[3] = {"gpt2-124m", "t5-base", "llama3-8b"};
    const char *machines[2] = {"cpu", "a100"};
    for (int mi = 0; mi < 3; mi++)
        for (int ma = 0; ma < 2; ma++) {
            dyn_model_config cfg;
            assert_int_equal(dyn_model_config_preset(models[mi], &cfg, NULL), DYN_OK);
            dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin(machines[ma]), NULL);
            assert_non_null(cm);
            int t5 = cfg.kind == DYN_MODEL_T5;
            for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
                if (!dyn_cost_kind_present(&cfg, (dyn_layer_kind)k)) continue;
                for (int rc = 0; rc < DYN_RECOMPUTE_COUNT; rc++)
                    for (int dim = 0; dim < (t5 ? 3 : 2); dim++) {
                        dyn_layer_cost prev = {0};
                        for (int v = 1; v <= 4096; v *= 2) {
                            dyn_mb_shape mb = {.rows = 4, .enc_len = 256, .dec_len = t5 ? 64 : 0};
                            if (dim == 0) mb.rows = v;
                            if (dim == 1) mb.enc_len = v;
                            if (dim == 2) mb.dec_len = v;
                            dyn_layer_cost c = layer(cm, (dyn_layer_kind)k, mb, (dyn_recompute)rc);
                            double now[7] = {c.fwd_ms, c.bwd_ms, c.bwd_input_ms, c.bwd_weight_ms,
                                             c.stored_mb, c.peak_mb, c.output_mb};
                            double was[7] = {prev.fwd_ms, prev.bwd_ms, prev.bwd_input_ms, prev.bwd_weight_ms,
                                             prev.stored_mb, prev.peak_mb, prev.output_mb};
                            for (int j = 0; j < 7; j++) {
                                assert_true(isfinite(now[j]) && now[j] >= 0);
                                if (now[j] < was[j])
                                    fail_msg("%s %s %s field %d decreases along dim %d at %d", models[mi],
                                             dyn_layer_kind_name((dyn_layer_kind)k),
                                             dyn_recompute_name((dyn_recompute)rc), j, dim, v);
                            }
                            assert_close(c.bwd_ms, c.bwd_input_ms + c.bwd_weight_ms, 1e-12);
                            prev = c;
                        }
                    }
            }
            dyn_cost_model_free(cm);
        }
}

/* full < selective < none in stored memory, the reverse in backward time;
 * forward time does not change. */
static void test_recompute_trades_time_for_memory(void **state)
{
    (void)state;
    const char *models[3] = {"gpt-6.7b", "t5-11b", "llama3-8b"};
    for (int mi = 0; mi < 3; mi++) {
        dyn_model_config cfg;
        assert_int_equal(dyn_model_config_preset(models[mi], &cfg, NULL), DYN_OK);
        dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("a100"), NULL);
        assert_non_null(cm);
        dyn_layer_kind kinds[2] = {DYN_LAYER_ENCODER, DYN_LAYER_DECODER};
        for (int k = 0; k < (cfg.kind == DYN_MODEL_T5 ? 2 : 1); k++) {
            dyn_mb_shape mb = {.rows = 2, .enc_len = 1024, .dec_len = cfg.kind == DYN_MODEL_T5 ? 256 : 0};
            dyn_layer_cost n = layer(cm, kinds[k], mb, DYN_RECOMPUTE_NONE);
            dyn_layer_cost s = layer(cm, kinds[k], mb, DYN_RECOMPUTE_SELECTIVE);
            dyn_layer_cost f = layer(cm, kinds[k], mb, DYN_RECOMPUTE_FULL);
            assert_true(f.stored_mb < s.stored_mb && s.stored_mb < n.stored_mb);
            assert_true(n.bwd_ms < s.bwd_ms && s.bwd_ms < f.bwd_ms);
            assert_true(n.fwd_ms == s.fwd_ms && s.fwd_ms == f.fwd_ms);
            assert_true(n.bwd_weight_ms == f.bwd_weight_ms); /* recompute is input-gradient work */
            /* full recompute redoes exactly one forward */
            assert_close(f.bwd_ms - n.bwd_ms, n.fwd_ms, 1e-12);
        }
        dyn_cost_model_free(cm);
    }
}

static void test_docmask_cheaper_than_dense(void **state)
{
    (void)state;
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("t5-base", &cfg, NULL), DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), NULL);
    assert_non_null(cm);
    /* rows of 1024 input / 256 target tokens packed with four samples each */
    dyn_mb_shape dense = {.rows = 2, .enc_len = 1024, .dec_len = 256};
    dyn_mb_shape dm = dense;
    dm.enc_attn = 2 * 4 * 256 * 256;
    dm.dec_attn = 2 * 4 * 64 * 64;
    dm.cross_attn = 2 * 4 * 64 * 256;
    dyn_layer_kind kinds[2] = {DYN_LAYER_ENCODER, DYN_LAYER_DECODER};
    for (int k = 0; k < 2; k++) {
        dyn_layer_cost a = layer(cm, kinds[k], dense, DYN_RECOMPUTE_NONE);
        dyn_layer_cost b = layer(cm, kinds[k], dm, DYN_RECOMPUTE_NONE);
        assert_true(b.fwd_ms < a.fwd_ms);
        assert_true(b.bwd_ms < a.bwd_ms);
        assert_true(b.stored_mb < a.stored_mb);
    }
    dyn_cost_model_free(cm);
}

static void test_bad_queries_are_rejected(void **state)
{
    (void)state;
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("gpt-tiny", &cfg, NULL), DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), NULL);
    assert_non_null(cm);
    dyn_layer_cost c;
    dyn_error err;
    dyn_mb_shape mb = {.rows = 1, .enc_len = 8};
    assert_int_equal(dyn_cost_layer(cm, DYN_LAYER_DECODER, &mb, DYN_RECOMPUTE_NONE, &c, &err), DYN_ERR_INVALID_ARG);
    mb.rows = 0;
    assert_int_equal(dyn_cost_layer(cm, DYN_LAYER_ENCODER, &mb, DYN_RECOMPUTE_NONE, &c, &err), DYN_ERR_INVALID_ARG);
    dyn_cost_model_free(cm);
    assert_int_equal(dyn_model_config_preset("t5-tiny", &cfg, NULL), DYN_OK);
    cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), NULL);
    mb = (dyn_mb_shape){.rows = 1, .enc_len = 8, .dec_len = 0};
    assert_int_equal(dyn_cost_layer(cm, DYN_LAYER_DECODER, &mb, DYN_RECOMPUTE_NONE, &c, &err), DYN_ERR_INVALID_ARG);
    dyn_cost_model_free(cm);
    cfg.heads = 0;
    assert_null(dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), &err));
    assert_non_null(strstr(err.msg, "heads"));
}

/* ---- table model ---------------------------------------------------------- */

/* A known multilinear function of (rows r, enc e, dec d) per output field j:
 * exactly what multilinear interpolation must reproduce, everywhere. */
static double known(int j, int kind, int rc, double r, double e, double d)
{
    double base = 1.0 + 0.25 * j + 0.5 * kind + 0.125 * rc;
    return base + 0.5 * r + 0.01 * e + 0.02 * d + 0.003 * r * e + 0.001 * r * d + 0.0001 * e * d +
           0.00002 * r * e * d;
}

static void fill_known(dyn_layer_cost *c, int kind, int rc, double r, double e, double d)
{
    c->fwd_ms = known(0, kind, rc, r, e, d);
    c->bwd_ms = known(1, kind, rc, r, e, d);
    c->bwd_input_ms = known(2, kind, rc, r, e, d);
    c->bwd_weight_ms = known(3, kind, rc, r, e, d);
    c->stored_mb = known(4, kind, rc, r, e, d);
    c->peak_mb = known(5, kind, rc, r, e, d);
    /* increasing in e (tables are monotone) and near 0 at the grid's left
     * end: extrapolating left goes negative -> clamped to 0 */
    c->output_mb = 0.1 * e - 1.5;
}

static const int32_t ROWS[] = {1, 2, 4, 8};
static const int32_t ENC[] = {16, 32, 64, 96};
static const int32_t DEC[] = {8, 16, 32};

static const char *write_known_t5_table(const char *name)
{
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("t5-tiny", &cfg, NULL), DYN_OK);
    dyn_cost_grid g = {4, 4, 3, ROWS, ENC, DEC};
    int64_t total = dyn_cost_grid_size(&g) * DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT;
    dyn_layer_cost *pts = calloc((size_t)total, sizeof *pts);
    assert_non_null(pts);
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++)
        for (int rc = 0; rc < DYN_RECOMPUTE_COUNT; rc++)
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++)
                    for (int c = 0; c < 3; c++)
                        fill_known(&pts[dyn_cost_grid_index(&g, (dyn_layer_kind)k, (dyn_recompute)rc, a, b, c)],
                                   k, rc, ROWS[a], ENC[b], DEC[c]);
    double states[DYN_LAYER_KIND_COUNT] = {1.5, 2.5, 3.5, 4.5, 5.5};
    const char *path = tmp_path(name);
    dyn_error err;
    if (dyn_cost_table_write(path, &cfg, dyn_machine_builtin("cpu"), states, &g, pts, &err) != DYN_OK)
        fail_msg("write: %s", err.msg);
    free(pts);
    return path;
}

static void test_table_reproduces_multilinear_function(void **state)
{
    (void)state;
    const char *path = write_known_t5_table("known.table");
    dyn_error err;
    dyn_cost_model *cm = dyn_cost_model_load_table(path, &err);
    if (cm == NULL) fail_msg("load: %s", err.msg);
    assert_int_equal(dyn_cost_model_config(cm)->kind, DYN_MODEL_T5);
    assert_string_equal(dyn_cost_model_machine(cm)->name, "cpu");
    assert_true(dyn_cost_layer_states_mb(cm, DYN_LAYER_DECODER) == 3.5);
    /* off-grid inside the grid (outside: test_table_extrapolation_rule) */
    int32_t qr[] = {1, 3, 5, 7, 8};
    int32_t qe[] = {16, 17, 50, 95, 96};
    int32_t qd[] = {8, 12, 31, 32};
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++)
        for (int rc = 0; rc < DYN_RECOMPUTE_COUNT; rc++)
            for (size_t a = 0; a < sizeof qr / sizeof *qr; a++)
                for (size_t b = 0; b < sizeof qe / sizeof *qe; b++)
                    for (size_t c = 0; c < sizeof qd / sizeof *qd; c++) {
                        dyn_mb_shape mb = {.rows = qr[a], .enc_len = qe[b], .dec_len = qd[c]};
                        dyn_layer_cost got = layer(cm, (dyn_layer_kind)k, mb, (dyn_recompute)rc);
                        dyn_layer_cost want;
                        fill_known(&want, k, rc, qr[a], qe[b], qd[c]);
                        assert_close(got.fwd_ms, want.fwd_ms, 1e-12);
                        assert_close(got.bwd_ms, want.bwd_ms, 1e-12);
                        assert_close(got.bwd_input_ms, want.bwd_input_ms, 1e-12);
                        assert_close(got.bwd_weight_ms, want.bwd_weight_ms, 1e-12);
                        assert_close(got.stored_mb, want.stored_mb, 1e-12);
                        assert_close(got.peak_mb, want.peak_mb, 1e-12);
                        assert_close(got.output_mb, want.output_mb, 1e-12);
                    }
    dyn_cost_model_free(cm);
}

/* Extrapolation is proportional from the grid's edge (value at the clamped
 * query times x / edge), so never negative and still monotone: checked on a
 * function that is NOT multilinear (quadratic in e). */
static void test_table_extrapolation_rule(void **state)
{
    (void)state;
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("gpt-tiny", &cfg, NULL), DYN_OK);
    int32_t rows[1] = {1}, enc[3] = {10, 20, 40}, dec[1] = {0};
    dyn_cost_grid g = {1, 3, 1, rows, enc, dec};
    dyn_layer_cost pts[DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT * 3];
    memset(pts, 0, sizeof pts);
    for (int k = 0; k < DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT; k++)
        for (int b = 0; b < 3; b++) {
            double e = enc[b];
            pts[k * 3 + b].fwd_ms = e * e / 100.0; /* 1, 4, 16 */
            pts[k * 3 + b].stored_mb = e - 5.0;    /* 5, 15, 35 */
        }
    double states[DYN_LAYER_KIND_COUNT] = {0};
    const char *path = tmp_path("quad.table");
    assert_int_equal(dyn_cost_table_write(path, &cfg, dyn_machine_builtin("a100"), states, &g, pts, NULL), DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_load_table(path, NULL);
    assert_non_null(cm);
    struct { int32_t e; double fwd, stored; } cases[] = {
        {15, 2.5, 10.0},   /* inside: halfway between 1 and 4, 5 and 15 */
        {30, 10.0, 25.0},  /* halfway between 4 and 16, 15 and 35 */
        {60, 24.0, 52.5},  /* right: 16 and 35 times 60/40 */
        {2, 0.2, 1.0},     /* left: 1 and 5 times 2/10 */
        {50, 20.0, 43.75}, /* 16 and 35 times 50/40 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dyn_mb_shape mb = {.rows = 3, .enc_len = cases[i].e}; /* rows axis constant */
        dyn_layer_cost c = layer(cm, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_FULL);
        assert_close(c.fwd_ms + 1e-300, cases[i].fwd + 1e-300, 1e-12);
        assert_true(fabs(c.stored_mb - cases[i].stored) < 1e-12);
    }
    dyn_cost_model_free(cm);
}

/* The analytic model written as a table reads back bit for bit at the grid
 * points, with the same config, machine and states. */
static void test_table_round_trip_from_analytic(void **state)
{
    (void)state;
    /* llama3.2-1b: a Llama model line with every field, rotary scaling too */
    const char *models[4] = {"gpt-tiny", "t5-tiny", "llama-tiny", "llama3.2-1b"};
    for (int mi = 0; mi < 4; mi++) {
        dyn_model_config cfg;
        assert_int_equal(dyn_model_config_preset(models[mi], &cfg, NULL), DYN_OK);
        dyn_cost_model *an = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), NULL);
        assert_non_null(an);
        int32_t rows[3] = {1, 4, 16}, enc[4] = {32, 64, 128, 256}, dec_t5[2] = {16, 64}, dec_gpt[1] = {0};
        int t5 = cfg.kind == DYN_MODEL_T5;
        dyn_cost_grid g = {3, 4, t5 ? 2 : 1, rows, enc, t5 ? dec_t5 : dec_gpt};
        const char *path = tmp_path("rt.table");
        dyn_error err;
        if (dyn_cost_table_write_from_model(path, an, &g, &err) != DYN_OK) fail_msg("%s", err.msg);
        dyn_cost_model *tb = dyn_cost_model_load_table(path, &err);
        if (tb == NULL) fail_msg("%s", err.msg);
        assert_memory_equal(dyn_cost_model_config(tb), &cfg, sizeof cfg);
        assert_memory_equal(dyn_cost_model_machine(tb), dyn_machine_builtin("cpu"), sizeof(dyn_machine));
        for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++)
            assert_true(dyn_cost_layer_states_mb(tb, (dyn_layer_kind)k) ==
                        dyn_cost_layer_states_mb(an, (dyn_layer_kind)k));
        assert_true(dyn_cost_model_states_mb(tb) == dyn_cost_model_states_mb(an));
        for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
            if (!dyn_cost_kind_present(&cfg, (dyn_layer_kind)k)) continue;
            for (int rc = 0; rc < DYN_RECOMPUTE_COUNT; rc++)
                for (int a = 0; a < 3; a++)
                    for (int b = 0; b < 4; b++)
                        for (int c = 0; c < g.n_dec; c++) {
                            dyn_mb_shape mb = {.rows = rows[a], .enc_len = enc[b], .dec_len = g.dec_len[c]};
                            dyn_layer_cost x = layer(an, (dyn_layer_kind)k, mb, (dyn_recompute)rc);
                            dyn_layer_cost y = layer(tb, (dyn_layer_kind)k, mb, (dyn_recompute)rc);
                            assert_memory_equal(&x, &y, sizeof x);
                        }
        }
        /* every term is affine in rows (the small-size terms are constants), so
         * the table is exact between rows too */
        dyn_mb_shape mb = {.rows = 10, .enc_len = 64, .dec_len = t5 ? 16 : 0};
        assert_close(layer(tb, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_NONE).fwd_ms,
                     layer(an, DYN_LAYER_ENCODER, mb, DYN_RECOMPUTE_NONE).fwd_ms, 1e-9);
        dyn_cost_model_free(an);
        dyn_cost_model_free(tb);
    }
}

/* A valid small GPT table as text, for the malformed-file tests to break. */
static const char *GOOD_TABLE =
    "dynapipe-cost-table 1\n"                                                                   /* 1 */
    "# toy table\n"                                                                             /* 2 */
    "model kind=gpt n_layers=2 n_dec_layers=0 hidden=64 heads=4 head_dim=16 ffn=256 vocab=512 max_seqlen=256\n" /* 3 */
    "machine name=toy matmul_gflops=88 attn_gflops=40 mem_gbps=12 bytes_per_elem=4 device_memory_mb=1024 "
    "link_latency_ms=0.01 link_gbps=4 dp_link_gbps=4\n"                                       /* 4 */
    "states_mb embed=1 encoder=2 decoder=0 lm_head=3\n"                                         /* 5 */
    "rows 1\n"                                                                                  /* 6 */
    "enc_len 8\n"                                                                               /* 7 */
    "dec_len 0\n";                                                                              /* 8 */

static void append_points(char *buf, size_t cap, const char *skip)
{
    const char *kinds[3] = {"embed", "encoder", "lm_head"};
    const char *rcs[3] = {"none", "selective", "full"};
    for (int k = 0; k < 3; k++)
        for (int r = 0; r < 3; r++) {
            char line[160];
            snprintf(line, sizeof line, "point %s %s 1 8 0 1 2 1 1 0.5 0.25 0.1\n", kinds[k], rcs[r]);
            if (skip && strncmp(line, skip, strlen(skip)) == 0) continue;
            strncat(buf, line, cap - strlen(buf) - 1);
        }
}

static void expect_table_error(const char *name, const char *text, const char *where, const char *what)
{
    const char *path = write_file(name, text);
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%s%s", path, where);
    dyn_error err;
    dyn_error_clear(&err);
    assert_null(dyn_cost_model_load_table(path, &err));
    assert_int_equal(err.code, DYN_ERR_PARSE);
    if (strncmp(err.msg, prefix, strlen(prefix)) != 0 || strstr(err.msg, what) == NULL)
        fail_msg("message '%s' should start with '%s' and mention '%s'", err.msg, prefix, what);
}

/* Format 2 added T5's bridge: a T5 table the writer makes is version 2
 * and loads with its bridge states; the same text as version 1 (an older
 * profile, whose embedding counted the bridge) is refused with a line
 * saying to profile again, at the first point. A version 1 GPT table
 * still loads (GOOD_TABLE below). */
static void test_table_version1_t5_refused(void **state)
{
    (void)state;
    const char *path = write_known_t5_table("v2.table");
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(dyn_file_read_all(path, &text, &len, NULL), DYN_OK);
    assert_true(strncmp(text, "dynapipe-cost-table 2\n", 22) == 0);
    assert_non_null(strstr(text, " bridge=5.5"));
    dyn_cost_model *cm = dyn_cost_model_load_table(path, NULL);
    assert_non_null(cm);
    assert_true(dyn_cost_layer_states_mb(cm, DYN_LAYER_BRIDGE) == 5.5);
    dyn_cost_model_free(cm);
    text[20] = '1';
    char *first_point = strstr(text, "\npoint ");
    assert_non_null(first_point);
    int line = 2; /* the line after the last newline before the first point */
    for (const char *c = text; c < first_point; c++) line += *c == '\n';
    char where[32];
    snprintf(where, sizeof where, ":%d: ", line);
    expect_table_error("v1.table", text, where, "a version 1 T5 table");
    free(text);
}

static void test_table_malformed_files(void **state)
{
    (void)state;
    static char buf[8192];
    /* the good one loads */
    snprintf(buf, sizeof buf, "%s", GOOD_TABLE);
    append_points(buf, sizeof buf, NULL);
    dyn_error err;
    dyn_cost_model *cm = dyn_cost_model_load_table(write_file("good.table", buf), &err);
    if (cm == NULL) fail_msg("%s", err.msg);
    dyn_layer_cost c;
    dyn_mb_shape mb = {.rows = 1, .enc_len = 8};
    assert_int_equal(dyn_cost_layer(cm, DYN_LAYER_ENCODER, &mb, DYN_RECOMPUTE_NONE, &c, NULL), DYN_OK);
    assert_true(c.bwd_ms == 2.0 && c.output_mb == 0.1);
    dyn_cost_model_free(cm);

    expect_table_error("magic.table", "cost table 1\n", ":1: ", "not a cost table");
    expect_table_error("version.table", "# c\ndynapipe-cost-table 9\n", ":2: ", "unsupported cost table version");
    expect_table_error("empty.table", "# nothing\n", ": ", "empty cost table");

    snprintf(buf, sizeof buf, "%s", GOOD_TABLE);
    char *p = strstr(buf, "ffn=256");
    memcpy(p, "fnn", 3);
    append_points(buf, sizeof buf, NULL);
    expect_table_error("key.table", buf, ":3: ", "unknown key: fnn");

    snprintf(buf, sizeof buf, "%s", GOOD_TABLE);
    p = strstr(buf, " vocab=512");
    memset(p, ' ', strlen(" vocab=512"));
    expect_table_error("missing_key.table", buf, ":3: ", "missing key: vocab");

    snprintf(buf, sizeof buf, "%s", GOOD_TABLE);
    p = strstr(buf, "heads=4");
    memcpy(p, "heads=5", 7);
    expect_table_error("bad_model.table", buf, ":3: ", "heads * head_dim");

    snprintf(buf, sizeof buf, "%s", GOOD_TABLE);
    p = strstr(buf, "bytes_per_elem=4");
    memcpy(p, "bytes_per_elem=3", 16);
    expect_table_error("bad_machine.table", buf, ":4: ", "bytes_per_elem");

    snprintf(buf, sizeof buf, "%s", GOOD_TABLE);
    p = strstr(buf, "mem_gbps=12");
    memcpy(p, "mem_gbps=xx", 11);
    expect_table_error("nan_machine.table", buf, ":4: ", "bad value for key: mem_gbps");

    snprintf(buf, sizeof buf, "%s%s", GOOD_TABLE, "point encoder none 1 8 0 1 2 1 1 0.5 0.25\n");
    expect_table_error("short_point.table", buf, ":9: ", "got 12 fields");

    snprintf(buf, sizeof buf, "%s%s", GOOD_TABLE, "point encoder none 2 8 0 1 2 1 1 0.5 0.25 0.1\n");
    expect_table_error("offgrid.table", buf, ":9: ", "not on the grid: 2");

    snprintf(buf, sizeof buf, "%s%s", GOOD_TABLE, "point decoder none 1 8 0 1 2 1 1 0.5 0.25 0.1\n");
    expect_table_error("decoder_in_gpt.table", buf, ":9: ", "unknown layer kind for this model: decoder");

    snprintf(buf, sizeof buf, "%s%s", GOOD_TABLE, "point encoder none 1 8 0 1 -2 1 1 0.5 0.25 0.1\n");
    expect_table_error("negative.table", buf, ":9: ", "bwd_ms -2 is negative");

    snprintf(buf, sizeof buf, "%s%s", GOOD_TABLE, "point encoder some 1 8 0 1 2 1 1 0.5 0.25 0.1\n");
    expect_table_error("rc.table", buf, ":9: ", "unknown recompute mode: some");

    snprintf(buf, sizeof buf, "%s", GOOD_TABLE);
    append_points(buf, sizeof buf, NULL);
    strncat(buf, "point encoder full 1 8 0 1 2 1 1 0.5 0.25 0.1\n", sizeof buf - strlen(buf) - 1);
    expect_table_error("dup.table", buf, ":18: ", "duplicate point");

    snprintf(buf, sizeof buf, "%s", GOOD_TABLE);
    append_points(buf, sizeof buf, "point lm_head selective");
    expect_table_error("missing_point.table", buf, ": ", "missing point lm_head selective rows=1 enc_len=8 dec_len=0");

    snprintf(buf, sizeof buf, "dynapipe-cost-table 1\npoint encoder none 1 8 0 1 2 1 1 0.5 0.25 0.1\n");
    expect_table_error("early_point.table", buf, ":2: ", "point before the model");

    snprintf(buf, sizeof buf, "%s", GOOD_TABLE);
    p = strstr(buf, "enc_len 8");
    memcpy(p, "enc_len x", 9);
    expect_table_error("axis.table", buf, ":7: ", "axis value is not an integer: x");

    snprintf(buf, sizeof buf, "%s", GOOD_TABLE);
    p = strstr(buf, "dec_len 0");
    memcpy(p, "dec_len 4", 9);
    append_points(buf, sizeof buf, NULL);
    expect_table_error("gpt_dec.table", buf, ":8: ", "single value 0"); /* the axis line, not the first point */

    snprintf(buf, sizeof buf, "%sbogus 1 2\n", GOOD_TABLE);
    expect_table_error("unknown_line.table", buf, ":9: ", "unknown line: bogus");

    assert_null(dyn_cost_model_load_table("/nonexistent/t.table", &err));
    assert_int_equal(err.code, DYN_ERR_IO);
}

/* buf with the first occurrence of from replaced by to (buf has room). */
static void replace_once(char *buf, size_t cap, const char *from, const char *to)
{
    char *p = strstr(buf, from);
    if (p == NULL) fail_msg("'%s' not in the table", from);
    size_t tail = strlen(p + strlen(from));
    assert_true(strlen(buf) - strlen(from) + strlen(to) < cap);
    memmove(p + strlen(to), p + strlen(from), tail + 1);
    memcpy(p, to, strlen(to));
}

/* Values whose sums over a plan would not be finite are refused where they
 * are read, naming the line and the field: a time or size column above
 * 1e12 (DYN_COST_VALUE_MAX), inf, nan, a number past double's range; the
 * same for states_mb and the machine line's latencies. 1e12 itself loads. */
static void test_table_refuses_huge_and_non_finite_values(void **state)
{
    (void)state;
    static char buf[8192];
    struct { const char *point, *what; } bad[] = {
        {"point encoder none 1 8 0 1e308 2 1 1 0.5 0.25 0.1\n", "fwd_ms 1e308 is too large (at most 1e12)"},
        {"point encoder none 1 8 0 1 2 1 1 0.5 1.5e12 0.1\n", "peak_mb 1.5e12 is too large (at most 1e12)"},
        {"point encoder none 1 8 0 1 2 inf 1 0.5 0.25 0.1\n", "bwd_input_ms inf is not a finite number"},
        {"point encoder none 1 8 0 1 2 1 nan 0.5 0.25 0.1\n", "bwd_weight_ms nan is not a finite number"},
        {"point encoder none 1 8 0 1 2 1 1 1e400 0.25 0.1\n", "stored_mb 1e400 is not a finite number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(buf, sizeof buf, "%s%s", GOOD_TABLE, bad[i].point);
        expect_table_error("huge.table", buf, ":9: ", bad[i].what);
    }

    snprintf(buf, sizeof buf, "%s", GOOD_TABLE);
    replace_once(buf, sizeof buf, "encoder=2", "encoder=1e308");
    append_points(buf, sizeof buf, NULL);
    expect_table_error("huge_states.table", buf, ":5: ", "states_mb encoder 1e+308 is too large (at most 1e12)");

    snprintf(buf, sizeof buf, "%s", GOOD_TABLE);
    replace_once(buf, sizeof buf, "link_latency_ms=0.01", "link_latency_ms=1e300");
    append_points(buf, sizeof buf, NULL);
    expect_table_error("huge_latency.table", buf, ":4: ", "link_latency_ms = 1e+300 is too large");
    dyn_machine mm = *dyn_machine_builtin("cpu"); /* machine files share the check */
    mm.layer_overhead_ms = 2e12;
    dyn_error merr;
    assert_int_equal(dyn_machine_validate(&mm, &merr), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(merr.msg, "layer_overhead_ms = 2e+12 is too large (at most 1e12)"));

    /* the bound itself, and a negative zero, load */
    snprintf(buf, sizeof buf, "%s%s%s", GOOD_TABLE, "point encoder none 1 8 0 1e12 1e12 1 1 0.5 1e12 -0\n",
             "point embed none 1 8 0 1 2 1 1 0.5 0.25 1e12\n");
    append_points(buf, sizeof buf, "point e");
    strncat(buf, "point encoder selective 1 8 0 1 2 1 1 0.5 0.25 0.1\npoint encoder full 1 8 0 1 2 1 1 0.5 0.25 0.1\n"
                 "point embed selective 1 8 0 1 2 1 1 0.5 0.25 0.1\npoint embed full 1 8 0 1 2 1 1 0.5 0.25 0.1\n",
            sizeof buf - strlen(buf) - 1);
    dyn_error err;
    dyn_cost_model *cm = dyn_cost_model_load_table(write_file("bound.table", buf), &err);
    if (cm == NULL) fail_msg("%s", err.msg);
    dyn_layer_cost c;
    dyn_mb_shape mb = {.rows = 1, .enc_len = 8};
    assert_int_equal(dyn_cost_layer(cm, DYN_LAYER_ENCODER, &mb, DYN_RECOMPUTE_NONE, &c, NULL), DYN_OK);
    assert_true(c.fwd_ms == 1e12 && c.peak_mb == 1e12 && c.output_mb == 0.0);
    dyn_cost_model_free(cm);
}

/* Every axis error names the line that declared the axis (rows, enc_len,
 * dec_len, in any order), not the first point line where the grid is
 * checked. */
static void test_table_axis_errors_name_the_axis_line(void **state)
{
    (void)state;
    static char buf[8192];
    snprintf(buf, sizeof buf, "%s", GOOD_TABLE);
    replace_once(buf, sizeof buf, "rows 1\n", "rows 0 1\n");
    append_points(buf, sizeof buf, NULL);
    expect_table_error("rows0.table", buf, ":6: ", "rows axis value 0 is below 1");

    snprintf(buf, sizeof buf, "%s", GOOD_TABLE);
    replace_once(buf, sizeof buf, "enc_len 8\n", "enc_len 8 4\n");
    append_points(buf, sizeof buf, NULL);
    expect_table_error("enc_order.table", buf, ":7: ", "enc_len axis is not strictly increasing (4 after 8)");

    /* axes declared in another order, after a comment: each error still
     * points at its own axis */
    snprintf(buf, sizeof buf, "%s", GOOD_TABLE);
    replace_once(buf, sizeof buf, "rows 1\nenc_len 8\ndec_len 0\n", "dec_len 0 8\n# grid\nenc_len 8\nrows 1\n");
    append_points(buf, sizeof buf, NULL);
    expect_table_error("dec_first.table", buf, ":6: ", "single value 0");
    snprintf(buf, sizeof buf, "%s", GOOD_TABLE);
    replace_once(buf, sizeof buf, "rows 1\nenc_len 8\ndec_len 0\n", "dec_len 0\n# grid\nenc_len 8\nrows 2 2\n");
    append_points(buf, sizeof buf, NULL);
    expect_table_error("rows_last.table", buf, ":9: ", "rows axis is not strictly increasing");
}

/* Random byte edits of a valid table: the reader either accepts the file or
 * returns one parse error naming it; never a crash (run under ASan/UBSan). */
static void test_table_reader_survives_random_edits(void **state)
{
    (void)state;
    static char good[8192], buf[8192];
    snprintf(good, sizeof good, "%s", GOOD_TABLE);
    append_points(good, sizeof good, NULL);
    size_t n = strlen(good);
    const char alphabet[] = "0123456789 \t\n#=.-+eExkindpt";
    unsigned seed = 12345;
    int rejected = 0;
    for (int it = 0; it < 300; it++) {
        memcpy(buf, good, n + 1);
        for (int e = 0; e < 1 + it % 4; e++) {
            seed = seed * 1103515245u + 12345u;
            size_t pos = (seed >> 8) % n;
            seed = seed * 1103515245u + 12345u;
            buf[pos] = alphabet[(seed >> 8) % (sizeof alphabet - 1)];
        }
        const char *path = write_file("fuzz.table", buf);
        dyn_error err;
        dyn_error_clear(&err);
        dyn_cost_model *cm = dyn_cost_model_load_table(path, &err);
        if (cm != NULL) {
            dyn_layer_cost c;
            dyn_mb_shape mb = {.rows = 3, .enc_len = 100};
            assert_int_equal(dyn_cost_layer(cm, DYN_LAYER_ENCODER, &mb, DYN_RECOMPUTE_FULL, &c, NULL), DYN_OK);
            assert_true(c.fwd_ms >= 0 && isfinite(c.fwd_ms));
            dyn_cost_model_free(cm);
        } else {
            rejected++;
            assert_int_equal(err.code, DYN_ERR_PARSE);
            assert_int_equal(strncmp(err.msg, path, strlen(path)), 0);
        }
    }
    assert_true(rejected > 100);
}

static void test_table_write_rejects_bad_input(void **state)
{
    (void)state;
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("gpt-tiny", &cfg, NULL), DYN_OK);
    int32_t rows[2] = {4, 2}, enc[1] = {8}, dec[1] = {0};
    dyn_cost_grid g = {2, 1, 1, rows, enc, dec};
    dyn_layer_cost pts[DYN_LAYER_KIND_COUNT * DYN_RECOMPUTE_COUNT * 2];
    memset(pts, 0, sizeof pts);
    double states[DYN_LAYER_KIND_COUNT] = {0};
    dyn_error err;
    const char *path = tmp_path("never.table");
    assert_int_equal(dyn_cost_table_write(path, &cfg, dyn_machine_builtin("cpu"), states, &g, pts, &err),
                     DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "strictly increasing"));
    rows[0] = 1;
    pts[3].fwd_ms = -1.0;
    assert_int_equal(dyn_cost_table_write(path, &cfg, dyn_machine_builtin("cpu"), states, &g, pts, &err),
                     DYN_ERR_INVALID_ARG);
    assert_int_equal(access(path, F_OK), -1); /* nothing written */
    pts[3].fwd_ms = 1.0;
    assert_int_equal(dyn_cost_table_write(path, &cfg, dyn_machine_builtin("cpu"), states, &g, pts, &err), DYN_OK);
    assert_int_equal(access(path, F_OK), 0);
}

/* ---- machines and model JSON ------------------------------------------------ */

static void test_builtin_machines(void **state)
{
    (void)state;
    const dyn_machine *cpu = dyn_machine_builtin("cpu"), *a100 = dyn_machine_builtin("a100");
    assert_non_null(cpu);
    assert_non_null(a100);
    assert_null(dyn_machine_builtin("h100"));
    assert_int_equal(dyn_machine_validate(cpu, NULL), DYN_OK);
    assert_int_equal(dyn_machine_validate(a100, NULL), DYN_OK);
    assert_int_equal(cpu->bytes_per_elem, 4);
    assert_int_equal(a100->bytes_per_elem, 2);
    /* one core's sgemm: above an AVX2 core's, below an AVX-512 core's FMA
     * peak (~175 GFLOP/s measured on the Xeon, docs/performance.md) */
    assert_true(cpu->matmul_gflops > 50.0 && cpu->matmul_gflops < 175.0);
    assert_true(a100->matmul_gflops < 312000.0 && a100->matmul_gflops > 100000.0);
    /* both have a small-product term; the GPU also a per-layer launch cost
     * (one CPU thread has none measurable: docs/performance.md) */
    assert_true(cpu->gemm_n_half > 0 && a100->gemm_n_half > 0);
    assert_true(a100->layer_overhead_ms > 0 && cpu->layer_overhead_ms >= 0);
    assert_true(a100->device_memory_mb <= 40960.0);
}

static void expect_machine_error(const char *name, const char *json, const char *what)
{
    const char *path = write_file(name, json);
    dyn_machine m;
    dyn_error err;
    assert_int_equal(dyn_machine_load(path, &m, &err), DYN_ERR_PARSE);
    if (strncmp(err.msg, path, strlen(path)) != 0 || strstr(err.msg, what) == NULL)
        fail_msg("message '%s' should name %s and say '%s'", err.msg, path, what);
}

static void test_machine_json(void **state)
{
    (void)state;
    dyn_machine m;
    dyn_error err;
    const char *p = write_file("m.json",
                               "{\"name\": \"box\", \"matmul_gflops\": 100, \"attn_gflops\": 50, \"mem_gbps\": 20,"
                               " \"bytes_per_elem\": 4, \"device_memory_mb\": 4096, \"link_latency_ms\": 0.02,"
                               " \"link_gbps\": 10, \"dp_link_gbps\": 5}");
    if (dyn_machine_load(p, &m, &err) != DYN_OK) fail_msg("%s", err.msg);
    assert_string_equal(m.name, "box");
    assert_true(m.attn_gflops == 50 && m.dp_link_gbps == 5 && m.link_latency_ms == 0.02);
    /* the small-size terms are optional: absent means 0 */
    assert_true(m.gemm_n_half == 0 && m.layer_overhead_ms == 0);
    p = write_file("m2.json", "{\"base\": \"cpu\", \"gemm_n_half\": 32, \"layer_overhead_ms\": 0.5}");
    assert_int_equal(dyn_machine_load(p, &m, &err), DYN_OK);
    assert_true(m.gemm_n_half == 32 && m.layer_overhead_ms == 0.5);
    p = write_file("m3.json", "{\"base\": \"a100\"}");
    assert_int_equal(dyn_machine_load(p, &m, &err), DYN_OK);
    assert_memory_equal(&m, dyn_machine_builtin("a100"), sizeof m);
    p = write_file("base.json", "{\"base\": \"a100\", \"name\": \"a100-80\", \"device_memory_mb\": 79000}");
    assert_int_equal(dyn_machine_load(p, &m, &err), DYN_OK);
    assert_true(m.device_memory_mb == 79000 && m.matmul_gflops == dyn_machine_builtin("a100")->matmul_gflops);
    assert_int_equal(dyn_machine_resolve("cpu", &m, &err), DYN_OK);
    assert_string_equal(m.name, "cpu");
    assert_int_equal(dyn_machine_resolve("/nonexistent/m.json", &m, &err), DYN_ERR_IO);

    expect_machine_error("m1.json", "{\"name\": \"x\", \"matmul_gflops\": 1}", "missing field \"attn_gflops\"");
    expect_machine_error("m2.json", "{\"base\": \"cpu\", \"bytes_per_elem\": 8}", "\"bytes_per_elem\" must be 2 or 4");
    expect_machine_error("m3.json", "{\"base\": \"cpu\", \"mem_gbps\": -1}", "mem_gbps = -1 must be positive");
    expect_machine_error("m4.json", "{\"base\": \"cpu\", \"mem_gbs\": 1}", "unknown field \"mem_gbs\"");
    expect_machine_error("m5.json", "{\"base\": \"cpu\",", "not valid JSON");
    expect_machine_error("m6.json", "[1, 2]", "expected a JSON object");
    expect_machine_error("m7.json", "{\"base\": \"tpu\"}", "built-in machine");
    expect_machine_error("m8.json", "{\"base\": \"cpu\", \"link_gbps\": \"fast\"}", "\"link_gbps\" must be a number");
    expect_machine_error("m9.json", "{\"base\": \"cpu\", \"gemm_n_half\": -1}", "gemm_n_half = -1 must be >= 0");
    expect_machine_error("m10.json", "{\"base\": \"cpu\", \"layer_overhead_ms\": \"x\"}",
                         "\"layer_overhead_ms\" must be a number");
}

static void expect_model_error(const char *name, const char *json, const char *what)
{
    const char *path = write_file(name, json);
    dyn_model_config c;
    dyn_error err;
    assert_int_equal(dyn_model_config_load(path, &c, &err), DYN_ERR_PARSE);
    if (strncmp(err.msg, path, strlen(path)) != 0 || strstr(err.msg, what) == NULL)
        fail_msg("message '%s' should name %s and say '%s'", err.msg, path, what);
}

static void test_model_json(void **state)
{
    (void)state;
    dyn_model_config c, want;
    dyn_error err;
    const char *p = write_file("gpt.json", "{\"kind\": \"gpt\", \"n_layers\": 12, \"hidden\": 768, \"heads\": 12,"
                                           " \"ffn\": 3072, \"vocab\": 50257, \"max_seqlen\": 1024}");
    if (dyn_model_config_load(p, &c, &err) != DYN_OK) fail_msg("%s", err.msg);
    assert_int_equal(dyn_model_config_preset("gpt2-124m", &want, NULL), DYN_OK);
    assert_memory_equal(&c, &want, sizeof c);
    p = write_file("t5.json", "{\"preset\": \"t5-11b\", \"n_layers\": 4, \"n_dec_layers\": 4}");
    assert_int_equal(dyn_model_config_load(p, &c, &err), DYN_OK);
    assert_int_equal(c.n_layers, 4);
    assert_int_equal(c.head_dim, 128); /* from the preset: not hidden / heads */
    p = write_file("ovr.json", "{\"preset\": \"gpt-tiny\", \"hidden\": 128}");
    assert_int_equal(dyn_model_config_load(p, &c, &err), DYN_OK);
    assert_int_equal(c.head_dim, 32); /* re-derived */

    expect_model_error("e1.json", "{\"kind\": \"gpt\", \"n_layers\": 2}", "missing field \"hidden\"");
    expect_model_error("e2.json", "{\"kind\": \"bert\"}", "\"kind\" must be \"gpt\", \"t5\" or \"llama\"");
    expect_model_error("e3.json", "{\"kind\": \"gpt\", \"n_layers\": 2, \"hidden\": 100, \"heads\": 3, \"ffn\": 4,"
                                  " \"vocab\": 5, \"max_seqlen\": 8}", "heads 3 does not divide hidden 100");
    expect_model_error("e4.json", "{\"kind\": \"t5\", \"n_layers\": 2, \"hidden\": 64, \"heads\": 4, \"ffn\": 4,"
                                  " \"vocab\": 5, \"max_seqlen\": 8}", "missing field \"n_dec_layers\"");
    expect_model_error("e5.json", "{\"preset\": \"gpt-tiny\", \"n_layers\": 2.5}", "\"n_layers\" must be an integer");
    expect_model_error("e6.json", "{\"preset\": \"gpt-tiny\", \"layers\": 2}", "unknown field \"layers\"");
    expect_model_error("e7.json", "{\"preset\": \"gpt-tiny\", \"n_dec_layers\": 2}", "n_dec_layers = 2 must be 0");
    expect_model_error("e8.json", "{\"preset\": \"gpt-tiny\", \"vocab\": 0}", "vocab = 0 must be positive");
    expect_model_error("e9.json", "nope", "not valid JSON");

    /* Llama: the preset's shape from JSON, defaults as Hugging Face's
     * LlamaConfig where a field is left out, fields refused elsewhere. */
    p = write_file("llama.json", "{\"kind\": \"llama\", \"n_layers\": 32, \"hidden\": 4096, \"heads\": 32,"
                                 " \"kv_heads\": 8, \"ffn\": 14336, \"vocab\": 128256, \"max_seqlen\": 8192,"
                                 " \"tie_embeddings\": false, \"rope_theta\": 500000, \"rms_eps\": 1e-5}");
    if (dyn_model_config_load(p, &c, &err) != DYN_OK) fail_msg("%s", err.msg);
    assert_int_equal(dyn_model_config_preset("llama3-8b", &want, NULL), DYN_OK);
    assert_memory_equal(&c, &want, sizeof c);
    p = write_file("llama2.json", "{\"kind\": \"llama\", \"n_layers\": 2, \"hidden\": 64, \"heads\": 4,"
                                  " \"ffn\": 176, \"vocab\": 300, \"max_seqlen\": 64, \"qkv_bias\": 1,"
                                  " \"tie_embeddings\": true}");
    if (dyn_model_config_load(p, &c, &err) != DYN_OK) fail_msg("%s", err.msg);
    assert_int_equal(c.kind, DYN_MODEL_LLAMA);
    assert_int_equal(c.kv_heads, 4); /* default: as many as query heads */
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.qkv_bias, 1);
    assert_int_equal(c.tie_embeddings, 1);
    assert_true(c.rope_theta == 10000.0 && c.rms_eps == 1e-6);
    p = write_file("llama3.json", "{\"preset\": \"llama-mini\", \"kv_heads\": 1, \"tie_embeddings\": 1}");
    assert_int_equal(dyn_model_config_load(p, &c, &err), DYN_OK);
    assert_int_equal(c.kv_heads, 1);
    assert_int_equal(c.tie_embeddings, 1);
    assert_true(c.rms_eps == 1e-5); /* the preset's */
    p = write_file("llama4.json", "{\"preset\": \"llama-mini\", \"kind\": \"gpt\", \"ffn\": 1024}");
    assert_int_equal(dyn_model_config_load(p, &c, &err), DYN_OK);
    assert_int_equal(c.kind, DYN_MODEL_GPT);
    assert_true(c.kv_heads == 0 && c.rope_theta == 0 && c.rms_eps == 0); /* a GPT has no Llama fields */
    expect_model_error("l1.json", "{\"preset\": \"llama-mini\", \"kv_heads\": 3}", "kv_heads = 3 must divide heads = 4");
    expect_model_error("l2.json", "{\"preset\": \"gpt-tiny\", \"kv_heads\": 2}", "\"kv_heads\" applies to kind llama only");
    expect_model_error("l3.json", "{\"preset\": \"llama-mini\", \"rope_theta\": -1}", "\"rope_theta\" must be a number > 0");
    expect_model_error("l4.json", "{\"preset\": \"llama-mini\", \"qkv_bias\": 2}", "\"qkv_bias\" must be true, false, 0 or 1");
    expect_model_error("l5.json", "{\"preset\": \"llama-mini\", \"head_dim\": 63}", "head_dim = 63 must be even");
    expect_model_error("l6.json", "{\"preset\": \"llama-mini\", \"n_dec_layers\": 1}", "n_dec_layers = 1 must be 0");
    assert_int_equal(dyn_model_config_load("/nonexistent/m.json", &c, &err), DYN_ERR_IO);
}

static void test_names_round_trip(void **state)
{
    (void)state;
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        dyn_layer_kind out;
        assert_int_equal(dyn_layer_kind_parse(dyn_layer_kind_name((dyn_layer_kind)k), &out, NULL), DYN_OK);
        assert_int_equal(out, k);
    }
    for (int r = 0; r < DYN_RECOMPUTE_COUNT; r++) {
        dyn_recompute out;
        assert_int_equal(dyn_recompute_parse(dyn_recompute_name((dyn_recompute)r), &out, NULL), DYN_OK);
        assert_int_equal(out, r);
    }
    dyn_recompute rc;
    assert_int_equal(dyn_recompute_parse("partial", &rc, NULL), DYN_ERR_INVALID_ARG);
    dyn_model_kind mk;
    for (int k = DYN_MODEL_GPT; k <= DYN_MODEL_LLAMA; k++) {
        assert_int_equal(dyn_model_kind_parse(dyn_model_kind_name((dyn_model_kind)k), &mk, NULL), DYN_OK);
        assert_int_equal(mk, k);
    }
    assert_string_equal(dyn_model_kind_name(DYN_MODEL_LLAMA), "llama");
    dyn_error err;
    assert_int_equal(dyn_model_kind_parse("mistral", &mk, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "gpt, t5 or llama"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_block_flops_hand_worked),
        cmocka_unit_test(test_t5_decoder_flops_hand_worked),
        cmocka_unit_test(test_small_size_terms_hand_worked),
        cmocka_unit_test(test_gpt_block_memory_hand_worked),
        cmocka_unit_test(test_t5_decoder_memory_hand_worked),
        cmocka_unit_test(test_llama_block_flops_hand_worked),
        cmocka_unit_test(test_llama_block_memory_hand_worked),
        cmocka_unit_test(test_param_counts_match_published),
        cmocka_unit_test(test_analytic_monotone_in_each_dimension),
        cmocka_unit_test(test_recompute_trades_time_for_memory),
        cmocka_unit_test(test_docmask_cheaper_than_dense),
        cmocka_unit_test(test_bad_queries_are_rejected),
        cmocka_unit_test(test_table_reproduces_multilinear_function),
        cmocka_unit_test(test_table_extrapolation_rule),
        cmocka_unit_test(test_table_round_trip_from_analytic),
        cmocka_unit_test(test_table_malformed_files),
        cmocka_unit_test(test_table_version1_t5_refused),
        cmocka_unit_test(test_table_refuses_huge_and_non_finite_values),
        cmocka_unit_test(test_table_axis_errors_name_the_axis_line),
        cmocka_unit_test(test_table_reader_survives_random_edits),
        cmocka_unit_test(test_table_write_rejects_bad_input),
        cmocka_unit_test(test_builtin_machines),
        cmocka_unit_test(test_machine_json),
        cmocka_unit_test(test_model_json),
        cmocka_unit_test(test_names_round_trip),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
