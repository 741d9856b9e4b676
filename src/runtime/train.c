/* train.c — one rank of `dynapipe train` (see train.h): start-up, the
 * iteration loop, checkpoints and the end of the run. Plans reach the
 * ranks through mail.c (rank 0's planner thread fills a queue, its main
 * thread sends each planned iteration while the previous one trains); the
 * stage models and the optimizer step are step.c's; the progress line,
 * metrics and trace are written by report.c.
 *
 * One iteration reads as its data flow:
 *   work_receive  this rank's work (plan + samples), checked against the run
 *   rt_exec_run   the interpreter runs the plan (exec.c)
 *   step          gradient sums, global norm, AdamW (rt_stages_step)
 *   metrics       every rank's rt_rank_rec gathered on rank 0, which makes
 *                 the iteration's rt_iter, calibrates and prints progress
 * with every buffer of the metrics allocated once at start-up. */
#include "runtime/train.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "dynapipe/model_config.h" /* defines: dyn_model_kind_name, dyn_model_config_params */
#include "model/blas.h"            /* defines: dyn_blas_describe */
#include "model/hf_load.h"         /* defines: dyn_hf_open, dyn_hf_check, dyn_hf_load */
#include "model/model.h"
#include "runtime/calibrate.h"     /* defines: rt_calib_* */
#include "runtime/checkpoint.h"    /* defines: rt_ckpt_* */
#include "runtime/evaluate.h"      /* defines: rt_eval_run */
#include "runtime/exec.h"          /* defines: rt_exec_*, rt_wait */
#include "runtime/group.h"         /* defines: dyn_rt_group, dyn_rt_mpi_check */
#include "runtime/mail.h"          /* defines: rt_mail_* */
#include "runtime/planner.h"       /* defines: rt_planner_* */
#include "runtime/report.h"        /* defines: rt_iter, rt_report_* */
#include "runtime/source.h"        /* defines: rt_source_* */
#include "runtime/step.h"          /* defines: rt_stages_*, rt_step_out */
#include "runtime/work.h"          /* defines: dyn_rt_work */
#include "util/util.h"

/* Iterations of a process that online calibration leaves out (cold;
 * calibrate_hook). */
#define CALIB_COLD 2

void dyn_train_options_default(dyn_train_options *o)
{
    memset(o, 0, sizeof *o);
    dyn_plan_options_default(&o->plan);
    o->plan.stages = 2;
    o->schedule = DYN_SCHEDULE_AUTO;
    o->order_groups = 2;
    o->plan_ahead = 2;
    o->data_spec = "builtin";
    o->n_samples = 20000;
    o->global_batch_tokens = 8192;
    o->steps = 20;
    o->seed = 1;
    o->lr = (dyn_lr_schedule){1e-3f, 1e-4f, 5, 20};
    o->adamw = dyn_adamw_default();
    o->clip_norm = 1.0;
    o->timeout_s = 60;
    o->calibrate_window = 8;
    o->kill_rank = o->hang_rank = -1;
    o->eval_samples = 64;
    o->shuffle = 0; /* dataset order; the command shuffles files (cli_train.c) */
}

/* ---- the run's state --------------------------------------------------------- */

/* What each rank reports to rank 0 after an iteration: gathered as
 * RT_REC_DOUBLES doubles, so every field is a double. */
typedef struct rt_rank_rec {
    double iter_ms;        /* the whole iteration on this rank: receive, execute, step */
    double exec_ms;        /* plan interpretation (first to last instruction) */
    double step_ms;        /* optimizer step: gradient norm and AdamW */
    double busy_ms;        /* in Forward / Backward* */
    double comm_wait_ms;   /* blocked on communication */
    double comm_bytes;     /* sent */
    double plan_wait_ms;   /* waiting for this iteration's plan */
    double alloc_mb;       /* model states + activation arenas and buffer slots, MB */
    double loss_sum;       /* target-token losses summed (last stage) */
    double target_tokens;  /* target tokens of loss_sum */
    double pred_peak_mb;   /* the plan's predicted allocation of this pipeline rank, MB */
    double meas_ms[2];     /* measured Forward [0] and Backward* [1] time */
    double pred_ms[2];     /* the plan's prediction of the same */
} rt_rank_rec;
#define RT_REC_DOUBLES ((int)(sizeof(rt_rank_rec) / sizeof(double)))
_Static_assert(sizeof(rt_rank_rec) == 15 * sizeof(double), "rt_rank_rec travels as plain doubles");

/* The run's metrics, allocated once at start-up: one rt_iter per step and,
 * on rank 0, the gathered records and every iteration's per-rank arrays
 * (carved from one slab). */
typedef struct rt_metrics {
    rt_iter *iters;    /* [steps] */
    rt_rank_rec *all;  /* rank 0: [world] this iteration's records */
    double *slab;      /* rank 0: the per-rank arrays of every rt_iter */
    rt_calib *calib;   /* rank 0 with --calibrate, else NULL */
    double *calib_buf; /* [stages * (RT_CALIB_DIRS + 1)] scratch of calibrate_hook */
} rt_metrics;

/* Where the run stands in its steps. */
typedef struct rt_position {
    int64_t first_step;    /* 0, or the step a --resume continues from */
    char resume_dir[4096]; /* the step folder resumed from */
    int stop_signal;       /* the signal that stopped the run at a boundary, or 0 */
    int64_t end_step;      /* steps done when the loop ended */
} rt_position;

