/* attention_ref.c — the obviously-correct attention the tiled kernel in
 * attention.c is tested against: for every (segment pair, head) it
 * materialises the full score matrix in double, applies the mask and the
 * relative bias, takes a plain softmax and its textbook gradient. Single
 * threaded and allocating; for tests only. Same contract as
 * dyn_attention_forward/backward in layers.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/layers.h" /* defines: dyn_attn_cfg, dyn_t5_bucket */

/* Column offset in heads of the key/value head query head h reads (GQA). */
static size_t ref_kv(const dyn_attn_cfg *cfg, int h)
{
    int kvh = cfg->kv_heads > 0 ? cfg->kv_heads : cfg->NH;
    return (size_t)(h / (cfg->NH / kvh));
}

/* Probabilities P (Lq × Lk, double) of pair (qs, ks), head h; masked = 0.
 * If lse_row is not NULL, lse_row[a] receives query a's log-sum-exp of the
 * raw scores, in double until the final rounding. */
static void ref_probs(double *P, float *lse_row, const float *q, int ldq, const float *k, int ldk,
                      const float *rel_bias, const dyn_segment *qs, const dyn_segment *ks, int h,
                      int Tq, int Tk, const dyn_attn_cfg *cfg)
{
    int HD = cfg->HD;
    for (int a = 0; a < qs->len; a++) {
        const float *qa = q + ((size_t)qs->row * Tq + qs->start + a) * ldq + (size_t)h * HD;
        double mx = -INFINITY;
        double *p = P + (size_t)a * ks->len;
        for (int c = 0; c < ks->len; c++) {
            if (cfg->causal && c > a) {
                p[c] = -INFINITY;
                continue;
            }
            const float *kc = k + ((size_t)ks->row * Tk + ks->start + c) * ldk + ref_kv(cfg, h) * HD;
            double s = 0.0;
            for (int x = 0; x < HD; x++) s += (double)qa[x] * kc[x];
            s *= cfg->scale;
            if (rel_bias)
                s += rel_bias[(size_t)h * cfg->num_buckets +
                              dyn_t5_bucket(c - a, cfg->bidirectional, cfg->num_buckets,
                                            cfg->max_distance)];
            p[c] = s;
            if (s > mx) mx = s;
        }
        double sum = 0.0;
        for (int c = 0; c < ks->len; c++) {
            p[c] = p[c] == -INFINITY ? 0.0 : exp(p[c] - mx);
            sum += p[c];
        }
        for (int c = 0; c < ks->len; c++) p[c] /= sum;
        if (lse_row) lse_row[a] = (float)(mx + log(sum));
    }
}

int dyn_attention_forward_ref(float *out, float *lse, const float *q, int ldq, const float *k,
                              int ldk, const float *v, int ldv, const float *rel_bias,
                              const dyn_layout *ql, const dyn_layout *kl,
                              const dyn_attn_cfg *cfg)
{
    int NH = cfg->NH, HD = cfg->HD, Tq = ql->T, Tk = kl->T, ldo = NH * HD;
    memset(out, 0, (size_t)ql->B * Tq * ldo * sizeof(float));
    memset(lse, 0, (size_t)ql->B * NH * Tq * sizeof(float));
    for (int s = 0; s < ql->n_seg && s < kl->n_seg; s++) {
        const dyn_segment *qs = &ql->segs[s], *ks = &kl->segs[s];
        double *P = malloc((size_t)qs->len * ks->len * sizeof(double));
        if (!P) return 1;
        for (int h = 0; h < NH; h++) {
            ref_probs(P, lse + ((size_t)qs->row * NH + h) * Tq + qs->start, q, ldq, k, ldk, rel_bias,
                      qs, ks, h, Tq, Tk, cfg);
            for (int a = 0; a < qs->len; a++) {
                size_t row = (size_t)qs->row * Tq + qs->start + a;
                for (int x = 0; x < HD; x++) {
                    double acc = 0.0;
                    for (int c = 0; c < ks->len; c++)
                        acc += P[(size_t)a * ks->len + c] *
                               v[((size_t)ks->row * Tk + ks->start + c) * ldv + ref_kv(cfg, h) * HD + x];
                    out[row * ldo + (size_t)h * HD + x] = (float)acc;
                }
            }
        }
        free(P);
    }
    return 0;
}

