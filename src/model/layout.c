/* layout.c — constructors and helpers for variable-length micro-batch
 * layouts (padded, packed with document masks, packed without). See
 * layout.h for the segment model and its invariants. */
#include <stdlib.h>
#include <string.h>

#include "model/layout.h" /* defines: dyn_layout, dyn_segment */
#include "util/util.h"    /* defines: dyn_calloc */

/* Allocate a layout with room for n_seg segments and n_samples samples. */
static dyn_layout *layout_alloc(int32_t B, int32_t T, int32_t n_seg, int32_t n_samples,
                                dyn_error *err)
{
    dyn_layout *lay = dyn_calloc(1, sizeof(*lay), "layout", err);
    if (!lay) return NULL;
    lay->B = B;
    lay->T = T;
    lay->segs = dyn_calloc((size_t)(n_seg > 0 ? n_seg : 1), sizeof(dyn_segment), "layout segments", err);
    lay->samples = dyn_calloc((size_t)(n_samples > 0 ? n_samples : 1), sizeof(dyn_segment),
                              "layout samples", err);
    lay->row_begin = dyn_calloc((size_t)B + 1, sizeof(int32_t), "layout rows", err);
    if (!lay->segs || !lay->samples || !lay->row_begin) {
        dyn_layout_free(lay);
        return NULL;
    }
    return lay;
}

void dyn_layout_free(dyn_layout *lay)
{
    if (!lay) return;
    free(lay->segs);
    free(lay->samples);
    free(lay->row_begin);
    free(lay);
}

dyn_layout *dyn_layout_create_padded(const int32_t *lens, int32_t B, int32_t T, dyn_error *err)
{
    if (B < 1 || T < 1 || !lens) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "layout: need B >= 1 and T >= 1 (got B=%d T=%d)", B, T);
        return NULL;
    }
    int32_t n = 0;
    for (int32_t b = 0; b < B; b++) {
        if (lens[b] < 0 || lens[b] > T) {
            dyn_error_set(err, DYN_ERR_INVALID_ARG, "layout: row %d length %d not in [0, %d]", b, lens[b], T);
            return NULL;
        }
        if (lens[b] > 0) n++;
    }
    dyn_layout *lay = layout_alloc(B, T, n, n, err);
    if (!lay) return NULL;
    lay->kind = DYN_LAYOUT_PADDED;
    int32_t s = 0;
    for (int32_t b = 0; b < B; b++) {
        lay->row_begin[b] = s;
        if (lens[b] > 0) {
            dyn_segment seg = {b, 0, lens[b], 0};
            lay->segs[s] = seg;
            lay->samples[s] = seg;
            lay->n_tokens += lens[b];
            s++;
        }
    }
    lay->row_begin[B] = s;
    lay->n_seg = s;
    lay->n_samples = s;
    return lay;
}

dyn_layout *dyn_layout_create_packed(const int32_t *sample_lens, const int32_t *row_counts,
                                     int32_t B, int32_t T, int docmask, dyn_error *err)
{
    if (B < 1 || T < 1 || !row_counts) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "layout: need B >= 1 and T >= 1 (got B=%d T=%d)", B, T);
        return NULL;
    }
    int64_t n_samples = 0;
    int32_t rows_used = 0;
    for (int32_t b = 0; b < B; b++) {
        if (row_counts[b] < 0) {
            dyn_error_set(err, DYN_ERR_INVALID_ARG, "layout: row %d has negative sample count %d", b, row_counts[b]);
            return NULL;
        }
        int64_t used = 0;
        for (int32_t j = 0; j < row_counts[b]; j++) {
            int32_t len = sample_lens[n_samples + j];
            if (len < 1) {
                dyn_error_set(err, DYN_ERR_INVALID_ARG, "layout: sample %lld in row %d has length %d (< 1)",
                              (long long)(n_samples + j), b, len);
                return NULL;
            }
            used += len;
        }
        if (used > T) {
            dyn_error_set(err, DYN_ERR_INVALID_ARG, "layout: row %d packs %lld tokens, more than T=%d",
                          b, (long long)used, T);
            return NULL;
        }
        if (row_counts[b] > 0) rows_used++;
        n_samples += row_counts[b];
    }
    int32_t n_seg = docmask ? (int32_t)n_samples : rows_used;
    dyn_layout *lay = layout_alloc(B, T, n_seg, (int32_t)n_samples, err);
    if (!lay) return NULL;
    lay->kind = docmask ? DYN_LAYOUT_PACKED_DOCMASK : DYN_LAYOUT_PACKED_NOMASK;
    int32_t s = 0, k = 0;
    for (int32_t b = 0; b < B; b++) {
        lay->row_begin[b] = s;
        int32_t start = 0;
        for (int32_t j = 0; j < row_counts[b]; j++, k++) {
            int32_t len = sample_lens[k];
            /* Without document masks the position ids continue across the
             * samples of a row, so a sample's first position id is its start. */
            dyn_segment smp = {b, start, len, docmask ? 0 : start};
            lay->samples[k] = smp;
            if (docmask) lay->segs[s++] = (dyn_segment){b, start, len, 0};
            start += len;
        }
        if (!docmask && start > 0) lay->segs[s++] = (dyn_segment){b, 0, start, 0};
        lay->n_tokens += start;
    }
    lay->row_begin[B] = s;
    lay->n_seg = s;
    lay->n_samples = (int32_t)n_samples;
    return lay;
}

void dyn_layout_positions(const dyn_layout *lay, int32_t *pos)
{
    memset(pos, 0, (size_t)lay->B * (size_t)lay->T * sizeof(int32_t));
    for (int32_t s = 0; s < lay->n_seg; s++) {
        const dyn_segment *g = &lay->segs[s];
        int32_t *p = pos + (size_t)g->row * lay->T + g->start;
        for (int32_t t = 0; t < g->len; t++) p[t] = g->pos0 + t;
    }
}

void dyn_layout_valid_mask(const dyn_layout *lay, float *mask)
{
    size_t n = (size_t)lay->B * (size_t)lay->T;
    for (size_t i = 0; i < n; i++) mask[i] = 0.0f;
    for (int32_t s = 0; s < lay->n_seg; s++) {
        const dyn_segment *g = &lay->segs[s];
        float *m = mask + (size_t)g->row * lay->T + g->start;
        for (int32_t t = 0; t < g->len; t++) m[t] = 1.0f;
    }
}

void dyn_layout_segment_ids(const dyn_layout *lay, int32_t *seg_ids)
{
    size_t n = (size_t)lay->B * (size_t)lay->T;
    for (size_t i = 0; i < n; i++) seg_ids[i] = -1;
    for (int32_t s = 0; s < lay->n_seg; s++) {
        const dyn_segment *g = &lay->segs[s];
        int32_t *m = seg_ids + (size_t)g->row * lay->T + g->start;
        for (int32_t t = 0; t < g->len; t++) m[t] = s;
    }
}

int64_t dyn_layout_attn_pairs(const dyn_layout *lay)
{
    int64_t n = 0;
    for (int32_t s = 0; s < lay->n_seg; s++) n += (int64_t)lay->segs[s].len * lay->segs[s].len;
    return n;
}

int64_t dyn_layout_cross_pairs(const dyn_layout *q, const dyn_layout *k)
{
    if (q->n_seg != k->n_seg) return -1;
    int64_t n = 0;
    for (int32_t s = 0; s < q->n_seg; s++) n += (int64_t)q->segs[s].len * k->segs[s].len;
    return n;
}
