/* train.c — one rank of `dynapipe train` (see train.h): start-up, the
 * iteration loop and the optimizer step. Plans reach the ranks through
 * mail.c (rank 0's planner thread fills a queue, its main thread sends each
 * planned iteration while the previous one trains); the progress line,
 * metrics and trace are written by report.c.
 *
 * Stage models. A rank holds the parameters, gradients and AdamW moments of
 * its own stages only (one stage model per chunk: dyn_model_create_stage),
 * plus copies of the shared tensors those stages use (GPT's tied embedding
 * on the first and the last stage; T5's shared embedding and relative-bias
 * tables).
 *
 * The step, after the plan's last instruction: (1) each shared tensor's
 * gradient is summed over the ranks holding it (one small communicator
 * per tensor) and written back into every copy; (2) with data parallelism,
 * every held gradient is summed over the replicas of the stage; (3) the
 * global gradient norm is the square root of the owned tensors' squared
 * norms summed over the pipeline (dyn_model_grad_sqnorm_owned counts each
 * tensor once); (4) every rank clips by that norm and takes the same AdamW
 * step, so shared copies and replicas stay identical. */
#include "runtime/train.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "dynapipe/cost.h"
#include "dynapipe/model_config.h"
#include "dynapipe/sched.h"
#include "model/blas.h"  /* defines: dyn_blas_describe */
#include "model/model.h"
#include "model/threads.h"
#include "runtime/checkpoint.h" /* defines: rt_ckpt_* */
#include "runtime/evaluate.h"   /* defines: rt_eval_run */
#include "runtime/exec.h"
#include "runtime/group.h"
#include "runtime/mail.h"
#include "runtime/report.h"
#include "runtime/calibrate.h"
#include "runtime/planner.h"
#include "runtime/source.h"
#include "runtime/work.h"
#include "util/util.h"

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
}

/* ---- layers per stage ------------------------------------------------------- */

/* The model layer where cost layer c begins (c = the cost model's flattened
 * layer list of sched.h: GPT [embed, blocks, head], T5 [embed, encoder
 * blocks, bridge, decoder blocks, head]; c = its length maps to L). The
 * bridge is two model layers, the encoder's final norm and the decoder
 * embedding (model.h), so the layers after it are one further on. */
static int32_t model_layer_of(const dyn_model_config *cfg, int32_t c)
{
    if (cfg->kind == DYN_MODEL_GPT) return c;
    int32_t ne = cfg->n_layers;
    return c <= ne + 1 ? c : c + 1;
}

static dyn_status stage_layers(const dyn_train_options *o, int32_t **lay_first, int32_t *n_stages, dyn_error *err)
{
    dyn_cost_model *cm = o->cost_table ? dyn_cost_model_load_table(o->cost_table, err)
                                       : dyn_cost_model_create_analytic(&o->model, &o->machine, err);
    if (cm == NULL) return err->code;
    /* The planner's own assignment (dyn_stage_assign_run, which its stage
     * costs use too), so plan stages and model layers agree on every rank. */
    int32_t v = o->schedule == DYN_SCHEDULE_INTERLEAVED ? o->plan.chunks : 1;
    dyn_stage_assignment a;
    memset(&a, 0, sizeof a);
    dyn_status st = dyn_stage_assign_run(cm, o->plan.stages * v, &a, err);
    dyn_cost_model_free(cm);
    if (st != DYN_OK) return st;
    *n_stages = a.n_stages;
    *lay_first = dyn_calloc((size_t)a.n_stages + 1, sizeof(int32_t), "stage layers", err);
    if (*lay_first == NULL) {
        dyn_stage_assignment_free(&a);
        return DYN_ERR_NOMEM;
    }
    for (int32_t s = 0; s <= a.n_stages; s++) (*lay_first)[s] = model_layer_of(&o->model, a.stage_first[s]);
    dyn_stage_assignment_free(&a);
    return DYN_OK;
}

/* ---- per-iteration records -------------------------------------------------- */

/* What each rank reports to rank 0 after an iteration. */
enum { R_ITER_MS, R_BUSY_MS, R_COMM_MS, R_COMM_BYTES, R_PLAN_WAIT_MS, R_ALLOC_MB, R_LOSS, R_TOKENS, R_PRED_PEAK_MB,
       R_MEAS_F, R_MEAS_B, R_PRED_F, R_PRED_B, R_EXEC_MS, R_STEP_MS, R_COUNT };


/* A stage model's gradient allreduce goes in parts of at most 2^30 floats
 * (MPI counts are int). */
#define DP_PARTS 8
#define DP_PART_FLOATS ((size_t)1 << 30)

/* A shared tensor held by this rank: the local chunks holding a copy, and
 * the communicator of the ranks holding one (MPI_COMM_NULL when all
 * holders are on this rank). */
typedef struct rt_shared {
    char name[96];
    int32_t n_local, local[8]; /* chunk indices */
    size_t numel;
    float *sum;                /* numel scratch */
    MPI_Comm comm;
} rt_shared;

