/* baselines.c — the micro-batching methods dynapipe is compared with. Each
 * fills the same dyn_batch_plan as the DP, through plan_assemble, so the
 * costs, memory check and replica balancing are the same for all.
 *
 *   padding          samples in dataset order, mb_samples per micro-batch,
 *                    each padded to its longest sample (rounded up to
 *                    round_to). Default (mb_samples = 0): as many as fit the
 *                    memory limit when every sample is max_seqlen long.
 *   packing          samples packed first-fit-decreasing into rows of
 *                    max_seqlen tokens (T5: an encoder row and a decoder row
 *                    of max_seqlen each; a sample goes to the first row with
 *                    room on both sides), pack_rows rows per micro-batch.
 *                    Attention runs over whole rows. Default pack_rows: as
 *                    many rows as fit the memory limit.
 *   packing-docmask  the same rows, but attention only within each sample:
 *                    the shape's *_attn fields count sum(len^2) (cross:
 *                    sum(input * target)) over the packed samples.
 *   token            samples in the dynapipe order (length sorted), each
 *                    micro-batch filled while rows * padded length (T5: rows
 *                    * (input + target)) stays within mb_tokens. Default:
 *                    the token count of the padding default's micro-batch
 *                    of max_seqlen rows.
 */
#include "plan/plan_internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/util.h" /* defines: dyn_calloc */

dyn_status plan_max_rows(const dyn_planner *p, int32_t cap, int32_t *rows, dyn_error *err)
{
    dyn_mb_shape sh = {0};
    sh.enc_len = plan_round_up(p->opt.max_seqlen, p->opt.round_to);
    sh.dec_len = p->kind == DYN_MODEL_T5 ? sh.enc_len : 0;
    /* fits(k) is monotone in k: grow geometrically, then bisect. */
    int32_t good = 0, bad = -1, k = 1;
    while (k <= cap) {
        sh.rows = k;
        dyn_mb_cost c;
        int fits;
        dyn_status st = plan_mb_cost(p, &sh, &c, &fits, err);
        if (st != DYN_OK) return st;
        if (!fits) {
            bad = k;
            break;
        }
        good = k;
        if (k == cap) break;
        k = k > cap / 2 ? cap : k * 2;
    }
    if (bad < 0) bad = good + 1; /* good == cap */
    while (bad - good > 1) {
        sh.rows = good + (bad - good) / 2;
        dyn_mb_cost c;
        int fits;
        dyn_status st = plan_mb_cost(p, &sh, &c, &fits, err);
        if (st != DYN_OK) return st;
        if (fits) good = sh.rows;
        else bad = sh.rows;
    }
    *rows = good;
    return DYN_OK;
}

dyn_status dyn_planner_fit_rows(const dyn_planner *p, int32_t *rows, dyn_error *err)
{
    return plan_max_rows(p, 1 << 24, rows, err);
}

/* Auto knob: rows of max_seqlen that fit; infeasible if not even one. */
static dyn_status auto_rows(const dyn_planner *p, int32_t cap, int32_t *rows, dyn_error *err)
{
    dyn_status st = plan_max_rows(p, cap, rows, err);
    if (st != DYN_OK) return st;
    if (*rows < 1)
        return dyn_error_set(err, DYN_ERR_INFEASIBLE,
                             "%s: not even one row of %d tokens fits the memory limit (%.1f MB "
                             "per micro-batch per stage); set the method's size flag",
                             dyn_batching_name(p->opt.method), p->opt.max_seqlen, p->stored_limit_mb);
    return DYN_OK;
}

static dyn_status plan_padding(dyn_planner *p, const dyn_sample *s, int32_t n, int32_t *perm,
                               int32_t *groups, dyn_batch_plan *out, dyn_error *err)
{
    int32_t c = p->opt.mb_samples;
    dyn_status st;
    if (c == 0 && (st = auto_rows(p, n, &c, err)) != DYN_OK) return st;
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) perm[i] = i;
    for (int32_t i = 0; i < n; i += c) groups[m++] = n - i < c ? n - i : c;
    return plan_assemble(p, s, n, perm, groups, m, NULL, NULL, NULL, NULL, out, err);
}

