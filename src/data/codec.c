/* codec.c — how a record's text becomes its token sequence (include/dynapipe/
 * corpus.h, dyn_codec): the tokenizer, its special ids, the prompt template
 * and the end-of-sequence convention, in one place, so that training data
 * (jsonl.c) and evaluation/generation encode a record the same way.
 *
 * Conventions (the "record rule"):
 *   raw      the byte tokenizer without a template: the input's bytes then
 *            SEP (259), the target's bytes then EOS (258): the built-in
 *            tasks' format, so that a model learns where its answer ends
 *            and a prompt (the input side) ends as its training inputs did.
 *            Decoder-only text: its bytes then EOS.
 *   tokenizer otherwise: the input side is the (templated) input encoded with
 *            the tokenizer's own additions (add_special: GPT-2 none, Llama
 *            BOS, T5 EOS); the target side is the (templated) target encoded
 *            without them, then EOS when the tokenizer has one. Decoder-only
 *            text is encoded with the tokenizer's additions, then EOS unless
 *            it already ends with it.
 * A template "...{input}...{target}..." splits at {target}: the input side is
 * the text before {target} with {input} replaced by the record's input, the
 * target side the record's target followed by the text after {target}.
 *
 * Chat records ("messages", dyn_codec_encode_chat): the tokenizer folder's
 * chat template (chat.h) renders the input text (every message but the
 * last, add_generation_prompt true) and the target text (the rest of the
 * whole conversation's rendering). Both are encoded as Hugging Face's
 * apply_chat_template(tokenize=True) encodes its text: without the
 * tokenizer's additions (the template writes BOS and end-of-turn tokens
 * itself; nothing else is added, no EOS either), special tokens written in
 * the text becoming their ids (the tokenizer matches added tokens first). */
#include <stdlib.h>
#include <string.h>

#include "data/chat.h"       /* defines: dyn_chat_load, dyn_chat_render */
#include "data/corpus_impl.h" /* defines: dyn_codec_encode_chat */
#include "data/tokenizer.h"  /* defines: dyn_tokenizer_*, dyn_token_buf, dyn_byte_buf */
#include "data/tokenizer_impl.h" /* defines: dyn_token_buf_reserve, dyn_byte_buf_append */
#include "dynapipe/corpus.h" /* defines: dyn_codec, dyn_corpus_specials, DYN_CORPUS_TOK_* */
#include "util/util.h"       /* defines: dyn_calloc */

struct dyn_codec {
    dyn_tokenizer *tok;
    dyn_model_kind kind;
    int raw;                 /* bytes without a template: SEP after the input */
    char *tmpl;              /* the template, NULL when none */
    size_t in_at, tgt_at;    /* offsets of {input} and {target} in tmpl */
    dyn_corpus_specials sp;
    dyn_chat *chat;          /* the tokenizer folder's chat template, NULL when none */
    dyn_token_buf in, tgt;   /* what the last encode returned */
    dyn_byte_buf text;       /* scratch: the templated text; the last decode */
};

static const char IN_MARK[] = "{input}";
static const char TGT_MARK[] = "{target}";

/* Offset of the only occurrence of mark in s; -1 when absent, -2 when twice. */
static long find_once(const char *s, const char *mark)
{
    const char *p = strstr(s, mark);
    if (p == NULL) return -1;
    if (strstr(p + 1, mark) != NULL) return -2;
    return (long)(p - s);
}

