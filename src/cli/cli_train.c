/* cli_train.c — `dynapipe train`: pipeline-parallel training on MPI ranks
 * (src/runtime). Typed by hand it re-executes itself under mpirun with one
 * rank per stage per replica; under mpirun each rank parses the same flags
 * and runs its part. Bad flags are reported once, before any rank starts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_machine.h" /* defines: cli_train_header, cli_rank_argv */
#include "cli/plan_args.h"
#include "dynapipe/model_config.h"
#include "dynapipe/sched.h"
#include "model/threads.h"
#include "runtime/checkpoint.h" /* defines: rt_ckpt_resolve, rt_ckpt_read, rt_ckpt_check */
#include "runtime/group.h"
#include "runtime/train.h"

#define CMD "train"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: dynapipe train --model gpt|t5 [flags]\n\n"
            "Train a model with dynamic micro-batches on a pipeline of MPI ranks (one per\n"
            "stage per data-parallel replica; started with mpirun automatically).\n\n"
            "training flags:\n"
            "  --steps N                 iterations (global batches), default 20\n"
            "  --schedule NAME|auto      1f1b, cyclic, wait-free-cyclic, interleaved (needs --chunks),\n"
            "                            zb, or auto: best schedule per batch by simulation (default)\n"
            "  --threads T               threads per rank (default: cores / ranks, at least 1)\n"
            "  --lr X --min-lr X --warmup N  AdamW learning rate: warm-up, then cosine (1e-3, 1e-4, 5)\n"
            "  --clip X                  global gradient-norm clip (default 1.0; 0: none)\n"
            "  --adam-eps X --weight-decay X  AdamW epsilon and decoupled decay (1e-8, 0.01)\n"
            "  --seed N                  model initialisation seed (default 1)\n"
            "  --samples N               samples of the built-in --data (default 20000)\n"
            "  --timeout S               deadline of every wait for a peer, seconds (default 60)\n"
            "  --plan-ahead K            global batches planned ahead of training (default 2)\n"
            "  --profile auto            use this shape's profile (--cost-model), profiling it first\n"
            "                            (--quick grid) when the cache has none: $XDG_CACHE_HOME/dynapipe,\n"
            "                            else ~/.cache/dynapipe\n"
            "  --calibrate               correct the planner's layer times online from the measured\n"
            "                            Forward/Backward times (median of the last --calibrate-window\n"
            "                            rank-iterations, default 8); on by default\n"
            "  --no-calibrate            plan every iteration with the cost model as given\n"
            "  --order-groups K          auto's micro-batch order search, 1..4 (default 2)\n"
            "  --metrics FILE.jsonl      one record per iteration\n"
            "  --trace FILE.json         Perfetto/Chrome trace of every rank's instructions\n"
            "  --save FILE.safetensors   final weights as one file (Hugging Face names)\n"
            "  --save DIR                sharded checkpoints DIR/step-K (Hugging Face safetensors per\n"
            "                            stage, index, config.json, optimizer, trainer state) at the\n"
            "                            end, every --save-every N steps, and on SIGINT/SIGTERM (at\n"
            "                            the next step boundary; the ranks exit 128 + signal, the\n"
            "                            command non-zero)\n"
            "  --save-every N            checkpoint interval in steps (with --save DIR)\n"
            "  --resume DIR              continue from a checkpoint (DIR's latest, or a step folder);\n"
            "                            --steps is the total, same model, stages, data and batch;\n"
            "                            another --steps, --lr, --min-lr or --warmup than the\n"
            "                            checkpoint's moves the lr schedule (a note says so)\n"
            "  --eval-every N            held-out loss every N steps into the metrics (eval_loss)\n"
            "  --eval-samples N          held-out samples per evaluation (default 64)\n"
            "  --hostfile FILE           hosts for mpirun, filled slot by slot so a replica's\n"
            "                            stages share a host (default: this machine)\n"
            "  --quiet | --verbose\n\n"
            "Defaults for the planning flags below: --data builtin, --model-config gpt-mini /\n"
            "t5-mini, --stages 2, --global-batch-tokens 8192, --max-seqlen 512.\n\n");
    plan_args_usage(out);
}