typedef struct rt_run {
    dyn_train_options o;
    dyn_rt_group g;
    int threads;       /* kernel threads per rank */
    int tty;           /* stderr is a terminal */
    rt_source *src;
    rt_stages s;
    rt_exec *x;
    rt_mail mail;
    rt_planner *planner; /* rank 0 */
    int32_t per_epoch;   /* rank 0: samples per epoch (the data less the held-out split) */
    double epoch_ms;     /* rank 0's clock at start: the trace's zero */
    rt_metrics met;
    rt_position pos;
    rt_ckpt_data data;   /* rank 0 with --save DIR: the data settings checkpoints record */
} rt_run;

static dyn_model *model_of(void *ctx, int32_t stage)
{
    rt_run *R = ctx;
    return R->s.models[stage / R->g.stages];
}

/* ---- hooks of the waits and the interpreter ---------------------------------- */

/* The poll hook of every wait: plan delivery, and the data-parallel
 * allreduces started during the backward (MPI_Test drives them). */
static void run_poll(void *ctx)
{
    rt_run *R = ctx;
    rt_mail_poll(&R->mail);
    rt_stages_poll(&R->s);
}

/* The interpreter's stage_done hook: the stage's weight gradients of this
 * iteration are complete, so their allreduce overlaps the rest of the plan. */
static void on_stage_done(void *ctx, int32_t stage)
{
    rt_run *R = ctx;
    dyn_error e;
    if (rt_stages_stage_done(&R->s, stage, &e) != DYN_OK) rt_mail_fail(&R->mail, e.code, &e);
}

/* ---- the whole model, checkpoints, resume and evaluation --------------------- */

/* --save FILE.safetensors: the whole model as one file, written by rank 0
 * (so rank 0 holds the whole model once, at the end). */
static dyn_status save_full(rt_run *R, dyn_error *err)
{
    dyn_model *full = NULL;
    dyn_status st = rt_stages_gather_full(&R->s, &full, err);
    if (st == DYN_OK && full != NULL) st = dyn_model_save(full, R->o.save_path, err);
    dyn_model_free(full);
    return st;
}

static volatile sig_atomic_t got_signal;

static void on_stop_signal(int sig) { got_signal = sig == SIGUSR1 ? SIGTERM : sig; }

/* With --save DIR, SIGINT and SIGTERM stop the run at the next iteration
 * boundary, after a checkpoint (ckpt_after_step). */
static dyn_status ckpt_install_signals(dyn_error *err)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    /* SIGUSR1: the launcher's stop request, which mpirun passes on without
     * ending the job (launch.c); it counts as SIGTERM. */
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGUSR1, &sa, NULL) != 0)
        return dyn_error_set(err, DYN_ERR_INTERNAL, "cannot install the SIGINT/SIGTERM/SIGUSR1 handlers");
    return DYN_OK;
}

/* --resume: every rank checks the checkpoint (sizes and hashes of every
 * file, then the run's shape) and loads its own chunks; *pos gets the
 * sampler position for rank 0's planner. Nothing trains before all ranks
 * loaded (the start-up barrier). */
static dyn_status ckpt_resume(rt_run *R, int64_t *pos, dyn_error *err)
{
    rt_ckpt_meta *meta = dyn_calloc(1, sizeof *meta, "checkpoint", err);
    if (meta == NULL) return DYN_ERR_NOMEM;
    dyn_status st = rt_ckpt_resolve(R->o.resume_dir, R->pos.resume_dir, sizeof R->pos.resume_dir, err);
    if (st == DYN_OK) st = rt_ckpt_read(R->pos.resume_dir, meta, err);
    if (st == DYN_OK) st = rt_ckpt_check(meta, &R->o, err);
    if (st == DYN_OK && meta->n_stages != R->s.n_stages)
        st = dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: %d plan stages, this run %d", R->pos.resume_dir, meta->n_stages,
                           R->s.n_stages);
    int32_t per_epoch = 0;
    if (st == DYN_OK) st = rt_source_per_epoch(rt_source_lengths(R->src), &R->o, &per_epoch, err);
    if (st == DYN_OK && meta->per_epoch > 0 && meta->per_epoch != per_epoch)
        st = dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: its order has %d samples per epoch, this run's data %d: the "
                           "data changed", R->pos.resume_dir, meta->per_epoch, per_epoch);
    for (int32_t c = 0; st == DYN_OK && c < R->s.n_local; c++)
        st = rt_ckpt_load_stage(R->pos.resume_dir, meta, c * R->g.stages + R->g.stage_rank, R->s.models[c], err);
    if (st == DYN_OK) {
        R->pos.first_step = meta->step;
        *pos = meta->sampler_pos;
        R->o.tokens = meta->tokens; /* the next checkpoint names the same token ids */
        R->o.have_tokens = 1;
        /* Not an error: extending a run (a larger --steps) is a legitimate
         * use, but the rates change under it, so say so once. */
        char note[512];
        if (R->g.world_rank == 0 && rt_ckpt_schedule_note(meta, &R->o, note, sizeof note))
            fprintf(stderr, "dynapipe train: note: %s\n", note);
    }
    free(meta);
    return st;
}

/* --init: every rank checks the folder's headers against the run's shape
 * and loads only its own chunks' tensors (model/hf_load.h); the optimizer
 * and the step count stay those of a fresh run. */
