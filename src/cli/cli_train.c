/* cli_train.c — `dynapipe train`: pipeline-parallel training on MPI ranks
 * (src/runtime). Typed by hand it re-executes itself under mpirun with one
 * rank per stage per replica; under mpirun each rank parses the same flags
 * and runs its part. Bad flags are reported once, before any rank starts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"         /* defines: cli_errorf, cli_profile_cached, CLI_EXIT_* */
#include "cli/cli_machine.h" /* defines: cli_train_header, cli_rank_argv */
#include "cli/flags.h"     /* defines: cli_flag, cli_flags_parse, cli_flags_usage */
#include "cli/plan_args.h" /* defines: plan_args_*, plan_inputs_* */
#include "cli/train_init.h" /* defines: train_init_apply, train_init_check */
#include "dynapipe/model_config.h"
#include "dynapipe/pipeline.h" /* defines: dyn_schedule_parse */
#include "dynapipe/sched.h"
#include "model/threads.h"
#include "runtime/checkpoint.h" /* defines: rt_ckpt_resolve, rt_ckpt_read, rt_ckpt_check */
#include "runtime/group.h"
#include "runtime/source.h" /* defines: rt_source_open, rt_source_epoch_steps */
#include "runtime/train.h"

#define CMD "train"
#define DEFAULT_MAX_SEQLEN 512 /* without --max-seqlen and a cost table */

/* Everything the command line chose, read-only once parsed; the run's
 * options (dyn_train_options, with the shape, machine and planner options
 * resolved) are built from it by build_options. */
typedef struct train_args {
    dyn_train_options o; /* the training flags' fields (dyn_train_options_default) */
    plan_args plan;      /* the planning flags, with training's defaults (train_args_init) */
    const char *hostfile; /* --hostfile */
    cli_train_defaults defaulted; /* which of the header's settings were not given */
    int profile_auto;    /* --profile auto */
    int have_warmup;     /* --warmup given */
    int have_samples;    /* --samples given */
    int have_max_seqlen; /* --max-seqlen given (else 512, or a cost table's max length) */
    int have_order_groups, have_calibrate_window, have_eval_samples; /* given */
    int have_steps, have_epochs; /* given */
    int shuffle;         /* --shuffle 1, --no-shuffle 0; -1: files shuffled, the built-in data not */
    int print_options;   /* --print-options */
} train_args;

static void train_args_init(train_args *t)
{
    memset(t, 0, sizeof *t);
    dyn_train_options_default(&t->o);
    t->shuffle = -1;
    t->o.calibrate = 1; /* the command's default (docs/cost-model.md); --no-calibrate */
    plan_args_init(&t->plan);
    /* training's defaults for the planning flags */
    t->plan.data_spec = t->o.data_spec;
    t->plan.default_config[DYN_MODEL_GPT] = "gpt-mini";
    t->plan.default_config[DYN_MODEL_T5] = "t5-mini";
    t->plan.default_config[DYN_MODEL_LLAMA] = "llama-mini";
    t->plan.global_batch_tokens = t->o.global_batch_tokens;
    t->plan.opt.max_seqlen = DEFAULT_MAX_SEQLEN; /* or a cost table's (build_options) */
    t->plan.have_max_seqlen = 1;
    t->plan.opt.stages = t->o.plan.stages;
    t->plan.have_stages = 1;
}

static int parse_schedule(const char *cmd, const cli_flag *f, const char *v, void *args)
{
    train_args *t = args;
    dyn_error e;
    if (dyn_schedule_parse(v, &t->o.schedule, &e) != DYN_OK) {
        cli_errorf(cmd, "%s: %s", f->name, e.msg);
        return -1;
    }
    return 0;
}

static int parse_profile(const char *cmd, const cli_flag *f, const char *v, void *args)
{
    if (strcmp(v, "auto") != 0) {
        cli_errorf(cmd, "%s: expected auto (a profile file goes to --cost-model FILE), got '%s'", f->name, v);
        return -1;
    }
    ((train_args *)args)->profile_auto = 1;
    return 0;
}

/* --save FILE.safetensors (final weights) or DIR (checkpoints). */
static int parse_save(const char *cmd, const cli_flag *f, const char *v, void *args)
{
    train_args *t = args;
    if (cli_flag_path(cmd, f->name, v) != 0) return -1;
    size_t n = strlen(v), x = strlen(".safetensors");
    if (n > x && strcmp(v + n - x, ".safetensors") == 0) t->o.save_path = v;
    else t->o.save_dir = v;
    return 0;
}

