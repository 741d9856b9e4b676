/* layers.c — the per-token layer kernels of layers.h: linear, LayerNorm,
 * RMSNorm, GELU, gated GELU, residual, embeddings and the fused LM head +
 * cross-entropy. Attention lives in attention.c (fast) and attention_ref.c
 * (reference).
 *
 * Determinism: every OpenMP loop either computes each output element
 * independently (rows, elements) or splits a column reduction over channel
 * ranges with each thread summing rows in order, so results do not depend on
 * the thread count. Matrix products are OpenBLAS sgemm through dyn_sgemm
 * (threads.h), whose results do not depend on the thread count either. */
#include "model/fastmath.h" /* defines: dyn_fast_expf, dyn_row_*; must come first */

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "model/layers.h"   /* defines: the kernel contracts */
#include "model/threads.h"  /* defines: dyn_par, dyn_sgemm */

/* The [c0, c1) slice of n channels owned by thread tid of nt. */
static void channel_range(int n, int tid, int nt, int *c0, int *c1)
{
    int per = (n + nt - 1) / nt;
    *c0 = tid * per < n ? tid * per : n;
    *c1 = *c0 + per < n ? *c0 + per : n;
}

/* ---- linear ----------------------------------------------------------- */

void dyn_linear_forward(float *out, const float *inp, const float *w, const float *bias,
                        int N, int C, int OC)
{
    float beta = 0.0f;
    if (bias) {
        /* Start from the bias so that sgemm adds the product in one pass. */
#pragma omp parallel for schedule(static) if (dyn_par((size_t)N * OC))
        for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
        beta = 1.0f;
    }
    dyn_sgemm(0, 1, N, OC, C, 1.0f, inp, C, w, C, beta, out, OC);
}

/* The fused backward is its two halves, input first: the same operations in
 * the same order as a zero-bubble B then W, so fused and split agree to the
 * bit, and each piece of arithmetic has one place (the halves, below). */
void dyn_linear_backward(float *dinp, float *dw, float *dbias, const float *dout,
                         const float *inp, const float *w, int N, int C, int OC)
{
    if (dinp) dyn_linear_backward_input(dinp, dout, w, N, C, OC);
    dyn_linear_backward_weight(dw, dbias, dout, inp, N, C, OC);
}

/* ---- LayerNorm -------------------------------------------------------- */

/* One row of LayerNorm: o (C) from x (C), saving its mean and rstd. */
static inline void layernorm_row(float *o, float *mean, float *rstd, const float *x, const float *w,
                                 const float *b, int C)
{
    float m = 0.0f;
    for (int c = 0; c < C; c++) m += x[c];
    m /= (float)C;
    float v = 0.0f;
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    v /= (float)C;
    float s = 1.0f / sqrtf(v + DYN_LN_EPS);
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
    *mean = m;
    *rstd = s;
}

void dyn_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int N, int C)
{
#pragma omp parallel for schedule(static) if (dyn_par((size_t)N * C))
    for (int n = 0; n < N; n++)
        layernorm_row(out + (size_t)n * C, mean + n, rstd + n, inp + (size_t)n * C, w, b, C);
}

void dyn_residual_layernorm_forward(float *x, const float *res, float *out, float *mean, float *rstd,
                                    const float *w, const float *b, int N, int C)
{
#pragma omp parallel for schedule(static) if (dyn_par((size_t)N * C))
    for (int n = 0; n < N; n++) {
        float *xr = x + (size_t)n * C;
        const float *r = res + (size_t)n * C;
        for (int c = 0; c < C; c++) xr[c] = xr[c] + r[c];
        layernorm_row(out + (size_t)n * C, mean + n, rstd + n, xr, w, b, C);
    }
}

/* B then W, as dyn_linear_backward. */
void dyn_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C)
{
    if (dinp) dyn_layernorm_backward_input(dinp, dout, inp, w, mean, rstd, N, C);
    dyn_layernorm_backward_weight(dw, db, dout, inp, mean, rstd, N, C);
}

/* ---- RMSNorm ---------------------------------------------------------- */

