/* test_model_forward.c — forward values of a tiny GPT-2 and a tiny T5 v1.1
 * against independent computations in double precision written here from
 * each model's definition. Every parameter is random (not the init's ones
 * and zeros), so each tensor matters. The gradient tests check derivatives;
 * this checks the values themselves.
 *
 * GPT-2: token + position embedding; per block
 *   x += proj(causal_attention(LN1(x))), x += fc2(gelu_tanh(fc1(LN2(x))));
 *   final LayerNorm; logits with the tied token table; cross-entropy of the
 *   target tokens.
 * T5 v1.1: encoder x = shared[input]; per block
 *   x += o(attention(rms1(x)) + relative bias), x += wo(gelu_tanh(wi_0 h) *
 *   (wi_1 h)) with h = rms2(x); enc = rms_final(x). Decoder y = shared[BOS,
 *   target[0 .. n-2]]; per block causal self-attention with the decoder's own
 *   (one-directional) relative bias, cross-attention to enc without bias, the
 *   same gated FFN; logits = lm_head(rms_final(y)) (v1.1: lm_head untied, no
 *   d_model^-1/2 rescale); cross-entropy of every target token. RMSNorm
 *   divides by sqrt(mean(x^2) + 1e-6), no mean, no bias; attention scores
 *   are q.k unscaled (T5 folds 1/sqrt(d) into the initialisation); the bias
 *   buckets are those of the T5 paper's code: 32 buckets, half per direction
 *   in the encoder, exact up to half a direction's buckets, then
 *   logarithmic up to distance 128. */
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

/* ---- T5 v1.1 ---------------------------------------------------------- */

/* out[T][C] = x / sqrt(mean(x^2) + 1e-6) * w. */
static void ref_rmsnorm(double *out, const double *x, const float *w, int T, int C)
{
    for (int t = 0; t < T; t++) {
        double ms = 0;
        for (int c = 0; c < C; c++) ms += x[t * C + c] * x[t * C + c] / C;
        double s = 1.0 / sqrt(ms + 1e-6);
        for (int c = 0; c < C; c++) out[t * C + c] = x[t * C + c] * s * w[c];
    }
}

/* T5's relative-position bucket of key position minus query position d. */
static int ref_bucket(int d, int bidirectional)
{
    int nb = 32, base = 0, n;
    if (bidirectional) {
        nb /= 2;
        base = d > 0 ? nb : 0; /* keys after the query use the upper half */
        n = abs(d);
    } else {
        n = d < 0 ? -d : 0; /* decoder: only the past is visible */
    }
    int exact = nb / 2;
    if (n < exact) return base + n;
    int b = exact + (int)floor(log((double)n / exact) / log(128.0 / exact) * (nb - exact));
    return base + (b < nb - 1 ? b : nb - 1);
}

/* y[Tq][H*D] = softmax(q k^T + bias) v per head; q (Tq, H*D), k and v
 * (Tk, H*D). rel: (H, 32) bias table or NULL; causal: key u <= query t. */
static void ref_t5_attention(double *y, const double *q, const double *k, const double *v, int Tq, int Tk, int H,
                             int D, const float *rel, int bidirectional, int causal)
{
    double *s = xcalloc((size_t)Tk, sizeof(double));
    for (int h = 0; h < H; h++)
        for (int t = 0; t < Tq; t++) {
            int n = causal ? t + 1 : Tk;
            double mx = -INFINITY, sum = 0;
            for (int u = 0; u < n; u++) {
                double d = 0;
                for (int j = 0; j < D; j++) d += q[t * H * D + h * D + j] * k[u * H * D + h * D + j];
                if (rel) d += rel[h * 32 + ref_bucket(u - t, bidirectional)];
                s[u] = d;
                if (d > mx) mx = d;
            }
            for (int u = 0; u < n; u++) sum += (s[u] = exp(s[u] - mx));
            for (int j = 0; j < D; j++) {
                double acc = 0;
                for (int u = 0; u < n; u++) acc += s[u] / sum * v[u * H * D + h * D + j];
                y[t * H * D + h * D + j] = acc;
            }
        }
    free(s);
}