/* --debug-kill / --debug-hang RANK:STEP. */
static int parse_fault(const char *cmd, const cli_flag *f, const char *v, void *args)
{
    train_args *t = args;
    char *end;
    long r = strtol(v, &end, 10), k = -1;
    if (end != v && *end == ':') {
        const char *s = end + 1;
        k = strtol(s, &end, 10);
        if (end == s || *end != '\0') k = -1;
    }
    if (r < 0 || k < 0 || r > INT32_MAX || k > INT32_MAX) {
        cli_errorf(cmd, "%s: expected RANK:STEP, got '%s'", f->name, v);
        return -1;
    }
    int kill = strcmp(f->name, "--debug-kill") == 0;
    *(kill ? &t->o.kill_rank : &t->o.hang_rank) = (int32_t)r;
    *(kill ? &t->o.kill_step : &t->o.hang_step) = (int32_t)k;
    return 0;
}

/* --eval-split P: a fraction in (0, 1). */
static int parse_eval_split(const char *cmd, const cli_flag *f, const char *v, void *args)
{
    return cli_parse_fraction(cmd, f->name, v, &((train_args *)args)->o.eval_split);
}

/* --lengths / --synthetic: planning flags that give no tokens. */
static int refuse_lengths(const char *cmd, const cli_flag *f, const char *v, void *args)
{
    (void)v, (void)args;
    cli_errorf(cmd, "%s gives lengths only; training needs tokens: --data builtin[:SEED]|FILE.jsonl|PREFIX", f->name);
    return -1;
}

