/* plan_args.c — the planning flags (see plan_args.h): their table (flags.h:
 * parsing, errors and --help come from it), and building the model,
 * machine, cost model, samples and planner from them. Shared by
 * `dynapipe plan`, `simulate` and `train`.
 *
 * Defaults (plan_args_init; train sets its own before parsing), chosen so
 * that the README's one-line invocation works:
 *   model shape  with --cost-model FILE: the table's; else gpt -> preset
 *                gpt2-124m, t5 -> t5-base, llama -> smollm2-135m (train:
 *                gpt-mini, t5-mini, llama-mini);
 *                shape flags override single fields; max_seqlen is set from
 *                --max-seqlen
 *   machine      "auto": this machine measured and cached (cli_machine.h);
 *                memory limit = its device memory
 *   cost model   analytic on that machine
 *   method       dynapipe; dp 1, chunks 1; recompute none
 *   batches      synthetic and --data builtin: 4 global batches; file: all
 *   baseline knobs  tuned (plan_tune_method) on the first TUNE_BATCHES global
 *                batches, unless given
 *   stage split  tuned (plan_tune_split) on the same batches, after the knob
 */
#include "cli/plan_args.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"                /* defines: cli_errorf, cli_parse_*, CLI_EXIT_* */
#include "cli/cli_machine.h"        /* defines: cli_machine_auto */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_*, dyn_machine_resolve */
#include "dynapipe/pipeline.h"     /* defines: dyn_pipeline_tune, dyn_pipeline_tune_split */

#define DEFAULT_SYNTHETIC_BATCHES 4
#define TUNE_BATCHES 4 /* global batches a baseline's knob is tuned on */
#define STR_(x) #x
#define STR(x) STR_(x)
#define DEFAULT_BATCHES_TEXT STR(DEFAULT_SYNTHETIC_BATCHES) " synthetic or builtin, all of a file"

static int is_builtin(const char *spec)
{
    return strncmp(spec, "builtin", 7) == 0 && (spec[7] == '\0' || spec[7] == ':');
}

void plan_args_init(plan_args *a)
{
    memset(a, 0, sizeof *a);
    a->seed = 1;
    a->cost_model = "analytic";
    a->machine = "auto";
    a->default_config[DYN_MODEL_GPT] = "gpt2-124m";
    a->default_config[DYN_MODEL_T5] = "t5-base";
    a->default_config[DYN_MODEL_LLAMA] = "smollm2-135m"; /* a Llama of gpt2-124m's size */
    dyn_plan_options_default(&a->opt);
}

/* ---- the flags ------------------------------------------------------------- */

static int parse_model(const char *cmd, const cli_flag *f, const char *v, void *args)
{
    plan_args *a = args;
    dyn_error err;
    if (dyn_model_kind_parse(v, &a->kind, &err) != DYN_OK) {
        cli_errorf(cmd, "%s: %s", f->name, err.msg);
        return -1;
    }
    a->have_kind = 1;
    return 0;
}

static int parse_synthetic(const char *cmd, const cli_flag *f, const char *v, void *args)
{
    plan_args *a = args;
    (void)f;
    if (strncmp(v, "flan", 4) != 0 || (v[4] != '\0' && v[4] != ':')) {
        cli_errorf(cmd, "--synthetic: unknown generator '%s' (use flan or flan:SEED)", v);
        return -1;
    }
    a->synthetic = 1;
    a->seed = 1;
    if (v[4] == ':') {
        int64_t seed;
        if (cli_parse_i64(cmd, "--synthetic seed", v + 5, 0, INT64_MAX, &seed) != 0) return -1;
        a->seed = (uint64_t)seed;
    }
    return 0;
}

static int parse_recompute(const char *cmd, const cli_flag *f, const char *v, void *args)
{
    plan_args *a = args;
    dyn_error err;
    if (dyn_recompute_parse(v, &a->opt.recompute, &err) != DYN_OK) {
        cli_errorf(cmd, "%s: %s", f->name, err.msg);
        return -1;
    }
    return 0;
}

static int parse_method(const char *cmd, const cli_flag *f, const char *v, void *args)
{
    plan_args *a = args;
    dyn_error err;
    if (dyn_batching_parse(v, &a->opt.method, &err) != DYN_OK) {
        cli_errorf(cmd, "%s: %s", f->name, err.msg);
        return -1;
    }
    a->have_method = 1;
    return 0;
}

static const char *const split_names[] = {"train", "heldout", NULL}; /* dyn_corpus_split order */
static const char *const stage_split_names[] = {"tuned", "maxrow", NULL}; /* PLAN_SPLIT_* order */
static const char *const stage_obj_names[] = {"even", "max", "bottleneck", "both", NULL}; /* DYN_STAGE_OBJ_* */
_Static_assert(DYN_STAGE_OBJ_BOTTLENECK == 2 && DYN_STAGE_OBJ_BOTH == 3, "stage_obj_names follows DYN_STAGE_OBJ_*");
_Static_assert(DYN_SPLIT_TRAIN == 0 && DYN_SPLIT_HELDOUT == 1, "split_names follows dyn_corpus_split");

