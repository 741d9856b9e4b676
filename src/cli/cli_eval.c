/* cli_eval.c — `dynapipe eval`: a checkpoint of `dynapipe train --save DIR`
 * assembled into the whole model (one process, no MPI), then its loss and
 * per-task exact-match accuracy on an evaluation set, or the greedy
 * continuation of a prompt. The user's check that the model learned.
 *
 * The evaluation set, and what the output calls it: --eval-data FILE (or
 * the checkpoint's) is a "validation" set; --eval-split P (or the
 * checkpoint's) is the "held-out" part of the data that training never
 * sampled; the built-in dataset has a "held-out" stream; anything else is
 * the training file itself, and its loss a "train-data" loss. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"                /* defines: cli_errorf, CLI_EXIT_* */
#include "cli/flags.h"              /* defines: cli_flag, cli_flags_parse, cli_flags_usage */
#include "dynapipe/corpus.h"        /* defines: dyn_corpus_* */
#include "dynapipe/model_config.h"  /* defines: dyn_model_kind_name, dyn_model_config_params */
#include "model/model.h"            /* defines: dyn_model_generate_greedy, DYN_TOK_* */
#include "model/threads.h"          /* defines: dyn_threads_init */
#include "runtime/checkpoint.h"     /* defines: rt_ckpt_resolve, rt_ckpt_load_model */
#include "runtime/evaluate.h"       /* defines: rt_eval_run */

#define CMD "eval"

/* The flags (read-only once parsed). */
typedef struct eval_args {
    const char *ckpt, *spec, *prompt, *eval_data;
    double eval_split; /* 0: the checkpoint's (for its own data) */
    int64_t n, max_new, threads;
    int accuracy;
    int split; /* 0 train, 1 heldout (split_names) */
    int have_split, have_n, have_max_new; /* given */
} eval_args;

/* --eval-split P: a fraction in (0, 1). */
static int parse_eval_split(const char *cmd, const cli_flag *f, const char *v, void *args)
{
    return cli_parse_fraction(cmd, f->name, v, &((eval_args *)args)->eval_split);
}

static const char *const split_names[] = {"train", "heldout", NULL};

static const cli_flag eval_flags[] = {
    {.name = "--checkpoint", .metavar = "DIR", .type = CLI_FLAG_PATH, .field = offsetof(eval_args, ckpt),
     .help = "the checkpoint", .def = "required"},
    {.name = "--data", .metavar = "SPEC", .type = CLI_FLAG_PATH, .field = offsetof(eval_args, spec),
     .help = "token corpus, its held-out split for the built-in dataset",
     .def = "the one the checkpoint trained on"},
    {.name = "--split", .metavar = "heldout|train", .type = CLI_FLAG_ENUM, .field = offsetof(eval_args, split),
     .given = CLI_GIVEN(eval_args, have_split), .names = split_names, .help = "which built-in split"},
    {.name = "--eval-data", .metavar = "FILE", .type = CLI_FLAG_PATH, .field = offsetof(eval_args, eval_data),
     .help = "a validation set (any --data SPEC)", .def = "the checkpoint's --eval-data"},
    {.name = "--eval-split", .metavar = "P", .type = CLI_FLAG_FN, .parse = parse_eval_split,
     .help = "the held-out fraction P of --data (as train --eval-split P:\nthe same samples)",
     .def = "the checkpoint's, on its own data"},
    {.name = "--samples", .metavar = "N", .type = CLI_FLAG_I64, .field = offsetof(eval_args, n),
     .given = CLI_GIVEN(eval_args, have_n), .min = 1, .max = 100000000, .help = "samples evaluated"},
    CLI_BOOL("--no-accuracy", eval_args, accuracy, 0, "loss only (skips the greedy generation)"),
    CLI_STR("--prompt", "TEXT", eval_args, prompt,
            "print the greedy continuation of TEXT's bytes followed by the\n"
            "separator token (as the built-in tasks' inputs end), and stop"),
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
            "the loss on an evaluation set (held-out, validation or the training data: the\n"
            "first line says which) and per-task exact match of the greedy generation, or\n"
            "--prompt.\n\n");
    cli_flag_set set = {eval_flags, &d};
    cli_flags_usage(out, &set, 1, NULL);
}