#define TA train_args
static const cli_flag train_flags[] = {
    CLI_SECTION("training flags:"),
    {.name = "--steps", .metavar = "N", .type = CLI_FLAG_I64, .field = offsetof(TA, o.steps),
     .given = CLI_GIVEN(TA, have_steps), .min = 1, .max = 100000000,
     .help = "iterations (global batches); with --epochs, the run ends\n"
             "at whichever comes first (--epochs alone: the epochs')"},
    {.name = "--epochs", .metavar = "N", .type = CLI_FLAG_I64, .field = offsetof(TA, o.epochs),
     .given = CLI_GIVEN(TA, have_epochs), .min = 1, .max = 1000000,
     .help = "passes over the data (a line says when each ends);\nwithout it the data repeats until --steps"},
    CLI_BOOL("--shuffle", TA, shuffle, 1,
             "a new order of the samples every epoch, drawn from --seed\n"
             "(default for a file; the built-in data is random already)"),
    CLI_BOOL("--no-shuffle", TA, shuffle, 0, "train in the data's own order, every epoch"),
    CLI_FN("--schedule", "NAME|auto", parse_schedule,
           "1f1b, cyclic, wait-free-cyclic, interleaved (needs --chunks),\n"
           "zb, or auto: best schedule per batch by simulation (default auto)"),
    {.name = "--threads", .metavar = "T", .type = CLI_FLAG_I32, .field = offsetof(TA, o.threads), .min = 1,
     .max = 1024, .help = "threads per rank", .def = "cores / ranks, at least 1"},
    CLI_F32("--lr", "X", TA, o.lr.max_lr, 0, 10, "AdamW peak learning rate, after the warm-up"),
    CLI_F32("--min-lr", "X", TA, o.lr.min_lr, 0, 10, "learning rate at the end of the cosine decay"),
    {.name = "--warmup", .metavar = "N", .type = CLI_FLAG_I64, .field = offsetof(TA, o.lr.warmup_steps),
     .given = CLI_GIVEN(TA, have_warmup), .min = 0, .max = 100000000, .help = "warm-up steps of the learning rate",
     .def = "5, or --steps / 4 when that is not more"},
    CLI_F64("--clip", "X", TA, o.clip_norm, 0, 1e30, "global gradient-norm clip (0: none)"),
    CLI_F32("--adam-eps", "X", TA, o.adamw.eps, 0, 1e6, "AdamW epsilon"),
    CLI_F32("--weight-decay", "X", TA, o.adamw.weight_decay, 0, 1e6, "AdamW decoupled weight decay"),
    CLI_I64("--seed", "N", TA, o.seed, 0, INT64_MAX, "model initialisation and shuffle seed"),
    {.name = "--samples", .metavar = "N", .type = CLI_FLAG_I32, .field = offsetof(TA, o.n_samples),
     .given = CLI_GIVEN(TA, have_samples), .min = 1, .max = 100000000, .help = "samples of the built-in --data"},
    CLI_F64("--timeout", "S", TA, o.timeout_s, 0.1, 1e6, "deadline of every wait for a peer, seconds"),
    CLI_I32("--plan-ahead", "K", TA, o.plan_ahead, 1, 64, "global batches planned ahead of training"),
    CLI_FN("--profile", "auto", parse_profile,
           "use this shape's profile (--cost-model), profiling it first\n"
           "(--quick grid) when the cache has none: $XDG_CACHE_HOME/dynapipe,\n"
           "else ~/.cache/dynapipe"),
    CLI_BOOL("--calibrate", TA, o.calibrate, 1,
             "correct the planner's layer times online from the measured\n"
             "Forward/Backward times (median of the last --calibrate-window\n"
             "rank-iterations); on by default"),
    CLI_BOOL("--no-calibrate", TA, o.calibrate, 0, "plan every iteration with the cost model as given"),
    {.name = "--calibrate-window", .metavar = "N", .type = CLI_FLAG_I32, .field = offsetof(TA, o.calibrate_window),
     .given = CLI_GIVEN(TA, have_calibrate_window), .min = 1, .max = 100000,
     .help = "rank-iterations in --calibrate's median"},
    {.name = "--order-groups", .metavar = "K", .type = CLI_FLAG_I32, .field = offsetof(TA, o.order_groups),
     .given = CLI_GIVEN(TA, have_order_groups), .min = 1, .max = 4, .help = "--schedule auto's micro-batch order search"},
    CLI_PATH("--metrics", "FILE.jsonl", TA, o.metrics_path, "one record per iteration"),
    CLI_PATH("--trace", "FILE.json", TA, o.trace_path, "Perfetto/Chrome trace of every rank's instructions"),
    CLI_FN("--save", "FILE|DIR", parse_save,
           "FILE.safetensors: final weights as one file (Hugging Face names);\n"
           "DIR: sharded checkpoints DIR/step-K (Hugging Face safetensors per\n"
           "stage, index, config.json, optimizer, trainer state) at the\n"
           "end, every --save-every N steps, and on SIGINT/SIGTERM (at\n"
           "the next step boundary; the ranks exit 128 + signal, the\n"
           "command non-zero)"),
    CLI_I64("--save-every", "N", TA, o.save_every, 1, 100000000, "checkpoint interval in steps (with --save DIR)"),
    CLI_PATH("--resume", "DIR", TA, o.resume_dir,
            "continue from a checkpoint (DIR's latest, or a step folder);\n"
            "--steps is the total, same model, stages, data, order\n"
            "(shuffle, seed, --eval-split) and batch;\n"
            "another --steps, --lr, --min-lr or --warmup than the\n"
            "checkpoint's moves the lr schedule (a note says so)"),
    CLI_PATH("--init", "DIR", TA, o.init_dir,
            "start from a Hugging Face model folder (config.json and\n"
            "model.safetensors or its sharded index; GPT2LMHeadModel or\n"
            "T5ForConditionalGeneration v1.1), or a --save DIR checkpoint\n"
            "(its latest, or a step folder): its weights and shape, step 0,\n"
            "fresh optimizer (--resume continues a run instead)"),
    CLI_I64("--eval-every", "N", TA, o.eval_every, 1, 100000000,
            "eval loss every N steps into the metrics (eval_loss), and\n"
            "a new run's (also --init's) before its first step\n"
            "(eval_loss_before): on --eval-data, --eval-split's held-out\n"
            "part, the built-in held-out split, or else the training\n"
            "file itself (\"train-data loss\")"),
    {.name = "--eval-samples", .metavar = "N", .type = CLI_FLAG_I32, .field = offsetof(TA, o.eval_samples),
     .given = CLI_GIVEN(TA, have_eval_samples), .min = 1, .max = 1000000, .help = "samples per evaluation"},
    CLI_PATH("--eval-data", "FILE", TA, o.eval_data, "a validation set for --eval-every (any --data SPEC)"),
    CLI_FN("--eval-split", "P", parse_eval_split,
           "hold a fraction P in (0, 1) of --data out of training, the\n"
           "same samples whatever the seed, for --eval-every and eval"),
    CLI_PATH("--dump-order", "FILE.jsonl", TA, o.dump_order,
             "the samples of every step in training order, one line each:\n"
             "{\"step\", \"epoch\", \"samples\": [dataset indices]}"),
    {.name = "--hostfile", .metavar = "FILE", .type = CLI_FLAG_PATH, .field = offsetof(TA, hostfile),
     .help = "hosts for mpirun, filled slot by slot so a replica's\nstages share a host",
     .def = "this machine"},
    CLI_BOOL("--oversubscribe-ok", TA, o.oversubscribe_ok, 1,
             "start more ranks than the hosts' slots (8 per core without\n"
             "--hostfile), which is refused otherwise"),
    CLI_BOOL("--print-options", TA, print_options, 1,
             "print the run's resolved options (flags, defaults, the cost\n"
             "table's shape) as one JSON object and exit without training"),
    CLI_BOOL("--quiet", TA, o.progress, -1, "no progress lines"),
    CLI_BOOL("--verbose", TA, o.verbose, 1, "more detail in the progress lines"),
    CLI_FN("--debug-kill", "R:STEP", parse_fault, "(tests) rank R dies at the start of step STEP"),
    CLI_FN("--debug-hang", "R:STEP", parse_fault, "(tests) rank R stops answering at step STEP"),
    CLI_FN("--lengths", "FILE.tsv", refuse_lengths, NULL),
    CLI_FN("--synthetic", "flan[:SEED]", refuse_lengths, NULL),
    CLI_END,
};
#undef TA

