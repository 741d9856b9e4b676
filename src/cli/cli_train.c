/* cli_train.c — `dynapipe train`: pipeline-parallel training on MPI ranks
 * (src/runtime). Typed by hand it re-executes itself under mpirun with one
 * rank per stage per replica; under mpirun each rank parses the same flags
 * and runs its part. Bad flags are reported once, before any rank starts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"       /* defines: cli_errorf, cli_profile_cached, CLI_EXIT_* */
#include "cli/flags.h"     /* defines: cli_flag, cli_flags_parse, cli_flags_usage */
#include "cli/plan_args.h" /* defines: plan_args_*, plan_inputs_* */
#include "dynapipe/model_config.h"
#include "dynapipe/pipeline.h" /* defines: dyn_pipeline_schedule_parse */
#include "dynapipe/sched.h"
#include "model/threads.h"
#include "runtime/checkpoint.h" /* defines: rt_ckpt_resolve, rt_ckpt_read, rt_ckpt_check */
#include "runtime/group.h"
#include "runtime/train.h"
#include "cli/train_init.h" /* defines: train_init_apply, train_init_check */

#define CMD "train"

/* Everything the command line chose, read-only once parsed; the run's
 * options (dyn_train_options, with the shape, machine and planner options
 * resolved) are built from it by build_options. */
typedef struct train_args {
    dyn_train_options o; /* the training flags' fields (dyn_train_options_default) */
    plan_args plan;      /* the planning flags, with training's defaults (train_args_init) */
    const char *hostfile; /* --hostfile */
    int profile_auto;    /* --profile auto */
    int have_warmup;     /* --warmup given */
} train_args;

static void train_args_init(train_args *t)
{
    memset(t, 0, sizeof *t);
    dyn_train_options_default(&t->o);
    plan_args_init(&t->plan);
    /* training's defaults for the planning flags */
    t->plan.data_spec = t->o.data_spec;
    t->plan.default_config[DYN_MODEL_GPT] = "gpt-mini";
    t->plan.default_config[DYN_MODEL_T5] = "t5-mini";
    t->plan.global_batch_tokens = t->o.global_batch_tokens;
    t->plan.opt.max_seqlen = 512;
    t->plan.have_max_seqlen = 1;
    t->plan.opt.stages = t->o.plan.stages;
    t->plan.have_stages = 1;
}

