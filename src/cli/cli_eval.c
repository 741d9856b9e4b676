/* cli_eval.c — `dynapipe eval`: a checkpoint of `dynapipe train --save DIR`
 * assembled into the whole model (one process, no MPI), then its loss and
 * per-task exact-match accuracy on the held-out split, or the greedy
 * continuation of a prompt. The user's check that the model learned.
 *
 * The data is read as the checkpoint's run read it (rt_ckpt_data: its
 * truncation, tokenizer and template), and a prompt is encoded by the same
 * rule as a training record's input side (dyn_codec_encode_pair), so what
 * the model sees at evaluation is what it saw in training. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"                /* defines: cli_errorf, CLI_EXIT_* */
#include "cli/flags.h"              /* defines: cli_flag, cli_flags_parse, cli_flags_usage */
#include "dynapipe/corpus.h"        /* defines: dyn_corpus_* */
#include "dynapipe/model_config.h"  /* defines: dyn_model_kind_name, dyn_model_config_params */
#include "model/model.h"            /* defines: dyn_model_generate_greedy, dyn_model_specials */
#include "model/threads.h"          /* defines: dyn_threads_init */
#include "runtime/checkpoint.h"     /* defines: rt_ckpt_resolve, rt_ckpt_load_model */
#include "runtime/evaluate.h"       /* defines: rt_eval_run */

#define CMD "eval"

/* The flags (read-only once parsed). */
typedef struct eval_args {
    const char *ckpt, *spec, *prompt;
    const char *tokenizer, *template_str; /* NULL: the checkpoint's */
    int64_t n, max_new, threads;
    int accuracy;
    int truncate; /* --truncate: clip over-long samples even if the checkpoint's run did not */
    int split; /* 0 train, 1 heldout (split_names) */
    int have_split, have_n, have_max_new; /* given */
} eval_args;

static const char *const split_names[] = {"train", "heldout", NULL};

static const cli_flag eval_flags[] = {
    {.name = "--checkpoint", .metavar = "DIR", .type = CLI_FLAG_PATH, .field = offsetof(eval_args, ckpt),
     .help = "the checkpoint", .def = "required"},
    {.name = "--data", .metavar = "SPEC", .type = CLI_FLAG_PATH, .field = offsetof(eval_args, spec),
     .help = "token corpus, its held-out split for the built-in dataset",
     .def = "the one the checkpoint trained on"},
    {.name = "--split", .metavar = "heldout|train", .type = CLI_FLAG_ENUM, .field = offsetof(eval_args, split),
     .given = CLI_GIVEN(eval_args, have_split), .names = split_names, .help = "which built-in split"},
    {.name = "--samples", .metavar = "N", .type = CLI_FLAG_I64, .field = offsetof(eval_args, n),
     .given = CLI_GIVEN(eval_args, have_n), .min = 1, .max = 100000000, .help = "samples evaluated"},
    CLI_BOOL("--no-accuracy", eval_args, accuracy, 0, "loss only (skips the greedy generation)"),
    CLI_BOOL("--truncate", eval_args, truncate, 1,
             "clip samples over max_seqlen (default: as the checkpoint's\nrun did)"),
    {.name = "--tokenizer", .metavar = "DIR|FILE", .type = CLI_FLAG_PATH, .field = offsetof(eval_args, tokenizer),
     .help = "the checkpoint's tokenizer at another path (checked to be\nthe same file)",
     .def = "the one the checkpoint recorded"},
    {.name = "--template", .metavar = "TEXT", .type = CLI_FLAG_STR, .field = offsetof(eval_args, template_str),
     .help = "prompt template \"...{input}...{target}...\"", .def = "the checkpoint's"},
    CLI_STR("--prompt", "TEXT", eval_args, prompt,
            "print the greedy continuation of TEXT, encoded as a training\n"
            "record's input (tokenizer, template; bytes: then the separator\n"
            "token), decoded, up to the end-of-sequence token"),
    {.name = "--max-new", .metavar = "N", .type = CLI_FLAG_I64, .field = offsetof(eval_args, max_new),
     .given = CLI_GIVEN(eval_args, have_max_new), .min = 1, .max = 1 << 20, .help = "tokens generated for --prompt"},
    CLI_I64("--threads", "T", eval_args, threads, 1, 1024, "kernel threads"),
    CLI_END,
};

static void eval_args_init(eval_args *a)
{
    memset(a, 0, sizeof *a);
    a->n = 200, a->max_new = 128, a->threads = 1, a->accuracy = 1, a->split = 1;
}

static void usage(FILE *out)
{
    eval_args d;
    eval_args_init(&d);
    fprintf(out,
            "usage: dynapipe eval --checkpoint DIR [flags]\n\n"
            "Evaluate a checkpoint of `dynapipe train --save DIR` (DIR's latest, or a step folder):\n"
            "held-out loss and per-task exact match of the greedy generation, or --prompt.\n\n");
    cli_flag_set set = {eval_flags, &d};
    cli_flags_usage(out, &set, 1, NULL);
}