typedef struct rt_run {
    dyn_train_options o;
    dyn_rt_group g;
    rt_source *src;
    dyn_model **models;           /* [n_local]: chunk c holds plan stage c * S + stage_rank */
    int32_t n_local;
    int32_t *lay_first, n_stages;
    rt_shared *shared;            /* [n_shared] shared tensors this rank holds */
    int n_shared;
    MPI_Request (*dp_req)[DP_PARTS]; /* [n_local]: a chunk's data-parallel allreduce in flight */
    int *dp_started;              /* [n_local] */
    rt_exec *x;
    rt_mail mail;
    rt_planner *planner;
    rt_calib *calib;              /* rank 0 with --calibrate, else NULL */
    double *calib_buf;            /* [stages * (RT_CALIB_DIRS + 1)] scratch of calibrate_hook */
    rt_iter *iters;
    double epoch_ms;
    double states_mb;
    int tty;
    int64_t first_step;           /* 0, or the step a --resume continues from */
    char resume_dir[4096];        /* the step folder resumed from */
    int stop_signal;              /* the signal that stopped the run at a boundary, or 0 */
    int64_t end_step;             /* steps done when the loop ended */
    int threads;                  /* kernel threads per rank */
} rt_run;

static dyn_model *model_of(void *ctx, int32_t stage)
{
    rt_run *R = ctx;
    return R->models[stage / R->g.stages];
}

/* ---- the step --------------------------------------------------------------- */

/* Sum count values of buf over comm, in place, with the deadline. */
/* The poll hook of every wait: plan delivery, and the data-parallel
 * allreduces started during the backward (MPI_Test drives them). */
static void run_poll(void *ctx)
{
    rt_run *R = ctx;
    rt_mail_poll(&R->mail);
    for (int32_t c = 0; c < R->n_local; c++)
        if (R->dp_started[c])
            for (int k = 0; k < DP_PARTS; k++)
                if (R->dp_req[c][k] != MPI_REQUEST_NULL) {
                    int done = 0;
                    MPI_Test(&R->dp_req[c][k], &done, MPI_STATUS_IGNORE);
                }
}

/* Start chunk c's gradient allreduce over the stage's replicas. */
static dyn_status dp_start(rt_run *R, int32_t c, dyn_error *err)
{
    if (R->g.dp < 2 || R->dp_started[c]) return DYN_OK;
    float *g = dyn_model_grads(R->models[c]);
    size_t n = dyn_model_num_params(R->models[c]);
    if (n > DP_PARTS * DP_PART_FLOATS) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "a stage of %zu parameters", n);
    for (int k = 0; k < DP_PARTS; k++) R->dp_req[c][k] = MPI_REQUEST_NULL;
    for (size_t at = 0, k = 0; at < n; at += DP_PART_FLOATS, k++) {
        size_t cnt = n - at < DP_PART_FLOATS ? n - at : DP_PART_FLOATS;
        dyn_status st = dyn_rt_mpi_check(
            MPI_Iallreduce(MPI_IN_PLACE, g + at, (int)cnt, MPI_FLOAT, MPI_SUM, R->g.dpc, &R->dp_req[c][k]),
            "MPI_Iallreduce (data parallel)", err);
        if (st != DYN_OK) return st;
    }
    R->dp_started[c] = 1;
    return DYN_OK;
}

/* The interpreter's stage_done hook: the stage's weight gradients of this
 * iteration are complete, so their allreduce overlaps the rest of the plan. */
static void on_stage_done(void *ctx, int32_t stage)
{
    rt_run *R = ctx;
    dyn_error e;
    if (dp_start(R, stage / R->g.stages, &e) != DYN_OK) rt_mail_fail(&R->mail, e.code, &e);
}

static dyn_status allreduce_on(rt_run *R, MPI_Comm comm, void *buf, size_t count, MPI_Datatype t, const char *what,
                               dyn_error *err)
{
    size_t esz = t == MPI_DOUBLE ? 8 : 4;
    for (size_t at = 0; at < count; at += (size_t)1 << 30) {
        size_t c = count - at < ((size_t)1 << 30) ? count - at : (size_t)1 << 30; /* MPI counts are int */
        MPI_Request req;
        dyn_status st = dyn_rt_mpi_check(
            MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + at * esz, (int)c, t, MPI_SUM, comm, &req), what, err);
        if (st == DYN_OK) st = rt_wait(&req, R->o.timeout_s, run_poll, R, what, err);
        if (st != DYN_OK) return st;
    }
    return DYN_OK;
}

static dyn_status sum_shared(rt_run *R, dyn_error *err)
{
    for (int i = 0; i < R->n_shared; i++) {
        rt_shared *sh = &R->shared[i];
        memset(sh->sum, 0, sh->numel * sizeof(float));
        for (int32_t c = 0; c < sh->n_local; c++) {
            dyn_model *m = R->models[sh->local[c]];
            const float *g = dyn_model_grads(m) + dyn_model_find_tensor(m, sh->name)->offset;
            for (size_t j = 0; j < sh->numel; j++) sh->sum[j] += g[j];
        }
        if (sh->comm != MPI_COMM_NULL) {
            dyn_status st = allreduce_on(R, sh->comm, sh->sum, sh->numel, MPI_FLOAT, "the shared-tensor allreduce", err);
            if (st != DYN_OK) return st;
        }
        for (int32_t c = 0; c < sh->n_local; c++) {
            dyn_model *m = R->models[sh->local[c]];
            memcpy(dyn_model_grads(m) + dyn_model_find_tensor(m, sh->name)->offset, sh->sum, sh->numel * sizeof(float));
        }
    }
    return DYN_OK;
}