/* Tokens as text: bytes as they are, the special tokens by name. */
static void print_tokens(const int32_t *t, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        if (t[i] == DYN_TOK_EOS) break;
        if (t[i] >= 0 && t[i] < 256) putchar(t[i]);
        else printf("<%d>", t[i]);
    }
    putchar('\n');
}

static int run_prompt(dyn_model *m, const char *text, int32_t max_new)
{
    dyn_error err;
    int32_t n = (int32_t)strlen(text);
    int32_t *in = calloc((size_t)n + 1, sizeof(int32_t));
    int32_t *out = calloc((size_t)max_new + 1, sizeof(int32_t));
    dyn_model_acts *a = dyn_model_acts_create(&err);
    if (in == NULL || out == NULL || a == NULL) {
        cli_errorf(CMD, "out of memory");
        free(in);
        free(out);
        dyn_model_acts_free(a);
        return CLI_EXIT_FAIL;
    }
    for (int32_t i = 0; i < n; i++) in[i] = (unsigned char)text[i];
    in[n] = DYN_TOK_SEP;
    int32_t ng = 0;
    dyn_status st = dyn_model_generate_greedy(m, a, in, n + 1, max_new, out, &ng, &err);
    if (st == DYN_OK) print_tokens(out, ng);
    else cli_errorf(CMD, "--prompt: %s", err.msg);
    free(in);
    free(out);
    dyn_model_acts_free(a);
    return st == DYN_OK ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}

/* The evaluation set of ea against the checkpoint meta (the file comment):
 * its spec, built-in split, held-out fraction, and the words the output
 * uses for it. */
typedef struct eval_set {
    const char *spec;
    int split;          /* built-in: 1 the held-out stream */
    double fraction;    /* > 0: the held-out part of spec (dyn_eval_split) */
    const char *kind;   /* "validation", "held-out", "train-data" or "" */
    char what[1200];    /* "validation set v.jsonl", ... */
} eval_set;

static int is_builtin(const char *spec)
{
    return strncmp(spec, "builtin", 7) == 0 && (spec[7] == '\0' || spec[7] == ':');
}

static void eval_set_of(const eval_args *ea, const rt_ckpt_meta *meta, eval_set *es)
{
    memset(es, 0, sizeof *es);
    es->split = ea->split;
    const char *valid = ea->eval_data ? ea->eval_data : !ea->spec && !ea->have_split && !ea->eval_split &&
                                                                meta->eval_data[0] ? meta->eval_data : NULL;
    if (valid) {
        es->spec = valid;
        es->kind = "validation";
        snprintf(es->what, sizeof es->what, "validation set %s", valid);
        return;
    }
    es->spec = ea->spec ? ea->spec : meta->data_spec;
    int own = strcmp(es->spec, meta->data_spec) == 0; /* the data the checkpoint trained on */
    es->fraction = ea->eval_split > 0 ? ea->eval_split : own ? meta->eval_split : 0;
    if (es->fraction > 0) {
        es->split = own ? meta->split : 0; /* the split trained on, less its held-out part */
        /* the held-out set of a fraction holds that of any smaller one
         * (dyn_eval_split: the first round(P n) in a fixed hash order) */
        int untrained = own && es->fraction <= meta->eval_split;
        es->kind = !own || untrained ? "held-out" : "";
        if (own && !untrained)
            snprintf(es->what, sizeof es->what,
                     "%g of %s (--eval-split; the checkpoint held out %g, so some of these trained)", es->fraction,
                     es->spec, meta->eval_split);
        else
            snprintf(es->what, sizeof es->what, "held-out %g of %s (--eval-split%s)", es->fraction, es->spec,
                     own ? ", never trained" : "");
    } else if (is_builtin(es->spec)) {
        es->kind = es->split ? "held-out" : "train-data";
        snprintf(es->what, sizeof es->what, "%s split of %s", es->split ? "held-out" : "train", es->spec);
    } else if (own) {
        es->kind = "train-data";
        snprintf(es->what, sizeof es->what,
                 "%s, the training data (not held out: --eval-data FILE or --eval-split P gives a held-out set)",
                 es->spec);
    } else {
        es->kind = "";
        snprintf(es->what, sizeof es->what, "%s", es->spec);
    }
}