static void usage(FILE *out)
{
    train_args d;
    train_args_init(&d);
    fprintf(out,
            "usage: dynapipe train --model gpt|t5|llama [flags]\n"
            "       dynapipe train --init DIR [flags]   (shape and weights from a model folder)\n\n"
            "Train a model with dynamic micro-batches on a pipeline of MPI ranks (one per\n"
            "stage per data-parallel replica; started with mpirun automatically).\n\n");
    cli_flag_set set = {train_flags, &d};
    cli_flags_usage(out, &set, 1, NULL);
    fprintf(out, "  --help                    this text\n\n"
                 "planning flags (as `dynapipe plan`, with training's defaults):\n");
    plan_args_usage(out, &d.plan, train_flags);
}

/* --profile auto: the cached profile of the run's shape (threads per rank
 * as the run will use them), made first when absent — only by the process
 * typed by hand, before mpirun starts the ranks (they find it cached). */
static int profile_for(const train_args *t, char *path, size_t cap)
{
    plan_inputs in;
    plan_open po = {.tune = 0, .warn = 0};
    plan_args shape = t->plan;
    shape.machine = "cpu"; /* only the shape is wanted: nothing to measure */
    int rc = plan_inputs_open(CMD, &shape, &po, &in); /* the analytic model: resolves the shape */
    if (rc != 0) return rc;
    dyn_model_config cfg = in.model;
    plan_inputs_close(&in);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long ranks = (long)t->plan.opt.stages * (t->plan.opt.dp > 0 ? t->plan.opt.dp : 1);
    int threads = t->o.threads > 0 ? t->o.threads : (cores > ranks && ranks > 0 ? (int)(cores / ranks) : 1);
    /* A micro-batch holds at most a global batch's tokens, padded: twice
     * that bounds the grid points worth measuring. */
    return cli_profile_cached(&cfg, threads, 2 * t->plan.global_batch_tokens, path, cap, !dyn_rt_under_mpirun());
}

/* 1 when flag stands in argv as a flag (for the header's "(default)"
 * marks: train fills some planning flags with its own defaults). */
static int flag_given(int argc, char **argv, const char *flag)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], flag) == 0) return 1;
    return 0;
}

/* --init DIR without --tokenizer: DIR's own tokenizer when it has one (a
 * Hugging Face folder's tokenizer.json, tokenizer.model or spiece.model;
 * a dynapipe checkpoint's recorded tokenizer), else NULL (bytes). */
static const char *init_tokenizer(const char *dir)
{
    static const char *const files[] = {"tokenizer.json", "tokenizer.model", "spiece.model"};
    static rt_ckpt_meta meta;
    char p[4200];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        if (access(p, R_OK) == 0) return dir;
    }
    dyn_error e;
    snprintf(p, sizeof p, "%s/trainer_state.json", dir);
    if (access(p, R_OK) == 0 && rt_ckpt_read_state(dir, &meta, &e) == DYN_OK && meta.data.recorded &&
        strcmp(meta.data.tokenizer, "bytes") != 0)
        return meta.data.tokenizer;
    return NULL;
}

/* --resume: the data settings the checkpoint recorded (truncation,
 * tokenizer, template) are this run's where its flags leave them out, so
 * that the run reads its data as the checkpoint's run did; flags that give
 * them are compared with the checkpoint's later (rt_ckpt_check, one line).
 * A checkpoint that cannot be read is reported by check_resume. 0 or an
 * exit code. */
static int resume_data(train_args *t)
{
    static rt_ckpt_meta meta; /* its strings become the run's options */
    static char dir[4096];
    dyn_error e;
    if (rt_ckpt_resolve(t->o.resume_dir, dir, sizeof dir, &e) != DYN_OK ||
        rt_ckpt_read_state(dir, &meta, &e) != DYN_OK || !meta.data.recorded)
        return 0;
    if (meta.data.truncate) t->plan.clip = 1;
    if (t->plan.tokenizer == NULL && strcmp(meta.data.tokenizer, "bytes") != 0) t->plan.tokenizer = meta.data.tokenizer;
    if (t->plan.template_str == NULL && meta.data.template_str[0] != '\0') t->plan.template_str = meta.data.template_str;
    return 0;
}

/* Parse argv into t: 0, -1 for --help (usage printed), or an exit code
 * (message printed). */
