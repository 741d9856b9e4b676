/* test_model_forward.c — forward values of a tiny GPT-2 against an
 * independent computation in double precision written here from the
 * model's definition (GPT-2: token + position embedding; per block
 * x += proj(causal_attention(LN1(x))), x += fc2(gelu_tanh(fc1(LN2(x))));
 * final LayerNorm; logits with the tied token table; cross-entropy of the
 * target tokens). Every parameter is random (not the init's ones and zeros),
 * so each tensor matters. The gradient tests check derivatives; this checks
 * the values themselves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model_testutil.h" /* defines: xcalloc, fill_uniform */

static const float *tensor(const dyn_model *m, const char *name)
{
    const dyn_param_tensor *t = dyn_model_find_tensor(m, name);
    if (t == NULL) fail_msg("no tensor %s", name);
    return dyn_model_params((dyn_model *)m) + t->offset;
}

/* out[T][C] = LayerNorm(x) * w + b, eps 1e-5. */
static void ref_layernorm(double *out, const double *x, const float *w, const float *b, int T, int C)
{
    for (int t = 0; t < T; t++) {
        double mean = 0, var = 0;
        for (int c = 0; c < C; c++) mean += x[t * C + c] / C;
        for (int c = 0; c < C; c++) var += (x[t * C + c] - mean) * (x[t * C + c] - mean) / C;
        double s = 1.0 / sqrt(var + 1e-5);
        for (int c = 0; c < C; c++) out[t * C + c] = (x[t * C + c] - mean) * s * w[c] + b[c];
    }
}

/* out[T][O] = x[T][I] W^T + b, W (O, I) row-major (nn.Linear layout). */
static void ref_linear(double *out, const double *x, const float *W, const float *b, int T, int I, int O)
{
    for (int t = 0; t < T; t++)
        for (int o = 0; o < O; o++) {
            double acc = b ? b[o] : 0;
            for (int i = 0; i < I; i++) acc += x[t * I + i] * W[(size_t)o * I + i];
            out[t * O + o] = acc;
        }
}