#define PA plan_args
const cli_flag plan_args_flags[] = {
    CLI_SECTION("model:"),
    CLI_FN("--model", "gpt|t5|llama", parse_model, "model kind (required)"),
    CLI_PATH("--model-config", "NAME|FILE", PA, model_config,
            "preset (gpt-tiny, gpt-mini, gpt2-124m, gpt-6.7b, t5-tiny, t5-mini,\n"
            "t5-base, t5-11b, llama-tiny, llama-mini, smollm2-135m,\n"
            "llama3.2-1b, llama3-8b) or model JSON"),
    CLI_I32("--layers", "N", PA, layers, 1, 100000, "override the shape's layers (T5: encoder layers)"),
    CLI_I32("--dec-layers", "N", PA, dec_layers, 1, 100000, "override T5's decoder layers"),
    CLI_I32("--hidden", "N", PA, hidden, 1, 1 << 20, "override the hidden size"),
    CLI_I32("--heads", "N", PA, heads, 1, 1 << 16, "override the attention heads"),
    CLI_I32("--head-dim", "N", PA, head_dim, 1, 1 << 16, "override the head dimension"),
    CLI_I32("--ffn", "N", PA, ffn, 1, 1 << 24, "override the feed-forward size"),
    CLI_I32("--vocab", "N", PA, vocab, 1, 1 << 24, "override the vocabulary size"),
    CLI_SECTION("data:"),
    CLI_PATH("--lengths", "FILE.tsv", PA, lengths_path, "sample lengths, 'input<TAB>target' per line"),
    CLI_FN("--synthetic", "flan[:SEED]", parse_synthetic, "built-in FLAN-like generator (seed default 1)"),
    CLI_PATH("--data", "SPEC", PA, data_spec,
            "token data: builtin[:SEED[:TASK+..]], FILE.jsonl,\n"
            "Megatron PREFIX or IN_PREFIX,TGT_PREFIX (docs/data.md)"),
    CLI_ENUM("--split", "train|heldout", PA, split, split_names, "--data builtin: which stream"),
    CLI_STR("--tokenizer", "DIR|FILE", PA, tokenizer, "tokenizer.json, SentencePiece model or model folder\nfor --data text (default: bytes)"),
    CLI_STR("--template", "TEXT", PA, template_str, "prompt template of --data input/target text,\n\"...{input}...{target}...\""),
    {.name = "--global-batch-tokens", .metavar = "N", .type = CLI_FLAG_I64, .field = offsetof(PA, global_batch_tokens),
     .min = 1, .max = PLAN_MAX_BATCH_TOKENS, .help = "tokens (input + target) per global batch", .def = "required"},
    {.name = "--max-seqlen", .metavar = "L", .type = CLI_FLAG_I32, .field = offsetof(PA, opt.max_seqlen),
     .given = CLI_GIVEN(PA, have_max_seqlen), .min = 2, .max = 1 << 20,
     .help = "longest sequence, tokens (GPT: input+target, T5: each side)", .def = "required"},
    CLI_BOOL("--truncate", PA, clip, 1, "clip over-long samples of a file instead of failing"),
    CLI_BOOL("--clip", PA, clip, 1, "another name for --truncate"),
    {.name = "--batches", .metavar = "K", .type = CLI_FLAG_I32, .field = offsetof(PA, batches), .min = 1,
     .max = 1 << 24, .help = "global batches to plan", .def = DEFAULT_BATCHES_TEXT},
    CLI_SECTION("pipeline and costs:"),
    {.name = "--stages", .metavar = "S", .type = CLI_FLAG_I32, .field = offsetof(PA, opt.stages),
     .given = CLI_GIVEN(PA, have_stages), .min = 1, .max = 4096, .help = "pipeline stages", .def = "required"},
    CLI_I32("--dp", "D", PA, opt.dp, 1, 1 << 16, "data-parallel replicas"),
    CLI_I32("--chunks", "V", PA, opt.chunks, 1, 1024, "model chunks per device"),
    CLI_PATH("--cost-model", "analytic|FILE", PA, cost_model, "analytic, or a cost table file (dynapipe profile)"),
    {.name = "--machine", .metavar = "auto|NAME|FILE", .type = CLI_FLAG_PATH, .field = offsetof(PA, machine),
     .given = CLI_GIVEN(PA, have_machine),
     .help = "auto: this machine, measured once (up to ~30 s) and cached\n"
             "per CPU, BLAS kernel, threads and model; or the built-in cpu\n"
             "(a Xeon core) or a100, or machine JSON"},
    {.name = "--memory-limit", .metavar = "MB", .type = CLI_FLAG_F64, .field = offsetof(PA, opt.memory_limit_mb),
     .fmin = 1e-6, .fmax = 1e12, .help = "per device", .def = "the machine's memory"},
    CLI_FN("--recompute", "none|selective|full", parse_recompute, "activation recomputation (default none)"),
    CLI_ENUM("--stage-split", "tuned|maxrow", PA, stage_split, stage_split_names,
             "layers per stage: tuned (default) balances them for the\n"
             "micro-batches of the first global batches, kept if that\n"
             "simulates faster; maxrow for one row of max-seqlen tokens"),
    CLI_ENUM("--stage-objective", "even|max|bottleneck|both", PA, opt.stage_objective, stage_obj_names,
             "dynapipe's DP objective: even (default, the paper's: layers\n"
             "split evenly), max (the run's real split), bottleneck (sum of\n"
             "the bottleneck stage's times), both (even and max, the faster\n"
             "simulated plan kept); src/plan/stage_cost.c"),
    CLI_SECTION("micro-batching:"),
    CLI_FN("--method", "NAME", parse_method,
           "dynapipe, padding, packing, packing-docmask or token (default dynapipe)"),
    CLI_FN("--batching", "NAME", parse_method, "another name for --method"),
    CLI_I32("--round-to", "N", PA, opt.round_to, 1, 4096, "pad lengths to a multiple of N"),
    {.name = "--mb-samples", .metavar = "N", .type = CLI_FLAG_I32, .field = offsetof(PA, opt.mb_samples), .min = 1,
     .max = 1 << 24, .help = "padding: samples per micro-batch", .def = "tuned"},
    {.name = "--pack-rows", .metavar = "N", .type = CLI_FLAG_I32, .field = offsetof(PA, opt.pack_rows), .min = 1,
     .max = 1 << 24, .help = "packing: rows per micro-batch", .def = "tuned"},
    {.name = "--mb-tokens", .metavar = "N", .type = CLI_FLAG_I64, .field = offsetof(PA, opt.mb_tokens), .min = 1,
     .max = INT64_C(1) << 40,
     .help = "token: tokens per micro-batch", .def = "tuned"},
    CLI_BOOL("--untuned", PA, untuned, 1,
             "baseline knobs not given: the most that fit, not tuned (tuned:\n"
             "the fastest by simulated iteration time, schedule auto, on the\n"
             "first global batches, under the memory limit)"),
    CLI_BOOL("--no-dp-packing", PA, opt.enable_packing, 0,
             "dynapipe: the DP's plan alone (the default also plans the\n"
             "batch as document-masked packing, padding and token at\n"
             "their knob values and keeps the fastest by simulation)"),
    CLI_BOOL("--dp-packing", PA, opt.enable_packing, 1, "dynapipe: the default candidates (accepted for old scripts)"),
    CLI_END,
};
#undef PA

