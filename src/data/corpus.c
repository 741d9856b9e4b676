/* corpus.c — the dyn_corpus handle (include/dynapipe/corpus.h): parsing a
 * source spec, the options, the length rule applied to every record, and
 * dispatch to the three sources (tasks.c built-in, jsonl.c, indexed.c). The
 * built-in source lives here too: it is only text generation plus the SEP
 * and EOS tokens. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/corpus_impl.h" /* defines: dyn_corpus, builtin_*, jsonl_*, indexed_* */
#include "util/util.h"        /* defines: dyn_calloc, DYN_RESERVE */

void dyn_corpus_options_default(dyn_corpus_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->split = DYN_SPLIT_TRAIN;
    opt->builtin_samples = 100000;
    opt->max_seqlen = 2048;
    opt->kind = DYN_MODEL_GPT;
    opt->truncate = 0;
    opt->vocab = DYN_CORPUS_VOCAB_BYTES;
}

dyn_status corpus_reserve(dyn_corpus *c, size_t n_in, size_t n_tgt, dyn_error *err)
{
    if (DYN_RESERVE(c->tok_in, c->tok_in_cap, n_in) != 0)
        return dyn_error_set(err, DYN_ERR_NOMEM, "corpus: out of memory for %zu input tokens", n_in);
    if (DYN_RESERVE(c->tok_tgt, c->tok_tgt_cap, n_tgt) != 0)
        return dyn_error_set(err, DYN_ERR_NOMEM, "corpus: out of memory for %zu target tokens", n_tgt);
    return DYN_OK;
}

dyn_status corpus_fit_lengths(const dyn_corpus_options *opt, const char *where, int64_t record,
                              int64_t *in, int64_t *tgt, int *truncated, dyn_error *err)
{
    *truncated = 0;
    int32_t i32 = *in > INT32_MAX ? INT32_MAX : (int32_t)*in;
    int32_t t32 = *tgt > INT32_MAX ? INT32_MAX : (int32_t)*tgt;
    if (*in <= INT32_MAX && *tgt <= INT32_MAX && dyn_lengths_fit(opt->kind, opt->max_seqlen, i32, t32))
        return DYN_OK;
    if (!opt->truncate) {
        if (opt->kind != DYN_MODEL_T5)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "%s: record %lld: input + target = %lld tokens exceeds max_seqlen %d "
                                 "(decoder-only: the limit is on input+target; --truncate cuts it)",
                                 where, (long long)record, (long long)(*in + *tgt), opt->max_seqlen);
        int in_side = *in > opt->max_seqlen;
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: record %lld: %s = %lld tokens exceeds max_seqlen %d (T5: the limit "
                             "is on each side; --truncate cuts it)",
                             where, (long long)record, in_side ? "input" : "target",
                             (long long)(in_side ? *in : *tgt), opt->max_seqlen);
    }
    dyn_lengths_clip(opt->kind, opt->max_seqlen, &i32, &t32);
    *in = i32;
    *tgt = t32;
    *truncated = 1;
    return DYN_OK;
}

