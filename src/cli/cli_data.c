/* cli_data.c — `dynapipe data convert|stats|show|batches`: turn a token
 * source (the built-in dataset, JSONL, Megatron files;
 * include/dynapipe/corpus.h) into a Megatron indexed dataset, print its
 * length statistics and write the TSV of lengths that `dynapipe plan
 * --lengths` reads, print samples as text, or write the global batches
 * `dynapipe train` consumes (ids and tokens, as JSONL) so that another
 * trainer can be fed exactly the same data (bench/torch_train_gpt.py). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"          /* defines: cli_errorf, cli_flag_value, cli_parse_*, CLI_EXIT_* */
#include "dynapipe/corpus.h"  /* defines: dyn_corpus_* */
#include "dynapipe/data.h"    /* defines: dyn_dataset_synthetic_flan, dyn_dataset_free */
#include "dynapipe/model_config.h" /* defines: dyn_model_kind_parse */
#include "util/util.h"        /* defines: dyn_atomic_*, dyn_calloc */

/* The flags every data subcommand takes. */
typedef struct data_args {
    const char *src;
    const char *out;       /* convert: PREFIX; stats: TSV path (--tsv) */
    dyn_corpus_options opt;
    int have_max_seqlen;
    int have_vocab;
    int64_t index, count;  /* show: first sample, samples; batches: global batches */
    int64_t batch_tokens;  /* batches: --global-batch-tokens */
} data_args;

static void data_usage(FILE *out)
{
    fprintf(out,
            "usage: dynapipe data convert SRC --out PREFIX [options]\n"
            "       dynapipe data stats SRC [--tsv FILE.tsv] [options]\n"
            "       dynapipe data show SRC [--index I] [--count N] [options]\n"
            "       dynapipe data batches SRC --max-seqlen L --out FILE.jsonl [--count K]\n"
            "                             [--global-batch-tokens N] [options]\n\n"
            "SRC (a token source):\n"
            "  builtin[:SEED[:TASK+..]]  the built-in multi-task dataset (seed default 1), or\n"
            "                            some of its tasks: copy reverse sort add lookup cipher\n"
            "                            summarise classify\n"
            "  FILE.jsonl                {\"input\",\"target\"} strings, {\"input_ids\",\"target_ids\"},\n"
            "                            {\"text\"} or {\"input_ids\"} (decoder-only), or chat\n"
            "                            {\"messages\"} (the --tokenizer folder's chat template),\n"
            "                            one per line\n"
            "  PREFIX                    Megatron PREFIX.idx/.bin (decoder-only), or the pair\n"
            "                            PREFIX_input + PREFIX_target written by convert\n"
            "  IN_PREFIX,TGT_PREFIX      a pair of Megatron datasets (inputs, targets)\n"
            "  flan[:SEED]               (stats only) the FLAN-like length generator\n\n"
            "convert  writes SRC as a Megatron indexed dataset (atomically): PREFIX.idx/.bin\n"
            "         for decoder-only sources, else PREFIX_input.* and PREFIX_target.*\n"
            "stats    prints the count, length percentiles, per-task shares and a length\n"
            "         histogram; reads every sample (checks every token); --tsv writes\n"
            "         'input_len<TAB>target_len' per sample for 'dynapipe plan --lengths'\n"
            "show     prints samples as text (bytes; other tokens as <id>; with --tokenizer,\n"
            "         decoded by it): --index I (default 0, must exist) and up to --count N\n"
            "         samples after it (default 1)\n"
            "batches  writes the first K global batches (default 20) that `dynapipe train`\n"
            "         trains on from SRC with the same --max-seqlen, --global-batch-tokens\n"
            "         (default 8192), --samples (default 20000 here) and --model: the\n"
            "         sampler's batches in order, wrapping to the data's start at its end,\n"
            "         one JSON line each (atomically): {\"batch\", \"epoch\", \"tokens\",\n"
            "         \"target_tokens\", \"samples\": [{\"id\", \"input_ids\", \"target_ids\"}]}\n"
            "         (tokens = input + target, as train's --metrics counts them)\n\n"
            "options:\n"
            "  --model gpt|t5            which length rule (default gpt: input+target)\n"
            "  --max-seqlen L            length limit, tokens (default 2048 for builtin,\n"
            "                            none for files)\n"
            "  --truncate                clip over-long samples instead of failing\n"
            "  --vocab N                 ids must be < N (default 260, or the tokenizer's size)\n"
            "  --tokenizer DIR|FILE      encode JSONL text with tokenizer.json, a SentencePiece\n"
            "                            model or a model folder (default: bytes); its BOS/EOS\n"
            "                            are added, the target ends with EOS (docs/data.md)\n"
            "  --template STR            input/target text as a prompt: \"..{input}..{target}..\"\n"
            "  --samples N               builtin / flan: number of samples (default 10000, >= 1;\n"
            "                            batches: 20000, train's)\n"
            "  --split train|heldout     builtin: which stream (default train)\n");
}