static int parse(int argc, char **argv, train_args *t)
{
    train_args_init(t);
    t->defaulted = (cli_train_defaults){!flag_given(argc, argv, "--model-config"),
                                        !flag_given(argc, argv, "--max-seqlen"),
                                        !flag_given(argc, argv, "--global-batch-tokens"),
                                        !flag_given(argc, argv, "--stages")};
    t->plan.have_max_seqlen = 0; /* whether --max-seqlen is given (a cost table's is the default) */
    cli_flag_set sets[] = {{train_flags, t}, {plan_args_flags, &t->plan}};
    int r = cli_flags_parse(CMD, sets, 2, argc, argv);
    if (r == 1) {
        usage(stdout);
        return -1;
    }
    t->have_max_seqlen = t->plan.have_max_seqlen;
    t->plan.have_max_seqlen = 1;
    if (r != 0) return CLI_EXIT_USAGE;
    if (t->o.init_dir && (r = train_init_apply(CMD, &t->o.init_dir, argc, argv, &t->plan, &t->o.tokens)) != 0)
        return r;
    t->o.have_tokens = t->o.init_dir != NULL;
    if (t->o.init_dir && t->plan.tokenizer == NULL) t->plan.tokenizer = init_tokenizer(t->o.init_dir);
    if (t->o.resume_dir && (r = resume_data(t)) != 0) return r;
    if (plan_args_finish(CMD, &t->plan) != 0 || plan_args_check_methods(CMD, &t->plan, &t->plan.opt.method, 1) != 0)
        return CLI_EXIT_USAGE;
    if (t->profile_auto && strcmp(t->plan.cost_model, "analytic") != 0) {
        cli_errorf(CMD, "--profile auto and --cost-model %s: give one", t->plan.cost_model);
        return CLI_EXIT_USAGE;
    }
    return 0;
}

/* Flags that contradict each other or do not apply to this run: one line
 * naming both, before anything starts. 0 or CLI_EXIT_USAGE. */
static int check_combinations(const train_args *t, const dyn_train_options *o)
{
    const char *data = o->data_spec;
    int builtin = strncmp(data, "builtin", 7) == 0 && (data[7] == '\0' || data[7] == ':');
    const char *bad = NULL;
    char msg[512];
    if (o->lr.min_lr > o->lr.max_lr)
        snprintf(msg, sizeof msg, "--min-lr %g is above --lr %g: the cosine decays from --lr down to --min-lr",
                 (double)o->lr.min_lr, (double)o->lr.max_lr), bad = msg;
    else if (t->have_warmup && o->lr.warmup_steps >= o->steps)
        snprintf(msg, sizeof msg, "--warmup %lld is not below --steps %lld: the warm-up would be the whole run",
                 (long long)o->lr.warmup_steps, (long long)o->steps), bad = msg;
    else if (t->have_samples && !builtin)
        snprintf(msg, sizeof msg, "--samples applies to --data builtin, not --data %s (a file's samples are all of it)",
                 data), bad = msg;
    else if (o->schedule == DYN_SCHEDULE_INTERLEAVED && o->plan.chunks < 2)
        bad = "--schedule interleaved needs --chunks 2 or more";
    else if (o->schedule != DYN_SCHEDULE_INTERLEAVED && o->plan.chunks > 1)
        snprintf(msg, sizeof msg, "--chunks %d applies to --schedule interleaved only", o->plan.chunks), bad = msg;
    else if (t->have_order_groups && o->schedule != DYN_SCHEDULE_AUTO)
        snprintf(msg, sizeof msg, "--order-groups applies to --schedule auto, not --schedule %s",
                 dyn_schedule_name((dyn_schedule)o->schedule)), bad = msg;
    else if (t->have_calibrate_window && !o->calibrate)
        bad = "--calibrate-window applies to --calibrate only";
    else if (t->have_eval_samples && o->eval_every == 0)
        bad = "--eval-samples applies to --eval-every N only";
    else if (o->eval_data && o->eval_split > 0)
        bad = "--eval-data and --eval-split both give the validation set: give one";
    else if (o->eval_data && o->eval_every == 0)
        bad = "--eval-data applies to --eval-every N only";
    else if (o->save_every > 0 && o->save_dir == NULL)
        bad = "--save-every needs --save DIR (a checkpoint folder, not a .safetensors file)";
    if (bad == NULL) return 0;
    cli_errorf(CMD, "%s", bad);
    return CLI_EXIT_USAGE;
}

/* A cost table's max length is the run's (the ranks' model is the table's
 * shape): --max-seqlen may restate it, another is refused. Sets
 * run->opt.max_seqlen. 0 or an exit code (printed). */
static int table_max_seqlen(const train_args *t, plan_args *run)
{
    if (strcmp(run->cost_model, "analytic") == 0) return 0;
    dyn_error e;
    dyn_cost_model *cm = dyn_cost_model_load_table(run->cost_model, &e);
    if (cm == NULL) {
        cli_errorf(CMD, "%s", e.msg);
        return CLI_EXIT_FAIL;
    }
    int32_t table = dyn_cost_model_config(cm)->max_seqlen;
    dyn_cost_model_free(cm);
    if (t->have_max_seqlen && table != run->opt.max_seqlen) {
        cli_errorf(CMD, "--max-seqlen %d differs from the cost table %s's max length %d: the run has one (leave "
                   "out --max-seqlen to take the table's, or profile for %d)",
                   run->opt.max_seqlen, run->cost_model, table, run->opt.max_seqlen);
        return CLI_EXIT_USAGE;
    }
    run->opt.max_seqlen = table;
    return 0;
}