dyn_codec *dyn_codec_create(const char *tokenizer, const char *tmpl, dyn_model_kind kind, dyn_error *err)
{
    dyn_codec *k = dyn_calloc(1, sizeof *k, "codec", err);
    if (k == NULL) return NULL;
    k->kind = kind;
    k->tok = tokenizer == NULL ? dyn_tokenizer_bytes(err) : dyn_tokenizer_load(tokenizer, err);
    if (k->tok == NULL) goto fail;
    if (tmpl != NULL) {
        long pi = find_once(tmpl, IN_MARK), pt = find_once(tmpl, TGT_MARK);
        if (pi < 0 || pt < 0 || pi > pt) {
            dyn_error_set(err, DYN_ERR_INVALID_ARG,
                          "template '%s': needs {input} once and then {target} once (e.g. \"Q: {input}\\nA: {target}\")",
                          tmpl);
            goto fail;
        }
        if ((k->tmpl = strdup(tmpl)) == NULL) {
            dyn_error_set(err, DYN_ERR_NOMEM, "template: out of memory");
            goto fail;
        }
        k->in_at = (size_t)pi;
        k->tgt_at = (size_t)pt;
    }
    int bytes = dyn_tokenizer_kind_of(k->tok) == DYN_TOKENIZER_BYTES;
    k->raw = bytes && tmpl == NULL;
    if (!bytes) {
        char *dir = dyn_tok_dirname(dyn_tokenizer_source(k->tok));
        dyn_status st = dir == NULL ? dyn_error_set(err, DYN_ERR_NOMEM, "tokenizer: out of memory")
                                    : dyn_chat_load(dir, &k->chat, err);
        free(dir);
        if (st != DYN_OK) goto fail;
    }
    dyn_tokenizer_specials ts = dyn_tokenizer_specials_of(k->tok);
    k->sp = (dyn_corpus_specials){.pad = ts.pad, .bos = ts.bos, .eos = ts.eos, .decoder_start = ts.decoder_start,
                                  .sep = bytes ? DYN_CORPUS_TOK_SEP : -1,
                                  .vocab = dyn_tokenizer_vocab_size(k->tok)};
    /* Pad positions carry no loss, but their id is still looked up: one
     * inside the vocabulary, the tokenizer's pad when it has one. */
    if (k->sp.pad < 0) k->sp.pad = k->sp.eos >= 0 ? k->sp.eos : 0;
    if (k->sp.decoder_start < 0) k->sp.decoder_start = k->sp.pad;
    return k;
fail:
    dyn_codec_free(k);
    return NULL;
}

void dyn_codec_free(dyn_codec *k)
{
    if (k == NULL) return;
    dyn_tokenizer_free(k->tok);
    dyn_chat_free(k->chat);
    free(k->tmpl);
    dyn_token_buf_free(&k->in);
    dyn_token_buf_free(&k->tgt);
    dyn_byte_buf_free(&k->text);
    free(k);
}

dyn_corpus_specials dyn_codec_specials(const dyn_codec *k) { return k->sp; }

const char *dyn_codec_tokenizer(const dyn_codec *k) { return dyn_tokenizer_source(k->tok); }

int dyn_codec_is_bytes(const dyn_codec *k) { return dyn_tokenizer_kind_of(k->tok) == DYN_TOKENIZER_BYTES; }

int dyn_codec_has_template(const dyn_codec *k) { return k->tmpl != NULL; }

const char *dyn_codec_chat_template(const dyn_codec *k) { return k->chat ? dyn_chat_text(k->chat) : NULL; }

/* Append id to b unless it is -1 (none). */
static dyn_status add_id(dyn_token_buf *b, int32_t id, dyn_error *err)
{
    if (id < 0) return DYN_OK;
    dyn_status st = dyn_token_buf_reserve(b, 1, err);
    if (st == DYN_OK) b->ids[b->n++] = id;
    return st;
}

static dyn_status add_eos(dyn_codec *k, dyn_token_buf *b, dyn_error *err) { return add_id(b, k->sp.eos, err); }

/* Encode text (len bytes) into b (emptied first): with the tokenizer's own
 * additions when add_special. */
static dyn_status encode_into(dyn_codec *k, const char *text, size_t len, int add_special, dyn_token_buf *b,
                              dyn_error *err)
{
    b->n = 0;
    return dyn_tokenizer_encode(k->tok, text, len, add_special, b, err);
}

static void tokens_out(const dyn_codec *k, int pair, dyn_codec_tokens *out)
{
    *out = (dyn_codec_tokens){.input = k->in.ids, .input_len = (int64_t)k->in.n,
                              .target = pair ? k->tgt.ids : NULL, .target_len = pair ? (int64_t)k->tgt.n : 0};
}