/* Which subcommands take each valued flag (bit 0 convert, 1 stats, 2 show,
 * 3 batches): a flag that does not apply is refused, not ignored. */
enum { FOR_CONVERT = 1, FOR_STATS = 2, FOR_SHOW = 4, FOR_BATCHES = 8, FOR_ALL = 15 };
static const struct {
    const char *name;
    int subcommands;
} value_flags[] = {
    {"--out", FOR_CONVERT | FOR_BATCHES},
    {"--tsv", FOR_STATS},
    {"--model", FOR_ALL},
    {"--max-seqlen", FOR_ALL},
    {"--vocab", FOR_ALL},
    {"--samples", FOR_ALL},
    {"--index", FOR_SHOW},
    {"--count", FOR_SHOW | FOR_BATCHES},
    {"--global-batch-tokens", FOR_BATCHES},
    {"--split", FOR_ALL},
    {"--tokenizer", FOR_ALL},
    {"--template", FOR_ALL},
};

/* The subcommands that take valued flag `flag`; -1 if it is no valued flag. */
static int flag_subcommands(const char *flag)
{
    for (size_t k = 0; k < sizeof value_flags / sizeof value_flags[0]; k++)
        if (strcmp(flag, value_flags[k].name) == 0) return value_flags[k].subcommands;
    return -1;
}

static int subcommand_bit(const char *cmd)
{
    return strcmp(cmd, "data convert") == 0 ? FOR_CONVERT
           : strcmp(cmd, "data stats") == 0 ? FOR_STATS
           : strcmp(cmd, "data show") == 0  ? FOR_SHOW
                                            : FOR_BATCHES;
}

/* A path or prefix given to flag: neither empty (it would be taken as a
 * name: `--out ''` wrote "_input.idx" into the current folder) nor a folder
 * (a trailing '/' leaves the file name empty; an existing folder's name as
 * a prefix would write beside it). 0, or -1 with the usage error printed. */
static int check_path(const char *cmd, const char *flag, const char *v)
{
    size_t n = strlen(v);
    if (n == 0) {
        cli_errorf(cmd, "%s: the path is empty", flag);
        return -1;
    }
    struct stat sb;
    if (v[n - 1] == '/' || (stat(v, &sb) == 0 && S_ISDIR(sb.st_mode))) {
        cli_errorf(cmd, "%s: '%s' names a folder; give a file name%s", flag, v,
                   strcmp(cmd, "data convert") == 0 ? " prefix inside it" : " inside it");
        return -1;
    }
    return 0;
}

static int is_builtin(const char *src) { return strncmp(src, "builtin", 7) == 0 && (src[7] == '\0' || src[7] == ':'); }
static int is_flan(const char *src) { return strncmp(src, "flan", 4) == 0 && (src[4] == '\0' || src[4] == ':'); }

