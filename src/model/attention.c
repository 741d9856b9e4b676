/* attention.c — tiled (flash-attention style) multi-head attention over
 * variable-length layouts, forward and backward, with optional T5 relative
 * position bias. The naive reference with the same contract is
 * attention_ref.c; tests compare the two.
 *
 * Work decomposition. Query segment i attends key segment i. The forward
 * splits every (segment, head) pair into query tiles of DYN_ATTN_BQ rows;
 * each tile walks the key tiles of DYN_ATTN_BK columns it can see (under a
 * causal mask only up to its diagonal), computing S = scale·Q Kᵀ (+bias) with
 * one sgemm, an online softmax (running row max m and sum l, the output
 * rescaled when m grows) and O += P V with a second sgemm. O accumulates in
 * place in `out`; the row logsumexp m + log l is saved. Scores therefore
 * exist only per tile, never for a whole sequence, and tiles outside the
 * segment pairs (pad, other documents, the causal upper triangle) are never
 * visited.
 *
 * The backward owns one (segment, head) pair per work item, so dq/dk/dv of
 * different items never overlap and no atomics are needed: for each key tile
 * j and each visible query tile i it recomputes P = exp(S - lse), then
 *   dV_j += Pᵀ dO_i,  dP = dO_i V_jᵀ,  dS = P ∘ (dP - D_i),
 *   dQ_i += scale dS K_j,  dK_j += scale dSᵀ Q_i,
 * with D_i = rowsum(dO_i ∘ O_i). The bias gradient is summed per relative
 * distance inside the item, mapped to buckets into the item's own slot, and
 * the slots are added in item order at the end — results do not depend on
 * the thread count or on which thread ran an item.
 *
 * Relative bias lookups: T5's bucket depends only on the distance c - a, so
 * each call first tabulates bias[h][c - a] for every distance in range;
 * the inner loops then read a contiguous run of that table per row. */
#include "model/fastmath.h" /* defines: dyn_fast_expf, dyn_row_*; must come first */

#include <math.h>
#include <omp.h>
#include <string.h>

#include "model/layers.h"   /* defines: dyn_attn_cfg, attention contracts */
#include "model/threads.h"  /* defines: dyn_par, dyn_sgemm */

#define BQ DYN_ATTN_BQ
#define BK DYN_ATTN_BK

int dyn_t5_bucket(int rel, int bidirectional, int num_buckets, int max_distance)
{
    int bucket = 0, n;
    if (bidirectional) {
        num_buckets /= 2;
        if (rel > 0) bucket = num_buckets;
        n = rel < 0 ? -rel : rel;
    } else {
        n = rel < 0 ? -rel : 0;
    }
    int max_exact = num_buckets / 2;
    if (n < max_exact) return bucket + n;
    /* Logarithmically wider buckets from max_exact up to max_distance. */
    int large = max_exact + (int)(logf((float)n / (float)max_exact) /
                                  logf((float)max_distance / (float)max_exact) *
                                  (float)(num_buckets - max_exact));
    if (large > num_buckets - 1) large = num_buckets - 1;
    return bucket + large;
}

/* Work layout, in floats (see dyn_attention_work_floats):
 *   bias table  NH * (Tq + Tk)          only with a bias
 *   drel slots  B*Tq*NH * num_buckets   only with a bias
 *   per thread  S (BQ*BK), dP (BQ*BK), m (BQ), l (BQ), D (Tq), rel (Tq + Tk) */
typedef struct attn_work {
    float *bias_tab; /* [h][rel + Tq - 1], rel = c - a */
    float *drel_slots;
    float *thread_base;
    size_t per_thread;
    int rel_len; /* Tq + Tk */
} attn_work;

static size_t per_thread_floats(int Tq, int Tk)
{
    return 2 * (size_t)BQ * BK + 2 * (size_t)BQ + (size_t)Tq + (size_t)Tq + (size_t)Tk;
}