/* "R:STEP" of the fault-injection flags. */
static int parse_fault(const char *v, int32_t *rank, int32_t *step)
{
    char *end;
    long r = strtol(v, &end, 10);
    if (end == v || *end != ':') return -1;
    const char *s = end + 1;
    long k = strtol(s, &end, 10);
    if (end == s || *end != '\0' || r < 0 || k < 0) return -1;
    *rank = (int32_t)r;
    *step = (int32_t)k;
    return 0;
}

static int parse_train_flag(dyn_train_options *o, const char **hostfile, int argc, char **argv, int *i)
{
    const char *f = argv[*i];
    int64_t v;
    double d;
#define VAL() const char *val = cli_flag_value(CMD, argc, argv, i); if (val == NULL) return -1
    if (strcmp(f, "--steps") == 0) {
        VAL();
        if (cli_parse_i64(CMD, f, val, 1, 100000000, &v)) return -1;
        o->steps = v;
    } else if (strcmp(f, "--schedule") == 0) {
        VAL();
        if (strcmp(val, "auto") == 0) {
            o->schedule = DYN_SCHEDULE_AUTO;
        } else {
            dyn_schedule s;
            dyn_error e;
            if (dyn_schedule_parse(val, &s, &e) != DYN_OK) {
                cli_errorf(CMD, "--schedule: %s, or auto", e.msg);
                return -1;
            }
            o->schedule = s;
        }
    } else if (strcmp(f, "--threads") == 0) {
        VAL();
        if (cli_parse_i64(CMD, f, val, 1, 1024, &v)) return -1;
        o->threads = (int32_t)v;
    } else if (strcmp(f, "--lr") == 0 || strcmp(f, "--min-lr") == 0) {
        VAL();
        if (cli_parse_f64(CMD, f, val, 0, 10, &d)) return -1;
        if (f[2] == 'l') o->lr.max_lr = (float)d;
        else o->lr.min_lr = (float)d;
    } else if (strcmp(f, "--adam-eps") == 0 || strcmp(f, "--weight-decay") == 0) {
        VAL();
        if (cli_parse_f64(CMD, f, val, 0, 1e6, &d)) return -1;
        if (f[2] == 'a') o->adamw.eps = (float)d;
        else o->adamw.weight_decay = (float)d;
    } else if (strcmp(f, "--warmup") == 0) {
        VAL();
        if (cli_parse_i64(CMD, f, val, 0, 100000000, &v)) return -1;
        o->lr.warmup_steps = v;
    } else if (strcmp(f, "--clip") == 0) {
        VAL();
        if (cli_parse_f64(CMD, f, val, 0, 1e30, &d)) return -1;
        o->clip_norm = d;
    } else if (strcmp(f, "--seed") == 0) {
        VAL();
        if (cli_parse_i64(CMD, f, val, 0, INT64_MAX, &v)) return -1;
        o->seed = (uint64_t)v;
    } else if (strcmp(f, "--samples") == 0) {
        VAL();
        if (cli_parse_i64(CMD, f, val, 1, 100000000, &v)) return -1;
        o->n_samples = (int32_t)v;
    } else if (strcmp(f, "--timeout") == 0) {
        VAL();
        if (cli_parse_f64(CMD, f, val, 0.1, 1e6, &d)) return -1;
        o->timeout_s = d;
    } else if (strcmp(f, "--plan-ahead") == 0) {
        VAL();
        if (cli_parse_i64(CMD, f, val, 1, 64, &v)) return -1;
        o->plan_ahead = (int32_t)v;
    } else if (strcmp(f, "--order-groups") == 0) {
        VAL();
        if (cli_parse_i64(CMD, f, val, 1, 4, &v)) return -1;
        o->order_groups = (int32_t)v;
    } else if (strcmp(f, "--calibrate") == 0 || strcmp(f, "--no-calibrate") == 0) {
        o->calibrate = f[2] == 'c';
    } else if (strcmp(f, "--calibrate-window") == 0) {
        VAL();
        if (cli_parse_i64(CMD, f, val, 1, 100000, &v)) return -1;
        o->calibrate_window = (int32_t)v;
    } else if (strcmp(f, "--metrics") == 0) {
        VAL();
        o->metrics_path = val;
    } else if (strcmp(f, "--trace") == 0) {
        VAL();
        o->trace_path = val;
    } else if (strcmp(f, "--save") == 0) {
        VAL();
        size_t n = strlen(val), x = strlen(".safetensors");
        if (n > x && strcmp(val + n - x, ".safetensors") == 0) o->save_path = val;
        else o->save_dir = val;
    } else if (strcmp(f, "--save-every") == 0 || strcmp(f, "--eval-every") == 0) {
        VAL();
        if (cli_parse_i64(CMD, f, val, 1, 100000000, &v)) return -1;
        if (f[3] == 'a') o->save_every = v;
        else o->eval_every = v;
    } else if (strcmp(f, "--eval-samples") == 0) {
        VAL();
        if (cli_parse_i64(CMD, f, val, 1, 1000000, &v)) return -1;
        o->eval_samples = (int32_t)v;
    } else if (strcmp(f, "--resume") == 0) {
        VAL();
        o->resume_dir = val;
    } else if (strcmp(f, "--hostfile") == 0) {
        VAL();
        *hostfile = val;
    } else if (strcmp(f, "--debug-kill") == 0 || strcmp(f, "--debug-hang") == 0) {
        VAL();
        int kill = f[8] == 'k';
        if (parse_fault(val, kill ? &o->kill_rank : &o->hang_rank, kill ? &o->kill_step : &o->hang_step)) {
            cli_errorf(CMD, "%s: expected RANK:STEP, got '%s'", f, val);
            return -1;
        }
    } else if (strcmp(f, "--quiet") == 0) {
        o->progress = -1;
    } else if (strcmp(f, "--verbose") == 0) {
        o->verbose = 1;
    } else {
        return 0;
    }
#undef VAL
    return 1;
}