static dyn_status plan_token(dyn_planner *p, const dyn_sample *s, int32_t n, int32_t *perm,
                             int32_t *groups, dyn_batch_plan *out, dyn_error *err)
{
    int64_t budget = p->opt.mb_tokens;
    dyn_status st;
    const int32_t r = p->opt.round_to;
    if (budget == 0) {
        int32_t c;
        if ((st = auto_rows(p, n, &c, err)) != DYN_OK) return st;
        budget = (int64_t)c * plan_round_up(p->opt.max_seqlen, r) * (p->kind == DYN_MODEL_T5 ? 2 : 1);
    }
    st = dyn_model_kind_decoder_only(p->kind) ? plan_order_gpt(s, n, perm, err) : plan_order_t5_lex(s, n, perm, err);
    if (st != DYN_OK) return st;
    int32_t m = 0, cnt = 0, max_a = 0, max_b = 0;
    for (int32_t i = 0; i < n; i++) {
        const dyn_sample *x = &s[perm[i]];
        int32_t a = plan_round_up(dyn_model_kind_decoder_only(p->kind) ? x->input_len + x->target_len : x->input_len,
                                  r);
        int32_t b = p->kind == DYN_MODEL_T5 ? plan_round_up(x->target_len, r) : 0;
        int32_t na = a > max_a ? a : max_a, nb = b > max_b ? b : max_b;
        if (cnt > 0 && (int64_t)(cnt + 1) * (na + nb) > budget) {
            groups[m++] = cnt;
            cnt = 0;
            na = a;
            nb = b;
        }
        cnt++;
        max_a = na;
        max_b = nb;
    }
    if (cnt > 0) groups[m++] = cnt;
    return plan_assemble(p, s, n, perm, groups, m, NULL, NULL, NULL, NULL, out, err);
}

/* Packing: first-fit-decreasing into rows, then pack_rows rows per
 * micro-batch. Arrays are per sample in packed order: perm, row within the
 * micro-batch, token offsets. */
typedef struct pack_row {
    int32_t used_a, used_b; /* tokens used: GPT sequence / T5 encoder; T5 decoder */
    int32_t head, tail;     /* samples in the row, linked through next[] */
} pack_row;

static int cmp_desc_size(const void *a, const void *b)
{
    const int64_t *x = a, *y = b; /* (size << 32 | index): larger size first, then index */
    int64_t sx = x[0] >> 32, sy = y[0] >> 32;
    if (sx != sy) return (sx < sy) - (sx > sy);
    return (x[0] > y[0]) - (x[0] < y[0]);
}