static dyn_status init_weights(rt_run *R, dyn_error *err)
{
    dyn_hf_folder *f = dyn_hf_open(R->o.init_dir, R->o.model.max_seqlen, err);
    dyn_status st = f ? dyn_hf_check(f, &R->o.model, err) : err->code;
    for (int32_t c = 0; st == DYN_OK && c < R->s.n_local; c++) st = dyn_hf_load(f, R->s.models[c], err);
    dyn_hf_close(f);
    return st;
}

/* What --eval-every's loss is on, in the words the output uses:
 * "validation" (--eval-data), "held-out" (--eval-split's part of the data,
 * or the built-in dataset's held-out stream), or "train-data" (a file with
 * neither: its own training samples). */
static const char *eval_on(const dyn_train_options *o)
{
    const char *d = o->data_spec;
    int builtin = strncmp(d, "builtin", 7) == 0 && (d[7] == '\0' || d[7] == ':');
    if (o->eval_data) return "validation";
    return o->eval_split > 0 || builtin ? "held-out" : "train-data";
}

/* The samples --eval-every evaluates: the first eval_samples of --eval-data,
 * of --eval-split's held-out part of --data (*ids, ascending; never
 * trained), of the built-in held-out stream, or of the training file.
 * *c to free; *ids (NULL: the first *n of *c) to free. */
static dyn_status eval_set(const rt_run *R, dyn_corpus **c, int64_t **ids, int64_t *n, dyn_error *err)
{
    const dyn_train_options *o = &R->o;
    *c = NULL, *ids = NULL, *n = o->eval_samples;
    dyn_corpus_options co;
    dyn_corpus_options_default(&co);
    co.split = o->eval_split > 0 ? (dyn_corpus_split)o->split : DYN_SPLIT_HELDOUT; /* built-in only */
    co.builtin_samples = o->eval_split > 0 ? o->n_samples : o->eval_samples;
    co.max_seqlen = o->model.max_seqlen;
    co.kind = o->model.kind;
    co.truncate = o->truncate;
    co.vocab = o->model.vocab;
    co.tokenizer = o->tokenizer; /* --eval-data is read as the training data is */
    co.template_str = o->template_str;
    if (o->eval_split > 0) {
        int32_t total = rt_source_lengths(R->src)->n, held = 0;
        uint8_t *out = dyn_calloc((size_t)total + 1, 1, "evaluation", err);
        if (out == NULL) return DYN_ERR_NOMEM;
        dyn_status st = dyn_eval_split(total, o->eval_split, out, &held, err);
        if (st == DYN_OK && (*ids = dyn_calloc((size_t)held + 1, sizeof(int64_t), "evaluation", err)) == NULL)
            st = DYN_ERR_NOMEM;
        int64_t k = 0;
        for (int32_t i = 0; st == DYN_OK && i < total && k < o->eval_samples; i++)
            if (out[i]) (*ids)[k++] = i;
        free(out);
        if (st != DYN_OK) return st;
        *n = k;
    }
    *c = dyn_corpus_open(o->eval_data ? o->eval_data : o->data_spec, &co, err);
    return *c ? DYN_OK : err->code;
}

/* --eval-every: the whole model gathered on rank 0, its loss on eval_set. */
static dyn_status eval_step(rt_run *R, rt_iter *it, dyn_error *err)
{
    dyn_model *full = NULL;
    dyn_status st = rt_stages_gather_full(&R->s, &full, err);
    if (st != DYN_OK || full == NULL) return st;
    dyn_corpus *c = NULL;
    int64_t *ids = NULL, n = 0;
    st = eval_set(R, &c, &ids, &n, err);
    rt_eval_result *res = st == DYN_OK ? dyn_calloc(1, sizeof *res, "evaluation", err) : NULL;
    if (st == DYN_OK && res == NULL) st = DYN_ERR_NOMEM;
    if (st == DYN_OK) {
        dyn_model_set_threads(full, R->threads);
        st = rt_eval_run(full, c, ids, n, 0, res, err);
    }
    if (st == DYN_OK) {
        it->eval_loss = res->loss;
        it->eval_on = eval_on(&R->o);
    }
    free(res);
    free(ids);
    dyn_corpus_free(c);
    dyn_model_free(full);
    return st;
}

/* After step k (k + 1 steps done): with --save DIR, agree whether any rank
 * got SIGINT/SIGTERM, and save every --save-every steps, at the last step
 * and on a signal (then *stop); with --eval-every, the held-out loss. */