size_t dyn_attention_work_floats(int B, int Tq, int Tk, const dyn_attn_cfg *cfg)
{
    size_t nt = (size_t)(cfg->nthreads > 0 ? cfg->nthreads : 1);
    size_t n = nt * per_thread_floats(Tq, Tk);
    if (cfg->num_buckets > 0) {
        n += (size_t)cfg->NH * ((size_t)Tq + Tk);
        n += (size_t)B * Tq * cfg->NH * cfg->num_buckets;
    }
    return n;
}

static attn_work work_carve(float *work, const dyn_layout *ql, const dyn_layout *kl,
                            const dyn_attn_cfg *cfg, int with_bias)
{
    attn_work w;
    w.rel_len = ql->T + kl->T;
    float *p = work;
    w.bias_tab = NULL;
    w.drel_slots = NULL;
    if (with_bias && cfg->num_buckets > 0) {
        w.bias_tab = p;
        p += (size_t)cfg->NH * w.rel_len;
        w.drel_slots = p;
        p += (size_t)ql->B * ql->T * cfg->NH * cfg->num_buckets;
    }
    w.thread_base = p;
    w.per_thread = per_thread_floats(ql->T, kl->T);
    return w;
}

/* bias_tab[h][rel + Tq - 1] = rel_bias[h][bucket(rel)] for rel in
 * [-(Tq-1), Tk-1]. */
static void bias_tabulate(const attn_work *w, const float *rel_bias, int Tq, int Tk,
                          const dyn_attn_cfg *cfg)
{
    for (int r = -(Tq - 1); r <= Tk - 1; r++) {
        int b = dyn_t5_bucket(r, cfg->bidirectional, cfg->num_buckets, cfg->max_distance);
        for (int h = 0; h < cfg->NH; h++)
            w->bias_tab[(size_t)h * w->rel_len + (size_t)(r + Tq - 1)] =
                rel_bias[(size_t)h * cfg->num_buckets + b];
    }
}

/* Number of valid key columns of query offset a in a key tile starting at
 * c0 of width nk: all of them, or under the causal mask those with c <= a. */
static inline int visible_cols(int causal, int a, int c0, int nk)
{
    if (!causal) return nk;
    int v = a - c0 + 1;
    return v < 0 ? 0 : (v > nk ? nk : v);
}

/* Key/value heads (grouped-query attention) and the one serving query
 * head h: groups of NH / kv_heads consecutive query heads share one. */
static inline int kv_heads_of(const dyn_attn_cfg *cfg)
{
    return cfg->kv_heads > 0 ? cfg->kv_heads : cfg->NH;
}
static inline int kv_head(const dyn_attn_cfg *cfg, int h)
{
    return h / (cfg->NH / kv_heads_of(cfg));
}

/* S (nq × nk, ld BK) = scale·Q Kᵀ + bias for rows a0.. and columns c0..;
 * returns with S filled (masked entries untouched: callers use
 * visible_cols). */
static void scores_tile(float *S, const float *Q, int ldq, const float *K, int ldk, int nq,
                        int nk, int HD, float scale, const float *btab, int a0, int c0, int Tq)
{
    dyn_sgemm(0, 1, nq, nk, HD, scale, Q, ldq, K, ldk, 0.0f, S, BK);
    if (btab) {
        for (int i = 0; i < nq; i++) {
            const float *bt = btab + (c0 - (a0 + i) + Tq - 1);
            float *s = S + (size_t)i * BK;
            for (int c = 0; c < nk; c++) s[c] += bt[c];
        }
    }
}