void plan_args_usage(FILE *out, const plan_args *a, const cli_flag *shadow)
{
    char model_default[128];
    snprintf(model_default, sizeof model_default, "%s / %s / %s, or the --cost-model table's shape",
             a->default_config[DYN_MODEL_GPT], a->default_config[DYN_MODEL_T5], a->default_config[DYN_MODEL_LLAMA]);
    const cli_flag_default defaults[] = {{"--model-config", model_default}, {NULL, NULL}};
    static const cli_flag none[] = {CLI_END};
    cli_flag_set sets[] = {{shadow ? shadow : none, NULL}, {plan_args_flags, (void *)a}};
    cli_flags_usage_from(out, sets, 2, 1, defaults);
}

int plan_args_finish(const char *cmd, plan_args *a)
{
    if (!a->have_kind) {
        cli_errorf(cmd, "--model gpt|t5|llama is required");
        return -1;
    }
    if ((a->lengths_path != NULL) + (a->synthetic != 0) + (a->data_spec != NULL) != 1) {
        cli_errorf(cmd, "give exactly one of --lengths FILE.tsv, --synthetic flan[:SEED] and --data SPEC");
        return -1;
    }
    if (a->global_batch_tokens <= 0) {
        cli_errorf(cmd, "--global-batch-tokens N is required");
        return -1;
    }
    if (!a->have_max_seqlen) {
        cli_errorf(cmd, "--max-seqlen L is required");
        return -1;
    }
    if (!a->have_stages) {
        cli_errorf(cmd, "--stages S is required");
        return -1;
    }
    if (a->split != DYN_SPLIT_TRAIN && (a->data_spec == NULL || !is_builtin(a->data_spec))) {
        cli_errorf(cmd, "--split %s applies to --data builtin, not %s%s", a->split == DYN_SPLIT_HELDOUT ? "heldout" : "?",
                   a->data_spec ? "--data " : a->synthetic ? "--synthetic" : "--lengths",
                   a->data_spec ? a->data_spec : "");
        return -1;
    }
    if (a->kind != DYN_MODEL_T5 && a->dec_layers > 0) {
        cli_errorf(cmd, "--dec-layers applies to t5 only");
        return -1;
    }
    /* A cost table carries its own machine: --machine contradicts it. Shape
     * flags may restate the table's shape; another shape is refused when
     * the table is read (plan_inputs_open: "the cost model is for another
     * shape"). */
    if (strcmp(a->cost_model, "analytic") != 0 && a->have_machine) {
        cli_errorf(cmd, "--machine contradicts --cost-model %s: a cost table carries its own machine", a->cost_model);
        return -1;
    }
    return 0;
}

