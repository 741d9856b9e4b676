/* plan_args.c — the planning flags (see plan_args.h): parsing, usage text,
 * and building the model, machine, cost model, samples and planner from
 * them. Shared by `dynapipe plan` and `dynapipe simulate`.
 *
 * Defaults, chosen so that the README's one-line invocation works:
 *   model shape  gpt -> preset gpt2-124m, t5 -> preset t5-base (shape flags
 *                override single fields; max_seqlen is set from --max-seqlen)
 *   machine      "auto": this machine measured and cached (cli_machine.h); memory
 *                limit = its device memory
 *   cost model   analytic on that machine
 *   method       dynapipe; stages 1, dp 1, chunks 1; recompute none
 *   batches      synthetic and --data builtin: 4 global batches; file: all
 *   baseline knobs  tuned (plan_tune_method) on the first TUNE_BATCHES global
 *                batches, unless given
 */
#include "cli/plan_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"                /* defines: cli_errorf, cli_parse_*, CLI_EXIT_* */
#include "cli/cli_machine.h"        /* defines: cli_machine_auto */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_*, dyn_machine_resolve */
#include "dynapipe/pipeline.h"     /* defines: dyn_pipeline_tune */

#define DEFAULT_SYNTHETIC_BATCHES 4
#define TUNE_BATCHES 4 /* global batches a baseline's knob is tuned on */

void plan_args_init(plan_args *a)
{
    memset(a, 0, sizeof *a);
    a->seed = 1;
    a->cost_model = "analytic";
    a->machine = "auto";
    dyn_plan_options_default(&a->opt);
}

void plan_args_usage(FILE *out)
{
    fprintf(out,
            "model:\n"
            "  --model gpt|t5            model kind (required)\n"
            "  --model-config NAME|FILE  preset (gpt-tiny, gpt-mini, gpt2-124m, gpt-6.7b,\n"
            "                            t5-tiny, t5-mini, t5-base, t5-11b) or model JSON;\n"
            "                            default gpt2-124m / t5-base\n"
            "  --layers N --dec-layers N --hidden N --heads N --head-dim N --ffn N --vocab N\n"
            "                            override single fields of the shape\n"
            "data:\n"
            "  --lengths FILE.tsv        sample lengths, 'input<TAB>target' per line\n"
            "  --synthetic flan[:SEED]   built-in FLAN-like generator (seed default 1)\n"
            "  --data SPEC               token data: builtin[:SEED[:TASK+..]], FILE.jsonl,\n"
            "                            Megatron PREFIX or IN_PREFIX,TGT_PREFIX (docs/data.md)\n"
            "  --split train|heldout     --data builtin: which stream (default train)\n"
            "  --global-batch-tokens N   tokens (input + target) per global batch (required)\n"
            "  --max-seqlen L            longest sequence, tokens (required; GPT: input+target,\n"
            "                            T5: each side)\n"
            "  --clip, --truncate        clip over-long samples of a file instead of failing\n"
            "  --batches K               global batches to plan (default %d synthetic or builtin,\n"
            "                            all of a file)\n"
            "pipeline and costs:\n"
            "  --stages S                pipeline stages (required)\n"
            "  --dp D                    data-parallel replicas (default 1)\n"
            "  --chunks V                model chunks per device (default 1)\n"
            "  --cost-model analytic|FILE  analytic (default) or a cost table file\n"
            "  --machine auto|NAME|FILE  auto (default): this machine, measured once (up to ~30 s)\n"
            "                            and cached per CPU, BLAS kernel, threads and model; or the\n"
            "                            built-in cpu (a Xeon core) or a100, or machine JSON\n"
            "  --memory-limit MB         per device (default: the machine's memory)\n"
            "  --recompute none|selective|full  (default none)\n"
            "micro-batching:\n"
            "  --method dynapipe|padding|packing|packing-docmask|token  (default dynapipe;\n"
            "                            --batching is another name for it)\n"
            "  --round-to N              pad lengths to a multiple of N (default 8)\n"
            "  --mb-samples N            padding: samples per micro-batch (default: tuned)\n"
            "  --pack-rows N             packing: rows per micro-batch (default: tuned)\n"
            "  --mb-tokens N             token: tokens per micro-batch (default: tuned)\n"
            "                            tuned = the fastest by simulated iteration time (schedule\n"
            "                            auto) on the first global batches, under the memory limit\n"
            "  --untuned                 baseline knobs not given: the most that fit (no tuning)\n"
            "  --dp-packing              dynapipe: also consider document-masked packing of the\n"
            "                            batch and keep the plan with the lower predicted time\n",
            DEFAULT_SYNTHETIC_BATCHES);
}

