/* layout.h — variable-length micro-batch layouts: which positions of a padded
 * (B rows × T positions) buffer hold real tokens, and which tokens attend to
 * each other.
 *
 * A layout lists segments (row, start, len, pos0). A segment is a run of
 * tokens that attend to each other; positions of a row not covered by any
 * segment are pad: attention skips them (their outputs and gradients are 0)
 * and callers give them loss weight 0. The three uses:
 *   padded         one segment [0, len_b) per row with len_b > 0, pos0 = 0;
 *   packed docmask several segments per row, one per sample, back to back
 *                  from position 0; attention only within a segment, position
 *                  ids restart at 0 in each segment (pos0 = 0);
 *   packed nomask  one segment per row covering all used tokens [0, used_b)
 *                  (classic packing: attention across the whole row), pos0 = 0
 *                  so position ids continue across the samples of the row.
 * In every layout `samples` lists the real samples (row, start, len) in order,
 * so per-sample quantities (losses) can be read back even when several
 * samples share one segment (nomask). For padded and docmask layouts samples
 * equal segments.
 *
 * Cross-attention (T5 decoder → encoder) pairs query segment i with key
 * segment i, so encoder and decoder layouts must list segments in the same
 * sample order (build both with the same constructor and sample order).
 *
 * Invariants (checked by the constructors): segments sorted by (row, start),
 * non-overlapping, 0 <= start, len >= 1, start + len <= T, rows with no
 * segment allowed (all pad); row_begin[b]..row_begin[b+1]-1 are row b's
 * segments.
 *
 * Flat position index of (row b, position t) is b*T + t everywhere. */
#ifndef DYN_MODEL_LAYOUT_H
#define DYN_MODEL_LAYOUT_H

#include <stdint.h>

#include "dynapipe/common.h"

typedef struct dyn_segment {
    int32_t row;   /* 0 <= row < B */
    int32_t start; /* first position in the row, tokens */
    int32_t len;   /* tokens, >= 1 */
    int32_t pos0;  /* position id of the first token (0 in all constructors) */
} dyn_segment;

typedef enum dyn_layout_kind {
    DYN_LAYOUT_PADDED = 0,
    DYN_LAYOUT_PACKED_DOCMASK = 1,
    DYN_LAYOUT_PACKED_NOMASK = 2
} dyn_layout_kind;

typedef struct dyn_layout {
    dyn_layout_kind kind;
    int32_t B, T;         /* rows, padded positions per row */
    int32_t n_seg;        /* number of attention segments */
    dyn_segment *segs;    /* (n_seg), sorted by (row, start) */
    int32_t *row_begin;   /* (B+1): row b owns segs[row_begin[b] .. row_begin[b+1]) */
    int32_t n_samples;    /* number of real samples */
    dyn_segment *samples; /* (n_samples), sorted by (row, start); pos0 = position id of its first token */
    int64_t n_tokens;     /* real (non-pad) tokens = sum of segment lengths */
} dyn_layout;

/* Padded rows: row b holds one sample of lens[b] tokens at [0, lens[b]).
 * lens: (B), each in [0, T]; a 0 makes the row all pad (no segment).
 * Returns NULL (err set) on bad sizes or allocation failure. */
dyn_layout *dyn_layout_create_padded(const int32_t *lens, int32_t B, int32_t T, dyn_error *err);

/* Packed rows: row b holds row_counts[b] samples whose lengths are the next
 * row_counts[b] entries of sample_lens (rows in order), back to back from
 * position 0; the row's total must be <= T. docmask != 0 gives one segment
 * per sample (DYN_LAYOUT_PACKED_DOCMASK), docmask == 0 one segment per
 * non-empty row (DYN_LAYOUT_PACKED_NOMASK).
 * sample_lens: (sum of row_counts), each >= 1. row_counts: (B), each >= 0. */
dyn_layout *dyn_layout_create_packed(const int32_t *sample_lens, const int32_t *row_counts,
                                     int32_t B, int32_t T, int docmask, dyn_error *err);

/* Free a layout (NULL is fine). */
void dyn_layout_free(dyn_layout *lay);

/* Position ids (B*T): pos0 + offset inside the segment for real tokens,
 * 0 for pad. GPT feeds these to the learned position embedding. */
void dyn_layout_positions(const dyn_layout *lay, int32_t *pos);

/* Valid mask (B*T): 1.0f at real tokens, 0.0f at pad. */
void dyn_layout_valid_mask(const dyn_layout *lay, float *mask);

/* Segment index (B*T) of each position, -1 at pad. */
void dyn_layout_segment_ids(const dyn_layout *lay, int32_t *seg_ids);

/* Sum over segments of len*len: attended (query, key) pairs ignoring
 * causality (the dyn_mb_shape *_attn convention). For cross attention
 * between q and k layouts use dyn_layout_cross_pairs. */
int64_t dyn_layout_attn_pairs(const dyn_layout *lay);
/* Sum over i of q->segs[i].len * k->segs[i].len; -1 if n_seg differ. */
int64_t dyn_layout_cross_pairs(const dyn_layout *q, const dyn_layout *k);

#endif
