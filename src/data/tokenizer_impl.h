/*
 * tokenizer_impl.h — what the tokenizer kinds share inside src/data: the
 * handle's layout (one table of operations per kind), buffer helpers and
 * the reader of the special-token files beside a tokenizer. Not installed;
 * users see tokenizer.h only.
 */
#ifndef DYN_DATA_TOKENIZER_IMPL_H
#define DYN_DATA_TOKENIZER_IMPL_H

#include "data/tokenizer.h" /* defines: dyn_tokenizer, dyn_token_buf, dyn_byte_buf */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dyn_tokenizer_ops {
    /* Append the ids of text[0..len) to out (the caller restores out->n on
     * failure). add_special: see dyn_tokenizer_encode. */
    dyn_status (*encode)(dyn_tokenizer *t, const char *text, size_t len, int add_special,
                         dyn_token_buf *out, dyn_error *err);
    /* Append the bytes of one id, already checked to be in [0, vocab). */
    dyn_status (*decode)(dyn_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                         dyn_byte_buf *out, dyn_error *err);
    void (*free_impl)(void *impl);
} dyn_tokenizer_ops;

struct dyn_tokenizer {
    dyn_tokenizer_kind kind;
    int32_t vocab;               /* ids are [0, vocab) */
    dyn_tokenizer_specials sp;
    int add_bos, add_eos;        /* SentencePiece: what add_special adds */
    char *source;                /* "bytes" or the file's path (owned) */
    const dyn_tokenizer_ops *ops;
    void *impl;                  /* the kind's own state (owned) */
};

/* A handle of the given kind over impl, with source copied; on failure
 * impl is released with ops->free_impl and NULL returned. */
dyn_tokenizer *dyn_tokenizer_new(dyn_tokenizer_kind kind, const char *source,
                                 const dyn_tokenizer_ops *ops, void *impl, dyn_error *err);

/* Make room for extra more ids / bytes (+1 for the NUL); DYN_ERR_NOMEM. */
dyn_status dyn_token_buf_reserve(dyn_token_buf *b, size_t extra, dyn_error *err);
dyn_status dyn_byte_buf_reserve(dyn_byte_buf *b, size_t extra, dyn_error *err);
dyn_status dyn_byte_buf_append(dyn_byte_buf *b, const void *data, size_t len, dyn_error *err);

/* Maps a token's text to its id, or -1. */
typedef int32_t (*dyn_tok_lookup_fn)(void *ctx, const char *token);

/* Read the special ids from the files in dir (tokenizer_config.json,
 * special_tokens_map.json, config.json; each optional), in that order of
 * precedence, over what sp already holds (the tokenizer's own). Token
 * strings go through lookup; a token the vocabulary lacks, an id outside
 * [0, vocab) or a malformed file is an error naming the file. Also reads
 * add_bos_token / add_eos_token of tokenizer_config.json into *add_bos /
 * *add_eos when present (left alone otherwise). */
dyn_status dyn_tok_read_specials(const char *dir, int32_t vocab, dyn_tok_lookup_fn lookup, void *ctx,
                                 dyn_tokenizer_specials *sp, int *add_bos, int *add_eos, dyn_error *err);

/* Append the Unicode NFC normalization of the valid UTF-8 text s[0..n) to
 * out (tok_nfc.c); DYN_ERR_NOMEM. */
dyn_status dyn_tok_nfc(const char *s, size_t n, dyn_byte_buf *out, dyn_error *err);

/* The folder part of path ("." for a bare name); malloc'ed, NULL on NOMEM. */
char *dyn_tok_dirname(const char *path);

#ifdef __cplusplus
}
#endif
#endif