/* Online calibration (calibrate.h), rank 0: iteration k's per-rank
 * measured and predicted compute and optimizer step (all: [world][R_COUNT])
 * join the windows from this process's second iteration on (the first is
 * cold: arenas and caches growing, also after a resume), with the factors
 * k's plan carried; moved factors are posted to the planner thread, which
 * plans again what it has queued. The first warm iteration's correction
 * reaches the next iteration (rt_mail_hold), the others the one after
 * (the next was sent while k trained). The factors k's plan carried also
 * go to k's metrics record (time_scale). */
static void calibrate_hook(rt_run *R, rt_iter *it, int64_t k, const double *all)
{
    if (R->calib == NULL) return;
    int S = R->g.stages;
    double *carried = R->calib_buf, *opt = R->calib_buf + (size_t)S * RT_CALIB_DIRS;
    if (!rt_planner_carried(R->planner, k, carried, opt)) {
        free(it->time_scale), it->time_scale = NULL; /* no longer known: left out of the metrics */
        return;
    }
    memcpy(it->time_scale, carried, (size_t)S * RT_CALIB_DIRS * sizeof(double));
    if (k <= R->first_step) return;
    for (int r = 0; r < R->g.world_size; r++) {
        const double *q = all + (size_t)r * R_COUNT;
        int s = r % S;
        double meas[RT_CALIB_DIRS] = {q[R_MEAS_F], q[R_MEAS_B], q[R_STEP_MS]};
        double pred[RT_CALIB_DIRS] = {q[R_PRED_F], q[R_PRED_B], opt[s]};
        rt_calib_add(R->calib, s, meas, pred, carried + (size_t)s * RT_CALIB_DIRS);
    }
    if (rt_calib_update(R->calib, carried)) {
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

static dyn_status step(rt_run *R, int64_t k, double *grad_norm, double *lr, double *opt_ms, dyn_error *err)
{
    /* The data-parallel sums started as each stage's backward finished
     * (on_stage_done); a replica idle this iteration starts them now. Then
     * the shared tensors' sums over their holders (sums commute: the order
     * of the two does not change the total). */
    dyn_status st = R->mail.fail;
    if (st != DYN_OK) *err = R->mail.err;
    for (int32_t c = 0; st == DYN_OK && c < R->n_local; c++) {
        st = dp_start(R, c, err);
        for (int p = 0; st == DYN_OK && R->dp_started[c] && p < DP_PARTS; p++)
            st = rt_wait(&R->dp_req[c][p], R->o.timeout_s, run_poll, R, "the data-parallel gradient allreduce", err);
        R->dp_started[c] = 0;
    }
    if (st == DYN_OK) st = sum_shared(R, err);
    double sq = 0, t0 = dyn_time_ms();
    for (int32_t c = 0; c < R->n_local; c++) sq += dyn_model_grad_sqnorm_owned(R->models[c]);
    *opt_ms = dyn_time_ms() - t0;
    if (st == DYN_OK) st = allreduce_on(R, R->g.pipe, &sq, 1, MPI_DOUBLE, "the gradient-norm allreduce", err);
    if (st != DYN_OK) return st;
    *grad_norm = sqrt(sq);
    *lr = dyn_lr_at(&R->o.lr, k);
    t0 = dyn_time_ms();
    for (int32_t c = 0; c < R->n_local; c++) {
        dyn_model_adamw_step_norm(R->models[c], (float)*lr, &R->o.adamw, *grad_norm, R->o.clip_norm);
        dyn_model_zero_grad(R->models[c]);
    }
    *opt_ms += dyn_time_ms() - t0;
    return DYN_OK;
}

/* ---- the run ---------------------------------------------------------------- */

/* This rank's stage models and the shared tensors among them and its
 * pipeline peers. Collective over the pipeline (MPI_Comm_split). */
static dyn_status create_models(rt_run *R, int threads, dyn_error *err)
{
    const dyn_train_options *o = &R->o;
    int S = R->g.stages;
    R->n_local = R->n_stages / S;
    R->models = dyn_calloc((size_t)R->n_local, sizeof(dyn_model *), "stage models", err);
    if (R->models == NULL) return DYN_ERR_NOMEM;
    size_t bytes = 0;
    for (int32_t c = 0; c < R->n_local; c++) {
        int32_t s = c * S + R->g.stage_rank;
        R->models[c] = dyn_model_create_stage(&o->model, o->seed, R->lay_first[s], R->lay_first[s + 1], err);
        if (R->models[c] == NULL) return err->code;
        dyn_model_set_threads(R->models[c], threads);
        bytes += dyn_model_state_bytes(R->models[c], NULL);
    }
    R->states_mb = (double)bytes / (1024.0 * 1024.0);
    R->dp_req = dyn_calloc((size_t)R->n_local, sizeof *R->dp_req, "allreduce requests", err);
    R->dp_started = dyn_calloc((size_t)R->n_local, sizeof(int), "allreduce requests", err);
    if (R->dp_req == NULL || R->dp_started == NULL) return DYN_ERR_NOMEM;
    int n = 0;
    dyn_shared_tensor *sh = dyn_model_shared_tensors(&o->model, R->lay_first, R->n_stages, &n, err);
    if (sh == NULL) return err->code;
    R->shared = dyn_calloc((size_t)n + 1, sizeof(rt_shared), "shared tensors", err);
    dyn_status st = R->shared ? DYN_OK : DYN_ERR_NOMEM;
    for (int i = 0; st == DYN_OK && i < n; i++) {
        rt_shared *t = &R->shared[R->n_shared];
        int here = 0, spread = 0; /* a holder on this rank; holders on several ranks */
        for (int32_t h = 0; h < sh[i].n_holders; h++) {
            int32_t stage = sh[i].holders[h];
            if (stage % S == R->g.stage_rank) {
                if (t->n_local == 8) {
                    st = dyn_error_set(err, DYN_ERR_INTERNAL, "%s held by more than 8 chunks of a rank", sh[i].name);
                    break;
                }
                t->local[t->n_local++] = stage / S;
                here = 1;
            }
            if (stage % S != sh[i].holders[0] % S) spread = 1;
        }
        /* Every pipeline rank takes part in the split, holder or not; the
         * holders of a tensor kept on one rank need no communicator. */
        MPI_Comm comm = MPI_COMM_NULL;
        if (st == DYN_OK && spread)
            st = dyn_rt_mpi_check(MPI_Comm_split(R->g.pipe, here ? 0 : MPI_UNDEFINED, R->g.stage_rank, &comm),
                                  "MPI_Comm_split (shared tensor)", err);
        if (st != DYN_OK || !here) {
            t->n_local = 0;
            continue;
        }
        const dyn_param_tensor *pt = dyn_model_find_tensor(R->models[t->local[0]], sh[i].name);
        if (pt == NULL) {
            st = dyn_error_set(err, DYN_ERR_INTERNAL, "stage model lacks shared tensor %s", sh[i].name);
            break;
        }
        snprintf(t->name, sizeof t->name, "%s", sh[i].name);
        t->numel = pt->numel;
        t->comm = comm;
        if ((t->sum = dyn_calloc(t->numel, sizeof(float), "shared tensor", err)) == NULL) st = DYN_ERR_NOMEM;
        R->n_shared++;
    }
    dyn_model_shared_tensors_free(sh, n);
    return st;
}

/* Bytes of this rank's owned tensors packed for --save: per tensor a
 * 96-byte name, a u64 float count, the floats. buf NULL: only count. */
static size_t pack_owned(const rt_run *R, char *buf)
{
    size_t at = 0;
    for (int32_t c = 0; c < R->n_local; c++)
        for (int t = 0; t < dyn_model_num_tensors(R->models[c]); t++) {
            const dyn_param_tensor *pt = dyn_model_tensor(R->models[c], t);
            if (pt->shared_copy) continue;
            uint64_t numel = pt->numel;
            if (buf) {
                memset(buf + at, 0, 96);
                memcpy(buf + at, pt->name, strnlen(pt->name, 95));
                memcpy(buf + at + 96, &numel, 8);
                memcpy(buf + at + 104, dyn_model_params(R->models[c]) + pt->offset, numel * sizeof(float));
            }
            at += 104 + numel * sizeof(float);
        }
    return at;
}

/* Rank 0: a whole model from the packed tensors of every stage. */
static dyn_status unpack_full(const rt_run *R, const char *all, size_t total, dyn_model **out, dyn_error *err)
{
    dyn_model *full = dyn_model_create(&R->o.model, R->o.seed, err);
    if (full == NULL) return err->code;
    int filled = 0;
    for (size_t p = 0; p < total;) {
        char name[97];
        memcpy(name, all + p, 96);
        name[96] = '\0';
        uint64_t numel;
        memcpy(&numel, all + p + 96, 8);
        const dyn_param_tensor *pt = dyn_model_find_tensor(full, name);
        if (pt == NULL || pt->numel != numel) {
            dyn_model_free(full);
            return dyn_error_set(err, DYN_ERR_INTERNAL, "--save: tensor %s of %llu floats does not fit the model", name,
                                 (unsigned long long)numel);
        }
        memcpy(dyn_model_params(full) + pt->offset, all + p + 104, numel * sizeof(float));
        filled++;
        p += 104 + numel * sizeof(float);
    }
    if (filled != dyn_model_num_tensors(full)) {
        dyn_model_free(full);
        return dyn_error_set(err, DYN_ERR_INTERNAL, "--save: %d of %d tensors gathered", filled,
                             dyn_model_num_tensors(full));
    }
    *out = full;
    return DYN_OK;
}

/* Replica 0's ranks send their owned tensors to rank 0, which assembles
 * the whole model into *out (NULL elsewhere): for --save FILE and
 * --eval-every. */
static dyn_status gather_full(rt_run *R, dyn_model **out, dyn_error *err)
{
    *out = NULL;
    if (R->g.replica != 0) return DYN_OK;
    size_t bytes = pack_owned(R, NULL);
    if (bytes > (size_t)INT32_MAX) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "--save: a stage of %zu bytes", bytes);
    char *buf = malloc(bytes ? bytes : 1);
    if (buf == NULL) return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for --save");
    pack_owned(R, buf);
    int S = R->g.stages, me = R->g.stage_rank, len = (int)bytes;
    int *counts = NULL, *displs = NULL;
    char *all = NULL;
    dyn_status st = DYN_OK;
    if (me == 0) {
        counts = dyn_calloc((size_t)S, sizeof(int), "--save", err);
        displs = dyn_calloc((size_t)S, sizeof(int), "--save", err);
        if (counts == NULL || displs == NULL) st = DYN_ERR_NOMEM;
    }
    MPI_Request req;
    if (st == DYN_OK)
        st = dyn_rt_mpi_check(MPI_Igather(&len, 1, MPI_INT, counts, 1, MPI_INT, 0, R->g.pipe, &req), "MPI_Igather", err);
    if (st == DYN_OK) st = rt_wait(&req, R->o.timeout_s, NULL, NULL, "the weights gather", err);
    size_t total = 0;
    if (st == DYN_OK && me == 0) {
        for (int r = 0; r < S; r++) {
            displs[r] = (int)total;
            total += (size_t)counts[r];
        }
        if (total > (size_t)INT32_MAX || (all = malloc(total ? total : 1)) == NULL)
            st = dyn_error_set(err, DYN_ERR_NOMEM, "out of memory gathering %zu bytes of weights", total);
    }
    if (st == DYN_OK)
        st = dyn_rt_mpi_check(MPI_Igatherv(buf, len, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, R->g.pipe, &req),
                              "MPI_Igatherv", err);
    if (st == DYN_OK) st = rt_wait(&req, R->o.timeout_s, NULL, NULL, "the weights gather", err);
    free(buf);
    if (st == DYN_OK && me == 0) st = unpack_full(R, all, total, out, err);
    free(counts);
    free(displs);
    free(all);
    return st;
}

/* --save FILE.safetensors: the whole model as one file, written by rank 0
 * (so rank 0 holds the whole model once, at the end). */
static dyn_status save_full(rt_run *R, dyn_error *err)
{
    dyn_model *full = NULL;
    dyn_status st = gather_full(R, &full, err);
    if (st == DYN_OK && full != NULL) st = dyn_model_save(full, R->o.save_path, err);
    dyn_model_free(full);
    return st;
}

/* ---- checkpoints, resume and evaluation (checkpoint.h, evaluate.h) --------- */

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
    dyn_status st = rt_ckpt_resolve(R->o.resume_dir, R->resume_dir, sizeof R->resume_dir, err);
    if (st == DYN_OK) st = rt_ckpt_read(R->resume_dir, meta, err);
    if (st == DYN_OK) st = rt_ckpt_check(meta, &R->o, err);
    if (st == DYN_OK && meta->n_stages != R->n_stages)
        st = dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: %d plan stages, this run %d", R->resume_dir, meta->n_stages,
                           R->n_stages);
    for (int32_t c = 0; st == DYN_OK && c < R->n_local; c++)
        st = rt_ckpt_load_stage(R->resume_dir, meta, c * R->g.stages + R->g.stage_rank, R->models[c], err);
    if (st == DYN_OK) {
        R->first_step = meta->step;
        *pos = meta->sampler_pos;
        /* Not an error: extending a run (a larger --steps) is a legitimate
         * use, but the rates change under it, so say so once. */
        char note[512];
        if (R->g.world_rank == 0 && rt_ckpt_schedule_note(meta, &R->o, note, sizeof note))
            fprintf(stderr, "dynapipe train: note: %s\n", note);
    }
    free(meta);
    return st;
}