/* Which batching methods read each method knob (python/dynapipe/planner.py
 * has the same table as _KNOB_METHODS): the one place plan, simulate and
 * train look this up. */
static const struct {
    const char *flag;
    dyn_batching methods[2];
    int n;
} knob_methods[] = {
    {"--mb-samples", {DYN_BATCH_PADDING, DYN_BATCH_PADDING}, 1},
    {"--pack-rows", {DYN_BATCH_PACKING, DYN_BATCH_PACKING_DOCMASK}, 2},
    {"--mb-tokens", {DYN_BATCH_TOKEN, DYN_BATCH_TOKEN}, 1},
};

/* Knob k's value as given (0: not given). */
static int64_t knob_value(const plan_args *a, int k)
{
    switch (k) {
    case 0: return a->opt.mb_samples;
    case 1: return a->opt.pack_rows;
    default: return a->opt.mb_tokens;
    }
}

int plan_args_check_methods(const char *cmd, const plan_args *a, const dyn_batching *methods, int n_methods)
{
    for (int k = 0; k < (int)(sizeof knob_methods / sizeof knob_methods[0]); k++) {
        int64_t v = knob_value(a, k);
        if (v == 0) continue;
        int reads = 0;
        for (int i = 0; i < n_methods; i++)
            for (int j = 0; j < knob_methods[k].n; j++) reads |= methods[i] == knob_methods[k].methods[j];
        if (reads) continue;
        char given[64], wants[96] = "", run[160] = "";
        snprintf(given, sizeof given, " %lld", (long long)v);
        for (int j = 0; j < knob_methods[k].n; j++)
            snprintf(wants + strlen(wants), sizeof wants - strlen(wants), "%s%s", j ? " or " : "",
                     dyn_batching_name(knob_methods[k].methods[j]));
        for (int i = 0; i < n_methods; i++)
            snprintf(run + strlen(run), sizeof run - strlen(run), "%s%s", i ? ", " : "", dyn_batching_name(methods[i]));
        cli_errorf(cmd, "%s%s applies to --method %s, not %s", knob_methods[k].flag, given, wants, run);
        return -1;
    }
    return 0;
}

/* ---- inputs -------------------------------------------------------------- */

/* The shape flags over cfg, then max_seqlen from --max-seqlen; src names
 * the base in errors. 0 or CLI_EXIT_USAGE (printed). */
static int apply_shape_flags(const char *cmd, const plan_args *a, dyn_model_config *cfg)
{
    dyn_error err;
    if (a->layers) cfg->n_layers = a->layers;
    if (a->dec_layers) cfg->n_dec_layers = a->dec_layers;
    if (a->hidden) cfg->hidden = a->hidden;
    if (a->heads) cfg->heads = a->heads;
    if (a->ffn) cfg->ffn = a->ffn;
    if (a->vocab) cfg->vocab = a->vocab;
    if (a->head_dim) {
        cfg->head_dim = a->head_dim;
    } else if ((a->hidden || a->heads) && dyn_model_kind_decoder_only(cfg->kind)) {
        if (cfg->hidden % cfg->heads != 0) {
            cli_errorf(cmd, "model shape: --hidden %d is not a multiple of %s %d; give --heads (or --head-dim)",
                       cfg->hidden, a->heads ? "--heads" : "the model's heads", cfg->heads);
            return CLI_EXIT_USAGE;
        }
        cfg->head_dim = cfg->hidden / cfg->heads;
    }
    cfg->max_seqlen = a->opt.max_seqlen;
    if (dyn_model_config_validate(cfg, &err) != DYN_OK) {
        cli_errorf(cmd, "model shape: %s", err.msg);
        return CLI_EXIT_USAGE;
    }
    return 0;
}

int plan_model_resolve(const char *cmd, const plan_args *a, dyn_model_config *cfg)
{
    dyn_error err;
    if (a->have_init_model) { /* train --init: the folder's whole shape, restated flags and the run's length */
        *cfg = a->init_model;
        return apply_shape_flags(cmd, a, cfg);
    }
    const char *src = a->model_config ? a->model_config : a->default_config[a->kind];
    dyn_status st = dyn_model_config_preset(src, cfg, &err);
    if (st != DYN_OK) {
        if (a->model_config == NULL) { /* our own default must exist */
            cli_errorf(cmd, "%s", err.msg);
            return CLI_EXIT_FAIL;
        }
        FILE *fp = fopen(src, "rb"); /* a file? else report the unknown preset */
        if (fp == NULL) {
            cli_errorf(cmd, "--model-config: '%s' is neither a preset nor a readable file", src);
            return CLI_EXIT_FAIL;
        }
        fclose(fp);
        if (dyn_model_config_load(src, cfg, &err) != DYN_OK) {
            cli_errorf(cmd, "%s", err.msg);
            return CLI_EXIT_FAIL;
        }
    }
    if (cfg->kind != a->kind) {
        cli_errorf(cmd, "--model %s does not match the model config '%s' (%s)",
                   dyn_model_kind_name(a->kind), src, dyn_model_kind_name(cfg->kind));
        return CLI_EXIT_USAGE;
    }
    return apply_shape_flags(cmd, a, cfg);
}