/* x[T][C] += wo(gelu_tanh(wi_0 h) * wi_1 h), h = rms(x) * ln. */
static void ref_t5_ffn(double *x, const dyn_model *m, const char *pre, int T, int C, int F)
{
    char n[4][128];
    const char *sfx[4] = {"layer_norm.weight", "DenseReluDense.wi_0.weight", "DenseReluDense.wi_1.weight",
                          "DenseReluDense.wo.weight"};
    for (int i = 0; i < 4; i++) snprintf(n[i], sizeof n[i], "%s.%s", pre, sfx[i]);
    double *h = xcalloc((size_t)T * C, sizeof(double)), *a = xcalloc((size_t)T * F, sizeof(double));
    double *b = xcalloc((size_t)T * F, sizeof(double)), *o = xcalloc((size_t)T * C, sizeof(double));
    ref_rmsnorm(h, x, tensor(m, n[0]), T, C);
    ref_linear(a, h, tensor(m, n[1]), NULL, T, C, F);
    ref_linear(b, h, tensor(m, n[2]), NULL, T, C, F);
    for (int i = 0; i < T * F; i++)
        a[i] = 0.5 * a[i] * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (a[i] + 0.044715 * a[i] * a[i] * a[i]))) * b[i];
    ref_linear(o, a, tensor(m, n[3]), NULL, T, F, C);
    for (int i = 0; i < T * C; i++) x[i] += o[i];
    free(h), free(a), free(b), free(o);
}

/* x[Tq][C] += o(attention(q(rms(x)), k(kv), v(kv))): self-attention when kv
 * is NULL (keys from the same normalised x), else cross-attention to kv
 * (Tk, C). pre names the sub-layer ("encoder.block.0.layer.0"), att the
 * attention module inside it ("SelfAttention" or "EncDecAttention"). */
static void ref_t5_attn_layer(double *x, const double *kv, const dyn_model *m, const char *pre, const char *att,
                              int Tq, int Tk, const dyn_model_config *c, const float *rel, int bidirectional,
                              int causal)
{
    const int C = c->hidden, H = c->heads, D = c->head_dim, I = H * D;
    char n[5][128];
    snprintf(n[0], sizeof n[0], "%s.layer_norm.weight", pre);
    const char *w[4] = {"q", "k", "v", "o"};
    for (int i = 0; i < 4; i++) snprintf(n[i + 1], sizeof n[i + 1], "%s.%s.%s.weight", pre, att, w[i]);
    double *h = xcalloc((size_t)Tq * C, sizeof(double)), *q = xcalloc((size_t)Tq * I, sizeof(double));
    double *k = xcalloc((size_t)Tk * I, sizeof(double)), *v = xcalloc((size_t)Tk * I, sizeof(double));
    double *y = xcalloc((size_t)Tq * I, sizeof(double)), *o = xcalloc((size_t)Tq * C, sizeof(double));
    ref_rmsnorm(h, x, tensor(m, n[0]), Tq, C);
    const double *src = kv ? kv : h;
    ref_linear(q, h, tensor(m, n[1]), NULL, Tq, C, I);
    ref_linear(k, src, tensor(m, n[2]), NULL, Tk, C, I);
    ref_linear(v, src, tensor(m, n[3]), NULL, Tk, C, I);
    ref_t5_attention(y, q, k, v, Tq, Tk, H, D, rel, bidirectional, causal);
    ref_linear(o, y, tensor(m, n[4]), NULL, Tq, I, C);
    for (int i = 0; i < Tq * C; i++) x[i] += o[i];
    free(h), free(q), free(k), free(v), free(y), free(o);
}

/* One encoder-decoder pass over an encoder sequence ein (Te tokens) and a
 * decoder sequence din with the targets tgt (Td each). Outputs: enc (Te, C)
 * the normalised encoder output, dec (Td, C) the decoder hidden entering
 * the final norm, tok_loss (Td) each target's cross-entropy (nats). */