/* --eval-every: the whole model gathered on rank 0, its loss on the
 * held-out split (the same --data opened with the held-out split; a file
 * has no split, so it is the file itself). */
static dyn_status eval_step(rt_run *R, rt_iter *it, dyn_error *err)
{
    dyn_model *full = NULL;
    dyn_status st = gather_full(R, &full, err);
    if (st != DYN_OK || full == NULL) return st;
    dyn_corpus_options co;
    dyn_corpus_options_default(&co);
    co.split = DYN_SPLIT_HELDOUT;
    co.builtin_samples = R->o.eval_samples;
    co.max_seqlen = R->o.model.max_seqlen;
    co.kind = R->o.model.kind;
    co.truncate = R->o.truncate;
    co.vocab = R->o.model.vocab;
    dyn_corpus *c = dyn_corpus_open(R->o.data_spec, &co, err);
    if (c == NULL) st = err->code;
    rt_eval_result *res = st == DYN_OK ? dyn_calloc(1, sizeof *res, "evaluation", err) : NULL;
    if (st == DYN_OK && res == NULL) st = DYN_ERR_NOMEM;
    if (st == DYN_OK) {
        dyn_model_set_threads(full, R->threads);
        st = rt_eval_run(full, c, R->o.eval_samples, 0, res, err);
    }
    if (st == DYN_OK) it->eval_loss = res->loss;
    free(res);
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
            R->stop_signal = any;
        }
        if (*stop || done == R->o.steps || (R->o.save_every > 0 && done % R->o.save_every == 0)) {
            rt_ckpt_job j = {&R->g, &R->o, R->models, R->n_local, R->lay_first, R->n_stages, done,
                             R->mail.sampler_pos ? R->mail.sampler_pos[k] : 0};
            st = rt_ckpt_save(&j, err);
            if (st == DYN_OK && R->g.world_rank == 0 && R->o.progress >= 0)
                fprintf(stderr, "%scheckpoint %s/step-%08lld%s\n", R->tty ? "\r\033[K" : "", R->o.save_dir,
                        (long long)done, *stop ? " (stopped by a signal)" : "");
        }
    }
    if (st == DYN_OK && R->o.eval_every > 0 && (done % R->o.eval_every == 0 || done == R->o.steps))
        st = eval_step(R, &R->iters[k], err);
    if (st == DYN_OK && R->g.world_rank == 0 && R->iters[k].eval_loss >= 0 && R->o.progress >= 0)
        fprintf(stderr, "%sstep %lld: held-out loss %.4f\n", R->tty ? "\r\033[K" : "", (long long)done,
                R->iters[k].eval_loss);
    return st;
}

