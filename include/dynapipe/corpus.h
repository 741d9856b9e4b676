/*
 * corpus.h — token-bearing training data behind one opaque handle: the
 * built-in multi-task dataset, JSONL files and Megatron-LM indexed datasets
 * (PREFIX.idx + PREFIX.bin). Planning needs only lengths (data.h's
 * dyn_dataset, filled by dyn_corpus_lengths); training reads the tokens of
 * sample i with dyn_corpus_read. docs/data.md describes the formats and tasks.
 *
 * Tokens are int32. Without a tokenizer, text becomes byte tokens 0..255
 * (UTF-8 bytes) and the special ids are the model's (src/model/model.h): pad
 * 256, decoder start 257, eos 258, sep 259; 260 ids in all. With one (option
 * tokenizer), text is encoded by dyn_codec's rule (below) and the special ids
 * are the tokenizer's (dyn_corpus_specials_of). Pre-tokenised ids are passed
 * through as given and must lie in [0, vocab).
 *
 * A sample has an input and a target (both >= 1 token), as dyn_sample:
 *   GPT sees input ++ target and learns to predict the target tokens;
 *   T5 encodes the input and decodes the target.
 * Decoder-only records (JSONL `text` or `input_ids` alone, or a single
 * Megatron dataset) are one sequence s[0..n) with n >= 2, mapped to
 * input = s[0..1) and target = s[1..n): for GPT the model sees exactly s and
 * learns every token it can predict; the length rule of data.h then limits
 * n = input_len + target_len. For T5 the same split applies (the decoder
 * continues the sequence from its first token).
 *
 * Length limit: the rule of data.h (GPT: input + target <= max_seqlen; T5:
 * each side). A sample over it is an error naming the record, unless the
 * `truncate` option is set: then the lengths are clipped by
 * dyn_lengths_clip and the tokens kept are the first input_len tokens of the
 * input and the first target_len tokens of the target.
 *
 * Built-in samples are deterministic from (seed, split, index, max_seqlen,
 * kind) and generated on demand (sample i costs O(its length), whatever i);
 * they are built to fit max_seqlen (tasks scale down), so they are never
 * truncated. Every built-in input ends with sep (259) and every target with
 * eos (258), so the exact target string is what greedy decoding must produce.
 */
#ifndef DYNAPIPE_CORPUS_H
#define DYNAPIPE_CORPUS_H

#include "dynapipe/common.h"
#include "dynapipe/data.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Token ids shared with the model (same values as src/model/model.h). */
#define DYN_CORPUS_TOK_PAD 256
#define DYN_CORPUS_TOK_BOS 257 /* T5 decoder start */
#define DYN_CORPUS_TOK_EOS 258
#define DYN_CORPUS_TOK_SEP 259
#define DYN_CORPUS_VOCAB_BYTES 260

/* Smallest max_seqlen the built-in dataset supports, tokens: that of the
 * whole mixture and of every task but classify, which alone (spec
 * builtin:SEED:classify) goes down to 32, with shorter inputs. */
#define DYN_CORPUS_BUILTIN_MIN_SEQLEN 64

typedef enum dyn_corpus_split {
    DYN_SPLIT_TRAIN = 0,  /* the training stream */
    DYN_SPLIT_HELDOUT = 1 /* held-out stream (another seed stream), for evaluation */
} dyn_corpus_split;

typedef struct dyn_corpus_options {
    dyn_corpus_split split;  /* built-in only */
    int64_t builtin_samples; /* built-in only: samples in the corpus (>= 0) */
    int32_t max_seqlen;      /* tokens, the length rule of data.h; >= 2 (built-in: >= 64) */
    dyn_model_kind kind;     /* which side(s) max_seqlen limits */
    int truncate;            /* 1: clip over-long samples; 0: they are an error */
    int32_t vocab;           /* ids must be in [0, vocab); >= 1, or 0: the tokenizer's size */
    const char *tokenizer;   /* files only: tokenizer.json, a SentencePiece model or a model
                              * folder (dyn_codec_create); NULL or "bytes": byte tokens */
    const char *template_str; /* input/target records: "...{input}...{target}..." (dyn_codec) */
} dyn_corpus_options;

/* Defaults: train split, 100,000 built-in samples, max_seqlen 2048, GPT,
 * no truncation, vocab DYN_CORPUS_VOCAB_BYTES, bytes, no template. */
void dyn_corpus_options_default(dyn_corpus_options *opt);

typedef struct dyn_corpus dyn_corpus;