/* The data settings eval reads with: the checkpoint's (rt_ckpt_data), a
 * --tokenizer at another path checked to be the same tokenizer, a
 * --template or --truncate in place of the checkpoint's. */
typedef struct eval_data {
    const char *tokenizer;    /* NULL: bytes */
    const char *template_str; /* NULL: none */
    int truncate;
} eval_data;

static int eval_data_of(const eval_args *ea, const rt_ckpt_meta *meta, eval_data *d)
{
    const rt_ckpt_data *c = &meta->data;
    d->tokenizer = ea->tokenizer ? ea->tokenizer : strcmp(c->tokenizer, "bytes") != 0 ? c->tokenizer : NULL;
    d->template_str = ea->template_str ? ea->template_str : c->template_str[0] ? c->template_str : NULL;
    d->truncate = ea->truncate || c->truncate;
    if (!c->recorded || (d->tokenizer == NULL && !ea->tokenizer)) return 0;
    /* the tokenizer the checkpoint recorded, still the same file? */
    rt_ckpt_data now;
    dyn_error err;
    rt_ckpt_data want = *c;
    dyn_status st = rt_ckpt_data_of(d->tokenizer, NULL, 0, meta->model.kind, &now, &err);
    snprintf(want.template_str, sizeof want.template_str, "%s", now.template_str); /* compared: the tokenizer only */
    want.truncate = now.truncate;
    if (st == DYN_OK) st = rt_ckpt_data_check(&want, &now, &err);
    if (st != DYN_OK) {
        cli_errorf(CMD, "%s%s", err.msg,
                   ea->tokenizer ? "" : " (give the checkpoint's tokenizer with --tokenizer)");
        return -1;
    }
    return 0;
}

static int run_prompt(dyn_model *m, const rt_ckpt_meta *meta, const eval_data *d, const char *text, int32_t max_new)
{
    dyn_error err;
    dyn_codec *k = dyn_codec_create(d->tokenizer, d->template_str, meta->model.kind, &err);
    if (k == NULL) {
        cli_errorf(CMD, "--prompt: %s", err.msg);
        return CLI_EXIT_FAIL;
    }
    dyn_codec_tokens tok;
    int32_t *in = NULL, *out = NULL;
    dyn_model_acts *a = NULL;
    dyn_status st = dyn_codec_encode_pair(k, text, strlen(text), NULL, 0, &tok, &err);
    if (st == DYN_OK && tok.input_len > INT32_MAX - 1)
        st = dyn_error_set(&err, DYN_ERR_INVALID_ARG, "%lld tokens", (long long)tok.input_len);
    dyn_corpus_specials cs = dyn_codec_specials(k);
    if (st == DYN_OK) {
        in = calloc((size_t)tok.input_len + 1, sizeof(int32_t));
        out = calloc((size_t)max_new + 1, sizeof(int32_t));
        a = dyn_model_acts_create(&err);
        if (in == NULL || out == NULL || a == NULL) st = dyn_error_set(&err, DYN_ERR_NOMEM, "out of memory");
    }
    int32_t n = 0, ng = 0;
    if (st == DYN_OK) {
        memcpy(in, tok.input, (size_t)tok.input_len * sizeof(int32_t));
        n = (int32_t)tok.input_len;
        dyn_model_specials sp = {.pad = cs.pad, .bos = cs.bos, .eos = cs.eos, .decoder_start = cs.decoder_start};
        dyn_model_set_specials(m, &sp);
        st = dyn_model_generate_greedy(m, a, in, n, max_new, out, &ng, &err);
    }
    int ended = st == DYN_OK && ng > 0 && cs.eos >= 0 && out[ng - 1] == cs.eos;
    const char *txt = NULL;
    size_t len = 0;
    if (st == DYN_OK) st = dyn_codec_decode(k, out, (size_t)(ended ? ng - 1 : ng), 0, &txt, &len, &err);
    if (st == DYN_OK) {
        fwrite(txt, 1, len, stdout);
        putchar('\n');
        /* how it ended, apart from the text: stdout stays the answer alone */
        fprintf(stderr, "dynapipe eval: %d prompt tokens, %d generated, %s\n", n, ng,
                ended ? "ended by the end-of-sequence token"
                      : ng == max_new ? "stopped at --max-new (no end-of-sequence token)"
                                      : "stopped at max_seqlen (no end-of-sequence token)");
    } else {
        cli_errorf(CMD, "--prompt: %s", err.msg);
    }
    free(in);
    free(out);
    dyn_model_acts_free(a);
    dyn_codec_free(k);
    return st == DYN_OK ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}