dyn_status corpus_open_regular(const char *path, int *fd_out, dyn_error *err)
{
    *fd_out = -1;
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return dyn_error_set(err, DYN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    dyn_status st = DYN_OK;
    int fl;
    if (fstat(fd, &sb) != 0)
        st = dyn_error_set(err, DYN_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = dyn_error_set(err, DYN_ERR_IO, "%s: not a regular file (%s): data is read by seeking or mapping, so "
                           "a pipe, device or folder cannot be a source", path,
                           S_ISFIFO(sb.st_mode)                         ? "a FIFO"
                           : S_ISDIR(sb.st_mode)                        ? "a folder"
                           : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device"
                                                                        : "a special file");
    else if ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
        st = dyn_error_set(err, DYN_ERR_IO, "%s: cannot set blocking reads: %s", path, strerror(errno));
    if (st != DYN_OK) {
        close(fd);
        return st;
    }
    *fd_out = fd;
    return DYN_OK;
}

/* ---- built-in ------------------------------------------------------------- */

/* "TASK+TASK+..." after the seed -> a mask of task ids. */
static dyn_status parse_tasks(const char *spec, const char *list, uint32_t *mask, dyn_error *err)
{
    *mask = 0;
    const char *p = list;
    for (;;) {
        const char *e = strchr(p, '+');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        int32_t found = -1;
        for (int32_t t = 0; t < BUILTIN_NUM_TASKS && found < 0; t++)
            if (strlen(builtin_task_name(t)) == n && strncmp(builtin_task_name(t), p, n) == 0) found = t;
        if (found < 0)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "corpus '%s': unknown task '%.*s' (copy, reverse, sort, add, lookup, cipher, "
                                 "summarise, classify)", spec, (int)n, p);
        *mask |= UINT32_C(1) << found;
        if (e == NULL) return DYN_OK;
        p = e + 1;
    }
}

static dyn_status builtin_open(dyn_corpus *c, const char *spec, dyn_error *err)
{
    c->src = SRC_BUILTIN;
    c->seed = 1;
    c->task_mask = (UINT32_C(1) << BUILTIN_NUM_TASKS) - 1;
    if (spec[7] == ':') {
        char *end = NULL;
        errno = 0;
        unsigned long long s = strtoull(spec + 8, &end, 10);
        if (spec[8] < '0' || spec[8] > '9' || (*end != '\0' && *end != ':') || errno == ERANGE)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "corpus '%s': seed is not a non-negative integer", spec);
        c->seed = (uint64_t)s;
        if (*end == ':') {
            dyn_status st = parse_tasks(spec, end + 1, &c->task_mask, err);
            if (st != DYN_OK) return st;
        }
    } else if (spec[7] != '\0') {
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "corpus '%s': use builtin, builtin:SEED or builtin:SEED:TASK+TASK", spec);
    }
    int32_t min_len = builtin_min_seqlen(c->task_mask);
    if (c->opt.max_seqlen < min_len)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "corpus %s: max_seqlen %d < %d (the smallest the tasks fit)",
                             spec, c->opt.max_seqlen, min_len);
    if (c->opt.builtin_samples < 1) /* an empty dataset, as an empty file, is refused */
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "corpus builtin: %lld samples (at least 1)",
                             (long long)c->opt.builtin_samples);
    if (c->opt.split != DYN_SPLIT_TRAIN && c->opt.split != DYN_SPLIT_HELDOUT)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "corpus builtin: unknown split %d", (int)c->opt.split);
    if (c->opt.vocab < DYN_CORPUS_VOCAB_BYTES)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "corpus builtin: vocab %d < %d (bytes and special tokens)",
                             c->opt.vocab, DYN_CORPUS_VOCAB_BYTES);
    c->n = c->opt.builtin_samples;
    size_t cap = (size_t)c->opt.max_seqlen + 16;
    c->text_in = dyn_calloc(cap, 1, "builtin text", err);
    c->text_tgt = dyn_calloc(cap, 1, "builtin text", err);
    if (c->text_in == NULL || c->text_tgt == NULL) return DYN_ERR_NOMEM;
    return DYN_OK;
}

static void builtin_text_at(const dyn_corpus *c, int64_t i, builtin_text *t)
{
    t->in = c->text_in;
    t->tgt = c->text_tgt;
    builtin_generate(c->seed, c->opt.split, i, c->opt.max_seqlen, c->opt.kind, c->task_mask, t);
}

static dyn_status builtin_read(dyn_corpus *c, int64_t i, dyn_corpus_sample *out, dyn_error *err)
{
    builtin_text t;
    builtin_text_at(c, i, &t);
    dyn_status st = corpus_reserve(c, (size_t)t.in_len + 1, (size_t)t.tgt_len + 1, err);
    if (st != DYN_OK) return st;
    for (int32_t k = 0; k < t.in_len; k++) c->tok_in[k] = (unsigned char)t.in[k];
    c->tok_in[t.in_len] = DYN_CORPUS_TOK_SEP;
    for (int32_t k = 0; k < t.tgt_len; k++) c->tok_tgt[k] = (unsigned char)t.tgt[k];
    c->tok_tgt[t.tgt_len] = DYN_CORPUS_TOK_EOS;
    *out = (dyn_corpus_sample){.index = i, .task = t.task, .input_len = t.in_len + 1,
                               .target_len = t.tgt_len + 1, .input = c->tok_in, .target = c->tok_tgt};
    return DYN_OK;
}

/* ---- the handle ------------------------------------------------------------- */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The corpus's codec from opt.tokenizer / opt.template_str, and the
 * vocabulary every id is checked against: opt.vocab, or the tokenizer's size
 * when 0. A tokenizer whose ids reach past opt.vocab is refused here, naming
 * it, so that no encoded record can hold an id the model does not have. */
static dyn_status corpus_codec_open(dyn_corpus *c, const char *spec, dyn_error *err)
{
    const char *tok = c->opt.tokenizer;
    if (tok != NULL && strcmp(tok, "bytes") == 0) tok = NULL;
    int builtin = strncmp(spec, "builtin", 7) == 0 && (spec[7] == '\0' || spec[7] == ':');
    if (builtin && (tok != NULL || c->opt.template_str != NULL))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "corpus %s: the built-in dataset is byte tokens; a tokenizer or template applies to files",
                             spec);
    if (!builtin && c->opt.template_str != NULL && !ends_with(spec, ".jsonl"))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "corpus %s: a template applies to JSONL text records, not to Megatron token files", spec);
    dyn_error e;
    c->codec = dyn_codec_create(tok, c->opt.template_str, c->opt.kind, &e);
    if (c->codec == NULL) return dyn_error_set(err, e.code, "%s", e.msg);
    int32_t tv = dyn_codec_specials(c->codec).vocab;
    if (c->opt.vocab == 0) c->opt.vocab = tv;
    else if (tok != NULL && tv > c->opt.vocab)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: the tokenizer has %d ids, more than the model's vocabulary of %d",
                             dyn_codec_tokenizer(c->codec), tv, c->opt.vocab);
    return DYN_OK;
}

