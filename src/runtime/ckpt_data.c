/* ckpt_data.c — the data settings a checkpoint records (checkpoint.h,
 * rt_ckpt_data): truncation, the prompt template and the tokenizer's
 * identity (its file, a hash of the file, its size and special ids, a hash
 * of its folder's chat template). Taken
 * from a run's options when it saves, compared when a run resumes, and read
 * back by `dynapipe eval`, so that a checkpoint is evaluated and continued
 * on the token sequences it was trained on.
 *
 * Identity, not path: a tokenizer file moved to another folder is the same
 * tokenizer (its hash and ids agree); the same path holding another file is
 * not. */
#define _XOPEN_SOURCE 700 /* realpath (the build's _POSIX_C_SOURCE alone does not declare it) */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/corpus.h"  /* defines: dyn_codec_* */
#include "runtime/checkpoint.h"
#include "runtime/ckpt_fs.h"  /* defines: rt_ckpt_fnv1a64 */
#include "util/util.h"        /* defines: dyn_file_read_all */

dyn_status rt_ckpt_data_of(const char *tokenizer, const char *tmpl, int truncate, dyn_model_kind kind,
                           rt_ckpt_data *d, dyn_error *err)
{
    memset(d, 0, sizeof *d);
    d->recorded = 1;
    d->truncate = truncate != 0;
    if (tmpl != NULL && strlen(tmpl) >= sizeof d->template_str)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "--template: %zu bytes, a checkpoint records at most %zu",
                             strlen(tmpl), sizeof d->template_str - 1);
    snprintf(d->template_str, sizeof d->template_str, "%s", tmpl ? tmpl : "");
    if (tokenizer != NULL && strcmp(tokenizer, "bytes") == 0) tokenizer = NULL;
    dyn_codec *k = dyn_codec_create(tokenizer, tmpl, kind, err);
    if (k == NULL) return err->code;
    dyn_corpus_specials cs = dyn_codec_specials(k);
    d->vocab = cs.vocab;
    d->sp = (dyn_model_specials){.pad = cs.pad, .bos = cs.bos, .eos = cs.eos, .decoder_start = cs.decoder_start};
    const char *chat = dyn_codec_chat_template(k);
    d->chat_fnv = chat ? rt_ckpt_fnv1a64((const unsigned char *)chat, strlen(chat)) : 0;
    dyn_status st = DYN_OK;
    if (dyn_codec_is_bytes(k)) {
        snprintf(d->tokenizer, sizeof d->tokenizer, "bytes");
    } else {
        const char *file = dyn_codec_tokenizer(k);
        char abs[PATH_MAX];
        char *data = NULL;
        size_t len = 0;
        if (realpath(file, abs) == NULL)
            st = dyn_error_set(err, DYN_ERR_IO, "%s: cannot resolve the tokenizer's path", file);
        else if (strlen(abs) >= sizeof d->tokenizer)
            st = dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: a path longer than a checkpoint records (%zu bytes)",
                               abs, sizeof d->tokenizer - 1);
        else if ((st = dyn_file_read_all(abs, &data, &len, err)) == DYN_OK) {
            memcpy(d->tokenizer, abs, strlen(abs) + 1); /* fits: checked above */
            d->tokenizer_fnv = rt_ckpt_fnv1a64((const unsigned char *)data, len);
        }
        free(data);
    }
    dyn_codec_free(k);
    return st;
}

/* "bytes" or "TOKENIZER (N ids)" of d, into buf. */
static const char *describe(const rt_ckpt_data *d, char *buf, size_t cap)
{
    if (strcmp(d->tokenizer, "bytes") == 0) snprintf(buf, cap, "bytes");
    else snprintf(buf, cap, "%s (%d ids)", d->tokenizer, d->vocab);
    return buf;
}

dyn_status rt_ckpt_data_check(const rt_ckpt_data *ckpt, const rt_ckpt_data *run, dyn_error *err)
{
    if (!ckpt->recorded) return DYN_OK;
    if (ckpt->truncate != run->truncate)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             ckpt->truncate ? "the checkpoint was trained with --truncate, this run reads the data "
                                              "without it"
                                            : "--truncate: the checkpoint was trained without truncation (leave "
                                              "--truncate out to read the data as it did)");
    if (strcmp(ckpt->template_str, run->template_str) != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "--template: the checkpoint was trained with %s%s%s, this run %s%s%s",
                             ckpt->template_str[0] ? "template '" : "no template", ckpt->template_str,
                             ckpt->template_str[0] ? "'" : "", run->template_str[0] ? "template '" : "no template",
                             run->template_str, run->template_str[0] ? "'" : "");
    char a[1100], b[1100];
    int bytes_a = strcmp(ckpt->tokenizer, "bytes") == 0, bytes_b = strcmp(run->tokenizer, "bytes") == 0;
    if (bytes_a != bytes_b || ckpt->vocab != run->vocab)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "--tokenizer: the checkpoint was trained with %s, this run "
                             "reads the data with %s", describe(ckpt, a, sizeof a), describe(run, b, sizeof b));
    if (ckpt->tokenizer_fnv != run->tokenizer_fnv)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "--tokenizer: %s is not the file the checkpoint was trained with (%s; the contents "
                             "differ)", run->tokenizer, ckpt->tokenizer);
    if (ckpt->chat_fnv != run->chat_fnv)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "--tokenizer %s: %s chat template; the checkpoint was trained with %s", run->tokenizer,
                             run->chat_fnv ? "its folder has another" : "its folder has no",
                             ckpt->chat_fnv ? "one that renders messages records otherwise" : "none");
    const dyn_model_specials *p = &ckpt->sp, *q = &run->sp;
    if (p->pad != q->pad || p->bos != q->bos || p->eos != q->eos || p->decoder_start != q->decoder_start)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "--tokenizer %s: special ids pad %d, bos %d, eos %d, decoder start %d; the checkpoint "
                             "was trained with pad %d, bos %d, eos %d, decoder start %d (its folder's config files "
                             "changed)",
                             run->tokenizer, q->pad, q->bos, q->eos, q->decoder_start, p->pad, p->bos, p->eos,
                             p->decoder_start);
    return DYN_OK;
}