/* The data layer (src/data) knows two sequence layouts: decoder-only
 * (input ++ target, GPT's) and encoder-decoder (T5's). Llama's is GPT's. */
static dyn_model_kind data_kind(dyn_model_kind kind)
{
    return dyn_model_kind_decoder_only(kind) ? DYN_MODEL_GPT : DYN_MODEL_T5;
}

/* Synthetic samples: enough for the requested number of full batches. The
 * generator is prefix-stable (sample i does not depend on how many are
 * drawn), so doubling until there is one batch more than needed changes
 * nothing but the count. */
static int make_synthetic(const char *cmd, const plan_args *a, int32_t batches, plan_inputs *in)
{
    dyn_error err;
    int64_t n = (int64_t)batches * (a->global_batch_tokens / 256 + 1) + 64;
    for (;;) {
        if (n > (INT64_C(1) << 28)) {
            cli_errorf(cmd, "--synthetic: too many samples needed for %d batches", batches);
            return CLI_EXIT_FAIL;
        }
        dyn_dataset_free(&in->ds);
        if (dyn_dataset_synthetic_flan(a->seed, (int32_t)n, a->opt.max_seqlen, data_kind(a->kind), &in->ds, &err) !=
            DYN_OK) {
            cli_errorf(cmd, "%s", err.msg);
            return CLI_EXIT_FAIL;
        }
        int64_t tokens = 0;
        for (int32_t i = 0; i < in->ds.n; i++)
            tokens += (int64_t)in->ds.samples[i].input_len + in->ds.samples[i].target_len;
        if (tokens >= (int64_t)(batches + 1) * a->global_batch_tokens) return 0;
        n *= 2;
    }
}

/* Lengths of a --data source. Built-in: enough samples for the requested
 * batches, doubling like make_synthetic (sample i does not depend on the
 * count). Files: every sample. Ids are checked against the model's vocab. */
static int make_corpus(const char *cmd, const plan_args *a, int32_t batches, plan_inputs *in)
{
    dyn_corpus_options opt;
    dyn_corpus_options_default(&opt);
    opt.split = a->split;
    opt.max_seqlen = a->opt.max_seqlen;
    opt.kind = data_kind(a->kind);
    opt.truncate = a->clip;
    opt.vocab = in->model.vocab;
    opt.tokenizer = a->tokenizer;
    opt.template_str = a->template_str;
    int builtin = is_builtin(a->data_spec);
    if (builtin && opt.vocab < DYN_CORPUS_VOCAB_BYTES) opt.vocab = DYN_CORPUS_VOCAB_BYTES; /* lengths only */
    int64_t n = (int64_t)batches * (a->global_batch_tokens / 256 + 1) + 64;
    for (;;) {
        if (n > (INT64_C(1) << 28)) {
            cli_errorf(cmd, "--data: too many samples needed for %d batches", batches);
            return CLI_EXIT_FAIL;
        }
        opt.builtin_samples = n;
        dyn_error err;
        dyn_corpus *c = dyn_corpus_open(a->data_spec, &opt, &err);
        dyn_dataset_free(&in->ds);
        if (c == NULL || dyn_corpus_lengths(c, &in->ds, &err) != DYN_OK) {
            cli_errorf(cmd, "--data: %s", err.msg);
            dyn_corpus_free(c);
            return CLI_EXIT_FAIL;
        }
        dyn_corpus_free(c);
        if (!builtin) return 0;
        int64_t tokens = 0;
        for (int32_t i = 0; i < in->ds.n; i++)
            tokens += (int64_t)in->ds.samples[i].input_len + in->ds.samples[i].target_len;
        if (tokens >= (int64_t)(batches + 1) * a->global_batch_tokens) return 0;
        n *= 2;
    }
}

/* A cost table against the run: a model shape given by flags (a preset or
 * a file, or shape flags over the table's own shape) must be the table's,
 * and lengths past the table's grid get one warning when po->warn (they are
 * extrapolated, docs/cost-model.md). */