static dyn_status plan_packing(dyn_planner *p, const dyn_sample *s, int32_t n, int32_t *perm,
                               int32_t *groups, dyn_batch_plan *out, dyn_error *err)
{
    const int gpt = dyn_model_kind_decoder_only(p->kind);
    const int32_t L = plan_round_up(p->opt.max_seqlen, p->opt.round_to);
    int64_t *key = dyn_calloc((size_t)n, sizeof(int64_t), "packing keys", err);
    pack_row *rowv = dyn_calloc((size_t)n, sizeof(pack_row), "packing rows", err);
    int32_t *next = dyn_calloc((size_t)n, sizeof(int32_t), "packing links", err);
    int32_t *row_of = dyn_calloc((size_t)n, sizeof(int32_t), "packing rows", err);
    int32_t *enc_off = dyn_calloc((size_t)n, sizeof(int32_t), "packing offsets", err);
    int32_t *dec_off = dyn_calloc((size_t)n, sizeof(int32_t), "packing offsets", err);
    int32_t *offa = dyn_calloc((size_t)n, sizeof(int32_t), "packing offsets", err);
    int32_t *offb = dyn_calloc((size_t)n, sizeof(int32_t), "packing offsets", err);
    dyn_mb_shape *shapes = dyn_calloc((size_t)n, sizeof(dyn_mb_shape), "packing shapes", err);
    dyn_status st = DYN_OK;
    if (!key || !rowv || !next || !row_of || !enc_off || !dec_off || !offa || !offb || !shapes) {
        st = DYN_ERR_NOMEM;
        goto done;
    }
    for (int32_t i = 0; i < n; i++)
        key[i] = ((int64_t)s[i].input_len + s[i].target_len) << 32 | i;
    qsort(key, (size_t)n, sizeof(int64_t), cmp_desc_size);
    int32_t n_rows = 0;
    for (int32_t q = 0; q < n; q++) {
        int32_t i = (int32_t)(key[q] & 0xffffffff);
        int32_t a = gpt ? s[i].input_len + s[i].target_len : s[i].input_len;
        int32_t b = gpt ? 0 : s[i].target_len;
        int32_t r = 0;
        while (r < n_rows && (rowv[r].used_a + a > L || rowv[r].used_b + b > L)) r++;
        if (r == n_rows) rowv[n_rows++] = (pack_row){0, 0, -1, -1};
        offa[i] = rowv[r].used_a;
        offb[i] = rowv[r].used_b;
        rowv[r].used_a += a;
        rowv[r].used_b += b;
        next[i] = -1;
        if (rowv[r].head < 0) rowv[r].head = i;
        else next[rowv[r].tail] = i;
        rowv[r].tail = i;
    }
    int32_t per = p->opt.pack_rows;
    if (per == 0 && (st = auto_rows(p, n_rows, &per, err)) != DYN_OK) goto done;
    int32_t m = 0, pos = 0;
    for (int32_t r0 = 0; r0 < n_rows; r0 += per) {
        int32_t r1 = r0 + per < n_rows ? r0 + per : n_rows;
        dyn_mb_shape sh = {.rows = r1 - r0, .enc_len = L, .dec_len = gpt ? 0 : L};
        int32_t cnt = 0;
        for (int32_t r = r0; r < r1; r++)
            for (int32_t i = rowv[r].head; i >= 0; i = next[i]) {
                perm[pos] = i;
                row_of[pos] = r - r0;
                enc_off[pos] = offa[i];
                dec_off[pos] = offb[i];
                if (p->opt.method == DYN_BATCH_PACKING_DOCMASK) {
                    int64_t a = gpt ? s[i].input_len + s[i].target_len : s[i].input_len;
                    sh.enc_attn += a * a;
                    if (!gpt) {
                        sh.dec_attn += (int64_t)s[i].target_len * s[i].target_len;
                        sh.cross_attn += (int64_t)s[i].target_len * s[i].input_len;
                    }
                }
                pos++;
                cnt++;
            }
        shapes[m] = sh;
        groups[m++] = cnt;
    }
    st = plan_assemble(p, s, n, perm, groups, m, shapes, row_of, enc_off, dec_off, out, err);
done:
    free(key);
    free(rowv);
    free(next);
    free(row_of);
    free(enc_off);
    free(dec_off);
    free(offa);
    free(offb);
    free(shapes);
    return st;
}

dyn_status plan_baseline(dyn_planner *p, const dyn_sample *s, int32_t n, dyn_batch_plan *out,
                             dyn_error *err)
{
    int32_t *perm = dyn_calloc((size_t)n, sizeof(int32_t), "baseline order", err);
    int32_t *groups = dyn_calloc((size_t)n, sizeof(int32_t), "baseline groups", err);
    dyn_status st;
    if (perm == NULL || groups == NULL) {
        st = DYN_ERR_NOMEM;
    } else {
        switch (p->opt.method) {
        case DYN_BATCH_PADDING: st = plan_padding(p, s, n, perm, groups, out, err); break;
        case DYN_BATCH_TOKEN: st = plan_token(p, s, n, perm, groups, out, err); break;
        case DYN_BATCH_PACKING:
        case DYN_BATCH_PACKING_DOCMASK: st = plan_packing(p, s, n, perm, groups, out, err); break;
        default:
            st = dyn_error_set(err, DYN_ERR_INVALID_ARG, "not a baseline method: %d", p->opt.method);
        }
    }
    free(perm);
    free(groups);
    return st;
}