/* --epochs: the run ends at the first end of --steps and the epochs (or at
 * the epochs' alone without --steps). The step count of the epochs is a
 * pure function of the data's lengths and the order (runtime/source.h), so
 * it is counted here, on the samples every rank will open, and the lr
 * schedule spans it. 0 or an exit code (printed). */
static int epoch_steps(const train_args *t, dyn_train_options *o)
{
    dyn_error e;
    rt_source *src = rt_source_open(o, &e);
    int64_t n = 0;
    dyn_status st = src ? rt_source_epoch_steps(rt_source_lengths(src), o, &n, &e) : e.code;
    rt_source_free(src);
    if (st != DYN_OK) {
        cli_errorf(CMD, "--epochs %lld: %s", (long long)o->epochs, e.msg);
        return CLI_EXIT_FAIL;
    }
    if (!t->have_steps || n < o->steps) o->steps = n;
    return 0;
}

/* The run's options from the flags: the shape, machine and planner options
 * resolved (the cost table's, --profile auto's cached one, or the analytic
 * model's), the lr schedule completed, combinations checked. 0 or an exit
 * code (message printed). */
static int build_options(const train_args *t, dyn_train_options *o, char *header, size_t header_cap)
{
    static char profile_path[1024];
    plan_args run = t->plan; /* the planning flags, with --profile auto's table */
    run.threads = t->o.threads;
    run.cost_quiet = 1; /* the header says it */
    if (t->profile_auto) {
        int rc = profile_for(t, profile_path, sizeof profile_path);
        if (rc != 0) return rc;
        run.cost_model = profile_path;
    }
    int rc = table_max_seqlen(t, &run);
    if (rc != 0) return rc;
    /* A baseline's knob and the stage split are tuned by every process
     * alike (same inputs, same values: simulation, no timing); only the
     * process that speaks for the job warns, and what it chose joins the
     * header, printed once the run is checked (a refused run prints only
     * its error). */
    int speaks = dyn_rt_speaks_for_job();
    /* The flags' own combinations are refused before the inputs are built,
     * which may measure this machine for seconds (--machine auto). */
    *o = t->o;
    o->data_spec = run.data_spec;
    o->plan = run.opt;
    if ((rc = check_combinations(t, o)) != 0) return rc;
    char *tuned = NULL;
    size_t tuned_len = 0;
    FILE *tune_fp = speaks ? open_memstream(&tuned, &tuned_len) : NULL;
    plan_open po = {.tune = !run.untuned, .tune_split = 1, .tune_report = tune_fp,
                    .order_groups = t->o.order_groups, .warn = speaks};
    plan_inputs in;
    rc = plan_inputs_open(CMD, &run, &po, &in);
    if (tune_fp != NULL && fclose(tune_fp) != 0 && rc == 0) {
        cli_errorf(CMD, "out of memory");
        rc = CLI_EXIT_FAIL;
        plan_inputs_close(&in);
    }
    if (rc != 0) {
        free(tuned);
        return rc;
    }
    *o = t->o;
    o->model = in.model;
    o->machine = in.machine;
    o->plan = *dyn_planner_options(in.planner);
    size_t used = tuned ? strlen(tuned) : 0;
    if (used >= header_cap) used = 0; /* cannot happen at these sizes; the header alone then */
    if (used > 0) memcpy(header, tuned, used + 1);
    cli_train_header(header + used, header_cap - used, &run, &in, &t->defaulted);
    free(tuned);
    plan_inputs_close(&in);
    /* The ranks compute and send fp32: a machine of other elements would
     * plan messages of other sizes than the ranks exchange. */
    int table = strcmp(run.cost_model, "analytic") != 0;
    if (o->machine.bytes_per_elem != 4) {
        cli_errorf(CMD, "%s %s: the machine's elements are %d bytes; dynapipe train runs in fp32 (4 bytes)",
                   table ? "--cost-model" : "--machine", table ? run.cost_model : run.machine,
                   o->machine.bytes_per_elem);
        return CLI_EXIT_USAGE;
    }
    o->cost_table = table ? run.cost_model : NULL;
    o->data_spec = run.data_spec;
    o->split = run.split;
    o->truncate = run.clip;
    o->tokenizer = run.tokenizer;
    o->template_str = run.template_str;
    o->global_batch_tokens = run.global_batch_tokens;
    int builtin = strncmp(o->data_spec, "builtin", 7) == 0 && (o->data_spec[7] == '\0' || o->data_spec[7] == ':');
    o->shuffle = t->shuffle >= 0 ? t->shuffle : !builtin;
    if (o->epochs > 0 && (rc = epoch_steps(t, o)) != 0) return rc;
    /* The schedule spans the run: the default warm-up is shortened first
     * (to a quarter of a short run), then the cosine ends at the last step. */
    if (!t->have_warmup && o->lr.warmup_steps >= o->steps) o->lr.warmup_steps = o->steps / 4;
    o->lr.total_steps = o->steps;
    return 0;
}