dyn_corpus *dyn_corpus_open(const char *spec, const dyn_corpus_options *opt, dyn_error *err)
{
    if (spec == NULL || spec[0] == '\0') {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "corpus: empty source spec");
        return NULL;
    }
    dyn_corpus *c = dyn_calloc(1, sizeof *c, "corpus", err);
    if (c == NULL) return NULL;
    if (opt) c->opt = *opt;
    else dyn_corpus_options_default(&c->opt);
    dyn_status st;
    if (c->opt.max_seqlen < 2)
        st = dyn_error_set(err, DYN_ERR_INVALID_ARG, "corpus '%s': max_seqlen %d < 2", spec, c->opt.max_seqlen);
    else if (c->opt.kind != DYN_MODEL_GPT && c->opt.kind != DYN_MODEL_T5 && c->opt.kind != DYN_MODEL_LLAMA)
        st = dyn_error_set(err, DYN_ERR_INVALID_ARG, "corpus '%s': unknown model kind %d", spec, (int)c->opt.kind);
    else if (c->opt.vocab < 0)
        st = dyn_error_set(err, DYN_ERR_INVALID_ARG, "corpus '%s': vocab %d < 0", spec, c->opt.vocab);
    else if ((st = corpus_codec_open(c, spec, err)) != DYN_OK)
        ;
    else if (strncmp(spec, "builtin", 7) == 0 && (spec[7] == '\0' || spec[7] == ':'))
        st = builtin_open(c, spec, err);
    else if (ends_with(spec, ".jsonl"))
        st = jsonl_open(c, spec, err);
    else
        st = indexed_open(c, spec, err);
    if (st != DYN_OK) {
        dyn_corpus_free(c);
        return NULL;
    }
    return c;
}

void dyn_corpus_free(dyn_corpus *c)
{
    if (c == NULL) return;
    if (c->src == SRC_JSONL) jsonl_close(c);
    if (c->src == SRC_INDEXED) indexed_close(c);
    free(c->text_in);
    free(c->text_tgt);
    free(c->tok_in);
    free(c->tok_tgt);
    dyn_codec_free(c->codec);
    free(c);
}

dyn_corpus_specials dyn_corpus_specials_of(const dyn_corpus *c) { return dyn_codec_specials(c->codec); }

dyn_codec *dyn_corpus_codec(dyn_corpus *c) { return c->codec; }

int64_t dyn_corpus_count(const dyn_corpus *c) { return c->n; }

int dyn_corpus_decoder_only(const dyn_corpus *c) { return c->decoder_only; }

int32_t dyn_corpus_num_tasks(const dyn_corpus *c)
{
    return c->src == SRC_BUILTIN ? BUILTIN_NUM_TASKS : 0;
}

const char *dyn_corpus_task_name(const dyn_corpus *c, int32_t task)
{
    return c->src == SRC_BUILTIN ? builtin_task_name(task) : NULL;
}

dyn_status dyn_corpus_lengths(const dyn_corpus *c, dyn_dataset *out, dyn_error *err)
{
    if (c->n > INT32_MAX)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "corpus: %lld samples is more than a dataset holds (%d)",
                             (long long)c->n, INT32_MAX);
    dyn_sample *s = dyn_calloc(c->n > 0 ? (size_t)c->n : 1, sizeof *s, "corpus lengths", err);
    if (s == NULL) return DYN_ERR_NOMEM;
    for (int64_t i = 0; i < c->n; i++) {
        int64_t in = 0, tgt = 0;
        int32_t task = -1;
        if (c->src == SRC_BUILTIN) {
            builtin_text t;
            builtin_text_at(c, i, &t);
            in = t.in_len + 1;
            tgt = t.tgt_len + 1;
            task = t.task;
        } else if (c->src == SRC_JSONL) {
            in = c->len_in[i];
            tgt = c->len_tgt[i];
        } else {
            indexed_lengths(c, i, &in, &tgt);
        }
        s[i] = (dyn_sample){.id = (int32_t)i, .task = task, .input_len = (int32_t)in, .target_len = (int32_t)tgt};
    }
    out->n = (int32_t)c->n;
    out->samples = s;
    return DYN_OK;
}

dyn_status dyn_corpus_read(dyn_corpus *c, int64_t i, dyn_corpus_sample *out, dyn_error *err)
{
    if (i < 0 || i >= c->n)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "corpus: sample %lld out of range [0, %lld)",
                             (long long)i, (long long)c->n);
    if (c->src == SRC_BUILTIN) return builtin_read(c, i, out, err);
    if (c->src == SRC_JSONL) return jsonl_read(c, i, out, err);
    return indexed_read(c, i, out, err);
}