/* One forward item: query tile [a0, a0+nq) of segment pair s, head h. */
static void forward_item(float *out, float *lse, const float *q, int ldq, const float *k, int ldk,
                         const float *v, int ldv, const dyn_segment *qs, const dyn_segment *ks,
                         int h, int a0, int nq, const dyn_layout *ql, const dyn_layout *kl,
                         const dyn_attn_cfg *cfg, const attn_work *w, float *tw)
{
    const int HD = cfg->HD, ldo = cfg->NH * cfg->HD, Tq = ql->T;
    float *S = tw, *m = tw + 2 * (size_t)BQ * BK, *l = m + BQ;
    size_t qrow = (size_t)qs->row * Tq + qs->start + a0;
    size_t krow = (size_t)ks->row * kl->T + ks->start;
    const float *Q = q + qrow * ldq + (size_t)h * HD;
    float *O = out + qrow * ldo + (size_t)h * HD;
    const float *btab = w->bias_tab ? w->bias_tab + (size_t)h * w->rel_len : NULL;
    const size_t kvcol = (size_t)kv_head(cfg, h) * HD;
    int kend = ks->len;
    if (cfg->causal && a0 + nq < kend) kend = a0 + nq;
    for (int i = 0; i < nq; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    for (int c0 = 0; c0 < kend; c0 += BK) {
        int nk = kend - c0 < BK ? kend - c0 : BK;
        const float *K = k + (krow + c0) * ldk + kvcol;
        const float *V = v + (krow + c0) * ldv + kvcol;
        scores_tile(S, Q, ldq, K, ldk, nq, nk, HD, cfg->scale, btab, a0, c0, Tq);
        for (int i = 0; i < nq; i++) {
            float *s = S + (size_t)i * BK;
            int nv = visible_cols(cfg->causal, a0 + i, c0, nk);
            float mx = dyn_row_max(s, nv, m[i]);
            dyn_row_exp_sub(s, nv, mx);
            float sum = dyn_row_sum(s, nv);
            for (int c = nv; c < nk; c++) s[c] = 0.0f;
            if (mx != m[i]) {
                /* The running max grew: rescale what is accumulated so far. */
                float corr = m[i] == -INFINITY ? 0.0f : dyn_fast_expf(m[i] - mx);
                float *o = O + (size_t)i * ldo;
                for (int d = 0; d < HD; d++) o[d] *= corr;
                l[i] *= corr;
                m[i] = mx;
            }
            l[i] += sum;
        }
        dyn_sgemm(0, 0, nq, HD, nk, 1.0f, S, BK, V, ldv, 1.0f, O, ldo);
    }
    for (int i = 0; i < nq; i++) {
        float *o = O + (size_t)i * ldo;
        float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        for (int d = 0; d < HD; d++) o[d] *= inv;
        lse[((size_t)qs->row * cfg->NH + h) * Tq + qs->start + a0 + i] =
            l[i] > 0.0f ? m[i] + logf(l[i]) : 0.0f;
    }
}

/* Multiply-adds of one head over every segment pair, a work estimate for
 * deciding whether to go parallel (threads.h). The sgemms on tiles inside our
 * parallel regions run single-threaded: the OpenMP build of OpenBLAS does so
 * by itself inside a parallel region (threads.h). */
static size_t attn_work_estimate(const dyn_layout *ql, const dyn_layout *kl, int nseg,
                                 const dyn_attn_cfg *cfg)
{
    size_t w = 0;
    for (int s = 0; s < nseg; s++) w += (size_t)ql->segs[s].len * (size_t)kl->segs[s].len;
    return w * (size_t)cfg->NH * (size_t)cfg->HD;
}

void dyn_attention_forward(float *out, float *lse, const float *q, int ldq, const float *k,
                           int ldk, const float *v, int ldv, const float *rel_bias,
                           const dyn_layout *ql, const dyn_layout *kl, const dyn_attn_cfg *cfg,
                           float *work)
{
    const int NH = cfg->NH, nt = cfg->nthreads > 0 ? cfg->nthreads : 1;
    size_t nrows = (size_t)ql->B * ql->T;
    attn_work w = work_carve(work, ql, kl, cfg, rel_bias != NULL);
    if (w.bias_tab) bias_tabulate(&w, rel_bias, ql->T, kl->T, cfg);
    int nseg = ql->n_seg < kl->n_seg ? ql->n_seg : kl->n_seg;
    /* Items: (segment, head, query tile), enumerated in that order. */
    long n_items = 0;
    for (int s = 0; s < nseg; s++) n_items += (long)NH * ((ql->segs[s].len + BQ - 1) / BQ);
    int par = nt > 1 && dyn_par(attn_work_estimate(ql, kl, nseg, cfg));
#pragma omp parallel num_threads(nt) if (par)
    {
        float *tw = w.thread_base + (size_t)omp_get_thread_num() * w.per_thread;
#pragma omp for schedule(static)
        for (size_t r = 0; r < nrows; r++) {
            memset(out + r * (size_t)NH * cfg->HD, 0, (size_t)NH * cfg->HD * sizeof(float));
        }
#pragma omp for schedule(static)
        for (size_t r = 0; r < (size_t)ql->B * NH * ql->T; r++) lse[r] = 0.0f;
        /* Walk (segment, head, tile) lazily: item index → triple. Items are
         * independent, so dynamic scheduling cannot change any result. */
#pragma omp for schedule(dynamic, 1)
        for (long it = 0; it < n_items; it++) {
            long rem = it;
            int s = 0;
            for (;; s++) {
                long per = (long)NH * ((ql->segs[s].len + BQ - 1) / BQ);
                if (rem < per) break;
                rem -= per;
            }
            int ntile = (ql->segs[s].len + BQ - 1) / BQ;
            int h = (int)(rem / ntile), tile = (int)(rem % ntile);
            int a0 = tile * BQ, nq = ql->segs[s].len - a0 < BQ ? ql->segs[s].len - a0 : BQ;
            forward_item(out, lse, q, ldq, k, ldk, v, ldv, &ql->segs[s], &kl->segs[s], h, a0, nq,
                         ql, kl, cfg, &w, tw);
        }
    }
}

/* One backward step: segment pair s, head h. dq rows of the pair are zero
 * on entry; dk/dv rows of h's key/value head are zero before the first
 * head of its group and accumulate over the group's heads (in order). */
static void backward_item(float *dq, float *dk, float *dv, const float *dout, const float *q,
                          int ldq, const float *k, int ldk, const float *v, int ldv,
                          const float *out, const float *lse, const dyn_segment *qs,
                          const dyn_segment *ks, int h, const dyn_layout *ql,
                          const dyn_attn_cfg *cfg, const attn_work *w, float *tw, float *slot)
{
    const int HD = cfg->HD, NH = cfg->NH, ldo = NH * HD, Tq = ql->T;
    const int Tk = w->rel_len - Tq;
    float *S = tw, *dP = S + (size_t)BQ * BK, *D = dP + (size_t)BQ * BK + 2 * BQ;
    float *relacc = D + Tq;
    size_t qrow = (size_t)qs->row * Tq + qs->start;
    size_t krow = (size_t)ks->row * Tk + ks->start;
    const float *L = lse + ((size_t)qs->row * NH + h) * Tq + qs->start;
    const float *btab = w->bias_tab ? w->bias_tab + (size_t)h * w->rel_len : NULL;
    const size_t kvcol = (size_t)kv_head(cfg, h) * HD;
    int Lq = qs->len, Lk = ks->len;
    for (int a = 0; a < Lq; a++) {
        const float *o = out + (qrow + a) * ldo + (size_t)h * HD;
        const float *g = dout + (qrow + a) * ldo + (size_t)h * HD;
        D[a] = dyn_row_dot(o, g, HD);
    }
    if (btab) memset(relacc, 0, (size_t)(Tq + Tk) * sizeof(float));
    for (int c0 = 0; c0 < Lk; c0 += BK) {
        int nk = Lk - c0 < BK ? Lk - c0 : BK;
        const float *K = k + (krow + c0) * ldk + kvcol;
        const float *V = v + (krow + c0) * ldv + kvcol;
        float *dK = dk + (krow + c0) * ldk + kvcol;
        float *dV = dv + (krow + c0) * ldv + kvcol;
        /* Under the causal mask query tiles above the diagonal see nothing. */
        int a_first = cfg->causal ? (c0 / BQ) * BQ : 0;
        for (int a0 = a_first; a0 < Lq; a0 += BQ) {
            int nq = Lq - a0 < BQ ? Lq - a0 : BQ;
            const float *Q = q + (qrow + a0) * ldq + (size_t)h * HD;
            const float *dO = dout + (qrow + a0) * ldo + (size_t)h * HD;
            float *dQ = dq + (qrow + a0) * ldq + (size_t)h * HD;
            scores_tile(S, Q, ldq, K, ldk, nq, nk, HD, cfg->scale, btab, a0, c0, Tq);
            dyn_sgemm(0, 1, nq, nk, HD, 1.0f, dO, ldo, V, ldv, 0.0f, dP, BK);
            for (int i = 0; i < nq; i++) {
                float *s = S + (size_t)i * BK, *dp = dP + (size_t)i * BK;
                int nv = visible_cols(cfg->causal, a0 + i, c0, nk);
                float di = D[a0 + i];
                dyn_row_exp_sub(s, nv, L[a0 + i]);
                for (int c = 0; c < nv; c++) dp[c] = s[c] * (dp[c] - di);
                for (int c = nv; c < nk; c++) {
                    s[c] = 0.0f;
                    dp[c] = 0.0f;
                }
                if (btab) {
                    float *ra = relacc + (c0 - (a0 + i) + Tq - 1);
                    for (int c = 0; c < nv; c++) ra[c] += dp[c];
                }
            }
            /* S now holds P, dP holds dS. */
            dyn_sgemm(1, 0, nk, HD, nq, 1.0f, S, BK, dO, ldo, 1.0f, dV, ldv);
            dyn_sgemm(0, 0, nq, HD, nk, cfg->scale, dP, BK, K, ldk, 1.0f, dQ, ldq);
            dyn_sgemm(1, 0, nk, HD, nq, cfg->scale, dP, BK, Q, ldq, 1.0f, dK, ldk);
        }
    }
    if (btab) {
        for (int b = 0; b < cfg->num_buckets; b++) slot[b] = 0.0f;
        for (int r = -(Lq - 1); r <= Lk - 1; r++) {
            int b = dyn_t5_bucket(r, cfg->bidirectional, cfg->num_buckets, cfg->max_distance);
            slot[b] += relacc[r + Tq - 1];
        }
    }
}

/* Zero the NH*HD columns starting at x of every one of n rows (stride ld). */
static void zero_cols(float *x, int ld, size_t n, int width, int nt)
{
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && dyn_par(n * (size_t)width))
    for (size_t r = 0; r < n; r++) memset(x + r * ld, 0, (size_t)width * sizeof(float));
}