/* Loss summed over the target tokens of one GPT sequence (one row). */
static double ref_gpt_loss(const dyn_model *m, const dyn_model_config *c, const int32_t *seq, int T, int n_in)
{
    const int C = c->hidden, H = c->heads, D = C / H, F = c->ffn, V = c->vocab;
    double *x = xcalloc((size_t)T * C, sizeof(double)), *h = xcalloc((size_t)T * C, sizeof(double));
    double *qkv = xcalloc((size_t)T * 3 * C, sizeof(double)), *y = xcalloc((size_t)T * C, sizeof(double));
    double *o = xcalloc((size_t)T * C, sizeof(double)), *f = xcalloc((size_t)T * F, sizeof(double));
    const float *wte = tensor(m, "wte.weight"), *wpe = tensor(m, "wpe.weight");
    for (int t = 0; t < T; t++)
        for (int k = 0; k < C; k++) x[t * C + k] = (double)wte[(size_t)seq[t] * C + k] + wpe[(size_t)t * C + k];
    for (int l = 0; l < c->n_layers; l++) {
        char n[8][96];
        const char *sfx[8] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                              "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias"};
        for (int i = 0; i < 8; i++) snprintf(n[i], sizeof n[i], "h.%d.%s", l, sfx[i]);
        ref_layernorm(h, x, tensor(m, n[0]), tensor(m, n[1]), T, C);
        ref_linear(qkv, h, tensor(m, n[2]), tensor(m, n[3]), T, C, 3 * C);
        for (int hd = 0; hd < H; hd++)
            for (int t = 0; t < T; t++) {
                double s[256], mx = -INFINITY, sum = 0;
                for (int u = 0; u <= t; u++) { /* causal */
                    double d = 0;
                    for (int k = 0; k < D; k++) d += qkv[t * 3 * C + hd * D + k] * qkv[u * 3 * C + C + hd * D + k];
                    s[u] = d / sqrt((double)D);
                    if (s[u] > mx) mx = s[u];
                }
                for (int u = 0; u <= t; u++) sum += (s[u] = exp(s[u] - mx));
                for (int k = 0; k < D; k++) {
                    double acc = 0;
                    for (int u = 0; u <= t; u++) acc += s[u] / sum * qkv[u * 3 * C + 2 * C + hd * D + k];
                    y[t * C + hd * D + k] = acc;
                }
            }
        ref_linear(o, y, tensor(m, n[4]), tensor(m, n[5]), T, C, C);
        for (int i = 0; i < T * C; i++) x[i] += o[i];
        ref_layernorm(h, x, tensor(m, n[6]), tensor(m, n[7]), T, C);
        char fc_w[96], fc_b[96], pr_w[96], pr_b[96];
        snprintf(fc_w, sizeof fc_w, "h.%d.mlp.c_fc.weight", l);
        snprintf(fc_b, sizeof fc_b, "h.%d.mlp.c_fc.bias", l);
        snprintf(pr_w, sizeof pr_w, "h.%d.mlp.c_proj.weight", l);
        snprintf(pr_b, sizeof pr_b, "h.%d.mlp.c_proj.bias", l);
        ref_linear(f, h, tensor(m, fc_w), tensor(m, fc_b), T, C, F);
        for (int i = 0; i < T * F; i++) /* GELU, tanh form (GPT-2) */
            f[i] = 0.5 * f[i] * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (f[i] + 0.044715 * f[i] * f[i] * f[i])));
        ref_linear(o, f, tensor(m, pr_w), tensor(m, pr_b), T, F, C);
        for (int i = 0; i < T * C; i++) x[i] += o[i];
    }
    ref_layernorm(h, x, tensor(m, "ln_f.weight"), tensor(m, "ln_f.bias"), T, C);
    double loss = 0;
    for (int t = n_in - 1; t < T - 1; t++) { /* position t predicts seq[t + 1] */
        double mx = -INFINITY, sum = 0, tgt = 0;
        double *lg = xcalloc((size_t)V, sizeof(double));
        for (int v = 0; v < V; v++) {
            double d = 0;
            for (int k = 0; k < C; k++) d += h[t * C + k] * wte[(size_t)v * C + k];
            lg[v] = d;
            if (d > mx) mx = d;
        }
        for (int v = 0; v < V; v++) sum += exp(lg[v] - mx);
        tgt = lg[seq[t + 1]];
        loss += mx + log(sum) - tgt;
        free(lg);
    }
    free(x), free(h), free(qkv), free(y), free(o), free(f);
    return loss;
}

static void test_gpt_forward_matches_double_reference(void **state)
{
    (void)state;
    dyn_error err;
    dyn_model_config c = dyn_model_config_tiny(DYN_MODEL_GPT, 2, 16, 2, 32);
    dyn_model *m = dyn_model_create(&c, 9, &err);
    assert_non_null(m);
    dyn_rng rng;
    dyn_rng_seed(&rng, 21);
    fill_uniform(dyn_model_params(m), dyn_model_num_params(m), 0.3f, &rng);
    int32_t in[5] = {3, 141, 59, 26, 53}, tg[4] = {58, 97, 93, 238};
    dyn_token_sample s = {in, 5, tg, 4};
    dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(DYN_MODEL_GPT, &s, 1, &err);
    assert_non_null(mb);
    dyn_model_acts *a = dyn_model_acts_create(&err);
    assert_non_null(a);
    double loss = 0;
    float sample_loss[1];
    assert_int_equal(dyn_model_forward(m, a, mb, 0, &loss, sample_loss, &err), DYN_OK);
    int32_t seq[9] = {3, 141, 59, 26, 53, 58, 97, 93, 238};
    double ref = ref_gpt_loss(m, &c, seq, 9, 5);
    printf("    GPT forward: loss %.9f, double reference %.9f\n", loss, ref);
    /* fp32 arithmetic (and the fast tanh in GELU) against double: a few
     * parts in 1e6 are expected (measured: 2e-8); 1e-5 relative allowed */
    assert_true(fabs(loss - ref) <= 1e-5 * fabs(ref));
    assert_true(fabs(sample_loss[0] - ref) <= 1e-5 * fabs(ref));
    dyn_model_acts_free(a);
    dyn_model_microbatch_free(mb);
    dyn_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_forward_matches_double_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