void dyn_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C)
{
    dyn_rmsnorm_forward_eps(out, rstd, inp, w, DYN_RMS_EPS, N, C);
}

void dyn_rmsnorm_forward_eps(float *out, float *rstd, const float *inp, const float *w, float eps,
                             int N, int C)
{
#pragma omp parallel for schedule(static) if (dyn_par((size_t)N * C))
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float s = 1.0f / sqrtf(ss / (float)C + eps);
        for (int c = 0; c < C; c++) o[c] = x[c] * s * w[c];
        rstd[n] = s;
    }
}

/* B then W, as dyn_linear_backward. */
void dyn_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                          const float *w, const float *rstd, int N, int C)
{
    if (dinp) dyn_rmsnorm_backward_input(dinp, dout, inp, w, rstd, N, C);
    dyn_rmsnorm_backward_weight(dw, dout, inp, rstd, N, C);
}

/* ---- GELU ------------------------------------------------------------- */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

/* The tanh is most of GELU's cost (an exp and a division), and the value
 * and the derivative share it: every kernel that needs both computes it
 * once (gelu_tanh1) and passes it to gelu_of/gelu_grad_of, so the results
 * are the same bits as two separate evaluations. */
static inline float gelu_tanh1(float x) { return dyn_fast_tanhf(GELU_K * (x + GELU_A * x * x * x)); }

static inline float gelu_of(float x, float t) { return 0.5f * x * (1.0f + t); }

static inline float gelu_grad_of(float x, float t)
{
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
}

static inline float gelu1(float x) { return gelu_of(x, gelu_tanh1(x)); }

static inline float gelu_grad1(float x) { return gelu_grad_of(x, gelu_tanh1(x)); }

void dyn_gelu_forward(float *out, const float *inp, size_t n)
{
#pragma omp parallel for schedule(static) if (dyn_par(n))
    for (size_t i = 0; i < n; i++) out[i] = gelu1(inp[i]);
}

void dyn_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
#pragma omp parallel for schedule(static) if (dyn_par(n))
    for (size_t i = 0; i < n; i++) dinp[i] += gelu_grad1(inp[i]) * dout[i];
}

void dyn_gelu_backward_inplace(float *d, const float *inp, size_t n)
{
#pragma omp parallel for schedule(static) if (dyn_par(n))
    for (size_t i = 0; i < n; i++) d[i] = gelu_grad1(inp[i]) * d[i];
}

void dyn_gelu_forward_keep_grad(float *out, float *x_dgelu, size_t n)
{
#pragma omp parallel for schedule(static) if (dyn_par(n))
    for (size_t i = 0; i < n; i++) {
        float x = x_dgelu[i], t = gelu_tanh1(x);
        out[i] = gelu_of(x, t);
        x_dgelu[i] = gelu_grad_of(x, t);
    }
}