static dyn_status setup(rt_run *R, dyn_error *err)
{
    const dyn_train_options *o = &R->o;
    int threads = o->threads;
    if (threads <= 0) {
        const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        long local = ls ? atol(ls) : R->g.world_size;
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = local > 0 && cores > 0 ? (int)(cores / local) : 1;
        if (threads < 1) threads = 1;
    }
    R->threads = threads;
    dyn_status st = stage_layers(o, &R->lay_first, &R->n_stages, err);
    if (st != DYN_OK) return st;
    if ((R->src = rt_source_open(o, err)) == NULL) return err->code;
    if ((st = create_models(R, threads, err)) != DYN_OK) return st;
    int64_t resume_pos = 0;
    if (o->resume_dir && (st = ckpt_resume(R, &resume_pos, err)) != DYN_OK) return st;
    if (o->save_dir && (st = ckpt_install_signals(err)) != DYN_OK) return st;
    rt_exec_env env;
    memset(&env, 0, sizeof env);
    env.g = &R->g;
    env.kind = o->model.kind;
    env.model_of = model_of;
    env.model_ctx = R;
    env.lay_first = R->lay_first;
    env.n_stages = R->n_stages;
    env.n_layers = dyn_model_num_layers(R->models[0]);
    env.src = R->src;
    env.timeout_s = o->timeout_s;
    env.poll = run_poll;
    env.poll_ctx = R;
    env.stage_done = on_stage_done;
    env.record = o->trace_path != NULL;
    if ((R->x = rt_exec_create(&env, err)) == NULL) return err->code;
    for (int32_t c = 0; c < R->n_local; c++) dyn_model_set_progress(R->models[c], rt_exec_poll, R->x);
    R->iters = dyn_calloc((size_t)o->steps, sizeof(rt_iter), "metrics", err);
    if (R->iters == NULL) return DYN_ERR_NOMEM;
    if ((st = rt_mail_init(&R->mail, &R->g, o->steps, o->timeout_s, err)) != DYN_OK) return st;
    if (R->g.world_rank == 0) {
        if ((R->planner = rt_planner_create(o, rt_source_lengths(R->src), err)) == NULL) return err->code;
        if (o->calibrate) {
            R->calib = rt_calib_create(R->g.stages, o->calibrate_window, 0.03);
            R->calib_buf = calloc((size_t)R->g.stages * (RT_CALIB_DIRS + 1), sizeof(double));
            if (R->calib == NULL || R->calib_buf == NULL)
                return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the calibration");
        }
        if (R->first_step > 0 && (st = rt_planner_seek(R->planner, R->first_step, resume_pos, err)) != DYN_OK)
            return st;
        if ((st = rt_planner_start(R->planner, err)) != DYN_OK) return st;
        rt_mail_start_sending(&R->mail, R->planner, R->first_step);
        if (o->calibrate) rt_mail_hold(&R->mail, R->first_step + 2); /* the first warm record's next plan */
        if (o->progress >= 0) {
            char hosts[512];
            dyn_rt_group_hosts_describe(&R->g, hosts, sizeof hosts);
            fprintf(stderr, "dynapipe train: %d ranks (%d stages x %d replicas) on %s, %d threads per rank, %s %.2fM "
                            "parameters (%.1f MB of states on rank 0); %s\n",
                    R->g.world_size, R->g.stages, R->g.dp, hosts, threads, dyn_model_kind_name(o->model.kind),
                    dyn_model_config_params(&o->model) / 1e6, R->states_mb, dyn_blas_describe());
            int split = dyn_rt_group_split_replica(&R->g);
            if (split >= 0)
                fprintf(stderr, "dynapipe train: note: replica %d's stages are on more than one host, so its "
                                "activations cross the network; give each host a multiple of %d slots\n",
                        split, R->g.stages);
        }
    }
    if (R->first_step > 0 && R->g.world_rank == 0 && o->progress >= 0)
        fprintf(stderr, "dynapipe train: resumed from %s at step %lld\n", R->resume_dir, (long long)R->first_step);
    rt_mail_post(&R->mail, R->first_step);
    return DYN_OK;
}