static int data_parse(const char *cmd, int argc, char **argv, data_args *a)
{
    memset(a, 0, sizeof *a);
    dyn_corpus_options_default(&a->opt);
    /* batches: train's defaults, so that the same flags give the same batches */
    int batches = strcmp(cmd, "data batches") == 0;
    a->opt.builtin_samples = batches ? 20000 : 10000;
    a->count = batches ? 20 : 1;
    a->batch_tokens = 8192;
    int samples_flag = 0, split_flag = 0; /* given: they apply to builtin (and flan) only */
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v;
        int subs;
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            data_usage(stdout);
            return 1;
        } else if (f[0] != '-' || f[1] == '\0') {
            if (a->src) {
                cli_errorf(cmd, "one source only (got '%s' and '%s')", a->src, f);
                return -1;
            }
            if (f[0] == '\0') {
                cli_errorf(cmd, "the source is empty (a file, a prefix, builtin or flan)");
                return -1;
            }
            a->src = f;
        } else if (strcmp(f, "--truncate") == 0) {
            a->opt.truncate = 1;
        } else if ((subs = flag_subcommands(f)) < 0) {
            cli_errorf(cmd, "unknown option '%s' (try --help)", f);
            return -1;
        } else if (!(subs & subcommand_bit(cmd))) {
            cli_errorf(cmd, "%s does not apply to %s (try --help)", f, cmd);
            return -1;
        } else if ((v = cli_flag_value(cmd, argc, argv, &i)) == NULL) {
            return -1;
        } else if (strcmp(f, "--out") == 0 || strcmp(f, "--tsv") == 0) {
            if (check_path(cmd, f, v) != 0) return -1;
            a->out = v;
        } else if (strcmp(f, "--model") == 0) {
            dyn_error err;
            if (dyn_model_kind_parse(v, &a->opt.kind, &err) != DYN_OK) {
                cli_errorf(cmd, "--model: %s", err.msg);
                return -1;
            }
        } else if (strcmp(f, "--max-seqlen") == 0) {
            if (cli_parse_i32(cmd, f, v, 2, INT32_MAX, &a->opt.max_seqlen) != 0) return -1;
            a->have_max_seqlen = 1;
        } else if (strcmp(f, "--vocab") == 0) {
            if (cli_parse_i32(cmd, f, v, 1, INT32_MAX, &a->opt.vocab) != 0) return -1;
            a->have_vocab = 1;
        } else if (strcmp(f, "--tokenizer") == 0) {
            if (v[0] == '\0') {
                cli_errorf(cmd, "--tokenizer: the path is empty");
                return -1;
            }
            a->opt.tokenizer = v;
        } else if (strcmp(f, "--template") == 0) {
            a->opt.template_str = v;
        } else if (strcmp(f, "--samples") == 0) {
            /* At least one: an empty dataset is refused by every reader. */
            if (cli_parse_i64(cmd, f, v, 1, INT32_MAX, &a->opt.builtin_samples) != 0) return -1;
            samples_flag = 1;
        } else if (strcmp(f, "--index") == 0) {
            if (cli_parse_i64(cmd, f, v, 0, INT64_MAX, &a->index) != 0) return -1;
        } else if (strcmp(f, "--count") == 0) {
            if (cli_parse_i64(cmd, f, v, 1, INT64_MAX, &a->count) != 0) return -1;
        } else if (strcmp(f, "--global-batch-tokens") == 0) {
            if (cli_parse_i64(cmd, f, v, 1, INT64_MAX, &a->batch_tokens) != 0) return -1;
        } else if (strcmp(f, "--split") == 0) {
            if (strcmp(v, "train") == 0) a->opt.split = DYN_SPLIT_TRAIN;
            else if (strcmp(v, "heldout") == 0) a->opt.split = DYN_SPLIT_HELDOUT;
            else {
                cli_errorf(cmd, "--split: '%s' is not train or heldout", v);
                return -1;
            }
            split_flag = 1;
        }
    }
    if (a->src == NULL) {
        cli_errorf(cmd, "a source is required (try --help)");
        return -1;
    }
    /* --samples and --split describe the generated sources; a file has its own. */
    if (samples_flag && !is_builtin(a->src) && !is_flan(a->src)) {
        cli_errorf(cmd, "--samples applies to builtin and flan only, not to '%s'", a->src);
        return -1;
    }
    if (split_flag && !is_builtin(a->src)) {
        cli_errorf(cmd, "--split applies to builtin only, not to '%s'", a->src);
        return -1;
    }
    /* With a tokenizer, ids are checked against its size unless --vocab says. */
    if (a->opt.tokenizer && !a->have_vocab) a->opt.vocab = 0;
    /* Files have no limit unless asked; the built-in tasks scale to it. */
    if (!a->have_max_seqlen && !is_builtin(a->src)) a->opt.max_seqlen = INT32_MAX;
    return 0;
}