static int parse_schedule(const char *cmd, const cli_flag *f, const char *v, void *args)
{
    train_args *t = args;
    dyn_error e;
    if (dyn_pipeline_schedule_parse(v, &t->o.schedule, &e) != DYN_OK) {
        cli_errorf(cmd, "%s: %s, or auto", f->name, e.msg);
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
    (void)cmd, (void)f;
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
    CLI_I64("--steps", "N", TA, o.steps, 1, 100000000, "iterations (global batches)"),
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
    CLI_I64("--seed", "N", TA, o.seed, 0, INT64_MAX, "model initialisation seed"),
    CLI_I32("--samples", "N", TA, o.n_samples, 1, 100000000, "samples of the built-in --data"),
    CLI_F64("--timeout", "S", TA, o.timeout_s, 0.1, 1e6, "deadline of every wait for a peer, seconds"),
    CLI_I32("--plan-ahead", "K", TA, o.plan_ahead, 1, 64, "global batches planned ahead of training"),
    CLI_FN("--profile", "auto", parse_profile,
           "use this shape's profile (--cost-model), profiling it first\n"
           "(--quick grid) when the cache has none: $XDG_CACHE_HOME/dynapipe,\n"
           "else ~/.cache/dynapipe"),
    CLI_BOOL("--calibrate", TA, o.calibrate, 1,
             "correct the planner's layer times online from the measured\n"
             "Forward/Backward times (median of the last --calibrate-window\n"
             "rank-iterations)"),
    CLI_I32("--calibrate-window", "N", TA, o.calibrate_window, 1, 100000, "rank-iterations in --calibrate's median"),
    CLI_I32("--order-groups", "K", TA, o.order_groups, 1, 4, "auto's micro-batch order search"),
    CLI_STR("--metrics", "FILE.jsonl", TA, o.metrics_path, "one record per iteration"),
    CLI_STR("--trace", "FILE.json", TA, o.trace_path, "Perfetto/Chrome trace of every rank's instructions"),
    CLI_FN("--save", "FILE|DIR", parse_save,
           "FILE.safetensors: final weights as one file (Hugging Face names);\n"
           "DIR: sharded checkpoints DIR/step-K (Hugging Face safetensors per\n"
           "stage, index, config.json, optimizer, trainer state) at the\n"
           "end, every --save-every N steps, and on SIGINT/SIGTERM (at\n"
           "the next step boundary; the ranks exit 128 + signal, the\n"
           "command non-zero)"),
    CLI_I64("--save-every", "N", TA, o.save_every, 1, 100000000, "checkpoint interval in steps (with --save DIR)"),
    CLI_STR("--resume", "DIR", TA, o.resume_dir,
            "continue from a checkpoint (DIR's latest, or a step folder);\n"
            "--steps is the total, same model, stages, data and batch;\n"
            "another --steps, --lr, --min-lr or --warmup than the\n"
            "checkpoint's moves the lr schedule (a note says so)"),
    CLI_STR("--init", "DIR", TA, o.init_dir,
            "start from a Hugging Face model folder (config.json and\n"
            "model.safetensors or its sharded index; GPT2LMHeadModel or\n"
            "T5ForConditionalGeneration v1.1), or a --save DIR checkpoint\n"
            "(its latest, or a step folder): its weights and shape, step 0,\n"
            "fresh optimizer (--resume continues a run instead)"),
    CLI_I64("--eval-every", "N", TA, o.eval_every, 1, 100000000, "held-out loss every N steps into the metrics (eval_loss)"),
    CLI_I32("--eval-samples", "N", TA, o.eval_samples, 1, 1000000, "held-out samples per evaluation"),
    {.name = "--hostfile", .metavar = "FILE", .type = CLI_FLAG_STR, .field = offsetof(TA, hostfile),
     .help = "hosts for mpirun, filled slot by slot so a replica's\nstages share a host",
     .def = "this machine"},
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
            "usage: dynapipe train --model gpt|t5 [flags]\n"
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
    int rc = plan_inputs_open(CMD, &t->plan, &po, &in); /* the analytic model: resolves the shape */
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

/* Parse argv into t: 0, -1 for --help (usage printed), or an exit code
 * (message printed). */
static int parse(int argc, char **argv, train_args *t)
{
    train_args_init(t);
    cli_flag_set sets[] = {{train_flags, t}, {plan_args_flags, &t->plan}};
    int r = cli_flags_parse(CMD, sets, 2, argc, argv);
    if (r == 1) {
        usage(stdout);
        return -1;
    }
    if (r != 0) return CLI_EXIT_USAGE;
    if (t->o.init_dir && (r = train_init_apply(CMD, &t->o.init_dir, argc, argv, &t->plan)) != 0) return r;
    if (plan_args_finish(CMD, &t->plan) != 0) return CLI_EXIT_USAGE;
    if (t->profile_auto && strcmp(t->plan.cost_model, "analytic") != 0) {
        cli_errorf(CMD, "--profile auto and --cost-model %s: give one", t->plan.cost_model);
        return CLI_EXIT_USAGE;
    }
    return 0;
}

/* The run's options from the flags: the shape, machine and planner options
 * resolved (the cost table's, --profile auto's cached one, or the analytic
 * model's), the lr schedule completed, combinations checked. 0 or an exit
 * code (message printed). */
static int build_options(const train_args *t, dyn_train_options *o)
{
    static char profile_path[1024];
    plan_args run = t->plan; /* the planning flags, with --profile auto's table */
    if (t->profile_auto) {
        int rc = profile_for(t, profile_path, sizeof profile_path);
        if (rc != 0) return rc;
        run.cost_model = profile_path;
    }
    /* A baseline's knob is tuned by every process alike (same inputs, same
     * value); only the process that speaks for the job says what it chose,
     * and what it warns of. */
    int speaks = dyn_rt_speaks_for_job();
    plan_open po = {.tune = !run.untuned, .tune_report = speaks ? stderr : NULL,
                    .order_groups = t->o.order_groups, .warn = speaks};
    plan_inputs in;
    int rc = plan_inputs_open(CMD, &run, &po, &in);
    if (rc != 0) return rc;
    *o = t->o;
    o->model = in.model;
    o->machine = in.machine;
    o->plan = *dyn_planner_options(in.planner);
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
    o->global_batch_tokens = run.global_batch_tokens;
    o->lr.total_steps = o->steps > o->lr.warmup_steps ? o->steps : o->lr.warmup_steps + 1;
    if (!t->have_warmup && o->lr.warmup_steps >= o->steps) o->lr.warmup_steps = o->steps / 4;
    if (o->schedule == DYN_SCHED_INTERLEAVED && o->plan.chunks < 2) {
        cli_errorf(CMD, "--schedule interleaved needs --chunks 2 or more");
        return CLI_EXIT_USAGE;
    }
    if (o->schedule != DYN_SCHED_INTERLEAVED && o->plan.chunks > 1) {
        cli_errorf(CMD, "--chunks %d applies to --schedule interleaved only", o->plan.chunks);
        return CLI_EXIT_USAGE;
    }
    if (o->save_every > 0 && o->save_dir == NULL) {
        cli_errorf(CMD, "--save-every needs --save DIR (a checkpoint folder, not a .safetensors file)");
        return CLI_EXIT_USAGE;
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
    dyn_train_options o;
    if ((rc = build_options(&t, &o)) != 0) return rc;
    if (o.init_dir && o.resume_dir) {
        cli_errorf(CMD, "--init starts a new run, --resume continues one: give one");
        return CLI_EXIT_USAGE;
    }
    if (!mpi && o.resume_dir && check_resume(&o) != 0) return CLI_EXIT_FAIL;
    if (!mpi && o.init_dir && train_init_check(CMD, o.init_dir, &o.model) != 0) return CLI_EXIT_FAIL;
    if (!mpi) return dyn_train_launch(&o, t.hostfile, argc + 1, argv - 1);
    return dyn_train_rank_main(&o, &argc, &argv);
}
