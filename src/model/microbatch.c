/* microbatch.c — turn token samples into model inputs placed in a layout
 * (padded rows, packed rows with or without document masks): token ids,
 * next-token targets, loss weights and the sample each target belongs to,
 * with the vocabulary's pad and decoder-start ids (dyn_model_specials).
 * See dyn_model_microbatch in model.h for what each model kind sees. */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/util.h" /* defines: dyn_calloc */

void dyn_model_microbatch_free(dyn_model_microbatch *mb)
{
    if (mb == NULL) return;
    dyn_layout_free(mb->lay);
    dyn_layout_free(mb->dec_lay);
    free(mb->tokens);
    free(mb->dec_tokens);
    free(mb->targets);
    free(mb->weights);
    free(mb->sample_of);
    free(mb);
}

static dyn_status check_samples(const dyn_token_sample *s, int32_t n, dyn_error *err)
{
    if (n < 1) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "micro-batch needs at least one sample, got %d", n);
    for (int32_t i = 0; i < n; i++)
        if (s[i].input_len < 1 || s[i].target_len < 1 || s[i].input == NULL || s[i].target == NULL)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "sample %d: input and target need >= 1 token (got %d, %d)", i,
                                 s[i].input_len, s[i].target_len);
    return DYN_OK;
}

dyn_model_specials dyn_model_specials_bytes(void)
{
    return (dyn_model_specials){.pad = DYN_TOK_PAD, .bos = -1, .eos = DYN_TOK_EOS, .decoder_start = DYN_TOK_BOS};
}

/* Fill tokens/targets/weights once the layouts exist, with sp's pad and
 * decoder start. */
static dyn_status fill(dyn_model_microbatch *mb, const dyn_model_specials *sp, const dyn_token_sample *s,
                       dyn_error *err)
{
    const dyn_layout *lay = mb->lay;
    size_t N = (size_t)lay->B * (size_t)lay->T;
    const dyn_layout *out_lay = mb->kind == DYN_MODEL_T5 ? mb->dec_lay : lay;
    size_t No = (size_t)out_lay->B * (size_t)out_lay->T;
    mb->tokens = dyn_calloc(N, sizeof(int32_t), "micro-batch tokens", err);
    mb->targets = dyn_calloc(No, sizeof(int32_t), "micro-batch targets", err);
    mb->weights = dyn_calloc(No, sizeof(float), "micro-batch weights", err);
    mb->sample_of = dyn_calloc(No, sizeof(int32_t), "micro-batch sample map", err);
    if (mb->kind == DYN_MODEL_T5) mb->dec_tokens = dyn_calloc(No, sizeof(int32_t), "decoder tokens", err);
    if (!mb->tokens || !mb->targets || !mb->weights || !mb->sample_of || (mb->kind == DYN_MODEL_T5 && !mb->dec_tokens))
        return DYN_ERR_NOMEM;
    for (size_t i = 0; i < N; i++) mb->tokens[i] = sp->pad;
    for (size_t i = 0; i < No; i++) mb->sample_of[i] = -1;
    if (mb->dec_tokens)
        for (size_t i = 0; i < No; i++) mb->dec_tokens[i] = sp->pad;
    for (int32_t j = 0; j < mb->n_samples; j++) {
        const dyn_segment *g = &lay->samples[j];
        size_t base = (size_t)g->row * (size_t)lay->T + (size_t)g->start;
        int32_t in = s[j].input_len, tg = s[j].target_len;
        if (mb->kind != DYN_MODEL_T5) { /* decoder-only: GPT, Llama */
            int32_t len = in + tg;
            for (int32_t p = 0; p < len; p++) mb->tokens[base + p] = p < in ? s[j].input[p] : s[j].target[p - in];
            for (int32_t p = in - 1; p < len - 1; p++) { /* position p predicts token p+1 */
                mb->targets[base + p] = s[j].target[p + 1 - in];
                mb->weights[base + p] = 1.0f;
                mb->sample_of[base + p] = j;
            }
        } else {
            for (int32_t p = 0; p < in; p++) mb->tokens[base + p] = s[j].input[p];
            const dyn_segment *d = &mb->dec_lay->samples[j];
            size_t db = (size_t)d->row * (size_t)mb->dec_lay->T + (size_t)d->start;
            for (int32_t p = 0; p < tg; p++) {
                mb->dec_tokens[db + p] = p == 0 ? sp->decoder_start : s[j].target[p - 1];
                mb->targets[db + p] = s[j].target[p];
                mb->weights[db + p] = 1.0f;
                mb->sample_of[db + p] = j;
            }
        }
        mb->n_target_tokens += tg;
    }
    return DYN_OK;
}

/* A micro-batch shell for n samples, with each sample's length in the
 * (encoder or GPT) layout in *lens and in the decoder layout in *dlens, which
 * finish() frees. NULL when out of memory. */
static dyn_model_microbatch *begin(dyn_model_kind kind, const dyn_token_sample *s, int32_t n, int32_t **lens,
                             int32_t **dlens, dyn_error *err)
{
    dyn_model_microbatch *mb = dyn_calloc(1, sizeof *mb, "micro-batch", err);
    *lens = dyn_calloc((size_t)n, sizeof(int32_t), "micro-batch lengths", err);
    *dlens = dyn_calloc((size_t)n, sizeof(int32_t), "micro-batch lengths", err);
    if (mb == NULL || *lens == NULL || *dlens == NULL) {
        free(mb);
        free(*lens);
        free(*dlens);
        return NULL;
    }
    mb->kind = kind;
    mb->n_samples = n;
    for (int32_t i = 0; i < n; i++) {
        (*lens)[i] = kind != DYN_MODEL_T5 ? s[i].input_len + s[i].target_len : s[i].input_len;
        (*dlens)[i] = s[i].target_len;
    }
    return mb;
}