static int run_eval(dyn_model *m, const rt_ckpt_meta *meta, const eval_set *es, int64_t n, int accuracy)
{
    dyn_error err;
    dyn_corpus_options co;
    dyn_corpus_options_default(&co);
    co.split = es->split ? DYN_SPLIT_HELDOUT : DYN_SPLIT_TRAIN;
    co.builtin_samples = es->fraction > 0 ? meta->n_samples : n;
    co.max_seqlen = meta->model.max_seqlen;
    co.kind = meta->model.kind;
    co.vocab = meta->model.vocab;
    const char *flag = es->kind[0] == 'v' ? "--eval-data" : "--data";
    dyn_corpus *c = dyn_corpus_open(es->spec, &co, &err);
    if (c == NULL) {
        cli_errorf(CMD, "%s %s: %s", flag, es->spec, err.msg);
        return CLI_EXIT_FAIL;
    }
    /* the held-out part: the first n of its samples, as train --eval-every */
    int64_t *ids = NULL, total = dyn_corpus_count(c);
    dyn_status st = DYN_OK;
    if (es->fraction > 0) {
        int32_t held = 0;
        uint8_t *out = total <= INT32_MAX ? calloc((size_t)total + 1, 1) : NULL;
        ids = calloc((size_t)(total < n ? total : n) + 1, sizeof *ids);
        if (out == NULL || ids == NULL) st = dyn_error_set(&err, DYN_ERR_NOMEM, "out of memory");
        if (st == DYN_OK) st = dyn_eval_split((int32_t)total, es->fraction, out, &held, &err);
        int64_t k = 0;
        for (int64_t i = 0; st == DYN_OK && i < total && k < n; i++)
            if (out[i]) ids[k++] = i;
        n = k;
        free(out);
    }
    rt_eval_result *r = st == DYN_OK ? calloc(1, sizeof *r) : NULL;
    if (st == DYN_OK) st = r ? rt_eval_run(m, c, ids, n, accuracy, r, &err) : dyn_error_set(&err, DYN_ERR_NOMEM, "out of memory");
    free(ids);
    if (st != DYN_OK) {
        cli_errorf(CMD, "%s %s: %s", flag, es->spec, err.msg);
        free(r);
        dyn_corpus_free(c);
        return CLI_EXIT_FAIL;
    }
    printf("%s, %lld samples: %s%sloss %.4f nats/target token", es->what, (long long)r->samples, es->kind,
           es->kind[0] ? " " : "", r->loss);
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
                        : ea.eval_data    ? "--eval-data"
                        : ea.eval_split   ? "--eval-split"
                        : ea.have_split   ? "--split"
                        : ea.have_n       ? "--samples"
                        : !ea.accuracy    ? "--no-accuracy"
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
    if (ea.prompt) {
        rc = run_prompt(m, ea.prompt, (int32_t)ea.max_new);
    } else {
        printf("checkpoint %s: step %lld, %s %.2fM parameters\n", dir, (long long)meta->step,
               dyn_model_kind_name(meta->model.kind), dyn_model_config_params(&meta->model) / 1e6);
        eval_set es;
        eval_set_of(&ea, meta, &es);
        rc = run_eval(m, meta, &es, ea.n, ea.accuracy);
    }
    dyn_model_free(m);
    free(meta);
    return rc;
}