void dyn_gelu_backward_kept(float *d, float *dbias, const float *dgelu, int N, int F)
{
    if (dbias == NULL) {
        size_t n = (size_t)N * F;
#pragma omp parallel for schedule(static) if (dyn_par(n))
        for (size_t i = 0; i < n; i++) d[i] = dgelu[i] * d[i];
        return;
    }
    /* Channels split over threads, rows in order: the bias sums are added
     * in the order dyn_linear_backward_weight adds them. */
#pragma omp parallel if (dyn_par((size_t)N * F))
    {
        int c0, c1;
        channel_range(F, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
        for (int r = 0; r < N; r++) {
            float *dr = d + (size_t)r * F;
            const float *gr = dgelu + (size_t)r * F;
            for (int c = c0; c < c1; c++) {
                dr[c] = gr[c] * dr[c];
                dbias[c] += dr[c];
            }
        }
    }
}

void dyn_gated_gelu_forward(float *out, const float *h, int N, int F)
{
#pragma omp parallel for schedule(static) if (dyn_par((size_t)N * F))
    for (int n = 0; n < N; n++) {
        const float *a = h + (size_t)n * 2 * F, *b = a + F;
        float *o = out + (size_t)n * F;
        for (int f = 0; f < F; f++) o[f] = gelu1(a[f]) * b[f];
    }
}

void dyn_gated_gelu_backward(float *dh, const float *dout, const float *h, int N, int F)
{
#pragma omp parallel for schedule(static) if (dyn_par((size_t)N * F))
    for (int n = 0; n < N; n++) {
        const float *a = h + (size_t)n * 2 * F, *b = a + F;
        const float *d = dout + (size_t)n * F;
        float *da = dh + (size_t)n * 2 * F, *db = da + F;
        for (int f = 0; f < F; f++) {
            float t = gelu_tanh1(a[f]);
            da[f] = d[f] * b[f] * gelu_grad_of(a[f], t);
            db[f] = d[f] * gelu_of(a[f], t);
        }
    }
}

/* ---- SwiGLU ----------------------------------------------------------- */

/* silu(a) = a * sigmoid(a); the fast exp (relative error ~2e-7,
 * fastmath.h) lets the loops vectorise. */
static inline float sigmoid1(float a) { return 1.0f / (1.0f + dyn_fast_expf(-a)); }

void dyn_swiglu_forward(float *out, const float *h, int N, int F)
{
#pragma omp parallel for schedule(static) if (dyn_par((size_t)N * F))
    for (int n = 0; n < N; n++) {
        const float *a = h + (size_t)n * 2 * F, *b = a + F;
        float *o = out + (size_t)n * F;
        for (int f = 0; f < F; f++) o[f] = a[f] * sigmoid1(a[f]) * b[f];
    }
}

void dyn_swiglu_backward(float *dh, const float *dout, const float *h, int N, int F)
{
#pragma omp parallel for schedule(static) if (dyn_par((size_t)N * F))
    for (int n = 0; n < N; n++) {
        const float *a = h + (size_t)n * 2 * F, *b = a + F;
        const float *d = dout + (size_t)n * F;
        float *da = dh + (size_t)n * 2 * F, *db = da + F;
        for (int f = 0; f < F; f++) {
            /* silu'(a) = s (1 + a (1 - s)), s = sigmoid(a) */
            float s = sigmoid1(a[f]);
            da[f] = d[f] * b[f] * (s * (1.0f + a[f] * (1.0f - s)));
            db[f] = d[f] * (a[f] * s);
        }
    }
}

/* ---- rotary position embedding ----------------------------------------- */

void dyn_rope_inv_freq(float *inv_freq, int HD, const dyn_model_config *c)
{
    const double two_pi = 6.283185307179586;
    for (int i = 0; i < HD / 2; i++) {
        double f = 1.0 / pow(c->rope_theta, (double)(2 * i) / (double)HD);
        if (c->rope_scaling == DYN_ROPE_LLAMA3) {
            /* Hugging Face's _compute_llama3_parameters: wavelengths longer
             * than orig_ctx / low_freq are slowed by factor, shorter than
             * orig_ctx / high_freq kept, and the band between blended by
             * smooth = (orig_ctx / wavelen - low) / (high - low). */
            double ctx = c->rope_orig_ctx, lo = c->rope_low_freq, hi = c->rope_high_freq;
            double wavelen = two_pi / f;
            if (wavelen > ctx / lo) {
                f = f / c->rope_factor;
            } else if (!(wavelen < ctx / hi)) {
                double smooth = (ctx / wavelen - lo) / (hi - lo);
                f = (1.0 - smooth) * f / c->rope_factor + smooth * f;
            }
        }
        inv_freq[i] = (float)f;
    }
}

void dyn_rope_tables(float *cos_t, float *sin_t, const float *inv_freq, int P, int HD)
{
    int half = HD / 2;
    for (int p = 0; p < P; p++)
        for (int i = 0; i < half; i++) {
            float ang = (float)p * inv_freq[i];
            cos_t[(size_t)p * half + i] = (float)cos((double)ang);
            sin_t[(size_t)p * half + i] = (float)sin((double)ang);
        }
}

/* Turn every head of x's N rows by +angle (sign 1) or -angle (sign -1). */
static void rope_apply(float *x, int ldx, int nh, int HD, const int32_t *pos, const float *cos_t,
                       const float *sin_t, int N, float sign)
{
    int half = HD / 2;
#pragma omp parallel for schedule(static) if (dyn_par((size_t)N * nh * HD))
    for (int n = 0; n < N; n++) {
        const float *cs = cos_t + (size_t)pos[n] * half, *sn = sin_t + (size_t)pos[n] * half;
        for (int h = 0; h < nh; h++) {
            float *a = x + (size_t)n * ldx + (size_t)h * HD, *b = a + half;
            for (int i = 0; i < half; i++) {
                float c = cs[i], s = sign * sn[i], u = a[i], v = b[i];
                a[i] = u * c - v * s;
                b[i] = v * c + u * s;
            }
        }
    }
}

void dyn_rope_forward(float *x, int ldx, int nh, int HD, const int32_t *pos, const float *cos_t,
                      const float *sin_t, int N)
{
    rope_apply(x, ldx, nh, HD, pos, cos_t, sin_t, N, 1.0f);
}

void dyn_rope_backward(float *d, int ldd, int nh, int HD, const int32_t *pos, const float *cos_t,
                       const float *sin_t, int N)
{
    rope_apply(d, ldd, nh, HD, pos, cos_t, sin_t, N, -1.0f);
}

/* ---- residual --------------------------------------------------------- */

void dyn_residual_forward(float *out, const float *a, const float *b, size_t n)
{
#pragma omp parallel for schedule(static) if (dyn_par(n))
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void dyn_residual_backward(float *da, float *db, const float *dout, size_t n)
{
#pragma omp parallel for schedule(static) if (dyn_par(n))
    for (size_t i = 0; i < n; i++) {
        if (da) da[i] += dout[i];
        if (db) db[i] += dout[i];
    }
}

/* ---- embeddings ------------------------------------------------------- */

void dyn_embed_pos_forward(float *out, const int32_t *tokens, const int32_t *pos,
                           const float *wte, const float *wpe, int N, int C)
{
#pragma omp parallel for schedule(static) if (dyn_par((size_t)N * C))
    for (int n = 0; n < N; n++) {
        assert(tokens[n] >= 0 && pos[n] >= 0);
        const float *te = wte + (size_t)tokens[n] * C;
        const float *pe = wpe + (size_t)pos[n] * C;
        float *o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
    }
}

void dyn_embed_pos_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                            const int32_t *pos, int N, int C)
{
    /* Rows of dwte are shared by repeated tokens: split channels, not rows,
     * so no two threads write one float and each adds rows in order. */
#pragma omp parallel if (dyn_par((size_t)N * C))
    {
        int c0, c1;
        channel_range(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
        for (int n = 0; n < N; n++) {
            const float *d = dout + (size_t)n * C;
            float *te = dwte + (size_t)tokens[n] * C;
            for (int c = c0; c < c1; c++) te[c] += d[c];
            if (dwpe) {
                float *pe = dwpe + (size_t)pos[n] * C;
                for (int c = c0; c < c1; c++) pe[c] += d[c];
            }
        }
    }
}

void dyn_embed_forward(float *out, const int32_t *tokens, const float *wte, int N, int C)
{
#pragma omp parallel for schedule(static) if (dyn_par((size_t)N * C))
    for (int n = 0; n < N; n++) {
        assert(tokens[n] >= 0);
        memcpy(out + (size_t)n * C, wte + (size_t)tokens[n] * C, (size_t)C * sizeof(float));
    }
}

void dyn_embed_backward(float *dwte, const float *dout, const int32_t *tokens, int N, int C)
{
    dyn_embed_pos_backward(dwte, NULL, dout, tokens, NULL, N, C);
}

/* ---- LM head + cross-entropy ----------------------------------------------
 * Rows with weight != 0 are gathered LMHEAD_RB at a time into xs (RB,C);
 * logits for LMHEAD_VCHUNK vocabulary entries at a time go to lg (RB,VCH).
 * The forward keeps a running (max, sum of exp) per row; the backward
 * recomputes each chunk's logits, turns them into dlogits in place and
 * applies two sgemms. */
#define LMHEAD_RB 256

size_t dyn_lmhead_work_floats(int N, int C, int V)
{
    size_t rb = (size_t)(N < LMHEAD_RB ? N : LMHEAD_RB);
    size_t vch = (size_t)(V < DYN_LMHEAD_VCHUNK ? V : DYN_LMHEAD_VCHUNK);
    if (rb < 1) rb = 1;
    return 2 * rb * (size_t)C + rb * vch + 3 * rb;
}

/* Gather the next up-to-RB rows with weight != 0, starting at *next; returns
 * the count, fills idx and xs. */
static int lmhead_gather(int *idx, float *xs, const float *x, const float *weights, int N, int C,
                         int rb, int *next)
{
    int m = 0;
    while (*next < N && m < rb) {
        int n = (*next)++;
        if (weights[n] == 0.0f) continue;
        idx[m] = n;
        memcpy(xs + (size_t)m * C, x + (size_t)n * C, (size_t)C * sizeof(float));
        m++;
    }
    return m;
}

double dyn_lmhead_ce_forward(float *losses, float *lse, const float *x, const float *w,
                             const int32_t *targets, const float *weights, int N, int C, int V,
                             float *work)
{
    int rb = N < LMHEAD_RB ? N : LMHEAD_RB;
    int vch = V < DYN_LMHEAD_VCHUNK ? V : DYN_LMHEAD_VCHUNK;
    if (rb < 1) return 0.0;
    float *xs = work, *lg = xs + 2 * (size_t)rb * C, *rmax = lg + (size_t)rb * vch;
    float *rsum = rmax + rb, *rtgt = rsum + rb;
    int idx[LMHEAD_RB];
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        if (losses) losses[n] = 0.0f;
        lse[n] = 0.0f;
    }
    int next = 0;
    for (;;) {
        int m = lmhead_gather(idx, xs, x, weights, N, C, rb, &next);
        if (m == 0) break;
        for (int i = 0; i < m; i++) {
            rmax[i] = -INFINITY;
            rsum[i] = 0.0f;
        }
        for (int v0 = 0; v0 < V; v0 += vch) {
            int nv = V - v0 < vch ? V - v0 : vch;
            dyn_sgemm(0, 1, m, nv, C, 1.0f, xs, C, w + (size_t)v0 * C, C, 0.0f, lg, nv);
#pragma omp parallel for schedule(static) if (dyn_par((size_t)m * nv))
            for (int i = 0; i < m; i++) {
                const float *l = lg + (size_t)i * nv;
                float mx = rmax[i];
                for (int v = 0; v < nv; v++) mx = l[v] > mx ? l[v] : mx;
                float s = 0.0f;
                for (int v = 0; v < nv; v++) s += dyn_fast_expf(l[v] - mx);
                /* Online logsumexp: rescale the running sum to the new max. */
                rsum[i] = rsum[i] * dyn_fast_expf(rmax[i] - mx) + s;
                rmax[i] = mx;
                int t = targets[idx[i]];
                if (t >= v0 && t < v0 + nv) rtgt[i] = l[t - v0];
            }
        }
        for (int i = 0; i < m; i++) {
            int n = idx[i];
            float l = rmax[i] + logf(rsum[i]);
            float loss = weights[n] * (l - rtgt[i]);
            lse[n] = l;
            if (losses) losses[n] = loss;
            total += (double)loss;
        }
    }
    return total;
}

/* One chunk's logits lg (m, nv) -> dlogits in place: dloss * weight *
 * (softmax - onehot(target)), with the row's logsumexp from the forward. */
static void lmhead_dlogits(float *lg, const int *idx, int m, int v0, int nv, const int32_t *targets,
                           const float *weights, const float *lse, float dloss)
{
#pragma omp parallel for schedule(static) if (dyn_par((size_t)m * nv))
    for (int i = 0; i < m; i++) {
        int n = idx[i];
        float *l = lg + (size_t)i * nv;
        float g = dloss * weights[n], ls = lse[n];
        for (int v = 0; v < nv; v++) l[v] = g * dyn_fast_expf(l[v] - ls);
        int t = targets[n];
        if (t >= v0 && t < v0 + nv) l[t - v0] -= g;
    }
}

/* The one LM head backward loop, behind the fused call (dx and dw) and the
 * split halves (dx only: B; dw only: W). The dlogits are (target rows, V):
 * far larger than anything else a block keeps, so neither half stores them;
 * each recomputes the logits chunk by chunk and applies only its own
 * product: one extra logits sgemm (2·rows·C·V FLOPs) for never holding
 * (rows, V) floats between B and W. Every half runs the fused call's
 * operations on its outputs in the same order, so B + W is bit-identical to
 * it. Work layout: xs (rb,C), dxs (rb,C), lg (rb,vch); dxs is used only
 * when dx is given. */
static void lmhead_backward(float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                            const float *weights, const float *lse, float dloss, int N, int C, int V,
                            float *work)
{
    int rb = N < LMHEAD_RB ? N : LMHEAD_RB;
    int vch = V < DYN_LMHEAD_VCHUNK ? V : DYN_LMHEAD_VCHUNK;
    if (rb < 1) return;
    float *xs = work, *dxs = xs + (size_t)rb * C, *lg = dxs + (size_t)rb * C;
    int idx[LMHEAD_RB];
    int next = 0;
    for (;;) {
        int m = lmhead_gather(idx, xs, x, weights, N, C, rb, &next);
        if (m == 0) break;
        if (dx) memset(dxs, 0, (size_t)m * C * sizeof(float));
        for (int v0 = 0; v0 < V; v0 += vch) {
            int nv = V - v0 < vch ? V - v0 : vch;
            dyn_sgemm(0, 1, m, nv, C, 1.0f, xs, C, w + (size_t)v0 * C, C, 0.0f, lg, nv);
            lmhead_dlogits(lg, idx, m, v0, nv, targets, weights, lse, dloss);
            if (dw)
                dyn_sgemm(1, 0, nv, C, m, 1.0f, lg, nv, xs, C, 1.0f, dw + (size_t)v0 * C, C);
            if (dx)
                dyn_sgemm(0, 0, m, C, nv, 1.0f, lg, nv, w + (size_t)v0 * C, C, 1.0f, dxs, C);
        }
        if (dx) {
            for (int i = 0; i < m; i++) {
                float *d = dx + (size_t)idx[i] * C;
                const float *s = dxs + (size_t)i * C;
                for (int c = 0; c < C; c++) d[c] += s[c];
            }
        }
    }
}

void dyn_lmhead_ce_backward(float *dx, float *dw, const float *x, const float *w,
                            const int32_t *targets, const float *weights, const float *lse,
                            float dloss, int N, int C, int V, float *work)
{
    lmhead_backward(dx, dw, x, w, targets, weights, lse, dloss, N, C, V, work);
}

void dyn_lmhead_ce_backward_input(float *dx, const float *x, const float *w, const int32_t *targets,
                                  const float *weights, const float *lse, float dloss, int N, int C,
                                  int V, float *work)
{
    lmhead_backward(dx, NULL, x, w, targets, weights, lse, dloss, N, C, V, work);
}

void dyn_lmhead_ce_backward_weight(float *dw, const float *x, const float *w, const int32_t *targets,
                                   const float *weights, const float *lse, float dloss, int N, int C,
                                   int V, float *work)
{
    lmhead_backward(NULL, dw, x, w, targets, weights, lse, dloss, N, C, V, work);
}

/* ---- split backward (zero-bubble B and W halves) ---------------------------
 * The input-gradient half and the weight-gradient half of the linear and
 * norm backwards. They are the only copy of that arithmetic: the fused
 * *_backward above calls B then W, so B + W is bit-identical to the fused
 * call by construction (tests/test_split_backward.c checks it, with W run
 * before B too). The LM head's three entry points share lmhead_backward. */

void dyn_linear_backward_input(float *dinp, const float *dout, const float *w, int N, int C, int OC)
{
    dyn_sgemm(0, 0, N, C, OC, 1.0f, dout, OC, w, C, 1.0f, dinp, C);
}

/* beta = 0 rather than a memset and beta = 1: OpenBLAS zeroes C itself, per
 * panel inside dyn_sgemm's parallel loop, where a memset before the call
 * would be one more serial pass over dinp. */
void dyn_linear_backward_input_set(float *dinp, const float *dout, const float *w, int N, int C,
                                   int OC)
{
    dyn_sgemm(0, 0, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C);
}

void dyn_linear_backward_weight(float *dw, float *dbias, const float *dout, const float *inp,
                                int N, int C, int OC)
{
    dyn_sgemm(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    if (dbias) {
#pragma omp parallel if (dyn_par((size_t)N * OC))
        {
            int c0, c1;
            channel_range(OC, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
            for (int n = 0; n < N; n++) {
                const float *d = dout + (size_t)n * OC;
                for (int c = c0; c < c1; c++) dbias[c] += d[c];
            }
        }
    }
}

void dyn_layernorm_backward_input(float *dinp, const float *dout, const float *inp, const float *w,
                                  const float *mean, const float *rstd, int N, int C)
{
    dyn_layernorm_backward_input_res(dinp, dinp, dout, inp, w, mean, rstd, N, C);
}

void dyn_layernorm_backward_input_res(float *dinp, const float *dres, const float *dout,
                                      const float *inp, const float *w, const float *mean,
                                      const float *rstd, int N, int C)
{
    /* dx = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)),
     * dnorm = dout * w: the standard LayerNorm input gradient. */
#pragma omp parallel for schedule(static) if (dyn_par((size_t)N * C))
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *d = dout + (size_t)n * C;
        const float *r = dres + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        float sum_dn = 0.0f, sum_dnx = 0.0f;
        for (int c = 0; c < C; c++) {
            float dn = d[c] * w[c];
            sum_dn += dn;
            sum_dnx += dn * (x[c] - m) * s;
        }
        sum_dn /= (float)C;
        sum_dnx /= (float)C;
        /* simd: r may be dx itself (the += form), read and written at the
         * same index only, which the alias check GCC would insert rejects. */
#pragma omp simd
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            dx[c] = r[c] + s * (d[c] * w[c] - sum_dn - xhat * sum_dnx);
        }
    }
}

void dyn_layernorm_backward_weight(float *dw, float *db, const float *dout, const float *inp,
                                   const float *mean, const float *rstd, int N, int C)
{
#pragma omp parallel if (dyn_par((size_t)N * C))
    {
        int c0, c1;
        channel_range(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C;
            const float *d = dout + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            for (int c = c0; c < c1; c++) {
                dw[c] += d[c] * (x[c] - m) * s;
                db[c] += d[c];
            }
        }
    }
}

void dyn_rmsnorm_backward_input(float *dinp, const float *dout, const float *inp, const float *w,
                                const float *rstd, int N, int C)
{
    dyn_rmsnorm_backward_input_res(dinp, dinp, dout, inp, w, rstd, N, C);
}

void dyn_rmsnorm_backward_input_res(float *dinp, const float *dres, const float *dout,
                                    const float *inp, const float *w, const float *rstd, int N,
                                    int C)
{
    /* y = x s w with s = (mean(x^2)+eps)^-1/2: dx = s (dn - x s^2 mean(dn x)),
     * dn = dout * w. */
#pragma omp parallel for schedule(static) if (dyn_par((size_t)N * C))
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *d = dout + (size_t)n * C;
        const float *r = dres + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float s = rstd[n];
        float dot = 0.0f;
        for (int c = 0; c < C; c++) dot += d[c] * w[c] * x[c];
        float k = s * s * dot / (float)C;
#pragma omp simd /* r may be dx: see the LayerNorm loop */
        for (int c = 0; c < C; c++) dx[c] = r[c] + s * (d[c] * w[c] - x[c] * k);
    }
}

void dyn_rmsnorm_backward_weight(float *dw, const float *dout, const float *inp, const float *rstd,
                                 int N, int C)
{
#pragma omp parallel if (dyn_par((size_t)N * C))
    {
        int c0, c1;
        channel_range(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C;
            const float *d = dout + (size_t)n * C;
            float s = rstd[n];
            for (int c = c0; c < c1; c++) dw[c] += d[c] * x[c] * s;
        }
    }
}