static dyn_model_microbatch *finish(dyn_model_microbatch *mb, const dyn_model_specials *sp, const dyn_token_sample *s,
                                    int32_t *lens, int32_t *dlens, dyn_error *err)
{
    free(lens);
    free(dlens);
    if (mb->lay == NULL || (mb->kind == DYN_MODEL_T5 && mb->dec_lay == NULL) || fill(mb, sp, s, err) != DYN_OK) {
        dyn_model_microbatch_free(mb);
        return NULL;
    }
    return mb;
}

static dyn_model_microbatch *create_padded(const dyn_model_specials *sp, dyn_model_kind kind,
                                           const dyn_token_sample *s, int32_t n, int32_t T, int32_t Td, dyn_error *err)
{
    if (check_samples(s, n, err) != DYN_OK) return NULL;
    int32_t *lens, *dlens;
    dyn_model_microbatch *mb = begin(kind, s, n, &lens, &dlens, err);
    if (mb == NULL) return NULL;
    int32_t longest = 0, dlongest = 0;
    for (int32_t i = 0; i < n; i++) {
        if (lens[i] > longest) longest = lens[i];
        if (dlens[i] > dlongest) dlongest = dlens[i];
    }
    if (T <= 0) T = longest;
    if (Td <= 0) Td = dlongest;
    if (T < longest || (kind == DYN_MODEL_T5 && Td < dlongest)) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "padded micro-batch: rows of %d (decoder %d) positions hold a %d-token "
                      "sample (decoder %d)", T, Td, longest, dlongest);
        free(lens);
        free(dlens);
        dyn_model_microbatch_free(mb);
        return NULL;
    }
    mb->lay = dyn_layout_create_padded(lens, n, T, err);
    if (mb->lay && kind == DYN_MODEL_T5) mb->dec_lay = dyn_layout_create_padded(dlens, n, Td, err);
    return finish(mb, sp, s, lens, dlens, err);
}

static dyn_model_microbatch *create_packed(const dyn_model_specials *sp, dyn_model_kind kind,
                                           const dyn_token_sample *s, int32_t n, const int32_t *row_counts, int32_t B,
                                           int32_t T, int32_t Td, int docmask, dyn_error *err)
{
    if (check_samples(s, n, err) != DYN_OK) return NULL;
    if (row_counts == NULL || B < 1) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "packed micro-batch needs row counts for B >= 1 rows (B = %d)", B);
        return NULL;
    }
    int64_t total = 0;
    for (int32_t b = 0; b < B; b++) {
        if (row_counts[b] < 0) {
            dyn_error_set(err, DYN_ERR_INVALID_ARG, "row %d has a negative sample count", b);
            return NULL;
        }
        total += row_counts[b];
    }
    if (total != n) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "row counts of %d rows place %lld samples, expected %d", B,
                      (long long)total, n);
        return NULL;
    }
    int32_t *lens, *dlens;
    dyn_model_microbatch *mb = begin(kind, s, n, &lens, &dlens, err);
    if (mb == NULL) return NULL;
    int32_t k = 0, autoT = 0, autoTd = 0;
    for (int32_t b = 0; b < B; b++) {
        int32_t used = 0, dused = 0;
        for (int32_t c = 0; c < row_counts[b]; c++, k++) {
            used += lens[k];
            dused += dlens[k];
        }
        if (used > autoT) autoT = used;
        if (dused > autoTd) autoTd = dused;
    }
    if (T <= 0) T = autoT;
    if (Td <= 0) Td = autoTd;
    mb->lay = dyn_layout_create_packed(lens, row_counts, B, T, docmask, err);
    if (mb->lay && kind == DYN_MODEL_T5) mb->dec_lay = dyn_layout_create_packed(dlens, row_counts, B, Td, docmask, err);
    return finish(mb, sp, s, lens, dlens, err);
}

dyn_model_microbatch *dyn_model_microbatch_create_ex(const dyn_model_specials *sp, dyn_model_kind kind,
                                                     const dyn_token_sample *s, int32_t n, const int32_t *row_counts,
                                                     int32_t B, int32_t T, int32_t Td, int docmask, dyn_error *err)
{
    dyn_model_specials bytes = dyn_model_specials_bytes();
    if (sp == NULL) sp = &bytes;
    if (row_counts == NULL) return create_padded(sp, kind, s, n, T, Td, err);
    return create_packed(sp, kind, s, n, row_counts, B, T, Td, docmask, err);
}

dyn_model_microbatch *dyn_model_microbatch_create_padded(dyn_model_kind kind, const dyn_token_sample *s, int32_t n,
                                                         dyn_error *err)
{
    return dyn_model_microbatch_create_ex(NULL, kind, s, n, NULL, 0, 0, 0, 0, err);
}

dyn_model_microbatch *dyn_model_microbatch_create_padded_to(dyn_model_kind kind, const dyn_token_sample *s,
                                                            int32_t n, int32_t T, int32_t Td, dyn_error *err)
{
    return dyn_model_microbatch_create_ex(NULL, kind, s, n, NULL, 0, T, Td, 0, err);
}

dyn_model_microbatch *dyn_model_microbatch_create_packed(dyn_model_kind kind, const dyn_token_sample *s, int32_t n,
                                                         const int32_t *row_counts, int32_t B, int32_t T, int32_t Td,
                                                         int docmask, dyn_error *err)
{
    dyn_model_specials bytes = dyn_model_specials_bytes();
    return create_packed(&bytes, kind, s, n, row_counts, B, T, Td, docmask, err); /* NULL row_counts: refused */
}