static void fault_injection(const rt_run *R, int64_t k)
{
    if (R->g.world_rank == R->o.kill_rank && k == R->o.kill_step) raise(SIGKILL);
    if (R->g.world_rank == R->o.hang_rank && k == R->o.hang_step)
        for (;;) pause(); /* stop answering; the peers' deadlines must end the job */
}

static dyn_status iteration(rt_run *R, int64_t k, dyn_error *err)
{
    rt_iter *it = &R->iters[k];
    it->eval_loss = -1;
    double t0 = dyn_time_ms();
    uint8_t *buf = NULL;
    size_t len = 0;
    double wait_ms = 0;
    fault_injection(R, k);
    dyn_status st = rt_mail_take(&R->mail, k, &buf, &len, &wait_ms, err);
    dyn_rt_work w;
    memset(&w, 0, sizeof w);
    if (st == DYN_OK) st = dyn_rt_work_unpack(buf, len, rt_source_lengths(R->src)->n, &w, err);
    free(buf);
    if (st == DYN_OK && w.iteration != k)
        st = dyn_error_set(err, DYN_ERR_INTERNAL, "received the plan of iteration %lld for %lld",
                           (long long)w.iteration, (long long)k);
    if (st == DYN_OK && w.replica != R->g.replica)
        st = dyn_error_set(err, DYN_ERR_INTERNAL, "received replica %d's plan on replica %d", w.replica, R->g.replica);
    if (st == DYN_OK && w.n_mb > 0 && (w.n_stages != R->n_stages || w.n_ranks != R->g.stages))
        st = dyn_error_set(err, DYN_ERR_INTERNAL, "plan of %d stages on %d ranks; this run has %d stages on %d ranks",
                           w.n_stages, w.n_ranks, R->n_stages, R->g.stages);
    rt_exec_stats xs;
    memset(&xs, 0, sizeof xs);
    if (st == DYN_OK) st = rt_exec_run(R->x, &w, R->epoch_ms, &xs, err);
    double grad_norm = 0, lr = 0, opt_ms = 0;
    if (st == DYN_OK) st = step(R, k, &grad_norm, &lr, &opt_ms, err);
    double rec[R_COUNT] = {0};
    rec[R_EXEC_MS] = xs.wall_ms;
    rec[R_STEP_MS] = opt_ms;
    rec[R_ITER_MS] = dyn_time_ms() - t0;
    rec[R_BUSY_MS] = xs.busy_ms;
    rec[R_COMM_MS] = xs.comm_wait_ms;
    rec[R_COMM_BYTES] = (double)xs.comm_bytes;
    rec[R_PLAN_WAIT_MS] = wait_ms;
    rec[R_ALLOC_MB] = R->states_mb + (double)xs.alloc_bytes / (1024.0 * 1024.0);
    rec[R_LOSS] = xs.loss_sum;
    rec[R_TOKENS] = (double)xs.target_tokens;
    rec[R_PRED_PEAK_MB] = w.n_mb > 0 ? w.peak_mb[R->g.stage_rank] : 0;
    rec[R_MEAS_F] = xs.meas_ms[0], rec[R_MEAS_B] = xs.meas_ms[1];
    rec[R_PRED_F] = xs.pred_ms[0], rec[R_PRED_B] = xs.pred_ms[1];
    double *all = NULL;
    if (st == DYN_OK && R->g.world_rank == 0) {
        all = dyn_calloc((size_t)R_COUNT * (size_t)R->g.world_size, sizeof(double), "metrics", err);
        it->peak_mb = dyn_calloc((size_t)R->g.world_size, sizeof(double), "metrics", err);
        it->pred_peak_mb = dyn_calloc((size_t)R->g.world_size, sizeof(double), "metrics", err);
        it->compute_ms = dyn_calloc(2 * (size_t)R->g.world_size, sizeof(double), "metrics", err);
        if (all == NULL || it->peak_mb == NULL || it->pred_peak_mb == NULL || it->compute_ms == NULL)
            st = DYN_ERR_NOMEM;
        if (st == DYN_OK && R->calib != NULL &&
            (it->time_scale = dyn_calloc((size_t)R->g.stages * RT_CALIB_DIRS, sizeof(double), "metrics", err)) == NULL)
            st = DYN_ERR_NOMEM; /* filled by calibrate_hook */
    }
    MPI_Request req;
    if (st == DYN_OK)
        st = dyn_rt_mpi_check(MPI_Igather(rec, R_COUNT, MPI_DOUBLE, all, R_COUNT, MPI_DOUBLE, 0, R->g.world, &req),
                              "MPI_Igather (metrics)", err);
    if (st == DYN_OK) st = rt_wait(&req, R->o.timeout_s, run_poll, R, "the metrics gather", err);
    if (st == DYN_OK && R->g.world_rank == 0) {
        double loss = 0, busy = 0, comm = 0, bytes = 0, wait = 0, iter_ms = 0;
        for (int r = 0; r < R->g.world_size; r++) {
            const double *q = all + (size_t)r * R_COUNT;
            loss += q[R_LOSS];
            busy += q[R_BUSY_MS];
            comm += q[R_COMM_MS];
            bytes += q[R_COMM_BYTES];
            if (q[R_PLAN_WAIT_MS] > wait) wait = q[R_PLAN_WAIT_MS];
            if (q[R_ITER_MS] > iter_ms) iter_ms = q[R_ITER_MS];
            if (q[R_EXEC_MS] > it->exec_ms) it->exec_ms = q[R_EXEC_MS];
            if (q[R_STEP_MS] > it->step_ms) it->step_ms = q[R_STEP_MS];
            it->peak_mb[r] = q[R_ALLOC_MB];
            it->pred_peak_mb[r] = q[R_PRED_PEAK_MB];
            it->compute_ms[2 * r] = q[R_MEAS_F] + q[R_MEAS_B];
            it->compute_ms[2 * r + 1] = q[R_PRED_F] + q[R_PRED_B];
        }
        calibrate_hook(R, it, k, all);
        it->step = k;
        it->loss = loss / (double)w.global_target_tokens;
        it->tokens = w.global_real_tokens;
        it->target_tokens = w.global_target_tokens;
        it->iteration_ms = iter_ms;
        it->predicted_ms = w.predicted_ms;
        it->makespan_ms = w.predicted_ms - rt_planner_step_ms(R->planner, k);
        it->bubble = iter_ms > 0 ? 1.0 - busy / ((double)R->g.world_size * iter_ms) : 0;
        it->plan_ms = w.plan_ms;
        it->plan_wait_ms = wait;
        it->comm_wait_ms = comm;
        it->comm_mb = bytes / (1024.0 * 1024.0);
        it->lr = lr;
        it->grad_norm = grad_norm;
        it->schedule = w.n_mb > 0 ? w.plan.schedule : -1;
        it->n_mb = w.n_mb;
        if (R->o.progress >= 0) rt_report_progress(it, R->o.steps, R->tty);
    }
    free(all);
    dyn_rt_work_free(&w);
    return st;
}