static int parse_synthetic(const char *cmd, const char *v, plan_args *a)
{
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

int plan_args_parse_one(const char *cmd, plan_args *a, int argc, char **argv, int *i)
{
    const char *f = argv[*i];
    const char *v;
    /* Integer flags into their fields: one table, one loop. */
    struct {
        const char *name;
        int32_t *dst;
        int32_t min, max;
    } ints[] = {
        {"--layers", &a->layers, 1, 100000},         {"--dec-layers", &a->dec_layers, 1, 100000},
        {"--hidden", &a->hidden, 1, 1 << 20},        {"--heads", &a->heads, 1, 1 << 16},
        {"--head-dim", &a->head_dim, 1, 1 << 16},    {"--ffn", &a->ffn, 1, 1 << 24},
        {"--vocab", &a->vocab, 1, 1 << 24},          {"--stages", &a->opt.stages, 1, 4096},
        {"--dp", &a->opt.dp, 1, 1 << 16},            {"--chunks", &a->opt.chunks, 1, 1024},
        {"--round-to", &a->opt.round_to, 1, 4096},   {"--mb-samples", &a->opt.mb_samples, 1, 1 << 24},
        {"--pack-rows", &a->opt.pack_rows, 1, 1 << 24}, {"--batches", &a->batches, 1, 1 << 24},
        {"--max-seqlen", &a->opt.max_seqlen, 2, 1 << 20},
    };
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        if (strcmp(f, ints[k].name) != 0) continue;
        if ((v = cli_flag_value(cmd, argc, argv, i)) == NULL) return -1;
        if (cli_parse_i32(cmd, f, v, ints[k].min, ints[k].max, ints[k].dst) != 0) return -1;
        if (ints[k].dst == &a->opt.max_seqlen) a->have_max_seqlen = 1;
        if (ints[k].dst == &a->opt.stages) a->have_stages = 1;
        return 1;
    }
    dyn_error err;
    if (strcmp(f, "--model") == 0) {
        if ((v = cli_flag_value(cmd, argc, argv, i)) == NULL) return -1;
        if (dyn_model_kind_parse(v, &a->kind, &err) != DYN_OK) {
            cli_errorf(cmd, "--model: %s", err.msg);
            return -1;
        }
        a->have_kind = 1;
    } else if (strcmp(f, "--model-config") == 0) {
        if ((a->model_config = cli_flag_value(cmd, argc, argv, i)) == NULL) return -1;
    } else if (strcmp(f, "--lengths") == 0) {
        if ((a->lengths_path = cli_flag_value(cmd, argc, argv, i)) == NULL) return -1;
    } else if (strcmp(f, "--synthetic") == 0) {
        if ((v = cli_flag_value(cmd, argc, argv, i)) == NULL) return -1;
        if (parse_synthetic(cmd, v, a) != 0) return -1;
    } else if (strcmp(f, "--data") == 0) {
        if ((a->data_spec = cli_flag_value(cmd, argc, argv, i)) == NULL) return -1;
    } else if (strcmp(f, "--split") == 0) {
        if ((v = cli_flag_value(cmd, argc, argv, i)) == NULL) return -1;
        if (strcmp(v, "train") == 0) a->split = DYN_SPLIT_TRAIN;
        else if (strcmp(v, "heldout") == 0) a->split = DYN_SPLIT_HELDOUT;
        else {
            cli_errorf(cmd, "--split: '%s' is not train or heldout", v);
            return -1;
        }
    } else if (strcmp(f, "--dp-packing") == 0) {
        a->opt.enable_packing = 1;
    } else if (strcmp(f, "--untuned") == 0) {
        a->untuned = 1;
    } else if (strcmp(f, "--clip") == 0 || strcmp(f, "--truncate") == 0) {
        a->clip = 1;
    } else if (strcmp(f, "--global-batch-tokens") == 0) {
        if ((v = cli_flag_value(cmd, argc, argv, i)) == NULL) return -1;
        /* A bound far above any real budget (the paper's is 65,536): larger
         * ones would only run out of memory drawing samples. */
        if (cli_parse_i64(cmd, f, v, 1, PLAN_MAX_BATCH_TOKENS, &a->global_batch_tokens) != 0) return -1;
    } else if (strcmp(f, "--mb-tokens") == 0) {
        if ((v = cli_flag_value(cmd, argc, argv, i)) == NULL) return -1;
        if (cli_parse_i64(cmd, f, v, 1, INT64_C(1) << 40, &a->opt.mb_tokens) != 0) return -1;
    } else if (strcmp(f, "--cost-model") == 0) {
        if ((a->cost_model = cli_flag_value(cmd, argc, argv, i)) == NULL) return -1;
    } else if (strcmp(f, "--machine") == 0) {
        if ((a->machine = cli_flag_value(cmd, argc, argv, i)) == NULL) return -1;
        a->have_machine = 1;
    } else if (strcmp(f, "--memory-limit") == 0) {
        if ((v = cli_flag_value(cmd, argc, argv, i)) == NULL) return -1;
        if (cli_parse_f64(cmd, f, v, 1e-6, 1e12, &a->opt.memory_limit_mb) != 0) return -1;
    } else if (strcmp(f, "--recompute") == 0) {
        if ((v = cli_flag_value(cmd, argc, argv, i)) == NULL) return -1;
        if (dyn_recompute_parse(v, &a->opt.recompute, &err) != DYN_OK) {
            cli_errorf(cmd, "--recompute: %s", err.msg);
            return -1;
        }
    } else if (strcmp(f, "--method") == 0 || strcmp(f, "--batching") == 0) {
        if ((v = cli_flag_value(cmd, argc, argv, i)) == NULL) return -1;
        if (dyn_batching_parse(v, &a->opt.method, &err) != DYN_OK) {
            cli_errorf(cmd, "%s: %s", f, err.msg);
            return -1;
        }
    } else {
        return 0;
    }
    return 1;
}