static int table_check(const char *cmd, const plan_args *a, const plan_open *po, plan_inputs *in)
{
    dyn_error err;
    int rc;
    if (a->model_config || a->layers || a->dec_layers || a->hidden || a->heads || a->ffn || a->vocab ||
        a->head_dim) {
        dyn_model_config want = in->model;
        if ((rc = a->model_config ? plan_model_resolve(cmd, a, &want) : apply_shape_flags(cmd, a, &want)) != 0)
            return rc;
        if (dyn_cost_model_check_shape(in->cm, &want, &err) != DYN_OK) {
            cli_errorf(cmd, "--cost-model %s: %s", a->cost_model, err.msg);
            return CLI_EXIT_USAGE;
        }
    }
    int32_t mr, me, md;
    if (po->warn && a->have_max_seqlen && dyn_cost_model_grid_max(in->cm, &mr, &me, &md) &&
        (a->opt.max_seqlen > me || (in->model.kind == DYN_MODEL_T5 && a->opt.max_seqlen > md))) {
        fprintf(stderr,
                "dynapipe %s: warning: the cost table %s covers lengths up to %d%s, --max-seqlen is %d: longer "
                "micro-batches are extrapolated in proportion to their length (docs/cost-model.md)\n",
                cmd, a->cost_model, me, in->model.kind == DYN_MODEL_T5 ? " (inputs)" : "", a->opt.max_seqlen);
    }
    return 0;
}

/* The cost model with its shape and machine: the analytic model of the
 * resolved shape, or a table (checked against the flags). 0 or an exit
 * code (printed; in->cm freed by the caller's plan_inputs_close). */
static int open_costs(const char *cmd, const plan_args *a, const plan_open *po, plan_inputs *in)
{
    dyn_error err;
    int rc;
    if (strcmp(a->cost_model, "analytic") == 0) {
        if (strcmp(a->machine, "auto") == 0) cli_machine_auto_prepare();
        if ((rc = plan_model_resolve(cmd, a, &in->model)) != 0) return rc;
        if (strcmp(a->machine, "auto") == 0) {
            in->machine_auto = 1; /* measured once the data is read (open_samples): bad data fails first */
            return 0;
        }
        if ((a->machine[0] == '{' ? dyn_machine_parse(a->machine, "--machine", &in->machine, &err)
                                  : dyn_machine_resolve(a->machine, &in->machine, &err)) != DYN_OK) {
            cli_errorf(cmd, "--machine: %s", err.msg);
            return CLI_EXIT_FAIL;
        }
        in->cm = dyn_cost_model_create_analytic(&in->model, &in->machine, &err);
    } else if ((in->cm = dyn_cost_model_load_table(a->cost_model, &err)) != NULL) {
        in->model = *dyn_cost_model_config(in->cm);
        in->machine = *dyn_cost_model_machine(in->cm);
        if (in->model.kind != a->kind) {
            cli_errorf(cmd, "--model %s does not match the cost table %s (%s)", dyn_model_kind_name(a->kind),
                       a->cost_model, dyn_model_kind_name(in->model.kind));
            return CLI_EXIT_USAGE;
        }
        return table_check(cmd, a, po, in);
    }
    if (in->cm == NULL) {
        cli_errorf(cmd, "%s", err.msg);
        return CLI_EXIT_FAIL;
    }
    return 0;
}

/* The samples (synthetic, --data or --lengths) and the sampler over them.
 * 0 or CLI_EXIT_FAIL (printed). */
static int open_samples(const char *cmd, const plan_args *a, plan_inputs *in)
{
    dyn_error err;
    int rc = 0;
    int32_t batches = a->batches;
    if (a->synthetic) {
        if (batches == 0) batches = DEFAULT_SYNTHETIC_BATCHES;
        rc = make_synthetic(cmd, a, batches, in);
    } else if (a->data_spec) {
        if (batches == 0 && is_builtin(a->data_spec)) batches = DEFAULT_SYNTHETIC_BATCHES;
        rc = make_corpus(cmd, a, batches, in);
        if (rc == 0 && in->ds.n == 0) {
            cli_errorf(cmd, "--data %s: no samples", a->data_spec);
            rc = CLI_EXIT_FAIL;
        }
    } else if (dyn_dataset_read_tsv(a->lengths_path, a->opt.max_seqlen, data_kind(a->kind), a->clip, &in->ds, &err) !=
               DYN_OK) {
        cli_errorf(cmd, "%s", err.msg);
        rc = CLI_EXIT_FAIL;
    } else if (in->ds.n == 0) {
        cli_errorf(cmd, "%s: no samples", a->lengths_path);
        rc = CLI_EXIT_FAIL;
    }
    if (rc != 0) return rc;
    if (in->machine_auto) {
        if ((rc = cli_machine_auto(cmd, a, &in->model, &in->machine)) != 0) return rc;
        if ((in->cm = dyn_cost_model_create_analytic(&in->model, &in->machine, &err)) == NULL) {
            cli_errorf(cmd, "%s", err.msg);
            return CLI_EXIT_FAIL;
        }
    }
    in->batches_left = batches > 0 ? batches : -1;
    in->global_batch_tokens = a->global_batch_tokens;
    in->sampler = dyn_sampler_create(&in->ds, a->global_batch_tokens, &err);
    if (in->sampler == NULL) {
        cli_errorf(cmd, "%s", err.msg);
        return CLI_EXIT_FAIL;
    }
    return 0;
}