static int run_eval(dyn_model *m, const rt_ckpt_meta *meta, const eval_data *d, const char *spec, int split,
                    int64_t n, int accuracy)
{
    dyn_error err;
    dyn_corpus_options co;
    dyn_corpus_options_default(&co);
    co.split = split ? DYN_SPLIT_HELDOUT : DYN_SPLIT_TRAIN;
    co.builtin_samples = n;
    co.max_seqlen = meta->model.max_seqlen;
    co.kind = meta->model.kind;
    co.vocab = meta->model.vocab;
    co.truncate = d->truncate;
    co.tokenizer = d->tokenizer;
    co.template_str = d->template_str;
    dyn_corpus *c = dyn_corpus_open(spec, &co, &err);
    if (c == NULL) {
        cli_errorf(CMD, "--data %s: %s", spec, err.msg);
        return CLI_EXIT_FAIL;
    }
    rt_eval_result *r = calloc(1, sizeof *r);
    dyn_status st = r ? rt_eval_run(m, c, n, accuracy, r, &err) : DYN_ERR_NOMEM;
    if (st != DYN_OK) {
        cli_errorf(CMD, "%s", r ? err.msg : "out of memory");
        free(r);
        dyn_corpus_free(c);
        return CLI_EXIT_FAIL;
    }
    printf("%s split of %s, %lld samples: loss %.4f nats/target token", split ? "held-out" : "train", spec,
           (long long)r->samples, r->loss);
    if (accuracy)
        printf(", exact match %lld/%lld (%.1f%%)", (long long)r->exact, (long long)r->samples,
               r->samples ? 100.0 * (double)r->exact / (double)r->samples : 0.0);
    printf("\n\n%-10s %8s %8s%s\n", "task", "samples", "loss", accuracy ? "  exact match" : "");
    for (int32_t t = 0; t < r->n_tasks; t++) {
        const rt_eval_task *x = &r->task[t];
        if (x->samples == 0) continue;
        printf("%-10s %8lld %8.4f", x->name, (long long)x->samples,
               x->target_tokens ? x->loss_sum / (double)x->target_tokens : 0.0);
        if (accuracy)
            printf("  %5.1f%% (%lld/%lld)", 100.0 * (double)x->exact / (double)x->samples, (long long)x->exact,
                   (long long)x->samples);
        printf("\n");
    }
    free(r);
    dyn_corpus_free(c);
    return CLI_EXIT_OK;
}

int cli_eval_main(int argc, char **argv)
{
    eval_args ea;
    eval_args_init(&ea);
    cli_flag_set set = {eval_flags, &ea};
    int r = cli_flags_parse(CMD, &set, 1, argc, argv);
    if (r == 1) {
        usage(stdout);
        return CLI_EXIT_OK;
    }
    if (r != 0) return CLI_EXIT_USAGE;
    if (ea.ckpt == NULL) {
        cli_errorf(CMD, "--checkpoint DIR is required");
        return CLI_EXIT_USAGE;
    }
    /* flags of the other mode: --prompt generates once; the rest evaluate */
    const char *other = ea.prompt == NULL ? (ea.have_max_new ? "--max-new" : NULL)
                        : ea.spec         ? "--data"
                        : ea.have_split   ? "--split"
                        : ea.have_n       ? "--samples"
                        : !ea.accuracy    ? "--no-accuracy"
                        : ea.truncate     ? "--truncate"
                                          : NULL;
    if (other != NULL) {
        cli_errorf(CMD, ea.prompt ? "%s applies to the evaluation, not to --prompt" : "%s applies to --prompt only",
                   other);
        return CLI_EXIT_USAGE;
    }
    dyn_threads_init();
    char dir[4096];
    dyn_error err;
    rt_ckpt_meta *meta = calloc(1, sizeof *meta);
    if (meta == NULL) {
        cli_errorf(CMD, "out of memory");
        return CLI_EXIT_FAIL;
    }
    dyn_model *m = NULL;
    if (rt_ckpt_resolve(ea.ckpt, dir, sizeof dir, &err) == DYN_OK) m = rt_ckpt_load_model(dir, meta, &err);
    if (m == NULL) {
        cli_errorf(CMD, "--checkpoint: %s", err.msg);
        free(meta);
        return CLI_EXIT_FAIL;
    }
    dyn_model_set_threads(m, (int)ea.threads);
    int rc;
    eval_data d;
    if (eval_data_of(&ea, meta, &d) != 0) {
        rc = CLI_EXIT_FAIL;
    } else if (ea.prompt) {
        rc = run_prompt(m, meta, &d, ea.prompt, (int32_t)ea.max_new);
    } else {
        printf("checkpoint %s: step %lld, %s %.2fM parameters\n", dir, (long long)meta->step,
               dyn_model_kind_name(meta->model.kind), dyn_model_config_params(&meta->model) / 1e6);
        rc = run_eval(m, meta, &d, ea.spec ? ea.spec : meta->data_spec, ea.split, ea.n, ea.accuracy);
    }
    dyn_model_free(m);
    free(meta);
    return rc;
}
