/* corpus_impl.h — inside the dyn_corpus handle (include/dynapipe/corpus.h):
 * the handle's fields and the entry points of its three sources, the
 * built-in tasks (tasks.c), JSONL (jsonl.c) and Megatron indexed datasets
 * (indexed.c). corpus.c dispatches between them. */
#ifndef DYN_DATA_CORPUS_IMPL_H
#define DYN_DATA_CORPUS_IMPL_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "dynapipe/corpus.h"

/* A chat record's tokens (codec.c; the rule in codec.c's header): messages
 * is the record's "messages" array. One line on error (no chat template, a
 * template error, the last message not the assistant's, a rendering that
 * does not start with its prompt's). */
dyn_status dyn_codec_encode_chat(dyn_codec *k, const cJSON *messages, dyn_codec_tokens *out, dyn_error *err);

/* ---- built-in tasks (tasks.c) ---------------------------------------------
 * One sample as text: input bytes (the SEP token is added by the caller) and
 * target bytes (EOS added by the caller). The caller's buffers hold at least
 * max_seqlen bytes each. */
typedef struct builtin_text {
    int32_t task;
    char *in;        /* [in_len] */
    int32_t in_len;  /* bytes */
    char *tgt;       /* [tgt_len] */
    int32_t tgt_len; /* bytes */
} builtin_text;

#define BUILTIN_NUM_TASKS 8

const char *builtin_task_name(int32_t task);
/* Mixture weight of a task (they sum to 1). */
double builtin_task_weight(int32_t task);
/* Smallest max_seqlen (tokens) that every task in task_mask supports:
 * DYN_CORPUS_BUILTIN_MIN_SEQLEN, or less for classify alone. */
int32_t builtin_min_seqlen(uint32_t task_mask);
/* Generate sample (seed, split, index) so that its tokens (bytes + SEP,
 * bytes + EOS) fit max_seqlen (>= builtin_min_seqlen(task_mask)) for kind.
 * task_mask (bit t = task t, != 0) limits the mixture to those tasks, their
 * weights renormalised. */
void builtin_generate(uint64_t seed, dyn_corpus_split split, int64_t index, int32_t max_seqlen,
                      dyn_model_kind kind, uint32_t task_mask, builtin_text *out);
/* The fixed substitution cipher of the `cipher` task: lowercase letter c
 * maps to builtin_cipher_key()[c - 'a']. */
const char *builtin_cipher_key(void);

/* ---- the handle ------------------------------------------------------------ */

typedef enum corpus_source {
    SRC_BUILTIN = 0,
    SRC_JSONL = 1,
    SRC_INDEXED = 2
} corpus_source;

/* A memory-mapped Megatron dataset (indexed.c). */
typedef struct indexed_file {
    char *prefix;
    void *idx_map;
    size_t idx_size;
    void *bin_map;          /* NULL when the .bin is empty */
    size_t bin_size;
    int dtype;              /* Megatron dtype code 1..8 */
    int32_t elem;           /* bytes per token */
    int64_t n_seq;
    int64_t n_doc;
    const unsigned char *sizes;    /* int32 [n_seq], little-endian, maybe unaligned */
    const unsigned char *pointers; /* int64 [n_seq] */
} indexed_file;

struct dyn_corpus {
    corpus_source src;
    dyn_corpus_options opt;
    dyn_codec *codec;          /* the tokenizer and template (codec.c); never NULL once open */
    int64_t n;
    int decoder_only;
    /* built-in */
    uint64_t seed;
    uint32_t task_mask;        /* tasks in the mixture (bit t = task t) */
    char *text_in, *text_tgt;  /* generation buffers, max_seqlen bytes each */
    /* JSONL: the byte-offset index (record i is line line_no[i] at
     * offset[i], line_len[i] bytes) and the lengths after truncation */
    char *path;
    FILE *fp;
    int64_t *offset;
    int32_t *line_len;
    int64_t *line_no;
    int32_t *len_in, *len_tgt;
    int json_format;           /* which fields the records use (jsonl.c) */
    char *line_buf;
    size_t line_cap;
    /* Megatron: one (decoder-only) or two (input, target) datasets */
    indexed_file idx[2];
    /* what dyn_corpus_read returns */
    int32_t *tok_in, *tok_tgt;
    size_t tok_in_cap, tok_tgt_cap;
};

/* Grow c->tok_in / c->tok_tgt to hold n_in / n_tgt tokens. */
dyn_status corpus_reserve(dyn_corpus *c, size_t n_in, size_t n_tgt, dyn_error *err);

/* Apply the length rule to a record of (in, tgt) tokens (after the
 * decoder-only mapping): fit -> unchanged; over the limit -> clipped when
 * truncating, else DYN_ERR_INVALID_ARG "where: record i: ...". */
dyn_status corpus_fit_lengths(const dyn_corpus_options *opt, const char *where, int64_t record,
                              int64_t *in, int64_t *tgt, int *truncated, dyn_error *err);

/* Open path for reading as a file descriptor, refusing anything but a
 * regular file (a FIFO, device or folder) without blocking: every source
 * file is seeked or memory-mapped, and opening a FIFO would wait for a
 * writer forever. *fd: the descriptor (blocking reads, close-on-exec; the
 * caller closes it), or -1 with DYN_ERR_IO naming the path. */
dyn_status corpus_open_regular(const char *path, int *fd, dyn_error *err);

dyn_status jsonl_open(dyn_corpus *c, const char *path, dyn_error *err);
dyn_status jsonl_read(dyn_corpus *c, int64_t i, dyn_corpus_sample *out, dyn_error *err);
void jsonl_close(dyn_corpus *c);

dyn_status indexed_open(dyn_corpus *c, const char *spec, dyn_error *err);
void indexed_lengths(const dyn_corpus *c, int64_t i, int64_t *in, int64_t *tgt);
dyn_status indexed_read(dyn_corpus *c, int64_t i, dyn_corpus_sample *out, dyn_error *err);
void indexed_close(dyn_corpus *c);

#endif