int plan_inputs_open(const char *cmd, const plan_args *a, const plan_open *po, plan_inputs *in)
{
    memset(in, 0, sizeof *in);
    int rc = open_costs(cmd, a, po, in);
    if (rc == 0) rc = open_samples(cmd, a, in);
    dyn_plan_options opt = a->opt; /* the flags' options, with the tuned knob and split */
    int knob_tuned = po->tune && dyn_tune_knob_get(&opt) == 0;
    if (rc == 0 && po->tune) rc = plan_tune_method(cmd, in, &opt, po->order_groups, po->tune_report);
    if (rc == 0 && po->tune_split && a->stage_split == PLAN_SPLIT_TUNED)
        rc = plan_tune_split(cmd, in, &opt, po->order_groups, knob_tuned, po->tune_report);
    if (rc == 0) {
        dyn_error err;
        in->planner = dyn_planner_create(in->cm, &opt, &err);
        if (in->planner == NULL) {
            cli_errorf(cmd, "%s", err.msg);
            rc = err.code == DYN_ERR_INVALID_ARG ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
        }
    }
    if (rc != 0) plan_inputs_close(in);
    else cli_machine_auto_say(cmd, a, in);
    return rc;
}

/* The first global batches of in's data (at most TUNE_BATCHES, and no more
 * than the run plans), from a sampler of their own: *smp owns them (free
 * it). 0, or CLI_EXIT_FAIL (printed). */
static int tune_batches(const char *cmd, const plan_inputs *in, dyn_sampler **smp,
                        const dyn_sample *batches[TUNE_BATCHES], int32_t counts[TUNE_BATCHES], int32_t *nb)
{
    dyn_error err;
    *nb = 0;
    if ((*smp = dyn_sampler_create(&in->ds, in->global_batch_tokens, &err)) == NULL) {
        cli_errorf(cmd, "%s", err.msg);
        return CLI_EXIT_FAIL;
    }
    int32_t limit = in->batches_left > 0 && in->batches_left < TUNE_BATCHES ? in->batches_left : TUNE_BATCHES;
    while (*nb < limit) {
        if (dyn_sampler_next(*smp, &batches[*nb], &counts[*nb], &err) != DYN_OK) {
            cli_errorf(cmd, "%s", err.msg);
            dyn_sampler_free(*smp);
            *smp = NULL;
            return CLI_EXIT_FAIL;
        }
        if (counts[*nb] == 0) break;
        (*nb)++;
    }
    return 0;
}

/* plan_tune_method; note follows the knob's value on the report line. */
static int tune_knob(const char *cmd, plan_inputs *in, dyn_plan_options *opt, int32_t order_groups, FILE *report,
                     const char *note)
{
    if (dyn_tune_knob_name(opt->method) == NULL || dyn_tune_knob_get(opt) != 0) return 0;
    dyn_error err;
    dyn_sampler *smp;
    const dyn_sample *batches[TUNE_BATCHES];
    int32_t counts[TUNE_BATCHES], nb;
    if (tune_batches(cmd, in, &smp, batches, counts, &nb) != 0) return CLI_EXIT_FAIL;
    int rc = 0;
    if (nb > 0) {
        dyn_pipeline_options po;
        dyn_pipeline_options_default(&po);
        if (order_groups > 0) po.order_groups = order_groups;
        dyn_tune_result t;
        if (dyn_pipeline_tune(in->cm, opt, &po, batches, counts, nb, &t, &err) != DYN_OK) {
            cli_errorf(cmd, "%s", err.msg);
            rc = err.code == DYN_ERR_INVALID_ARG ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
        } else {
            dyn_tune_knob_set(opt, t.value);
            if (report) {
                fprintf(report, "%s: tuned --%s %lld%s (simulated iteration %.1f ms, schedule auto, %d global "
                                "batch%s; tried",
                        dyn_batching_name(opt->method), dyn_tune_knob_name(opt->method), (long long)t.value, note,
                        t.iter_ms, nb, nb == 1 ? "" : "es");
                for (int32_t i = 0; i < t.n_tried; i++)
                    fprintf(report, "%s %lld: %.1f", i ? "," : "", (long long)t.tried[i], t.tried_ms[i]);
                fprintf(report, ")\n");
            }
        }
    }
    dyn_sampler_free(smp);
    return rc;
}

int plan_tune_method(const char *cmd, plan_inputs *in, dyn_plan_options *opt, int32_t order_groups,
                     FILE *report)
{
    return tune_knob(cmd, in, opt, order_groups, report, "");
}

/* "[4, 2+6]": the transformer blocks of each stage of the split weight
 * gives (T5: encoder+decoder blocks), into buf (no '|': simulate's
 * markdown table is parsed by scripts). */