static dyn_status ckpt_after_step(rt_run *R, int64_t k, int *stop, dyn_error *err)
{
    int64_t done = k + 1;
    dyn_status st = DYN_OK;
    *stop = 0;
    if (R->o.save_dir) {
        int mine = got_signal, any = 0;
        MPI_Request req;
        st = dyn_rt_mpi_check(MPI_Iallreduce(&mine, &any, 1, MPI_INT, MPI_MAX, R->g.world, &req),
                              "MPI_Iallreduce (stop signal)", err);
        if (st == DYN_OK) st = rt_wait(&req, R->o.timeout_s, rt_mail_poll, &R->mail, "the stop-signal allreduce", err);
        if (st != DYN_OK) return st;
        if (any) {
            *stop = 1;
            R->pos.stop_signal = any;
        }
        if (*stop || done == R->o.steps || (R->o.save_every > 0 && done % R->o.save_every == 0)) {
            rt_ckpt_job j = {&R->g, &R->o, R->s.models, R->s.n_local, R->s.lay_first, R->s.n_stages, done,
                             R->mail.sampler_pos ? R->mail.sampler_pos[k] : 0, R->per_epoch, &R->data};
            st = rt_ckpt_save(&j, err);
            if (st == DYN_OK && R->g.world_rank == 0 && R->o.progress >= 0)
                fprintf(stderr, "%scheckpoint %s/step-%08lld%s\n", R->tty ? "\r\033[K" : "", R->o.save_dir,
                        (long long)done, *stop ? " (stopped by a signal)" : "");
        }
    }
    if (st == DYN_OK && R->o.eval_every > 0 && (done % R->o.eval_every == 0 || done == R->o.steps))
        st = eval_step(R, &R->met.iters[k], err);
    if (st == DYN_OK && R->g.world_rank == 0 && R->met.iters[k].eval_loss >= 0 && R->o.progress >= 0)
        fprintf(stderr, "%sstep %lld: %s loss %.4f\n", R->tty ? "\r\033[K" : "", (long long)done,
                R->met.iters[k].eval_on, R->met.iters[k].eval_loss);
    return st;
}

/* --eval-every on a new run (step 0; a resume continues a curve that has
 * its points): the eval loss of the weights it starts from, random or
 * --init's, before the first step, into the first record's eval_before.
 * A fine-tune's curve then starts where its pretrained model stood. */
static dyn_status eval_before_first(rt_run *R, dyn_error *err)
{
    if (R->o.eval_every <= 0 || R->pos.first_step != 0 || R->o.steps < 1) return DYN_OK;
    rt_iter it = {.eval_loss = -1};
    dyn_status st = eval_step(R, &it, err);
    if (st != DYN_OK || R->g.world_rank != 0) return st;
    R->met.iters[0].eval_before = it.eval_loss;
    if (R->o.progress >= 0)
        fprintf(stderr, "%sstep 0: %s loss %.4f\n", R->tty ? "\r\033[K" : "", it.eval_on, it.eval_loss);
    return DYN_OK;
}

/* ---- start-up ---------------------------------------------------------------- */

/* Kernel threads per rank: --threads, else this host's cores shared by
 * its ranks, at least 1. */
static int threads_per_rank(const rt_run *R)
{
    if (R->o.threads > 0) return R->o.threads;
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    long local = ls ? atol(ls) : R->g.world_size;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = local > 0 && cores > 0 ? (int)(cores / local) : 1;
    return threads < 1 ? 1 : threads;
}

/* The run's metrics records (rt_metrics): every buffer an iteration
 * needs, allocated here once. */
static dyn_status metrics_init(rt_run *R, dyn_error *err)
{
    rt_metrics *m = &R->met;
    int W = R->g.world_size, S = R->g.stages;
    int64_t steps = R->o.steps;
    if ((m->iters = dyn_calloc((size_t)steps, sizeof(rt_iter), "metrics", err)) == NULL) return DYN_ERR_NOMEM;
    for (int64_t k = 0; k < steps; k++) m->iters[k].eval_loss = m->iters[k].eval_before = -1;
    if (R->g.world_rank != 0) return DYN_OK;
    /* per iteration: peak_mb [W], pred_peak_mb [W], compute_ms [2W], time_scale [S x dirs] */
    size_t per = 4 * (size_t)W + (R->o.calibrate ? (size_t)S * RT_CALIB_DIRS : 0);
    m->all = dyn_calloc((size_t)W, sizeof(rt_rank_rec), "metrics", err);
    m->slab = m->all ? dyn_calloc((size_t)steps, per * sizeof(double), "metrics", err) : NULL;
    if (m->slab == NULL) return DYN_ERR_NOMEM;
    for (int64_t k = 0; k < steps; k++) {
        double *at = m->slab + (size_t)k * per;
        rt_iter *it = &m->iters[k];
        it->peak_mb = at;
        it->pred_peak_mb = at + W;
        it->compute_ms = at + 2 * (size_t)W;
        it->time_scale = R->o.calibrate ? at + 4 * (size_t)W : NULL; /* filled by calibrate_hook */
    }
    if (R->o.calibrate) {
        m->calib = rt_calib_create(S, R->o.calibrate_window, 0.03);
        m->calib_buf = calloc((size_t)S * (RT_CALIB_DIRS + 1), sizeof(double));
        if (m->calib == NULL || m->calib_buf == NULL)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the calibration");
    }
    return DYN_OK;
}

static void metrics_free(rt_metrics *m)
{
    rt_calib_free(m->calib);
    free(m->calib_buf);
    free(m->all);
    free(m->slab);
    free(m->iters);
    memset(m, 0, sizeof *m);
}

/* The instruction interpreter over this rank's stage models. */
static dyn_status exec_create(rt_run *R, dyn_error *err)
{
    rt_exec_env env;
    memset(&env, 0, sizeof env);
    env.g = &R->g;
    env.kind = R->o.model.kind;
    env.model_of = model_of;
    env.model_ctx = R;
    env.lay_first = R->s.lay_first;
    env.n_stages = R->s.n_stages;
    env.n_layers = dyn_model_num_layers(R->s.models[0]);
    env.src = R->src;
    env.timeout_s = R->o.timeout_s;
    env.poll = run_poll;
    env.poll_ctx = R;
    env.stage_done = on_stage_done;
    env.record = R->o.trace_path != NULL;
    if ((R->x = rt_exec_create(&env, err)) == NULL) return err->code;
    for (int32_t c = 0; c < R->s.n_local; c++) dyn_model_set_progress(R->s.models[c], rt_exec_poll, R->x);
    return DYN_OK;
}