/* --profile auto: the cached profile of the run's shape (threads per rank
 * as the run will use them), made first when absent — only by the process
 * typed by hand, before mpirun starts the ranks (they find it cached). */
static int profile_for(const plan_args *a, const dyn_train_options *o, char *path, size_t cap)
{
    plan_inputs in;
    plan_args shape = *a;
    shape.machine = "cpu"; /* only the shape is wanted: nothing to measure */
    int rc = plan_inputs_open(CMD, &shape, &in); /* the analytic model: resolves the shape */
    if (rc != 0) return rc;
    dyn_model_config cfg = in.model;
    plan_inputs_close(&in);
    long cores = sysconf(_SC_NPROCESSORS_ONLN), ranks = (long)a->opt.stages * (a->opt.dp > 0 ? a->opt.dp : 1);
    int threads = o->threads > 0 ? o->threads : (cores > ranks && ranks > 0 ? (int)(cores / ranks) : 1);
    /* A micro-batch holds at most a global batch's tokens, padded: twice
     * that bounds the grid points worth measuring. */
    return cli_profile_cached(&cfg, threads, 2 * a->global_batch_tokens, path, cap, !dyn_rt_under_mpirun());
}

/* The setup header (cli_train_header), printed by the launcher once the
 * run is checked, so that a run refused prints only its error. */
static char train_header[4096];

