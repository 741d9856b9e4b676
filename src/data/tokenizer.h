/*
 * tokenizer.h — text to token ids and back, behind one opaque handle, for the
 * three kinds of vocabulary dynapipe reads:
 *
 *   bytes          today's vocabulary (corpus.h): UTF-8 bytes 0..255, pad 256,
 *                  decoder start 257, eos 258, sep 259; 260 ids in all.
 *   byte-level BPE a Hugging Face tokenizer.json whose model is BPE over the
 *                  GPT-2 byte-to-unicode alphabet (GPT-2, Llama 3, Qwen2):
 *                  added tokens, the pre-tokenizer's split regex (PCRE2 with
 *                  Unicode properties), merges, the post-processor's BOS/EOS
 *                  (tok_bpe.c).
 *   SentencePiece  tokenizer.model / spiece.model (T5, Llama 2, Mistral)
 *                  through libsentencepiece (tok_spm.cc).
 *
 * Anything else (WordPiece, Unigram or WordLevel models in tokenizer.json,
 * normalizers other than NFC, pre-tokenizers the reader does not implement)
 * is refused at load with one line naming the file and what is not
 * supported (DYN_ERR_INVALID_ARG; a malformed file is DYN_ERR_PARSE).
 *
 * Invalid UTF-8 (BPE): the text is cut into maximal valid UTF-8 runs and
 * maximal invalid runs; each valid run is pre-tokenized on its own (as if it
 * were the whole text) and each invalid run is one piece, merged by BPE like
 * any other. Decoding returns the input bytes exactly. (Hugging Face's own
 * libraries take only valid Unicode strings, so they have no rule here.)
 *
 * Special ids come from the tokenizer files: tokenizer.json's added tokens
 * and post-processor, tokenizer_config.json, special_tokens_map.json and the
 * model folder's config.json (pad_token_id, bos_token_id, eos_token_id,
 * decoder_start_token_id; a list of eos ids gives its first). An id the files
 * do not give is -1, except that a missing decoder start falls back to pad
 * (T5's convention).
 *
 * Threads: one handle from one thread at a time (encode keeps scratch space
 * and a cache of encoded pieces in the handle). Units: lengths are bytes for
 * text and counts for ids.
 */
#ifndef DYN_DATA_TOKENIZER_H
#define DYN_DATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "dynapipe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dyn_tokenizer dyn_tokenizer;

typedef enum dyn_tokenizer_kind {
    DYN_TOKENIZER_BYTES = 0,
    DYN_TOKENIZER_BPE = 1, /* Hugging Face tokenizer.json, byte-level BPE */
    DYN_TOKENIZER_SPM = 2  /* SentencePiece model */
} dyn_tokenizer_kind;

/* Special ids of a tokenizer; -1 where it has none. */
typedef struct dyn_tokenizer_specials {
    int32_t pad;
    int32_t bos;
    int32_t eos;
    int32_t decoder_start; /* T5's decoder start (pad when not given) */
} dyn_tokenizer_specials;

/* A growable id buffer the encoder appends to; zero it before first use and
 * release it with dyn_token_buf_free. */
typedef struct dyn_token_buf {
    int32_t *ids;
    size_t n, cap;
} dyn_token_buf;
void dyn_token_buf_free(dyn_token_buf *b);

/* A growable byte buffer the decoder appends to (NUL-terminated after each
 * call, the NUL not counted in n); zero it first, free with dyn_byte_buf_free. */
typedef struct dyn_byte_buf {
    char *data;
    size_t n, cap;
} dyn_byte_buf;
void dyn_byte_buf_free(dyn_byte_buf *b);

/* The byte tokenizer (vocabulary 260). NULL only when out of memory. */
dyn_tokenizer *dyn_tokenizer_bytes(dyn_error *err);

/* Load a tokenizer from a file or a model folder:
 *   FILE   tokenizer.json (any name ending in .json) or a SentencePiece
 *          model (any other name); the special-token files are read from
 *          the file's folder;
 *   DIR    DIR/tokenizer.json when it holds a supported model, else
 *          DIR/tokenizer.model or DIR/spiece.model; with none of them, the
 *          error of tokenizer.json or a line saying the folder has none.
 * The word "bytes" gives the byte tokenizer. NULL with err set on failure. */
dyn_tokenizer *dyn_tokenizer_load(const char *path, dyn_error *err);

void dyn_tokenizer_free(dyn_tokenizer *t);

dyn_tokenizer_kind dyn_tokenizer_kind_of(const dyn_tokenizer *t);
/* Number of ids (the largest id + 1). */
int32_t dyn_tokenizer_vocab_size(const dyn_tokenizer *t);
dyn_tokenizer_specials dyn_tokenizer_specials_of(const dyn_tokenizer *t);
/* Where the tokenizer came from ("bytes" or the file's path). */
const char *dyn_tokenizer_source(const dyn_tokenizer *t);

/* Encode text[0..len) (bytes; need not be NUL-terminated) and append its ids
 * to out. add_special adds what the tokenizer adds around one sequence (the
 * post-processor's BOS/EOS; SentencePiece: add_bos_token / add_eos_token of
 * tokenizer_config.json, else BOS when the model has one, else EOS; bytes:
 * nothing). On failure out keeps its old contents (n unchanged). */
dyn_status dyn_tokenizer_encode(dyn_tokenizer *t, const char *text, size_t len, int add_special,
                                dyn_token_buf *out, dyn_error *err);

/* Decode ids[0..n) and append the bytes to out. skip_special leaves out the
 * special tokens (added tokens marked special; SentencePiece control ids;
 * the byte vocabulary's 256..259). An id outside [0, vocab) is
 * DYN_ERR_INVALID_ARG naming the id, its position and the tokenizer's file. */
dyn_status dyn_tokenizer_decode(dyn_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                                dyn_byte_buf *out, dyn_error *err);

/* Internal: the loaders of each kind (tok_bpe.c, tok_spm.cc); use
 * dyn_tokenizer_load, which also keeps their messages to one printable line. */
dyn_tokenizer *dyn_tokenizer_load_bpe_json(const char *path, dyn_error *err);
dyn_tokenizer *dyn_tokenizer_load_spm(const char *path, dyn_error *err);

#ifdef __cplusplus
}
#endif
#endif /* DYN_DATA_TOKENIZER_H */