/* Rank 0's start-up line: ranks, hosts, threads, model, BLAS. */
static void banner(const rt_run *R)
{
    const dyn_train_options *o = &R->o;
    char hosts[512];
    dyn_rt_group_hosts_describe(&R->g, hosts, sizeof hosts);
    fprintf(stderr, "dynapipe train: %d ranks (%d stages x %d replicas) on %s, %d threads per rank, %s %.2fM "
                    "parameters (%.1f MB of states on rank 0); %s\n",
            R->g.world_size, R->g.stages, R->g.dp, hosts, R->threads, dyn_model_kind_name(o->model.kind),
            dyn_model_config_params(&o->model) / 1e6, R->s.states_mb, dyn_blas_describe());
    if (o->eval_every > 0 && strcmp(eval_on(o), "train-data") == 0)
        fprintf(stderr, "dynapipe train: note: --eval-every evaluates on the training data (%s), so its loss is a "
                        "train-data loss, not a held-out one; --eval-data FILE or --eval-split P gives a held-out "
                        "set\n",
                o->data_spec);
    int split = dyn_rt_group_split_replica(&R->g);
    if (split >= 0)
        fprintf(stderr, "dynapipe train: note: replica %d's stages are on more than one host, so its "
                        "activations cross the network; give each host a multiple of %d slots\n",
                split, R->g.stages);
}

/* Rank 0: the planner thread (positioned at a resumed step) and the
 * sending of its plans. */
static dyn_status planner_start(rt_run *R, int64_t resume_pos, dyn_error *err)
{
    const dyn_train_options *o = &R->o;
    dyn_status st;
    if ((R->planner = rt_planner_create(o, rt_source_lengths(R->src), err)) == NULL) return err->code;
    R->per_epoch = rt_planner_train_count(R->planner);
    if (o->dump_order && (st = rt_mail_keep_order(&R->mail, err)) != DYN_OK) return st;
    if (R->pos.first_step > 0 && (st = rt_planner_seek(R->planner, R->pos.first_step, resume_pos, err)) != DYN_OK)
        return st;
    if ((st = rt_planner_start(R->planner, err)) != DYN_OK) return st;
    rt_mail_start_sending(&R->mail, R->planner, R->pos.first_step);
    if (o->calibrate) rt_mail_hold(&R->mail, R->pos.first_step + CALIB_COLD + 1); /* the first warm record's next plan */
    return DYN_OK;
}

static dyn_status setup(rt_run *R, dyn_error *err)
{
    const dyn_train_options *o = &R->o;
    R->threads = threads_per_rank(R);
    dyn_status st = rt_stages_create(&R->s, o, &R->g, R->threads, run_poll, R, err);
    if (st != DYN_OK) return st;
    if ((R->src = rt_source_open(o, err)) == NULL) return err->code;
    int64_t resume_pos = 0;
    if (o->resume_dir && (st = ckpt_resume(R, &resume_pos, err)) != DYN_OK) return st;
    if (o->init_dir && (st = init_weights(R, err)) != DYN_OK) return st;
    if (o->save_dir && (st = ckpt_install_signals(err)) != DYN_OK) return st;
    if (o->save_dir && R->g.world_rank == 0 &&
        (st = rt_ckpt_data_of(o->tokenizer, o->template_str, o->truncate, o->model.kind, &R->data, err)) != DYN_OK)
        return st;
    if ((st = exec_create(R, err)) != DYN_OK) return st;
    if ((st = metrics_init(R, err)) != DYN_OK) return st;
    if ((st = rt_mail_init(&R->mail, &R->g, o->steps, o->timeout_s, err)) != DYN_OK) return st;
    if (R->g.world_rank == 0) {
        if ((st = planner_start(R, resume_pos, err)) != DYN_OK) return st;
        if (o->progress >= 0) banner(R);
    }
    if (R->pos.first_step > 0 && R->g.world_rank == 0 && o->progress >= 0)
        fprintf(stderr, "dynapipe train: resumed from %s at step %lld\n", R->pos.resume_dir,
                (long long)R->pos.first_step);
    if (o->init_dir && R->g.world_rank == 0 && o->progress >= 0)
        fprintf(stderr, "dynapipe train: weights from %s (step 0, fresh optimizer)\n", o->init_dir);
    rt_mail_post(&R->mail, R->pos.first_step);
    return DYN_OK;
}

/* ---- one iteration ----------------------------------------------------------- */

static void fault_injection(const rt_run *R, int64_t k)
{
    if (R->g.world_rank == R->o.kill_rank && k == R->o.kill_step) raise(SIGKILL);
    if (R->g.world_rank == R->o.hang_rank && k == R->o.hang_step)
        for (;;) pause(); /* stop answering; the peers' deadlines must end the job */
}

/* Stage 1, work_receive: iteration k's work for this rank (the plan of
 * its replica and the samples), checked against this run. */