/* The resolved options as one JSON object on stdout (--print-options): what
 * a run of these flags would train with. Floats are printed as the float
 * the run holds (0.001, not 0.0010000000474974513). */
static int print_options(const dyn_train_options *o, const char *hostfile)
{
    const dyn_model_config *m = &o->model;
    cJSON *j = cJSON_CreateObject(), *mj = cJSON_AddObjectToObject(j, "model");
    char f32[32];
#define NUM(obj, key, v) cJSON_AddNumberToObject((obj), (key), (double)(v))
#define F32(key, v) (snprintf(f32, sizeof f32, "%.7g", (double)(v)), cJSON_AddRawToObject(j, (key), f32))
#define STR(key, v) ((v) ? cJSON_AddStringToObject(j, (key), (v)) : cJSON_AddNullToObject(j, (key)))
    cJSON_AddStringToObject(mj, "kind", dyn_model_kind_name(m->kind));
    NUM(mj, "n_layers", m->n_layers), NUM(mj, "n_dec_layers", m->n_dec_layers), NUM(mj, "hidden", m->hidden);
    NUM(mj, "heads", m->heads), NUM(mj, "head_dim", m->head_dim), NUM(mj, "ffn", m->ffn);
    NUM(mj, "vocab", m->vocab), NUM(mj, "max_seqlen", m->max_seqlen);
    cJSON_AddStringToObject(j, "method", dyn_batching_name(o->plan.method));
    NUM(j, "stages", o->plan.stages), NUM(j, "dp", o->plan.dp), NUM(j, "chunks", o->plan.chunks);
    cJSON_AddItemToObject(j, "split_weight", cJSON_CreateDoubleArray(o->plan.split_weight, DYN_LAYER_KIND_COUNT));
    STR("schedule", dyn_schedule_name(o->schedule));
    NUM(j, "order_groups", o->order_groups), NUM(j, "plan_ahead", o->plan_ahead);
    STR("cost_table", o->cost_table), STR("data", o->data_spec);
    STR("tokenizer", o->tokenizer), STR("template", o->template_str), NUM(j, "truncate", o->truncate);
    NUM(j, "samples", o->n_samples), NUM(j, "global_batch_tokens", o->global_batch_tokens);
    NUM(j, "steps", o->steps), NUM(j, "seed", o->seed);
    NUM(j, "epochs", o->epochs), NUM(j, "shuffle", o->shuffle), NUM(j, "eval_split", o->eval_split);
    STR("eval_data", o->eval_data), STR("dump_order", o->dump_order);
    F32("lr", o->lr.max_lr), F32("min_lr", o->lr.min_lr);
    NUM(j, "warmup_steps", o->lr.warmup_steps), NUM(j, "total_steps", o->lr.total_steps);
    F32("beta1", o->adamw.beta1), F32("beta2", o->adamw.beta2), F32("adam_eps", o->adamw.eps);
    F32("weight_decay", o->adamw.weight_decay), NUM(j, "clip", o->clip_norm);
    NUM(j, "threads", o->threads), NUM(j, "timeout_s", o->timeout_s), NUM(j, "calibrate", o->calibrate);
    NUM(j, "calibrate_window", o->calibrate_window), NUM(j, "eval_every", o->eval_every);
    NUM(j, "eval_samples", o->eval_samples), NUM(j, "save_every", o->save_every);
    STR("hostfile", hostfile);
#undef NUM
#undef F32
#undef STR
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (text == NULL) {
        cli_errorf(CMD, "out of memory");
        return CLI_EXIT_FAIL;
    }
    printf("%s\n", text);
    cJSON_free(text);
    return fflush(stdout) == 0 && !ferror(stdout) ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}

/* Every output the run writes at its end (or at a signal), checked before
 * it starts: a run never trains for hours to fail on its save. */
static int check_outputs(const dyn_train_options *o)
{
    if (o->save_path && cli_output_check(CMD, "--save", o->save_path, 0) != 0) return -1;
    if (o->save_dir && cli_output_check(CMD, "--save", o->save_dir, 1) != 0) return -1;
    if (o->metrics_path && cli_output_check(CMD, "--metrics", o->metrics_path, 0) != 0) return -1;
    if (o->trace_path && cli_output_check(CMD, "--trace", o->trace_path, 0) != 0) return -1;
    if (o->dump_order && cli_output_check(CMD, "--dump-order", o->dump_order, 0) != 0) return -1;
    return 0;
}