static void ref_t5_pass(const dyn_model *m, const dyn_model_config *c, const int32_t *ein, int Te, const int32_t *din,
                        const int32_t *tgt, int Td, double *enc, double *dec, double *tok_loss)
{
    const int C = c->hidden, F = c->ffn, V = c->vocab;
    const float *shared = tensor(m, "shared.weight");
    const float *erel = tensor(m, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
    const float *drel = tensor(m, "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
    double *x = xcalloc((size_t)Te * C, sizeof(double));
    char pre[96];
    for (int t = 0; t < Te; t++)
        for (int k = 0; k < C; k++) x[t * C + k] = shared[(size_t)ein[t] * C + k];
    for (int l = 0; l < c->n_layers; l++) {
        snprintf(pre, sizeof pre, "encoder.block.%d.layer.0", l);
        ref_t5_attn_layer(x, NULL, m, pre, "SelfAttention", Te, Te, c, erel, 1, 0);
        snprintf(pre, sizeof pre, "encoder.block.%d.layer.1", l);
        ref_t5_ffn(x, m, pre, Te, C, F);
    }
    ref_rmsnorm(enc, x, tensor(m, "encoder.final_layer_norm.weight"), Te, C);
    for (int t = 0; t < Td; t++)
        for (int k = 0; k < C; k++) dec[t * C + k] = shared[(size_t)din[t] * C + k];
    for (int l = 0; l < c->n_dec_layers; l++) {
        snprintf(pre, sizeof pre, "decoder.block.%d.layer.0", l);
        ref_t5_attn_layer(dec, NULL, m, pre, "SelfAttention", Td, Td, c, drel, 0, 1);
        snprintf(pre, sizeof pre, "decoder.block.%d.layer.1", l);
        ref_t5_attn_layer(dec, enc, m, pre, "EncDecAttention", Td, Te, c, NULL, 0, 0);
        snprintf(pre, sizeof pre, "decoder.block.%d.layer.2", l);
        ref_t5_ffn(dec, m, pre, Td, C, F);
    }
    double *h = xcalloc((size_t)Td * C, sizeof(double)), *lg = xcalloc((size_t)V, sizeof(double));
    const float *head = tensor(m, "lm_head.weight");
    ref_rmsnorm(h, dec, tensor(m, "decoder.final_layer_norm.weight"), Td, C);
    for (int t = 0; t < Td; t++) {
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < V; v++) {
            double d = 0;
            for (int k = 0; k < C; k++) d += h[t * C + k] * head[(size_t)v * C + k];
            lg[v] = d;
            if (d > mx) mx = d;
        }
        for (int v = 0; v < V; v++) sum += exp(lg[v] - mx);
        tok_loss[t] = mx + log(sum) - lg[tgt[t]];
    }
    free(x), free(h), free(lg);
}

#define T5_NS 3
static const int32_t t5_in_len[T5_NS] = {16, 5, 9}, t5_tg_len[T5_NS] = {20, 3, 7};

/* The test's samples: random byte tokens, fixed seed. */
static void t5_samples(dyn_token_sample *s, int32_t tok[T5_NS][2][20])
{
    dyn_rng r;
    dyn_rng_seed(&r, 5);
    for (int i = 0; i < T5_NS; i++) {
        for (int k = 0; k < 20; k++) tok[i][0][k] = (int32_t)dyn_rng_below(&r, 256);
        for (int k = 0; k < 20; k++) tok[i][1][k] = (int32_t)dyn_rng_below(&r, 256);
        s[i] = (dyn_token_sample){tok[i][0], t5_in_len[i], tok[i][1], t5_tg_len[i]};
    }
}

/* Reference for samples [s0, s1) seen as one attention group (one sample,
 * or the samples of a row packed without a document mask: the encoder
 * attends across the row and the decoder row is their decoder inputs back
 * to back, causal across the row). Checks the model's boundary activation
 * `out` (encoder output then decoder hidden, flat (row, position)) at every
 * real position of these samples, and returns the group's per-sample losses
 * in ref_loss[s0 .. s1) and each target's loss at its flat decoder position
 * in ref_tok (B*Td). The worst error ratio goes to *worst. */
static void t5_check_group(const dyn_model *m, const dyn_model_config *c, const dyn_model_microbatch *mb,
                           const dyn_token_sample *s, int s0, int s1, const float *out, double *ref_loss,
                           double *ref_tok, double *worst)
{
    const int C = c->hidden;
    int Te = 0, Td = 0;
    for (int i = s0; i < s1; i++) Te += s[i].input_len, Td += s[i].target_len;
    int32_t *ein = xcalloc((size_t)Te, sizeof(int32_t)), *din = xcalloc((size_t)Td, sizeof(int32_t));
    int32_t *tgt = xcalloc((size_t)Td, sizeof(int32_t));
    for (int i = s0, e = 0, d = 0; i < s1; i++) {
        for (int t = 0; t < s[i].input_len; t++) ein[e++] = s[i].input[t];
        for (int t = 0; t < s[i].target_len; t++, d++) { /* the decoder reads BOS, then the targets shifted right */
            din[d] = t == 0 ? DYN_TOK_BOS : s[i].target[t - 1];
            tgt[d] = s[i].target[t];
        }
    }
    double *enc = xcalloc((size_t)Te * C, sizeof(double)), *dec = xcalloc((size_t)Td * C, sizeof(double));
    double *tl = xcalloc((size_t)Td, sizeof(double));
    ref_t5_pass(m, c, ein, Te, din, tgt, Td, enc, dec, tl);
    /* fp32 (and the fast tanh in GELU) against double, through 4 blocks of
     * O(1) activations: errors of a few 1e-7 are expected (measured: at
     * most 0.04 of the allowance 1e-5 + 1e-5 |ref|); any one term of the
     * model left out or misplaced moves values by O(0.01) or more. */
    const size_t Ne = (size_t)mb->lay->B * mb->lay->T;
    for (int i = s0, e = 0, d = 0; i < s1; i++) {
        const dyn_segment *es = &mb->lay->samples[i], *ds = &mb->dec_lay->samples[i];
        ref_loss[i] = 0;
        for (int t = 0; t < s[i].input_len; t++, e++)
            for (int k = 0; k < C; k++) {
                double got = out[((size_t)es->row * mb->lay->T + es->start + t) * C + k], want = enc[e * C + k];
                double r = fabs(got - want) / (1e-5 + 1e-5 * fabs(want));
                if (!(r <= *worst)) *worst = r;
            }
        for (int t = 0; t < s[i].target_len; t++, d++) {
            size_t at = (size_t)ds->row * mb->dec_lay->T + ds->start + t;
            ref_tok[at] = tl[d];
            for (int k = 0; k < C; k++) {
                double got = out[(Ne + at) * C + k], want = dec[d * C + k];
                double r = fabs(got - want) / (1e-5 + 1e-5 * fabs(want));
                if (!(r <= *worst)) *worst = r;
            }
            ref_loss[i] += tl[d];
        }
    }
    free(ein), free(din), free(tgt), free(enc), free(dec), free(tl);
}

/* The whole check for one micro-batch: the boundary entering the head
 * elementwise, the loss sum, every sample's loss, and every target token's
 * loss alone (its logits' log-softmax at the target: the model returns no
 * logits, so each position is counted alone by giving only it weight 1).
 * groups[g] .. groups[g+1] are the attention groups (see t5_check_group). */
static void t5_check_microbatch(dyn_model *m, const dyn_model_config *c, dyn_model_microbatch *mb,
                                const dyn_token_sample *s, const int *groups, int n_groups, const char *what)
{
    dyn_error err;
    dyn_model_acts *a = dyn_model_acts_create(&err);
    assert_non_null(a);
    int L = dyn_model_num_layers(m);
    size_t nb = dyn_model_boundary_floats(m, L - 1, mb);
    float *out = xcalloc(nb, sizeof(float));
    assert_int_equal(dyn_model_stage_forward(m, a, mb, 0, L - 1, NULL, out, 0, NULL, NULL, &err), DYN_OK);
    double loss = 0;
    float sample_loss[T5_NS];
    assert_int_equal(dyn_model_forward(m, a, mb, 0, &loss, sample_loss, &err), DYN_OK);
    double ref_loss[T5_NS], ref = 0, worst = 0;
    const size_t Nd = (size_t)mb->dec_lay->B * mb->dec_lay->T;
    double *ref_tok = xcalloc(Nd, sizeof(double));
    for (int g = 0; g < n_groups; g++)
        t5_check_group(m, c, mb, s, groups[g], groups[g + 1], out, ref_loss, ref_tok, &worst);
    printf("    T5 forward, %s: hidden error ratio %.3g (<= 1 passes)\n", what, worst);
    assert_true(worst <= 1.0);
    for (int i = 0; i < T5_NS; i++) {
        ref += ref_loss[i];
        printf("    T5 forward, %s: sample %d loss %.9f, double reference %.9f\n", what, i, sample_loss[i], ref_loss[i]);
        /* as for GPT: fp32 logits and sums, 1e-5 relative allowed
         * (measured: at most 5e-8) */
        assert_true(fabs(sample_loss[i] - ref_loss[i]) <= 1e-5 * fabs(ref_loss[i]));
    }
    assert_true(fabs(loss - ref) <= 1e-5 * fabs(ref));
    float *w = mb->weights, *saved = xcalloc(Nd, sizeof(float));
    memcpy(saved, w, Nd * sizeof(float));
    double tok_worst = 0;
    int counted = 0;
    for (size_t i = 0; i < Nd; i++) {
        if (saved[i] == 0.0f) continue;
        memset(w, 0, Nd * sizeof(float));
        w[i] = 1.0f;
        double one = 0;
        assert_int_equal(dyn_model_forward(m, a, mb, 0, &one, NULL, &err), DYN_OK);
        double r = fabs(one - ref_tok[i]) / fabs(ref_tok[i]);
        if (!(r <= tok_worst)) tok_worst = r;
        counted++;
    }
    memcpy(w, saved, Nd * sizeof(float));
    printf("    T5 forward, %s: %d target tokens alone, worst relative error %.3g\n", what, counted, tok_worst);
    assert_int_equal(counted, mb->n_target_tokens);
    assert_true(tok_worst <= 1e-5); /* as the sample losses */
    free(saved);
    free(ref_tok);
    free(out);
    dyn_model_acts_free(a);
}

static dyn_model *t5_fixed_model(dyn_model_config *c)
{
    dyn_error err;
    *c = dyn_model_config_tiny(DYN_MODEL_T5, 2, 16, 2, 32);
    dyn_model *m = dyn_model_create(c, 9, &err);
    assert_non_null(m);
    dyn_rng rng;
    dyn_rng_seed(&rng, 23);
    fill_uniform(dyn_model_params(m), dyn_model_num_params(m), 0.5f, &rng);
    return m;
}

/* Padded rows: each sample alone in its row, shorter ones padded. */
static void test_t5_forward_padded_matches_double_reference(void **state)
{
    (void)state;
    dyn_model_config c;
    dyn_model *m = t5_fixed_model(&c);
    dyn_token_sample s[T5_NS];
    int32_t tok[T5_NS][2][20];
    t5_samples(s, tok);
    dyn_error err;
    dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(DYN_MODEL_T5, s, T5_NS, &err);
    assert_non_null(mb);
    const int groups[] = {0, 1, 2, 3};
    t5_check_microbatch(m, &c, mb, s, groups, 3, "padded");
    dyn_model_microbatch_free(mb);
    dyn_model_free(m);
}

/* Packed rows: samples 1 and 2 share row 1, with the document mask (each
 * sample on its own) and without it (the row is one sequence). */
static void test_t5_forward_packed_matches_double_reference(void **state)
{
    (void)state;
    dyn_model_config c;
    dyn_model *m = t5_fixed_model(&c);
    dyn_token_sample s[T5_NS];
    int32_t tok[T5_NS][2][20];
    t5_samples(s, tok);
    dyn_error err;
    const int32_t rows[2] = {1, 2};
    dyn_model_microbatch *mb = dyn_model_microbatch_create_packed(DYN_MODEL_T5, s, T5_NS, rows, 2, 0, 0, 1, &err);
    assert_non_null(mb);
    const int each[] = {0, 1, 2, 3}, by_row[] = {0, 1, 3};
    t5_check_microbatch(m, &c, mb, s, each, 3, "packed, document mask");
    dyn_model_microbatch_free(mb);
    mb = dyn_model_microbatch_create_packed(DYN_MODEL_T5, s, T5_NS, rows, 2, 0, 0, 0, &err);
    assert_non_null(mb);
    t5_check_microbatch(m, &c, mb, s, by_row, 2, "packed, no mask");
    dyn_model_microbatch_free(mb);
    dyn_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_forward_matches_double_reference),
        cmocka_unit_test(test_t5_forward_padded_matches_double_reference),
        cmocka_unit_test(test_t5_forward_packed_matches_double_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