static dyn_status work_receive(rt_run *R, int64_t k, dyn_rt_work *w, double *wait_ms, dyn_error *err)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    dyn_status st = rt_mail_take(&R->mail, k, &buf, &len, wait_ms, err);
    if (st == DYN_OK) st = dyn_rt_work_unpack(buf, len, rt_source_lengths(R->src)->n, w, err);
    free(buf);
    if (st != DYN_OK) return st;
    if (w->iteration != k)
        return dyn_error_set(err, DYN_ERR_INTERNAL, "received the plan of iteration %lld for %lld",
                             (long long)w->iteration, (long long)k);
    if (w->replica != R->g.replica)
        return dyn_error_set(err, DYN_ERR_INTERNAL, "received replica %d's plan on replica %d", w->replica,
                             R->g.replica);
    if (w->n_mb > 0 && (w->n_stages != R->s.n_stages || w->n_ranks != R->g.stages))
        return dyn_error_set(err, DYN_ERR_INTERNAL, "plan of %d stages on %d ranks; this run has %d stages on %d ranks",
                             w->n_stages, w->n_ranks, R->s.n_stages, R->g.stages);
    return DYN_OK;
}

/* This rank's record of the iteration from what the stages measured. */
static rt_rank_rec rank_record(const rt_run *R, const dyn_rt_work *w, const rt_exec_stats *xs, const rt_step_out *so,
                               double wait_ms, double iter_ms)
{
    rt_rank_rec r;
    memset(&r, 0, sizeof r);
    r.iter_ms = iter_ms;
    r.exec_ms = xs->wall_ms;
    r.step_ms = so->ms;
    r.busy_ms = xs->busy_ms;
    r.comm_wait_ms = xs->comm_wait_ms;
    r.comm_bytes = (double)xs->comm_bytes;
    r.plan_wait_ms = wait_ms;
    r.alloc_mb = R->s.states_mb + (double)xs->alloc_bytes / (1024.0 * 1024.0);
    r.loss_sum = xs->loss_sum;
    r.target_tokens = (double)xs->target_tokens;
    r.pred_peak_mb = w->n_mb > 0 ? w->peak_mb[R->g.stage_rank] : 0;
    for (int d = 0; d < 2; d++) r.meas_ms[d] = xs->meas_ms[d], r.pred_ms[d] = xs->pred_ms[d];
    return r;
}

/* Rank 0: iteration k's metrics record from every rank's (R->met.all)
 * and the work of this replica. */
static void aggregate(rt_run *R, int64_t k, const dyn_rt_work *w, const rt_step_out *so, rt_iter *it)
{
    double loss = 0, busy = 0, comm = 0, bytes = 0, wait = 0, iter_ms = 0;
    for (int r = 0; r < R->g.world_size; r++) {
        const rt_rank_rec *q = &R->met.all[r];
        loss += q->loss_sum;
        busy += q->busy_ms;
        comm += q->comm_wait_ms;
        bytes += q->comm_bytes;
        if (q->plan_wait_ms > wait) wait = q->plan_wait_ms;
        if (q->iter_ms > iter_ms) iter_ms = q->iter_ms;
        if (q->exec_ms > it->exec_ms) it->exec_ms = q->exec_ms;
        if (q->step_ms > it->step_ms) it->step_ms = q->step_ms;
        it->peak_mb[r] = q->alloc_mb;
        it->pred_peak_mb[r] = q->pred_peak_mb;
        it->compute_ms[2 * r] = q->meas_ms[0] + q->meas_ms[1];
        it->compute_ms[2 * r + 1] = q->pred_ms[0] + q->pred_ms[1];
    }
    it->step = k;
    it->loss = loss / (double)w->global_target_tokens;
    it->tokens = w->global_real_tokens;
    it->target_tokens = w->global_target_tokens;
    it->iteration_ms = iter_ms;
    it->predicted_ms = w->predicted_ms;
    it->makespan_ms = w->predicted_ms - rt_planner_step_ms(R->planner, k);
    it->ideal_ms = w->ideal_ms;
    it->efficiency = iter_ms > 0 ? w->ideal_ms / iter_ms : 0;
    /* the bound at the rates this run measured (report.h ideal_rated_ms) */
    double meas = 0, pred = 0, pred_step = rt_planner_step_ms(R->planner, k);
    for (int r = 0; r < R->g.world_size; r++) meas += it->compute_ms[2 * r], pred += it->compute_ms[2 * r + 1];
    double step_part = w->ideal_ms - w->ideal_compute_ms;
    it->ideal_rated_ms = w->ideal_compute_ms * (pred > 0 ? meas / pred : 1.0) +
                         step_part * (pred_step > 0 ? it->step_ms / pred_step : 1.0);
    it->efficiency_rated = iter_ms > 0 ? it->ideal_rated_ms / iter_ms : 0;
    it->bubble = iter_ms > 0 ? 1.0 - busy / ((double)R->g.world_size * iter_ms) : 0;
    it->plan_ms = w->plan_ms;
    it->plan_wait_ms = wait;
    it->comm_wait_ms = comm;
    it->comm_mb = bytes / (1024.0 * 1024.0);
    it->lr = so->lr;
    it->grad_norm = so->grad_norm;
    it->schedule = w->n_mb > 0 ? w->plan.schedule : -1;
    it->n_mb = w->n_mb;
}