void dyn_attention_backward(float *dq, float *dk, float *dv, float *drel_bias,
                            const float *dout, const float *q, int ldq, const float *k, int ldk,
                            const float *v, int ldv, const float *out, const float *lse,
                            const float *rel_bias, const dyn_layout *ql, const dyn_layout *kl,
                            const dyn_attn_cfg *cfg, float *work)
{
    const int NH = cfg->NH, HD = cfg->HD, nt = cfg->nthreads > 0 ? cfg->nthreads : 1;
    attn_work w = work_carve(work, ql, kl, cfg, rel_bias != NULL);
    if (w.bias_tab) bias_tabulate(&w, rel_bias, ql->T, kl->T, cfg);
    const int KVH = kv_heads_of(cfg), group = NH / KVH;
    zero_cols(dq, ldq, (size_t)ql->B * ql->T, NH * HD, nt);
    zero_cols(dk, ldk, (size_t)kl->B * kl->T, KVH * HD, nt);
    zero_cols(dv, ldv, (size_t)kl->B * kl->T, KVH * HD, nt);
    int nseg = ql->n_seg < kl->n_seg ? ql->n_seg : kl->n_seg;
    /* An item owns one (segment, key/value head): the query heads of its
     * group run one after the other into the same dk/dv rows, so no two
     * threads write one row. Without GQA (group 1) an item is one
     * (segment, head) pair, as always. */
    long n_items = (long)nseg * KVH;
    int par = nt > 1 && n_items > 1 && dyn_par(attn_work_estimate(ql, kl, nseg, cfg));
#pragma omp parallel num_threads(nt) if (par)
    {
        float *tw = w.thread_base + (size_t)omp_get_thread_num() * w.per_thread;
#pragma omp for schedule(dynamic, 1)
        for (long it = 0; it < n_items; it++) {
            int s = (int)(it / KVH), g = (int)(it % KVH);
            for (int h = g * group; h < (g + 1) * group; h++) {
                size_t pair = (size_t)s * NH + (size_t)h;
                float *slot = w.drel_slots ? w.drel_slots + pair * cfg->num_buckets : NULL;
                backward_item(dq, dk, dv, dout, q, ldq, k, ldk, v, ldv, out, lse, &ql->segs[s],
                              &kl->segs[s], h, ql, cfg, &w, tw, slot);
            }
        }
    }
    if (w.drel_slots && drel_bias) {
        /* Fixed-order reduction over (segment, head) pairs, segment-major. */
        for (long it = 0; it < (long)nseg * NH; it++) {
            int h = (int)(it % NH);
            const float *slot = w.drel_slots + (size_t)it * cfg->num_buckets;
            for (int b = 0; b < cfg->num_buckets; b++)
                drel_bias[(size_t)h * cfg->num_buckets + b] += slot[b];
        }
    }
}