int dyn_attention_backward_ref(float *dq, float *dk, float *dv, float *drel_bias,
                               const float *dout, const float *q, int ldq, const float *k,
                               int ldk, const float *v, int ldv, const float *rel_bias,
                               const dyn_layout *ql, const dyn_layout *kl,
                               const dyn_attn_cfg *cfg)
{
    int NH = cfg->NH, HD = cfg->HD, Tq = ql->T, Tk = kl->T, ldo = NH * HD;
    for (size_t r = 0; r < (size_t)ql->B * Tq; r++) memset(dq + r * ldq, 0, (size_t)ldo * sizeof(float));
    int ldkv = (cfg->kv_heads > 0 ? cfg->kv_heads : NH) * HD;
    for (size_t r = 0; r < (size_t)kl->B * Tk; r++) {
        memset(dk + r * ldk, 0, (size_t)ldkv * sizeof(float));
        memset(dv + r * ldv, 0, (size_t)ldkv * sizeof(float));
    }
    for (int s = 0; s < ql->n_seg && s < kl->n_seg; s++) {
        const dyn_segment *qs = &ql->segs[s], *ks = &kl->segs[s];
        int Lq = qs->len, Lk = ks->len;
        double *P = malloc((size_t)Lq * Lk * sizeof(double));
        double *dP = malloc((size_t)Lq * Lk * sizeof(double));
        if (!P || !dP) {
            free(P);
            free(dP);
            return 1;
        }
        for (int h = 0; h < NH; h++) {
            ref_probs(P, NULL, q, ldq, k, ldk, rel_bias, qs, ks, h, Tq, Tk, cfg);
            /* dP = dO Vᵀ, dS = P (dP - rowsum(P dP)); dV = Pᵀ dO. */
            for (int a = 0; a < Lq; a++) {
                const float *g = dout + ((size_t)qs->row * Tq + qs->start + a) * ldo + (size_t)h * HD;
                double dot = 0.0;
                for (int c = 0; c < Lk; c++) {
                    const float *vc = v + ((size_t)ks->row * Tk + ks->start + c) * ldv + ref_kv(cfg, h) * HD;
                    double d = 0.0;
                    for (int x = 0; x < HD; x++) d += (double)g[x] * vc[x];
                    dP[(size_t)a * Lk + c] = d;
                    dot += d * P[(size_t)a * Lk + c];
                    float *dvc = dv + ((size_t)ks->row * Tk + ks->start + c) * ldv + ref_kv(cfg, h) * HD;
                    for (int x = 0; x < HD; x++) dvc[x] += (float)(P[(size_t)a * Lk + c] * g[x]);
                }
                for (int c = 0; c < Lk; c++) {
                    size_t i = (size_t)a * Lk + c;
                    dP[i] = P[i] * (dP[i] - dot);
                }
            }
            for (int a = 0; a < Lq; a++) {
                size_t qr = (size_t)qs->row * Tq + qs->start + a;
                for (int c = 0; c < Lk; c++) {
                    double ds = dP[(size_t)a * Lk + c];
                    if (ds == 0.0) continue;
                    size_t kr = (size_t)ks->row * Tk + ks->start + c;
                    for (int x = 0; x < HD; x++) {
                        dq[qr * ldq + (size_t)h * HD + x] += (float)(cfg->scale * ds * k[kr * ldk + ref_kv(cfg, h) * HD + x]);
                        dk[kr * ldk + ref_kv(cfg, h) * HD + x] += (float)(cfg->scale * ds * q[qr * ldq + (size_t)h * HD + x]);
                    }
                    if (rel_bias && drel_bias)
                        drel_bias[(size_t)h * cfg->num_buckets +
                                  dyn_t5_bucket(c - a, cfg->bidirectional, cfg->num_buckets,
                                                cfg->max_distance)] += (float)ds;
                }
            }
        }
        free(P);
        free(dP);
    }
    return 0;
}