/* Online calibration (calibrate.h), rank 0: iteration k's per-rank
 * measured and predicted compute and optimizer step (all: [world]) join
 * the windows from this process's third iteration on (the first two are
 * cold: arenas and caches growing, also after a resume, and the planner
 * thread filling its plan-ahead queue on the cores the ranks train on --
 * on 2 cores the second iteration still ran 1.2-1.7x its later ratio of
 * measured to predicted), with the factors k's plan carried; moved factors are posted to the planner thread, which
 * plans again what it has queued. The first warm iteration's correction
 * reaches the next iteration (rt_mail_hold), the others the one after
 * (the next was sent while k trained). The factors k's plan carried also
 * go to k's metrics record (time_scale). */
static void calibrate_hook(rt_run *R, rt_iter *it, int64_t k, const rt_rank_rec *all)
{
    if (R->met.calib == NULL) return;
    int S = R->g.stages;
    double *carried = R->met.calib_buf, *opt = R->met.calib_buf + (size_t)S * RT_CALIB_DIRS;
    if (!rt_planner_carried(R->planner, k, carried, opt)) {
        it->time_scale = NULL; /* no longer known: left out of the metrics */
        return;
    }
    memcpy(it->time_scale, carried, (size_t)S * RT_CALIB_DIRS * sizeof(double));
    if (k < R->pos.first_step + CALIB_COLD) return;
    for (int r = 0; r < R->g.world_size; r++) {
        const rt_rank_rec *q = &all[r];
        int s = r % S;
        double meas[RT_CALIB_DIRS] = {q->meas_ms[0], q->meas_ms[1], q->step_ms};
        double pred[RT_CALIB_DIRS] = {q->pred_ms[0], q->pred_ms[1], opt[s]};
        rt_calib_add(R->met.calib, s, meas, pred, carried + (size_t)s * RT_CALIB_DIRS);
    }
    if (rt_calib_update(R->met.calib, carried)) {
        rt_planner_set_time_scale(R->planner, carried);
        if (R->o.verbose) {
            fprintf(stderr, "dynapipe train: calibration after iteration %lld:", (long long)k + 1);
            for (int s = 0; s < S; s++)
                fprintf(stderr, " rank %d forward x%.3f backward x%.3f step x%.3f%s", s,
                        carried[(size_t)s * RT_CALIB_DIRS], carried[(size_t)s * RT_CALIB_DIRS + 1],
                        carried[(size_t)s * RT_CALIB_DIRS + 2], s + 1 < S ? ";" : "\n");
        }
    }
}

/* Rank 0: the epochs done after iteration k into its record, and one line
 * when k's batch ended an epoch (a batch never crosses an epoch's end, so
 * the sampler's position after it is then a multiple of the epoch). */
static void epoch_hook(rt_run *R, rt_iter *it, int64_t k)
{
    it->epoch = -1;
    if (R->per_epoch <= 0 || R->mail.sampler_pos == NULL) return;
    int64_t pos = R->mail.sampler_pos[k];
    it->epoch = (double)pos / (double)R->per_epoch;
    if (pos % R->per_epoch != 0 || R->o.progress < 0) return;
    char of[48] = "";
    if (R->o.epochs > 0) snprintf(of, sizeof of, " of %lld", (long long)R->o.epochs);
    fprintf(stderr, "%sdynapipe train: epoch %lld%s done at step %lld (%d samples each)\n", R->tty ? "\r\033[K" : "",
            (long long)(pos / R->per_epoch), of, (long long)k + 1, R->per_epoch);
}

/* Stage 4, metrics: every rank's record gathered on rank 0, which makes
 * iteration k's metrics record, feeds the calibration and prints the
 * progress line. */
static dyn_status metrics(rt_run *R, int64_t k, const rt_rank_rec *mine, const dyn_rt_work *w, const rt_step_out *so,
                          dyn_error *err)
{
    MPI_Request req;
    dyn_status st = dyn_rt_mpi_check(MPI_Igather(mine, RT_REC_DOUBLES, MPI_DOUBLE, R->met.all, RT_REC_DOUBLES,
                                                 MPI_DOUBLE, 0, R->g.world, &req),
                                     "MPI_Igather (metrics)", err);
    if (st == DYN_OK) st = rt_wait(&req, R->o.timeout_s, run_poll, R, "the metrics gather", err);
    if (st != DYN_OK || R->g.world_rank != 0) return st;
    rt_iter *it = &R->met.iters[k];
    aggregate(R, k, w, so, it);
    calibrate_hook(R, it, k, R->met.all);
    if (R->o.progress >= 0) rt_report_progress(it, R->o.steps, R->tty);
    epoch_hook(R, it, k);
    return DYN_OK;
}

/* One iteration: work_receive -> exec -> step -> metrics. */
static dyn_status iteration(rt_run *R, int64_t k, dyn_error *err)
{
    R->met.iters[k].eval_loss = -1;
    double t0 = dyn_time_ms(), wait_ms = 0;
    fault_injection(R, k);
    dyn_rt_work w;
    memset(&w, 0, sizeof w);
    rt_exec_stats xs;
    memset(&xs, 0, sizeof xs);
    rt_step_out so;
    memset(&so, 0, sizeof so);
    dyn_status st = work_receive(R, k, &w, &wait_ms, err);
    if (st == DYN_OK) st = rt_exec_run(R->x, &w, R->epoch_ms, &xs, err);
    if (st == DYN_OK && R->mail.fail != DYN_OK) { /* posted during the plan: a hook's or the delivery's */
        st = R->mail.fail;
        *err = R->mail.err;
    }
    if (st == DYN_OK) st = rt_stages_step(&R->s, k, xs.loss_sum, &so, err);
    rt_rank_rec rec = rank_record(R, &w, &xs, &so, wait_ms, dyn_time_ms() - t0);
    if (st == DYN_OK) st = metrics(R, k, &rec, &w, &so, err);
    dyn_rt_work_free(&w);
    return st;
}