static dyn_corpus *open_source(const char *cmd, const data_args *a)
{
    dyn_error err;
    if (is_flan(a->src)) {
        cli_errorf(cmd, "%s has lengths only, no tokens: use it with 'dynapipe data stats'", a->src);
        return NULL;
    }
    dyn_corpus *c = dyn_corpus_open(a->src, &a->opt, &err);
    if (c == NULL) cli_errorf(cmd, "%s", err.msg);
    return c;
}

/* ---- convert ---------------------------------------------------------------- */

static int data_convert(int argc, char **argv)
{
    const char *cmd = "data convert";
    data_args a;
    int r = data_parse(cmd, argc, argv, &a);
    if (r != 0) return r > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    if (a.out == NULL) {
        cli_errorf(cmd, "--out PREFIX is required");
        return CLI_EXIT_USAGE;
    }
    dyn_corpus *c = open_source(cmd, &a);
    if (c == NULL) return CLI_EXIT_FAIL;
    dyn_error err;
    if (dyn_corpus_write_indexed(c, a.out, &err) != DYN_OK) {
        cli_errorf(cmd, "%s", err.msg);
        dyn_corpus_free(c);
        return CLI_EXIT_FAIL;
    }
    if (dyn_corpus_decoder_only(c))
        printf("wrote %lld sequences to %s.idx and %s.bin (decoder-only; open as '%s')\n",
               (long long)dyn_corpus_count(c), a.out, a.out, a.out);
    else
        printf("wrote %lld samples to %s_input.{idx,bin} and %s_target.{idx,bin} (open as '%s')\n",
               (long long)dyn_corpus_count(c), a.out, a.out, a.out);
    dyn_corpus_free(c);
    return CLI_EXIT_OK;
}

/* ---- stats ------------------------------------------------------------------- */