/* --eval-data, opened once before any rank starts as the evaluation will
 * open it: a missing or malformed file is one line now, not a failure at
 * the first evaluation. 0 or -1 (printed). */
static int check_eval_data(const dyn_train_options *o)
{
    dyn_corpus_options co;
    dyn_corpus_options_default(&co);
    co.split = DYN_SPLIT_HELDOUT;
    co.builtin_samples = o->eval_samples;
    co.max_seqlen = o->model.max_seqlen;
    co.kind = o->model.kind;
    co.truncate = o->truncate;
    co.vocab = o->model.vocab;
    co.tokenizer = o->tokenizer;
    co.template_str = o->template_str;
    dyn_error e;
    dyn_corpus *c = dyn_corpus_open(o->eval_data, &co, &e);
    if (c == NULL) {
        cli_errorf(CMD, "--eval-data %s: %s", o->eval_data, e.msg);
        return -1;
    }
    int64_t n = dyn_corpus_count(c);
    dyn_corpus_free(c);
    if (n == 0) {
        cli_errorf(CMD, "--eval-data %s: no samples", o->eval_data);
        return -1;
    }
    return 0;
}

/* --resume, checked once before any rank starts: the checkpoint's files
 * (sizes, hashes) and its shape against this run's; one line if not. */
static int check_resume(const dyn_train_options *o)
{
    char dir[4096];
    dyn_error e;
    rt_ckpt_meta *meta = calloc(1, sizeof *meta);
    if (meta == NULL) {
        cli_errorf(CMD, "out of memory");
        return -1;
    }
    dyn_status st = rt_ckpt_resolve(o->resume_dir, dir, sizeof dir, &e);
    if (st == DYN_OK) st = rt_ckpt_read(dir, meta, &e);
    if (st == DYN_OK && rt_ckpt_check(meta, o, &e) != DYN_OK) {
        cli_errorf(CMD, "--resume %s: %s", dir, e.msg);
        free(meta);
        return -1;
    }
    free(meta);
    if (st != DYN_OK) {
        cli_errorf(CMD, "--resume: %s", e.msg);
        return -1;
    }
    return 0;
}

int cli_train_main(int argc, char **argv)
{
    int mpi = dyn_rt_under_mpirun();
    /* Each rank sets its OpenMP wait policy (and BLAS kernel) before any
     * library reads them: this may re-execute the rank once. */
    if (mpi) dyn_threads_init();
    train_args t;
    int rc = parse(argc, argv, &t);
    if (rc != 0) return rc < 0 ? CLI_EXIT_OK : rc;
    /* Refusals that need no model or machine come first: building the
     * options may measure this machine for seconds (--machine auto). */
    if (t.o.init_dir && t.o.resume_dir) {
        cli_errorf(CMD, "--init starts a new run, --resume continues one: give one");
        return CLI_EXIT_USAGE;
    }
    if (!mpi && !t.print_options && check_outputs(&t.o) != 0) return CLI_EXIT_USAGE;
    /* --init's folder against its own config.json's shape (the tensors do
     * not depend on the run's length): a bad folder is refused before the
     * options are built, which may measure this machine for seconds. */
    if (!mpi && t.o.init_dir && train_init_check(CMD, t.o.init_dir, &t.plan.init_model) != 0) return CLI_EXIT_FAIL;
    dyn_train_options o;
    /* The setup header, printed by the launcher once the run is checked,
     * so that a run refused prints only its error. */
    static char header[4096];
    if ((rc = build_options(&t, &o, header, sizeof header)) != 0) return rc;
    if (!mpi && t.print_options) return print_options(&o, t.hostfile);
    if (!mpi && o.resume_dir && check_resume(&o) != 0) return CLI_EXIT_FAIL;
    if (!mpi && o.eval_data && check_eval_data(&o) != 0) return CLI_EXIT_FAIL;
    if (mpi) return dyn_train_rank_main(&o, &argc, &argv);
    /* a machine measured here travels to the ranks as JSON: they plan with
     * exactly the launcher's, on any host */
    int measured = o.cost_table == NULL && strcmp(o.machine.name, "auto") == 0, ac;
    char **av = cli_rank_argv(argc + 1, argv - 1, &o.machine, measured, &ac);
    if (av == NULL) {
        cli_errorf(CMD, "out of memory");
        return CLI_EXIT_FAIL;
    }
    /* a run the hosts cannot hold prints only its error, not the header */
    if ((rc = dyn_train_launch_check(&o, t.hostfile)) != 0) {
        cli_rank_argv_free(av, argv - 1);
        return rc;
    }
    if (o.progress >= 0) fputs(header, stderr);
    rc = dyn_train_launch(&o, t.hostfile, ac, av);
    cli_rank_argv_free(av, argv - 1);
    return rc;
}