/* Parse everything into o; 0 or an exit code (message printed). */
static int parse(int argc, char **argv, dyn_train_options *o, const char **hostfile)
{
    plan_args a;
    plan_args_init(&a);
    dyn_train_options_default(o);
    o->calibrate = 1; /* the command's default (docs/cost-model.md); --no-calibrate */
    int have_warmup = 0, have_config = 0, have_gbt = 0, profile_auto = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--profile") == 0) {
            const char *val = cli_flag_value(CMD, argc, argv, &i);
            if (val == NULL) return CLI_EXIT_USAGE;
            if (strcmp(val, "auto") != 0) {
                cli_errorf(CMD, "--profile: expected auto (a profile file goes to --cost-model FILE), got '%s'", val);
                return CLI_EXIT_USAGE;
            }
            profile_auto = 1;
            continue;
        }
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return -1;
        }
        if (strcmp(argv[i], "--lengths") == 0 || strcmp(argv[i], "--synthetic") == 0) {
            cli_errorf(CMD, "%s gives lengths only; training needs tokens: --data builtin[:SEED]|FILE.jsonl|PREFIX",
                       argv[i]);
            return CLI_EXIT_USAGE;
        }
        have_warmup |= strcmp(argv[i], "--warmup") == 0;
        have_config |= strcmp(argv[i], "--model-config") == 0;
        have_gbt |= strcmp(argv[i], "--global-batch-tokens") == 0;
        int r = parse_train_flag(o, hostfile, argc, argv, &i);
        if (r < 0) return CLI_EXIT_USAGE;
        if (r > 0) continue;
        r = plan_args_parse_one(CMD, &a, argc, argv, &i);
        if (r < 0) return CLI_EXIT_USAGE;
        if (r == 0) {
            cli_errorf(CMD, "unknown flag '%s' (try 'dynapipe train --help')", argv[i]);
            return CLI_EXIT_USAGE;
        }
    }
    /* training defaults for the planning flags */
    cli_train_defaults defaulted = {!have_config, !a.have_max_seqlen, !have_gbt, !a.have_stages};
    if (a.data_spec == NULL) a.data_spec = "builtin";
    if (!have_config && a.have_kind) a.model_config = a.kind == DYN_MODEL_GPT ? "gpt-mini" : "t5-mini";
    if (!have_gbt) a.global_batch_tokens = o->global_batch_tokens;
    if (!a.have_max_seqlen) {
        a.have_max_seqlen = 1;
        a.opt.max_seqlen = 512;
    }
    if (!a.have_stages) {
        a.have_stages = 1;
        a.opt.stages = 2;
    }
    if (plan_args_finish(CMD, &a) != 0) return CLI_EXIT_USAGE;
    /* A baseline's knob is tuned by every process alike (same inputs, same
     * value); only the launcher says what it chose. */
    a.tune_quiet = dyn_rt_under_mpirun();
    a.tune_order_groups = o->order_groups;
    a.threads = o->threads;
    a.cost_quiet = 1; /* the header below says it */
    static char profile_path[1024];
    if (profile_auto) {
        if (strcmp(a.cost_model, "analytic") != 0) {
            cli_errorf(CMD, "--profile auto and --cost-model %s: give one", a.cost_model);
            return CLI_EXIT_USAGE;
        }
        int rc = profile_for(&a, o, profile_path, sizeof profile_path);
        if (rc != 0) return rc;
        a.cost_model = profile_path;
    }
    plan_inputs in;
    int rc = plan_inputs_open(CMD, &a, &in);
    if (rc != 0) return rc;
    o->model = in.model;
    o->machine = in.machine;
    o->plan = *dyn_planner_options(in.planner);
    cli_train_header(train_header, sizeof train_header, &a, &in, &defaulted);
    plan_inputs_close(&in);
    /* The ranks compute and send fp32: a machine of other elements would
     * plan messages of other sizes than the ranks exchange. */
    if (o->machine.bytes_per_elem != 4) {
        int table = strcmp(a.cost_model, "analytic") != 0;
        cli_errorf(CMD, "%s %s: the machine's elements are %d bytes; dynapipe train runs in fp32 (4 bytes)",
                   table ? "--cost-model" : "--machine", table ? a.cost_model : a.machine, o->machine.bytes_per_elem);
        return CLI_EXIT_USAGE;
    }
    o->cost_table = strcmp(a.cost_model, "analytic") == 0 ? NULL : a.cost_model;
    o->data_spec = a.data_spec;
    o->split = a.split;
    o->truncate = a.clip;
    o->global_batch_tokens = a.global_batch_tokens;
    o->lr.total_steps = o->steps > o->lr.warmup_steps ? o->steps : o->lr.warmup_steps + 1;
    if (!have_warmup && o->lr.warmup_steps >= o->steps) o->lr.warmup_steps = o->steps / 4;
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
    if (o->progress < 0) train_header[0] = '\0';
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
    dyn_train_options o;
    const char *hostfile = NULL;
    int rc = parse(argc, argv, &o, &hostfile);
    if (rc != 0) return rc < 0 ? CLI_EXIT_OK : rc;
    if (!mpi && o.resume_dir && check_resume(&o) != 0) return CLI_EXIT_FAIL;
    if (!mpi) {
        /* a machine measured here travels to the ranks as JSON: they plan
         * with exactly the launcher's, on any host */
        int measured = o.cost_table == NULL && strcmp(o.machine.name, "auto") == 0, ac;
        char **av = cli_rank_argv(argc + 1, argv - 1, &o.machine, measured, &ac);
        if (av == NULL) {
            cli_errorf(CMD, "out of memory");
            return CLI_EXIT_FAIL;
        }
        if (hostfile == NULL || access(hostfile, R_OK) == 0) fputs(train_header, stderr); /* else: its error */
        rc = dyn_train_launch(&o, hostfile, ac, av);
        cli_rank_argv_free(av, argv - 1);
        return rc;
    }
    return dyn_train_rank_main(&o, &argc, &argv);
}