static int cmp_i32(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* Nearest-rank percentile of sorted v[n]: the smallest value with at least
 * p of the samples at or below it. */
static int32_t percentile(const int32_t *v, int64_t n, double p)
{
    int64_t k = (int64_t)ceil(p * (double)n) - 1;
    if (k < 0) k = 0;
    if (k >= n) k = n - 1;
    return v[k];
}

/* One row of the percentile table for lengths v[n] (sorted here). */
static void print_row(const char *name, int32_t *v, int64_t n)
{
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += v[i];
    qsort(v, (size_t)n, sizeof *v, cmp_i32);
    printf("%-8s %9.1f %7d %7d %7d %7d %7d\n", name, sum / (double)n, v[0], percentile(v, n, 0.5),
           percentile(v, n, 0.9), percentile(v, n, 0.99), v[n - 1]);
}

/* Percentages of samples per power-of-two bucket [2^k, 2^(k+1)) of input,
 * target and input + target. */
static void print_histogram(const dyn_dataset *ds)
{
    enum { NB = 32 };
    int64_t h[3][NB] = {{0}};
    int top = 0;
    for (int32_t i = 0; i < ds->n; i++) {
        int64_t len[3] = {ds->samples[i].input_len, ds->samples[i].target_len,
                          (int64_t)ds->samples[i].input_len + ds->samples[i].target_len};
        for (int k = 0; k < 3; k++) {
            int b = 0;
            while (b < NB - 1 && (len[k] >> (b + 1)) > 0) b++;
            h[k][b]++;
            if (b > top) top = b;
        }
    }
    printf("\nhistogram (%% of samples per length bucket, tokens):\n");
    printf("%-16s %8s %8s %8s\n", "bucket", "input", "target", "total");
    for (int b = 0; b <= top; b++) {
        char name[40];
        snprintf(name, sizeof name, "[%lld, %lld)", 1LL << b, 1LL << (b + 1));
        printf("%-16s %8.2f %8.2f %8.2f\n", name, 100.0 * (double)h[0][b] / ds->n,
               100.0 * (double)h[1][b] / ds->n, 100.0 * (double)h[2][b] / ds->n);
    }
}

/* Per-task share and mean lengths (the built-in dataset and flan). */
static void print_tasks(const dyn_dataset *ds, int32_t ntasks, const char *(*name)(const void *, int32_t),
                        const void *ctx)
{
    printf("\n%-18s %7s %11s %11s\n", "task", "share", "mean input", "mean target");
    for (int32_t t = 0; t < ntasks; t++) {
        int64_t n = 0;
        double in = 0, tgt = 0;
        for (int32_t i = 0; i < ds->n; i++)
            if (ds->samples[i].task == t) {
                n++;
                in += ds->samples[i].input_len;
                tgt += ds->samples[i].target_len;
            }
        printf("%-18s %7.3f %11.1f %11.1f\n", name(ctx, t), (double)n / ds->n, n ? in / (double)n : 0.0,
               n ? tgt / (double)n : 0.0);
    }
}

static const char *corpus_task(const void *ctx, int32_t t) { return dyn_corpus_task_name(ctx, t); }

static const char *flan_task(const void *ctx, int32_t t)
{
    (void)ctx;
    int32_t n;
    return dyn_flan_families(&n)[t].name;
}

/* Write the lengths as TSV (atomically). */
static int write_tsv(const char *cmd, const char *path, const char *src, const dyn_dataset *ds)
{
    dyn_atomic_file af;
    dyn_error err;
    if (dyn_atomic_open(&af, path, &err) != DYN_OK) {
        cli_errorf(cmd, "%s", err.msg);
        return -1;
    }
    fprintf(af.fp, "# lengths of %s (tokens), written by dynapipe data stats\ninput_len\ttarget_len\n", src);
    for (int32_t i = 0; i < ds->n; i++)
        fprintf(af.fp, "%d\t%d\n", ds->samples[i].input_len, ds->samples[i].target_len);
    if (dyn_atomic_commit(&af, &err) != DYN_OK) {
        cli_errorf(cmd, "%s", err.msg);
        return -1;
    }
    return 0;
}

static int data_stats(int argc, char **argv)
{
    const char *cmd = "data stats";
    data_args a;
    int r = data_parse(cmd, argc, argv, &a);
    if (r != 0) return r > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    dyn_dataset ds = {0};
    dyn_corpus *c = NULL;
    dyn_error err;
    int rc = CLI_EXIT_FAIL;
    if (is_flan(a.src)) {
        int64_t seed = 1;
        if (a.src[4] == ':' && cli_parse_i64(cmd, "flan seed", a.src + 5, 0, INT64_MAX, &seed) != 0)
            return CLI_EXIT_USAGE;
        int32_t L = a.have_max_seqlen ? a.opt.max_seqlen : 2048;
        if (dyn_dataset_synthetic_flan((uint64_t)seed, (int32_t)a.opt.builtin_samples, L, a.opt.kind, &ds, &err) !=
            DYN_OK) {
            cli_errorf(cmd, "%s", err.msg);
            return CLI_EXIT_FAIL;
        }
    } else {
        if ((c = open_source(cmd, &a)) == NULL) return CLI_EXIT_FAIL;
        if (dyn_corpus_lengths(c, &ds, &err) != DYN_OK) {
            cli_errorf(cmd, "%s", err.msg);
            goto done;
        }
        /* Read every sample: checks every token (Megatron ids, files changed). */
        for (int64_t i = 0; i < dyn_corpus_count(c); i++) {
            dyn_corpus_sample s;
            if (dyn_corpus_read(c, i, &s, &err) != DYN_OK) {
                cli_errorf(cmd, "%s", err.msg);
                goto done;
            }
        }
    }
    if (ds.n == 0) {
        cli_errorf(cmd, "%s: no samples", a.src);
        goto done;
    }
    int32_t *v = dyn_calloc((size_t)ds.n, sizeof *v, "lengths", &err);
    if (v == NULL) {
        cli_errorf(cmd, "%s", err.msg);
        goto done;
    }
    int64_t tok_in = 0, tok_tgt = 0;
    for (int32_t i = 0; i < ds.n; i++) {
        tok_in += ds.samples[i].input_len;
        tok_tgt += ds.samples[i].target_len;
    }
    printf("source %s: %d samples, %lld input + %lld target tokens%s\n", a.src, ds.n, (long long)tok_in,
           (long long)tok_tgt, c && dyn_corpus_decoder_only(c) ? " (decoder-only: input = first token)" : "");
    printf("%-8s %9s %7s %7s %7s %7s %7s\n", "tokens", "mean", "min", "p50", "p90", "p99", "max");
    for (int k = 0; k < 3; k++) {
        for (int32_t i = 0; i < ds.n; i++)
            v[i] = k == 0 ? ds.samples[i].input_len : k == 1 ? ds.samples[i].target_len
                                                              : ds.samples[i].input_len + ds.samples[i].target_len;
        print_row(k == 0 ? "input" : k == 1 ? "target" : "total", v, ds.n);
    }
    free(v);
    if (c && dyn_corpus_num_tasks(c) > 0) print_tasks(&ds, dyn_corpus_num_tasks(c), corpus_task, c);
    if (c == NULL) {
        int32_t nf;
        dyn_flan_families(&nf);
        print_tasks(&ds, nf, flan_task, NULL);
    }
    print_histogram(&ds);
    if (a.out && write_tsv(cmd, a.out, a.src, &ds) != 0) goto done;
    if (a.out) printf("\nwrote %d lengths to %s\n", ds.n, a.out);
    rc = CLI_EXIT_OK;
done:
    dyn_dataset_free(&ds);
    dyn_corpus_free(c);
    return rc;
}

/* ---- show -------------------------------------------------------------------- */

static void print_tokens(const int32_t *t, int32_t n)
{
    for (int32_t k = 0; k < n; k++) {
        if (t[k] == DYN_CORPUS_TOK_SEP) fputs("<sep>", stdout);
        else if (t[k] == DYN_CORPUS_TOK_EOS) fputs("<eos>", stdout);
        else if (t[k] >= 32 && t[k] < 127 && t[k] != '<') putchar(t[k]);
        else printf("<%d>", t[k]);
    }
    putchar('\n');
}

/* Decoded text of t[n] by the corpus's tokenizer, with control characters
 * and backslashes escaped so that a sample stays on one line. */
static int print_decoded(const char *cmd, dyn_codec *k, const int32_t *t, int32_t n)
{
    const char *text;
    size_t len;
    dyn_error err;
    if (dyn_codec_decode(k, t, (size_t)n, 0, &text, &len, &err) != DYN_OK) {
        cli_errorf(cmd, "%s", err.msg);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch == '\n') fputs("\\n", stdout);
        else if (ch == '\\') fputs("\\\\", stdout);
        else if (ch < 32 || ch == 127) printf("\\x%02x", ch);
        else putchar(ch);
    }
    printf("  [%d tokens]\n", n);
    return 0;
}