/* Open a source. spec is one of
 *   builtin | builtin:SEED   the built-in multi-task dataset (seed default 1)
 *   builtin:SEED:TASK+TASK   only those tasks (names below), their weights
 *                            renormalised; task ids stay those of all eight
 *   PATH.jsonl               one JSON object per line (docs/data.md)
 *   PREFIX                   a Megatron dataset PREFIX.idx + PREFIX.bin
 *                            (decoder-only); if PREFIX.idx does not exist but
 *                            PREFIX_input.idx and PREFIX_target.idx do, that pair
 *   INPUT_PREFIX,TARGET_PREFIX  a pair of Megatron datasets (sequence i of one
 *                            is the input of sample i, of the other its target)
 * opt may be NULL (defaults). JSONL is read once at open (every record is
 * parsed and checked; a byte-offset index is kept, not the records); Megatron
 * files are memory-mapped and their index checked. NULL + err on failure:
 * DYN_ERR_IO (unreadable), DYN_ERR_PARSE (malformed JSONL: "path:line: what"),
 * DYN_ERR_CORRUPT (bad magic, version, dtype, sizes, pointers),
 * DYN_ERR_INVALID_ARG (bad spec or options, a sample over max_seqlen, an id
 * out of range: naming the record). */
dyn_corpus *dyn_corpus_open(const char *spec, const dyn_corpus_options *opt, dyn_error *err);
void dyn_corpus_free(dyn_corpus *c);

/* Number of samples (>= 0). */
int64_t dyn_corpus_count(const dyn_corpus *c);

/* 1 if the source is decoder-only sequences (input is their first token),
 * 0 if it has separate inputs and targets. */
int dyn_corpus_decoder_only(const dyn_corpus *c);

/* Tasks: the built-in dataset has dyn_corpus_num_tasks() > 0 named tasks and
 * every sample's task is one of them; files have 0 tasks and task -1.
 * dyn_corpus_task_name returns NULL for an id out of range. */
int32_t dyn_corpus_num_tasks(const dyn_corpus *c);
const char *dyn_corpus_task_name(const dyn_corpus *c, int32_t task);

/* The lengths of every sample (after truncation) as a dyn_dataset for the
 * sampler and planner: samples[i].id = i (the corpus index), task = the task
 * id or -1. out is overwritten, its old contents not freed (free the
 * result with dyn_dataset_free).
 * DYN_ERR_INVALID_ARG if the corpus has more than INT32_MAX samples. The
 * built-in dataset generates every sample to know its lengths (about 7 us
 * per sample at max_seqlen 2048) in the handle's buffers, so this counts as
 * a use of the handle like a read. */
dyn_status dyn_corpus_lengths(const dyn_corpus *c, dyn_dataset *out, dyn_error *err);

/* One sample's tokens. input/target point into storage owned by the handle,
 * valid until the next dyn_corpus_read on the same handle or its free: open
 * one handle per thread or rank. */
typedef struct dyn_corpus_sample {
    int64_t index;         /* 0-based corpus index */
    int32_t task;          /* task id or -1 */
    int32_t input_len;     /* tokens, >= 1 */
    int32_t target_len;    /* tokens, >= 1 */
    const int32_t *input;  /* [input_len] */
    const int32_t *target; /* [target_len] */
    int truncated;         /* 1 if the truncate option shortened it */
} dyn_corpus_sample;

/* Read sample i (0 <= i < count) into *out. Megatron token ids are checked
 * here (an id outside [0, vocab), or a float token that is not an integer, is
 * DYN_ERR_INVALID_ARG naming the record); JSONL records were checked at
 * open. DYN_ERR_IO if the file cannot be read again. */
dyn_status dyn_corpus_read(dyn_corpus *c, int64_t i, dyn_corpus_sample *out, dyn_error *err);

/* The special ids of c's vocabulary (dyn_corpus_specials below): the byte
 * vocabulary's 256..259, or the tokenizer's. Training uses them for the
 * decoder start, the padding and the end of a target. */
typedef struct dyn_corpus_specials {
    int32_t pad;           /* fills pad positions: the tokenizer's, else eos, else 0 */
    int32_t bos;           /* -1 when none (bytes: none) */
    int32_t eos;           /* ends a target; -1 when none */
    int32_t decoder_start; /* T5's first decoder input: the tokenizer's, else pad */
    int32_t sep;           /* bytes: 259 (built-in inputs end with it); -1 otherwise */
    int32_t vocab;         /* the tokenizer's number of ids (bytes: 260) */
} dyn_corpus_specials;
dyn_corpus_specials dyn_corpus_specials_of(const dyn_corpus *c);