dyn_status dyn_codec_encode_pair(dyn_codec *k, const char *input, size_t in_len, const char *target,
                                 size_t tgt_len, dyn_codec_tokens *out, dyn_error *err)
{
    dyn_status st;
    int add = !k->raw;
    if (k->tmpl == NULL) {
        st = encode_into(k, input, in_len, add, &k->in, err);
    } else {
        k->text.n = 0;
        if ((st = dyn_byte_buf_append(&k->text, k->tmpl, k->in_at, err)) == DYN_OK &&
            (st = dyn_byte_buf_append(&k->text, input, in_len, err)) == DYN_OK &&
            (st = dyn_byte_buf_append(&k->text, k->tmpl + k->in_at + strlen(IN_MARK),
                                      k->tgt_at - k->in_at - strlen(IN_MARK), err)) == DYN_OK)
            st = encode_into(k, k->text.data, k->text.n, add, &k->in, err);
    }
    if (st == DYN_OK && k->raw) st = add_id(&k->in, k->sp.sep, err);
    if (st != DYN_OK) return st;
    if (target != NULL) {
        if (k->tmpl == NULL) {
            st = encode_into(k, target, tgt_len, 0, &k->tgt, err);
        } else {
            const char *tail = k->tmpl + k->tgt_at + strlen(TGT_MARK);
            k->text.n = 0;
            if ((st = dyn_byte_buf_append(&k->text, target, tgt_len, err)) == DYN_OK &&
                (st = dyn_byte_buf_append(&k->text, tail, strlen(tail), err)) == DYN_OK)
                st = encode_into(k, k->text.data, k->text.n, 0, &k->tgt, err);
        }
        if (st == DYN_OK) st = add_eos(k, &k->tgt, err);
        if (st != DYN_OK) return st;
    }
    tokens_out(k, target != NULL, out);
    return DYN_OK;
}

dyn_status dyn_codec_encode_text(dyn_codec *k, const char *text, size_t len, dyn_codec_tokens *out,
                                 dyn_error *err)
{
    if (k->tmpl != NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "a template applies to input/target records, not to decoder-only text");
    dyn_status st = encode_into(k, text, len, !k->raw, &k->in, err);
    if (st == DYN_OK && (k->in.n == 0 || k->in.ids[k->in.n - 1] != k->sp.eos))
        st = add_eos(k, &k->in, err);
    if (st != DYN_OK) return st;
    tokens_out(k, 0, out);
    return DYN_OK;
}

dyn_status dyn_codec_decode(dyn_codec *k, const int32_t *ids, size_t n, int skip_special, const char **text,
                            size_t *len, dyn_error *err)
{
    k->text.n = 0;
    dyn_status st = dyn_byte_buf_append(&k->text, "", 0, err); /* a NUL-terminated "" for n == 0 */
    if (st == DYN_OK) st = dyn_tokenizer_decode(k->tok, ids, n, skip_special, &k->text, err);
    if (st != DYN_OK) return st;
    *text = k->text.data;
    *len = k->text.n;
    return DYN_OK;
}

dyn_status dyn_codec_encode_chat(dyn_codec *k, const cJSON *messages, dyn_codec_tokens *out, dyn_error *err)
{
    if (k->chat == NULL) {
        if (dyn_codec_is_bytes(k))
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "chat \"messages\" need a tokenizer with a chat template "
                                 "(--tokenizer DIR of a model folder whose tokenizer_config.json has one); the byte "
                                 "tokenizer has none");
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "chat \"messages\" need a chat template, and the folder of %s "
                             "has none (no chat_template.jinja, no \"chat_template\" in tokenizer_config.json): write "
                             "input/target records, with --template for the prompt format",
                             dyn_tokenizer_source(k->tok));
    }
    if (k->tmpl != NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "--template applies to input/target records; a \"messages\" "
                             "record is rendered by the tokenizer's chat template");
    /* libsentencepiece encodes "<s>" or "[INST]" written by a template as
     * text, where Hugging Face's tokenizers give the special ids: refused
     * rather than encoded otherwise. */
    if (dyn_tokenizer_kind_of(k->tok) == DYN_TOKENIZER_SPM)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "chat \"messages\" need a tokenizer.json tokenizer: %s is a "
                             "SentencePiece model, which would encode the special tokens a chat template writes as "
                             "plain text", dyn_tokenizer_source(k->tok));
    const char *prompt, *target;
    size_t plen, tlen;
    dyn_status st = dyn_chat_render(k->chat, messages, &prompt, &plen, &target, &tlen, err);
    if (st == DYN_OK) st = encode_into(k, prompt, plen, 0, &k->in, err);
    if (st == DYN_OK) st = encode_into(k, target, tlen, 0, &k->tgt, err);
    if (st != DYN_OK) return st;
    tokens_out(k, 1, out);
    return DYN_OK;
}