static int data_show(int argc, char **argv)
{
    const char *cmd = "data show";
    data_args a;
    int r = data_parse(cmd, argc, argv, &a);
    if (r != 0) return r > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    dyn_corpus *c = open_source(cmd, &a);
    if (c == NULL) return CLI_EXIT_FAIL;
    /* Past the end is an error, not an empty listing; --count is clipped to
     * what is left, computed without overflow for any accepted value. */
    int64_t n = dyn_corpus_count(c);
    if (a.index >= n) {
        cli_errorf(cmd, "--index %lld is past the last sample: %s has %lld (indices 0..%lld)", (long long)a.index,
                   a.src, (long long)n, (long long)n - 1);
        dyn_corpus_free(c);
        return CLI_EXIT_FAIL;
    }
    int64_t end = a.count < n - a.index ? a.index + a.count : n;
    int rc = CLI_EXIT_OK;
    for (int64_t i = a.index; i < end; i++) {
        dyn_corpus_sample s;
        dyn_error err;
        if (dyn_corpus_read(c, i, &s, &err) != DYN_OK) {
            cli_errorf(cmd, "%s", err.msg);
            rc = CLI_EXIT_FAIL;
            break;
        }
        const char *task = dyn_corpus_task_name(c, s.task);
        printf("sample %lld%s%s: input %d tokens, target %d tokens%s\n", (long long)i, task ? " " : "",
               task ? task : "", s.input_len, s.target_len, s.truncated ? " (truncated)" : "");
        dyn_codec *k = dyn_corpus_codec(c);
        if (dyn_codec_is_bytes(k)) {
            fputs("  input:  ", stdout);
            print_tokens(s.input, s.input_len);
            fputs("  target: ", stdout);
            print_tokens(s.target, s.target_len);
        } else {
            fputs("  input:  ", stdout);
            if (print_decoded(cmd, k, s.input, s.input_len) != 0) {
                rc = CLI_EXIT_FAIL;
                break;
            }
            fputs("  target: ", stdout);
            if (print_decoded(cmd, k, s.target, s.target_len) != 0) {
                rc = CLI_EXIT_FAIL;
                break;
            }
        }
    }
    dyn_corpus_free(c);
    return rc;
}