/* ---- a record's token sequence (codec.c) ------------------------------------
 * One function turns a record's text into its tokens, for training data and
 * for evaluation and generation alike. The rule:
 *   bytes without a template: the input's bytes then sep (259), the
 *       target's bytes then eos (258), as the built-in tasks' samples;
 *       decoder-only text: its bytes then eos;
 *   otherwise: the input side is the (templated) input encoded with the
 *       tokenizer's own additions (its post-processor or add_bos/add_eos:
 *       GPT-2 nothing, Llama BOS, T5 EOS); the target side is the (templated)
 *       target encoded without them, then EOS (when the tokenizer has one).
 *       GPT sees input ++ target; T5 encodes the input, decodes the target.
 *       Decoder-only text is encoded with the tokenizer's additions, then EOS
 *       unless it already ends with it.
 *   template "...{input}...{target}...": split at {target}; the input side is
 *       the text before it with {input} replaced by the record's input, the
 *       target side the record's target followed by the text after {target}.
 *       A prompt for generation is the input side alone.
 *   chat records ("messages"): the tokenizer folder's chat template renders
 *       the input (every message but the last, add_generation_prompt true)
 *       and the target (the rest of the whole conversation's rendering; the
 *       last message must be the assistant's); both are encoded without the
 *       tokenizer's additions and without an EOS, as Hugging Face's
 *       apply_chat_template(tokenize=True) encodes (docs/guide-chat.md). */
typedef struct dyn_codec dyn_codec;

/* tokenizer: NULL or "bytes" for bytes, else what dyn_tokenizer_load takes (a
 * tokenizer.json, a SentencePiece model or a model folder); tmpl may be NULL.
 * NULL + err (naming the file, or the template) on failure. */
dyn_codec *dyn_codec_create(const char *tokenizer, const char *tmpl, dyn_model_kind kind, dyn_error *err);
void dyn_codec_free(dyn_codec *k);
dyn_corpus_specials dyn_codec_specials(const dyn_codec *k);
const char *dyn_codec_tokenizer(const dyn_codec *k); /* "bytes" or the tokenizer's file */
int dyn_codec_is_bytes(const dyn_codec *k);
int dyn_codec_has_template(const dyn_codec *k);
/* The tokenizer folder's chat template (Jinja text), or NULL when none. */
const char *dyn_codec_chat_template(const dyn_codec *k);

/* Tokens returned by the encoders: owned by the codec, valid until its next
 * encode or decode. */
typedef struct dyn_codec_tokens {
    const int32_t *input;
    int64_t input_len;
    const int32_t *target; /* NULL for a prompt or decoder-only text */
    int64_t target_len;
} dyn_codec_tokens;

/* A record's input and target (bytes, UTF-8) by the rule above; target NULL
 * encodes the prompt (the input side alone), as generation feeds it. */
dyn_status dyn_codec_encode_pair(dyn_codec *k, const char *input, size_t in_len, const char *target,
                                 size_t tgt_len, dyn_codec_tokens *out, dyn_error *err);
/* Decoder-only text: the whole sequence in out->input. DYN_ERR_INVALID_ARG
 * with a template. */
dyn_status dyn_codec_encode_text(dyn_codec *k, const char *text, size_t len, dyn_codec_tokens *out,
                                 dyn_error *err);
/* ids back to text (NUL-terminated, *len bytes, owned by the codec until its
 * next call); skip_special leaves out special tokens. An id outside the
 * tokenizer's vocabulary is DYN_ERR_INVALID_ARG naming it. */
dyn_status dyn_codec_decode(dyn_codec *k, const int32_t *ids, size_t n, int skip_special, const char **text,
                            size_t *len, dyn_error *err);

/* The codec of a corpus (its tokenizer and template), for decoding its
 * samples. Owned by the corpus; one thread at a time, as the corpus. */
dyn_codec *dyn_corpus_codec(dyn_corpus *c);

/* Token dtype of Megatron's own preprocessing for a vocabulary of `vocab`
 * ids: uint16 (code 8) below 65,500 ids, else int32 (code 4). */
int dyn_indexed_dtype_for_vocab(int32_t vocab);

/* Write every sample of c as a Megatron indexed dataset (version 1), each
 * sequence its own document, token dtype dyn_indexed_dtype_for_vocab(vocab). Decoder-only corpora write one dataset PREFIX.idx/.bin holding the
 * whole sequences (input ++ target); others a pair PREFIX_input.{idx,bin}
 * and PREFIX_target.{idx,bin}, which dyn_corpus_open("PREFIX") finds. All
 * files are written to temporaries and renamed only when every one is
 * complete (.bin before .idx), so a failed conversion leaves the old files.
 * Reads every sample (so every token id is checked). */
dyn_status dyn_corpus_write_indexed(dyn_corpus *c, const char *prefix, dyn_error *err);

#ifdef __cplusplus
}
#endif
#endif /* DYNAPIPE_CORPUS_H */
