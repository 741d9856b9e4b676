/* cli_eval.c — `dynapipe eval`: a checkpoint of `dynapipe train --save DIR`
 * assembled into the whole model (one process, no MPI), then its loss and
 * per-task exact-match accuracy on the held-out split, or the greedy
 * continuation of a prompt. The user's check that the model learned. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"                /* defines: cli_errorf, cli_flag_value, cli_parse_*, CLI_EXIT_* */
#include "dynapipe/corpus.h"        /* defines: dyn_corpus_* */
#include "dynapipe/model_config.h"  /* defines: dyn_model_kind_name, dyn_model_config_params */
#include "model/model.h"            /* defines: dyn_model_generate_greedy, DYN_TOK_* */
#include "model/threads.h"          /* defines: dyn_threads_init */
#include "runtime/checkpoint.h"     /* defines: rt_ckpt_resolve, rt_ckpt_load_model */
#include "runtime/evaluate.h"       /* defines: rt_eval_run */

#define CMD "eval"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: dynapipe eval --checkpoint DIR [flags]\n\n"
            "Evaluate a checkpoint of `dynapipe train --save DIR` (DIR's latest, or a step folder):\n"
            "held-out loss and per-task exact match of the greedy generation, or --prompt.\n\n"
            "  --checkpoint DIR     the checkpoint (required)\n"
            "  --data SPEC          token corpus (default: the one the checkpoint trained on),\n"
            "                       its held-out split for the built-in dataset\n"
            "  --split heldout|train  which built-in split (default heldout)\n"
            "  --samples N          samples evaluated (default 200)\n"
            "  --no-accuracy        loss only (skips the greedy generation)\n"
            "  --prompt TEXT        print the greedy continuation of TEXT's bytes followed by the\n"
            "                       separator token (as the built-in tasks' inputs end), and stop\n"
            "  --max-new N          tokens generated for --prompt (default 128)\n"
            "  --threads T          kernel threads (default 1)\n");
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

static int run_eval(dyn_model *m, const rt_ckpt_meta *meta, const char *spec, int split, int64_t n, int accuracy)
{
    dyn_error err;
    dyn_corpus_options co;
    dyn_corpus_options_default(&co);
    co.split = split ? DYN_SPLIT_HELDOUT : DYN_SPLIT_TRAIN;
    co.builtin_samples = n;
    co.max_seqlen = meta->model.max_seqlen;
    co.kind = meta->model.kind;
    co.vocab = meta->model.vocab;
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
    const char *ckpt = NULL, *spec = NULL, *prompt = NULL;
    int64_t n = 200, max_new = 128, threads = 1;
    int accuracy = 1, split = 1;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            usage(stdout);
            return CLI_EXIT_OK;
        }
        if (strcmp(f, "--no-accuracy") == 0) {
            accuracy = 0;
            continue;
        }
        const char *v = cli_flag_value(CMD, argc, argv, &i);
        if (v == NULL) return CLI_EXIT_USAGE;
        if (strcmp(f, "--checkpoint") == 0) ckpt = v;
        else if (strcmp(f, "--data") == 0) spec = v;
        else if (strcmp(f, "--prompt") == 0) prompt = v;
        else if (strcmp(f, "--split") == 0) {
            if (strcmp(v, "heldout") != 0 && strcmp(v, "train") != 0) {
                cli_errorf(CMD, "--split: expected heldout or train, got '%s'", v);
                return CLI_EXIT_USAGE;
            }
            split = v[0] == 'h';
        } else if (strcmp(f, "--samples") == 0) {
            if (cli_parse_i64(CMD, f, v, 1, 100000000, &n)) return CLI_EXIT_USAGE;
        } else if (strcmp(f, "--max-new") == 0) {
            if (cli_parse_i64(CMD, f, v, 1, 1 << 20, &max_new)) return CLI_EXIT_USAGE;
        } else if (strcmp(f, "--threads") == 0) {
            if (cli_parse_i64(CMD, f, v, 1, 1024, &threads)) return CLI_EXIT_USAGE;
        } else {
            cli_errorf(CMD, "unknown flag '%s' (try 'dynapipe eval --help')", f);
            return CLI_EXIT_USAGE;
        }
    }
    if (ckpt == NULL) {
        cli_errorf(CMD, "--checkpoint DIR is required");
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
    if (rt_ckpt_resolve(ckpt, dir, sizeof dir, &err) == DYN_OK) m = rt_ckpt_load_model(dir, meta, &err);
    if (m == NULL) {
        cli_errorf(CMD, "--checkpoint: %s", err.msg);
        free(meta);
        return CLI_EXIT_FAIL;
    }
    dyn_model_set_threads(m, (int)threads);
    int rc;
    if (prompt) {
        rc = run_prompt(m, prompt, (int32_t)max_new);
    } else {
        printf("checkpoint %s: step %lld, %s %.2fM parameters\n", dir, (long long)meta->step,
               dyn_model_kind_name(meta->model.kind), dyn_model_config_params(&meta->model) / 1e6);
        rc = run_eval(m, meta, spec ? spec : meta->data_spec, split, n, accuracy);
    }
    dyn_model_free(m);
    free(meta);
    return rc;
}