/* ---- batches ----------------------------------------------------------------- */

/* The sampler's next global batch as `dynapipe train`'s planner takes it
 * (src/runtime/planner.c, next_batch): at the end of the data, the sampler
 * starts again from the first sample (*epoch counts those restarts). */
static dyn_status next_global_batch(dyn_sampler *s, const dyn_sample **batch, int32_t *n, int64_t *epoch,
                                    dyn_error *err)
{
    dyn_status st = dyn_sampler_next(s, batch, n, err);
    if (st == DYN_OK && *n == 0) {
        dyn_sampler_reset(s);
        (*epoch)++;
        st = dyn_sampler_next(s, batch, n, err);
    }
    if (st == DYN_OK && *n == 0) st = dyn_error_set(err, DYN_ERR_INVALID_ARG, "the dataset has no samples");
    return st;
}

/* ids[n] as a JSON array. */
static void put_ids(FILE *fp, const int32_t *ids, int32_t n)
{
    fputc('[', fp);
    for (int32_t k = 0; k < n; k++) fprintf(fp, k ? ",%d" : "%d", ids[k]);
    fputc(']', fp);
}

/* Global batch k (n samples of ds from the sampler) as one JSON line. */
static dyn_status put_batch(FILE *fp, dyn_corpus *c, int64_t k, int64_t epoch, const dyn_sample *batch, int32_t n,
                            dyn_error *err)
{
    int64_t tokens = 0, target = 0;
    for (int32_t i = 0; i < n; i++) {
        tokens += (int64_t)batch[i].input_len + batch[i].target_len;
        target += batch[i].target_len;
    }
    fprintf(fp, "{\"batch\":%lld,\"epoch\":%lld,\"tokens\":%lld,\"target_tokens\":%lld,\"samples\":[", (long long)k,
            (long long)epoch, (long long)tokens, (long long)target);
    for (int32_t i = 0; i < n; i++) {
        dyn_corpus_sample s;
        dyn_status st = dyn_corpus_read(c, batch[i].id, &s, err);
        if (st != DYN_OK) return st;
        /* the sampler's lengths are the corpus's (dyn_corpus_lengths) */
        if (s.input_len != batch[i].input_len || s.target_len != batch[i].target_len)
            return dyn_error_set(err, DYN_ERR_INTERNAL, "sample %d: read %d+%d tokens, its lengths say %d+%d",
                                 batch[i].id, s.input_len, s.target_len, batch[i].input_len, batch[i].target_len);
        fprintf(fp, "%s{\"id\":%d,\"input_ids\":", i ? "," : "", batch[i].id);
        put_ids(fp, s.input, s.input_len);
        fputs(",\"target_ids\":", fp);
        put_ids(fp, s.target, s.target_len);
        fputc('}', fp);
    }
    fputs("]}\n", fp);
    return DYN_OK;
}