/* ---- split backward: B keeps the bias partial sums, W adds them ---------- */

static long rel_items(const dyn_layout *ql, const dyn_layout *kl, const dyn_attn_cfg *cfg)
{
    int nseg = ql->n_seg < kl->n_seg ? ql->n_seg : kl->n_seg;
    return (long)nseg * cfg->NH;
}

size_t dyn_attention_rel_items_floats(const dyn_layout *ql, const dyn_layout *kl,
                                      const dyn_attn_cfg *cfg)
{
    return cfg->num_buckets > 0 ? (size_t)rel_items(ql, kl, cfg) * (size_t)cfg->num_buckets : 0;
}

void dyn_attention_backward_input(float *dq, float *dk, float *dv, float *drel_items,
                                  const float *dout, const float *q, int ldq, const float *k,
                                  int ldk, const float *v, int ldv, const float *out,
                                  const float *lse, const float *rel_bias, const dyn_layout *ql,
                                  const dyn_layout *kl, const dyn_attn_cfg *cfg, float *work)
{
    /* The fused backward fills every item's slot in work whether or not it
     * is asked for the table gradient; keep them instead of reducing. */
    dyn_attention_backward(dq, dk, dv, NULL, dout, q, ldq, k, ldk, v, ldv, out, lse, rel_bias, ql,
                           kl, cfg, work);
    if (rel_bias && drel_items && cfg->num_buckets > 0) {
        attn_work w = work_carve(work, ql, kl, cfg, 1);
        memcpy(drel_items, w.drel_slots, dyn_attention_rel_items_floats(ql, kl, cfg) * sizeof(float));
    }
}

void dyn_attention_rel_bias_backward_weight(float *drel_bias, const float *drel_items,
                                            const dyn_layout *ql, const dyn_layout *kl,
                                            const dyn_attn_cfg *cfg)
{
    /* The fused backward's reduction: items in order, segment-major. */
    long n_items = rel_items(ql, kl, cfg);
    for (long it = 0; it < n_items; it++) {
        int h = (int)(it % cfg->NH);
        const float *slot = drel_items + (size_t)it * cfg->num_buckets;
        for (int b = 0; b < cfg->num_buckets; b++)
            drel_bias[(size_t)h * cfg->num_buckets + b] += slot[b];
    }
}