static void run_free(rt_run *R)
{
    rt_planner_free(R->planner);
    rt_calib_free(R->calib);
    free(R->calib_buf);
    rt_mail_free(&R->mail);
    rt_exec_free(R->x);
    for (int32_t c = 0; c < R->n_local && R->models; c++) dyn_model_free(R->models[c]);
    free(R->models);
    for (int i = 0; i < R->n_shared; i++) {
        free(R->shared[i].sum);
        if (R->shared[i].comm != MPI_COMM_NULL) MPI_Comm_free(&R->shared[i].comm);
    }
    free(R->shared);
    free(R->dp_req);
    free(R->dp_started);
    rt_source_free(R->src);
    free(R->lay_first);
    if (R->iters)
        for (int64_t k = 0; k < R->o.steps; k++) {
            free(R->iters[k].peak_mb);
            free(R->iters[k].pred_peak_mb);
            free(R->iters[k].compute_ms);
            free(R->iters[k].time_scale);
        }
    free(R->iters);
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
    R.end_step = R.first_step;
    for (int64_t k = R.first_step, stop = 0; st == DYN_OK && !stop && k < o->steps; k++) {
        st = iteration(&R, k, &err);
        int halt = 0;
        if (st == DYN_OK) st = ckpt_after_step(&R, k, &halt, &err);
        if (st == DYN_OK) R.end_step = k + 1;
        stop = halt;
    }
    if (st == DYN_OK && o->trace_path) st = rt_report_trace(o->trace_path, R.x, &R.g, o->timeout_s, &err);
    if (st == DYN_OK && R.g.world_rank == 0 && o->metrics_path)
        st = rt_report_metrics(o->metrics_path, R.iters, R.first_step, R.end_step, &R.g, &err);
    if (st == DYN_OK && o->save_path && !R.stop_signal) st = save_full(&R, &err);
    if (st != DYN_OK) dyn_rt_group_abort(&R.g, 1, err.msg);
    int rc = R.stop_signal ? 128 + R.stop_signal : 0; /* stopped by a signal: the shell's convention */
    run_free(&R);
    dyn_rt_group_free(&R.g);
    return rc;
}