/* ---- the run ----------------------------------------------------------------- */

static void run_free(rt_run *R)
{
    rt_planner_free(R->planner);
    rt_mail_free(&R->mail);
    rt_exec_free(R->x);
    rt_stages_free(&R->s);
    rt_source_free(R->src);
    metrics_free(&R->met);
}

/* A rank dies with its launcher (mpirun or orted): after a `kill -9` of
 * mpirun no orphaned rank trains on, or writes a checkpoint, behind the
 * user's back (Linux; elsewhere ranks notice at their next wait). */
static void die_with_parent(void)
{
#ifdef __linux__
    pid_t parent = getppid();
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(137);
#endif
}

int dyn_train_rank_main(const dyn_train_options *o, int *argc, char ***argv)
{
    die_with_parent();
    dyn_alloc_keep_freed(); /* the pools below grow while shapes vary */
    rt_run R;
    memset(&R, 0, sizeof R);
    R.o = *o;
    R.tty = isatty(2);
    dyn_error err;
    dyn_status st = dyn_rt_group_init(&R.g, argc, argv, o->plan.stages, o->plan.dp, &err);
    if (st != DYN_OK) {
        int init = 0;
        MPI_Initialized(&init);
        if (init) dyn_rt_group_abort(&R.g, 1, err.msg);
        fprintf(stderr, "dynapipe train: %s\n", err.msg);
        return 1;
    }
    st = setup(&R, &err);
    if (st == DYN_OK) {
        MPI_Request req;
        st = dyn_rt_mpi_check(MPI_Ibarrier(R.g.world, &req), "MPI_Ibarrier", &err);
        if (st == DYN_OK) st = rt_wait(&req, o->timeout_s, NULL, NULL, "the start-up barrier", &err);
        /* One epoch for every rank's trace: rank 0's clock reading. The
         * monotonic clock is the host's, so on one host every rank's events
         * are then on one time line (across hosts they are off by the
         * hosts' clock difference). */
        R.epoch_ms = dyn_time_ms();
        if (st == DYN_OK)
            st = dyn_rt_mpi_check(MPI_Ibcast(&R.epoch_ms, 1, MPI_DOUBLE, 0, R.g.world, &req), "MPI_Ibcast", &err);
        if (st == DYN_OK) st = rt_wait(&req, o->timeout_s, NULL, NULL, "the start-up broadcast", &err);
    }
    R.pos.end_step = R.pos.first_step;
    if (st == DYN_OK) st = eval_before_first(&R, &err);
    for (int64_t k = R.pos.first_step, stop = 0; st == DYN_OK && !stop && k < o->steps; k++) {
        st = iteration(&R, k, &err);
        int halt = 0;
        if (st == DYN_OK) st = ckpt_after_step(&R, k, &halt, &err);
        if (st == DYN_OK) R.pos.end_step = k + 1;
        stop = halt;
    }
    if (st == DYN_OK && R.g.world_rank == 0 && o->progress >= 0)
        rt_report_summary(R.met.iters, R.pos.first_step, R.pos.end_step);
    if (st == DYN_OK && o->trace_path) st = rt_report_trace(o->trace_path, R.x, &R.g, o->timeout_s, &err);
    if (st == DYN_OK && R.g.world_rank == 0 && o->metrics_path)
        st = rt_report_metrics(o->metrics_path, R.met.iters, R.pos.first_step, R.pos.end_step, &R.g, &err);
    if (st == DYN_OK && R.g.world_rank == 0 && o->dump_order)
        st = rt_report_order(o->dump_order, R.mail.order, R.mail.order_n, R.mail.sampler_pos, R.per_epoch,
                             R.pos.first_step, R.pos.end_step, &err);
    if (st == DYN_OK && o->save_path && !R.pos.stop_signal) st = save_full(&R, &err);
    /* A run that went non-finite stopped its ranks at the same step with
     * nothing saved after it: the metrics of the steps before it still
     * tell how it got there (every number in them finite). The other ranks
     * wait at a barrier for rank 0 to write them before all abort (a rank
     * that did not stop is not waited for beyond --timeout). */
    if (st == DYN_ERR_NUMERIC) {
        dyn_error e2;
        if (R.g.world_rank == 0 && o->metrics_path && R.pos.end_step > R.pos.first_step &&
            rt_report_metrics(o->metrics_path, R.met.iters, R.pos.first_step, R.pos.end_step, &R.g, &e2) != DYN_OK)
            fprintf(stderr, "dynapipe train: %s\n", e2.msg);
        MPI_Request req;
        if (MPI_Ibarrier(R.g.world, &req) == MPI_SUCCESS)
            (void)rt_wait(&req, o->timeout_s, NULL, NULL, "the barrier before stopping", &e2);
    }
    if (st != DYN_OK) dyn_rt_group_abort(&R.g, 1, err.msg);
    int rc = R.pos.stop_signal ? 128 + R.pos.stop_signal : 0; /* stopped by a signal: the shell's convention */
    run_free(&R);
    dyn_rt_group_free(&R.g);
    return rc;
}