static int data_batches(int argc, char **argv)
{
    const char *cmd = "data batches";
    data_args a;
    int r = data_parse(cmd, argc, argv, &a);
    if (r != 0) return r > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    /* train's default length limit is not data's: ask rather than guess */
    if (!a.have_max_seqlen) {
        cli_errorf(cmd, "--max-seqlen L is required: the training run's (train's default is 512)");
        return CLI_EXIT_USAGE;
    }
    if (a.out == NULL) {
        cli_errorf(cmd, "--out FILE.jsonl is required");
        return CLI_EXIT_USAGE;
    }
    dyn_corpus *c = open_source(cmd, &a);
    if (c == NULL) return CLI_EXIT_FAIL;
    dyn_dataset ds = {0};
    dyn_sampler *s = NULL;
    dyn_atomic_file af = {0}; /* zeroed: abort is a no-op until it is opened */
    int64_t epoch = 0;
    int rc = CLI_EXIT_FAIL;
    dyn_error err;
    if (dyn_corpus_lengths(c, &ds, &err) != DYN_OK) goto done;
    if (ds.n == 0) {
        dyn_error_set(&err, DYN_ERR_INVALID_ARG, "%s: no samples", a.src);
        goto done;
    }
    /* what train's planner makes: one pass in dataset order (rt_planner_create) */
    if ((s = dyn_sampler_create(&ds, a.batch_tokens, &err)) == NULL) goto done;
    if (dyn_atomic_open(&af, a.out, &err) != DYN_OK) goto done;
    for (int64_t k = 0; k < a.count; k++) {
        const dyn_sample *batch;
        int32_t n;
        if (next_global_batch(s, &batch, &n, &epoch, &err) != DYN_OK ||
            put_batch(af.fp, c, k, epoch, batch, n, &err) != DYN_OK)
            goto done;
    }
    if (ferror(af.fp)) {
        dyn_error_set(&err, DYN_ERR_IO, "%s: write failed", a.out);
        goto done;
    }
    if (dyn_atomic_commit(&af, &err) != DYN_OK) goto done; /* releases af either way */
    printf("wrote %lld global batch%s of <= %lld tokens to %s\n", (long long)a.count, a.count == 1 ? "" : "es",
           (long long)a.batch_tokens, a.out);
    rc = CLI_EXIT_OK;
done:
    if (rc != CLI_EXIT_OK) {
        cli_errorf(cmd, "%s", err.msg);
        dyn_atomic_abort(&af);
    }
    dyn_sampler_free(s);
    dyn_dataset_free(&ds);
    dyn_corpus_free(c);
    return rc;
}

int cli_data_main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        data_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    }
    if (strcmp(argv[1], "convert") == 0) return data_convert(argc - 1, argv + 1);
    if (strcmp(argv[1], "stats") == 0) return data_stats(argc - 1, argv + 1);
    if (strcmp(argv[1], "show") == 0) return data_show(argc - 1, argv + 1);
    if (strcmp(argv[1], "batches") == 0) return data_batches(argc - 1, argv + 1);
    cli_errorf("data", "unknown subcommand '%s' (convert, stats, show or batches)", argv[1]);
    return CLI_EXIT_USAGE;
}