static dyn_status split_text(const dyn_cost_model *cm, int32_t stages, const double *weight, char *buf, size_t cap,
                             dyn_error *err)
{
    dyn_stage_assignment a;
    dyn_status st = dyn_stage_assign_run(cm, stages, weight, &a, err);
    if (st != DYN_OK) return st;
    int t5 = dyn_cost_model_config(cm)->kind == DYN_MODEL_T5;
    int w0 = snprintf(buf, cap, "[");
    size_t len = w0 > 0 ? (size_t)w0 : 0;
    for (int32_t s = 0; s < a.n_stages && len < cap; s++) {
        int enc = 0, dec = 0;
        for (int32_t l = a.stage_first[s]; l < a.stage_first[s + 1]; l++) {
            enc += a.layer_kind[l] == DYN_LAYER_ENCODER;
            dec += a.layer_kind[l] == DYN_LAYER_DECODER;
        }
        int w = t5 ? snprintf(buf + len, cap - len, "%s%d+%d", s ? ", " : "", enc, dec)
                   : snprintf(buf + len, cap - len, "%s%d", s ? ", " : "", enc);
        if (w > 0) len += (size_t)w;
    }
    if (len < cap) snprintf(buf + len, cap - len, "]");
    dyn_stage_assignment_free(&a);
    return DYN_OK;
}

int plan_tune_split(const char *cmd, plan_inputs *in, dyn_plan_options *opt, int32_t order_groups, int retune_knob,
                    FILE *report)
{
    dyn_error err;
    dyn_sampler *smp;
    const dyn_sample *batches[TUNE_BATCHES];
    int32_t counts[TUNE_BATCHES], nb;
    if (tune_batches(cmd, in, &smp, batches, counts, &nb) != 0) return CLI_EXIT_FAIL;
    int rc = 0, retune = 0;
    if (nb > 0) {
        dyn_pipeline_options po;
        dyn_pipeline_options_default(&po);
        if (order_groups > 0) po.order_groups = order_groups;
        dyn_split_tune_result t;
        char base[256], tuned[256];
        dyn_status st = dyn_pipeline_tune_split(in->cm, opt, &po, batches, counts, nb, &t, &err);
        if (st == DYN_ERR_INFEASIBLE) { /* the run's own planning says which batch and why */
            dyn_sampler_free(smp);
            return 0;
        }
        if (st != DYN_OK || split_text(in->cm, opt->stages, opt->split_weight, base, sizeof base, &err) != DYN_OK ||
            split_text(in->cm, opt->stages, t.weight, tuned, sizeof tuned, &err) != DYN_OK) {
            cli_errorf(cmd, "%s", err.msg);
            rc = err.code == DYN_ERR_INVALID_ARG ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
        } else {
            const char *blocks = in->model.kind == DYN_MODEL_T5 ? " (encoder+decoder blocks)" : "";
            if (t.kept) memcpy(opt->split_weight, t.weight, sizeof opt->split_weight);
            /* The knob was tuned under the old split; the new one moves
             * the stages' balance, so the best micro-batch size may move
             * too (the old value is among the candidates again). */
            if (t.kept && retune_knob && dyn_tune_knob_name(opt->method) != NULL) {
                dyn_tune_knob_set(opt, 0);
                retune = 1;
            }
            char whose[96] = "the sample's"; /* dynapipe may keep a candidate baseline's split */
            if (t.kept && t.source != opt->method)
                snprintf(whose, sizeof whose, "%s's (--%s %lld)", dyn_batching_name(t.source),
                         dyn_tune_knob_name(t.source), (long long)t.source_knob);
            if (report && t.kept)
                fprintf(report,
                        "%s: stage split: balanced for %s micro-batches: layers per stage %s%s, "
                        "simulated %.1f ms against %.1f ms for a max-length row's %s\n",
                        dyn_batching_name(opt->method), whose, tuned, blocks, t.tuned_ms, t.base_ms, base);
            else if (report && t.n_rounds > 0) {
                char other[64];
                if (isfinite(t.tuned_ms)) snprintf(other, sizeof other, "%.1f ms", t.tuned_ms);
                else snprintf(other, sizeof other, "over the memory limit");
                fprintf(report,
                        "%s: stage split: for a max-length row, layers per stage %s%s (simulated %.1f ms; "
                        "balanced for the sample's micro-batches: %s)\n",
                        dyn_batching_name(opt->method), base, blocks, t.base_ms, other);
            }
            /* else the micro-batches balance the same split: nothing to say */
        }
    }
    dyn_sampler_free(smp);
    if (rc == 0 && retune) rc = tune_knob(cmd, in, opt, order_groups, report, " for that split");
    return rc;
}

int plan_inputs_next(const char *cmd, plan_inputs *in, const dyn_sample **batch, int32_t *n)
{
    *batch = NULL;
    *n = 0;
    if (in->batches_left == 0) return 0;
    dyn_error err;
    if (dyn_sampler_next(in->sampler, batch, n, &err) != DYN_OK) {
        cli_errorf(cmd, "%s", err.msg);
        return CLI_EXIT_FAIL;
    }
    if (in->batches_left > 0 && *n > 0) in->batches_left--;
    return 0;
}

void plan_inputs_close(plan_inputs *in)
{
    dyn_planner_free(in->planner);
    dyn_sampler_free(in->sampler);
    dyn_dataset_free(&in->ds);
    dyn_cost_model_free(in->cm);
    memset(in, 0, sizeof *in);
}