int plan_args_finish(const char *cmd, plan_args *a)
{
    if (!a->have_kind) {
        cli_errorf(cmd, "--model gpt|t5 is required");
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
    if (a->kind == DYN_MODEL_GPT && a->dec_layers > 0) {
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

/* ---- inputs -------------------------------------------------------------- */

/* Model shape: preset or file, then overrides; max_seqlen from the flag. */
static int resolve_model(const char *cmd, const plan_args *a, dyn_model_config *cfg)
{
    dyn_error err;
    const char *src = a->model_config ? a->model_config
                      : a->kind == DYN_MODEL_GPT ? "gpt2-124m" : "t5-base";
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
    if (a->layers) cfg->n_layers = a->layers;
    if (a->dec_layers) cfg->n_dec_layers = a->dec_layers;
    if (a->hidden) cfg->hidden = a->hidden;
    if (a->heads) cfg->heads = a->heads;
    if (a->ffn) cfg->ffn = a->ffn;
    if (a->vocab) cfg->vocab = a->vocab;
    if (a->head_dim) {
        cfg->head_dim = a->head_dim;
    } else if ((a->hidden || a->heads) && cfg->kind == DYN_MODEL_GPT) {
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
        if (dyn_dataset_synthetic_flan(a->seed, (int32_t)n, a->opt.max_seqlen, a->kind, &in->ds, &err) !=
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

static int is_builtin(const char *spec)
{
    return strncmp(spec, "builtin", 7) == 0 && (spec[7] == '\0' || spec[7] == ':');
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
    opt.kind = a->kind;
    opt.truncate = a->clip;
    opt.vocab = in->model.vocab;
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

/* A cost table against the run: a model shape given by flags (a preset, a
 * file or shape flags) must be the table's, and lengths past the table's
 * grid get one warning (they are extrapolated, docs/cost-model.md). */
static int table_check(const char *cmd, const plan_args *a, plan_inputs *in)
{
    dyn_error err;
    int rc;
    if (a->model_config || a->layers || a->dec_layers || a->hidden || a->heads || a->ffn || a->vocab ||
        a->head_dim) {
        dyn_model_config want;
        if ((rc = resolve_model(cmd, a, &want)) != 0) return rc;
        if (dyn_cost_model_check_shape(in->cm, &want, &err) != DYN_OK) {
            cli_errorf(cmd, "--cost-model %s: %s", a->cost_model, err.msg);
            return CLI_EXIT_USAGE;
        }
    }
    int32_t mr, me, md;
    /* One warning per command: `dynapipe train` parses its flags in the
     * process typed by hand and again in every rank, so the first one marks
     * the environment its ranks inherit, and ranks other than 0 stay quiet. */
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    int quiet = getenv("DYN_TABLE_RANGE_WARNED") != NULL || (rank != NULL && strcmp(rank, "0") != 0);
    if (!quiet && a->have_max_seqlen && dyn_cost_model_grid_max(in->cm, &mr, &me, &md) &&
        (a->opt.max_seqlen > me || (in->model.kind == DYN_MODEL_T5 && a->opt.max_seqlen > md))) {
        setenv("DYN_TABLE_RANGE_WARNED", "1", 1);
        fprintf(stderr,
                "dynapipe %s: warning: the cost table %s covers lengths up to %d%s, --max-seqlen is %d: longer "
                "micro-batches are extrapolated in proportion to their length (docs/cost-model.md)\n",
                cmd, a->cost_model, me, in->model.kind == DYN_MODEL_T5 ? " (inputs)" : "", a->opt.max_seqlen);
    }
    return 0;
}

int plan_inputs_open(const char *cmd, const plan_args *a, plan_inputs *in)
{
    memset(in, 0, sizeof *in);
    dyn_error err;
    int rc;
    if (strcmp(a->cost_model, "analytic") == 0) {
        if (strcmp(a->machine, "auto") == 0) cli_machine_auto_prepare();
        if ((rc = resolve_model(cmd, a, &in->model)) != 0) return rc;
        if (strcmp(a->machine, "auto") == 0) {
            in->machine_auto = 1; /* measured once the data is read (below): bad data fails first */
        } else if ((a->machine[0] == '{' ? dyn_machine_parse(a->machine, "--machine", &in->machine, &err)
                                         : dyn_machine_resolve(a->machine, &in->machine, &err)) != DYN_OK) {
            cli_errorf(cmd, "--machine: %s", err.msg);
            return CLI_EXIT_FAIL;
        }
        if (!in->machine_auto) in->cm = dyn_cost_model_create_analytic(&in->model, &in->machine, &err);
    } else {
        in->cm = dyn_cost_model_load_table(a->cost_model, &err);
        if (in->cm) {
            in->model = *dyn_cost_model_config(in->cm);
            in->machine = *dyn_cost_model_machine(in->cm);
            if (in->model.kind != a->kind) {
                cli_errorf(cmd, "--model %s does not match the cost table %s (%s)",
                           dyn_model_kind_name(a->kind), a->cost_model,
                           dyn_model_kind_name(in->model.kind));
                plan_inputs_close(in);
                return CLI_EXIT_USAGE;
            }
            if ((rc = table_check(cmd, a, in)) != 0) {
                plan_inputs_close(in);
                return rc;
            }
        }
    }
    if (in->cm == NULL && !in->machine_auto) {
        cli_errorf(cmd, "%s", err.msg);
        return CLI_EXIT_FAIL;
    }
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
    } else {
        rc = 0;
        if (dyn_dataset_read_tsv(a->lengths_path, a->opt.max_seqlen, a->kind, a->clip, &in->ds, &err) !=
            DYN_OK) {
            cli_errorf(cmd, "%s", err.msg);
            rc = CLI_EXIT_FAIL;
        } else if (in->ds.n == 0) {
            cli_errorf(cmd, "%s: no samples", a->lengths_path);
            rc = CLI_EXIT_FAIL;
        }
    }
    if (rc == 0 && in->machine_auto) {
        rc = cli_machine_auto(cmd, a, &in->model, &in->machine);
        if (rc == 0 && (in->cm = dyn_cost_model_create_analytic(&in->model, &in->machine, &err)) == NULL) {
            cli_errorf(cmd, "%s", err.msg);
            rc = CLI_EXIT_FAIL;
        }
    }
    if (rc == 0) {
        in->batches_left = batches > 0 ? batches : -1;
        in->global_batch_tokens = a->global_batch_tokens;
        in->sampler = dyn_sampler_create(&in->ds, a->global_batch_tokens, &err);
        if (in->sampler == NULL) {
            cli_errorf(cmd, "%s", err.msg);
            rc = CLI_EXIT_FAIL;
        }
    }
    dyn_plan_options opt = a->opt;
    if (rc == 0 && !a->no_tune && !a->untuned) rc = plan_tune_method(cmd, in, &opt, a->tune_order_groups, a->tune_quiet ? NULL : stderr);
    if (rc == 0) {
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

int plan_tune_method(const char *cmd, plan_inputs *in, dyn_plan_options *opt, int32_t order_groups,
                     FILE *report)
{
    if (dyn_tune_knob_name(opt->method) == NULL || dyn_tune_knob_get(opt) != 0) return 0;
    dyn_error err;
    dyn_sampler *smp = dyn_sampler_create(&in->ds, in->global_batch_tokens, &err);
    if (smp == NULL) {
        cli_errorf(cmd, "%s", err.msg);
        return CLI_EXIT_FAIL;
    }
    const dyn_sample *batches[TUNE_BATCHES];
    int32_t counts[TUNE_BATCHES];
    int32_t nb = 0, limit = in->batches_left > 0 && in->batches_left < TUNE_BATCHES ? in->batches_left
                                                                                     : TUNE_BATCHES;
    while (nb < limit) {
        if (dyn_sampler_next(smp, &batches[nb], &counts[nb], &err) != DYN_OK) {
            cli_errorf(cmd, "%s", err.msg);
            dyn_sampler_free(smp);
            return CLI_EXIT_FAIL;
        }
        if (counts[nb] == 0) break;
        nb++;
    }
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
                fprintf(report, "%s: tuned --%s %lld (simulated iteration %.1f ms, schedule auto, %d global "
                                "batch%s; tried",
                        dyn_batching_name(opt->method), dyn_tune_knob_name(opt->method), (long long)t.value,
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
