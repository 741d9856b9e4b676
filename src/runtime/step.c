/* step.c — this rank's stage models and the optimizer step (see step.h):
 * layers per plan stage, the stage models and their shared tensors, the
 * gradient sums (shared tensors over their holders, stages over their
 * data-parallel replicas), the global norm and AdamW, and the whole model
 * gathered on rank 0. */
#include "runtime/step.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/cost.h"
#include "dynapipe/sched.h" /* defines: dyn_stage_assign_run, DYN_SCHEDULE_INTERLEAVED */
#include "runtime/exec.h"   /* defines: rt_wait */
#include "util/util.h"

/* ---- layers per stage -------------------------------------------------------- */

/* The model layer where cost layer c begins (c = the cost model's flattened
 * layer list of sched.h: GPT and Llama [embed, blocks, head], T5 [embed,
 * encoder blocks, bridge, decoder blocks, head]; c = its length maps to L).
 * The bridge is two model layers, the encoder's final norm and the decoder
 * embedding (model.h), so the layers after it are one further on. */
static int32_t model_layer_of(const dyn_model_config *cfg, int32_t c)
{
    if (cfg->kind != DYN_MODEL_T5) return c;
    int32_t ne = cfg->n_layers;
    return c <= ne + 1 ? c : c + 1;
}

static dyn_status stage_layers(const dyn_train_options *o, int32_t **lay_first, int32_t *n_stages, dyn_error *err)
{
    dyn_cost_model *cm = o->cost_table ? dyn_cost_model_load_table(o->cost_table, err)
                                       : dyn_cost_model_create_analytic(&o->model, &o->machine, err);
    if (cm == NULL) return err->code;
    /* The planner's own assignment (dyn_stage_assign_run with the run's
     * split weights, which its stage costs use too), so plan stages and
     * model layers agree on every rank. */
    int32_t v = o->schedule == DYN_SCHEDULE_INTERLEAVED ? o->plan.chunks : 1;
    dyn_stage_assignment a;
    memset(&a, 0, sizeof a);
    dyn_status st = dyn_stage_assign_run(cm, o->plan.stages * v, o->plan.split_weight, &a, err);
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

/* ---- stage models ------------------------------------------------------------ */

/* The shared tensors among this rank's stage models and its pipeline
 * peers (rt_shared). Collective over the pipeline (MPI_Comm_split). */
static dyn_status shared_create(rt_stages *ss, dyn_error *err)
{
    const dyn_train_options *o = ss->o;
    int S = ss->g->stages;
    int n = 0;
    dyn_shared_tensor *sh = dyn_model_shared_tensors(&o->model, ss->lay_first, ss->n_stages, &n, err);
    if (sh == NULL) return err->code;
    ss->shared = dyn_calloc((size_t)n + 1, sizeof(rt_shared), "shared tensors", err);
    dyn_status st = ss->shared ? DYN_OK : DYN_ERR_NOMEM;
    for (int i = 0; st == DYN_OK && i < n; i++) {
        rt_shared *t = &ss->shared[ss->n_shared];
        int here = 0, spread = 0; /* a holder on this rank; holders on several ranks */
        for (int32_t h = 0; h < sh[i].n_holders; h++) {
            int32_t stage = sh[i].holders[h];
            if (stage % S == ss->g->stage_rank) {
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
            st = dyn_rt_mpi_check(MPI_Comm_split(ss->g->pipe, here ? 0 : MPI_UNDEFINED, ss->g->stage_rank, &comm),
                                  "MPI_Comm_split (shared tensor)", err);
        if (st != DYN_OK || !here) {
            t->n_local = 0;
            continue;
        }
        const dyn_param_tensor *pt = dyn_model_find_tensor(ss->models[t->local[0]], sh[i].name);
        if (pt == NULL) {
            st = dyn_error_set(err, DYN_ERR_INTERNAL, "stage model lacks shared tensor %s", sh[i].name);
            break;
        }
        snprintf(t->name, sizeof t->name, "%s", sh[i].name);
        t->numel = pt->numel;
        t->comm = comm;
        if ((t->sum = dyn_calloc(t->numel, sizeof(float), "shared tensor", err)) == NULL) st = DYN_ERR_NOMEM;
        ss->n_shared++;
    }
    dyn_model_shared_tensors_free(sh, n);
    return st;
}

/* This rank's stage models and the shared tensors among them and its
 * pipeline peers. Collective over the pipeline (MPI_Comm_split). */
static dyn_status create_models(rt_stages *ss, int threads, dyn_error *err)
{
    const dyn_train_options *o = ss->o;
    int S = ss->g->stages;
    ss->n_local = ss->n_stages / S;
    ss->models = dyn_calloc((size_t)ss->n_local, sizeof(dyn_model *), "stage models", err);
    if (ss->models == NULL) return DYN_ERR_NOMEM;
    size_t bytes = 0;
    for (int32_t c = 0; c < ss->n_local; c++) {
        int32_t s = c * S + ss->g->stage_rank;
        ss->models[c] = dyn_model_create_stage(&o->model, o->seed, ss->lay_first[s], ss->lay_first[s + 1], err);
        if (ss->models[c] == NULL) return err->code;
        dyn_model_set_threads(ss->models[c], threads);
        bytes += dyn_model_state_bytes(ss->models[c], NULL);
    }
    ss->states_mb = (double)bytes / (1024.0 * 1024.0);
    ss->dp_req = dyn_calloc((size_t)ss->n_local, sizeof *ss->dp_req, "allreduce requests", err);
    ss->dp_started = dyn_calloc((size_t)ss->n_local, sizeof(int), "allreduce requests", err);
    if (ss->dp_req == NULL || ss->dp_started == NULL) return DYN_ERR_NOMEM;
    return shared_create(ss, err);
}

dyn_status rt_stages_create(rt_stages *ss, const dyn_train_options *o, const dyn_rt_group *g, int threads,
                            void (*poll)(void *), void *poll_ctx, dyn_error *err)
{
    memset(ss, 0, sizeof *ss);
    ss->o = o;
    ss->g = g;
    ss->poll = poll;
    ss->poll_ctx = poll_ctx;
    dyn_status st = stage_layers(o, &ss->lay_first, &ss->n_stages, err);
    if (st == DYN_OK) st = create_models(ss, threads, err);
    return st;
}

void rt_stages_free(rt_stages *ss)
{
    for (int32_t c = 0; c < ss->n_local && ss->models; c++) dyn_model_free(ss->models[c]);
    free(ss->models);
    for (int i = 0; i < ss->n_shared; i++) {
        free(ss->shared[i].sum);
        if (ss->shared[i].comm != MPI_COMM_NULL) MPI_Comm_free(&ss->shared[i].comm);
    }
    free(ss->shared);
    free(ss->dp_req);
    free(ss->dp_started);
    free(ss->lay_first);
    memset(ss, 0, sizeof *ss);
}

/* ---- the step ---------------------------------------------------------------- */

/* Start chunk c's gradient allreduce over the stage's replicas. */
static dyn_status dp_start(rt_stages *ss, int32_t c, dyn_error *err)
{
    if (ss->g->dp < 2 || ss->dp_started[c]) return DYN_OK;
    float *g = dyn_model_grads(ss->models[c]);
    size_t n = dyn_model_num_params(ss->models[c]);
    if (n > RT_DP_PARTS * RT_DP_PART_FLOATS) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "a stage of %zu parameters", n);
    for (int k = 0; k < RT_DP_PARTS; k++) ss->dp_req[c][k] = MPI_REQUEST_NULL;
    for (size_t at = 0, k = 0; at < n; at += RT_DP_PART_FLOATS, k++) {
        size_t cnt = n - at < RT_DP_PART_FLOATS ? n - at : RT_DP_PART_FLOATS;
        dyn_status st = dyn_rt_mpi_check(
            MPI_Iallreduce(MPI_IN_PLACE, g + at, (int)cnt, MPI_FLOAT, MPI_SUM, ss->g->dpc, &ss->dp_req[c][k]),
            "MPI_Iallreduce (data parallel)", err);
        if (st != DYN_OK) return st;
    }
    ss->dp_started[c] = 1;
    return DYN_OK;
}

/* Sum count values of buf over comm, in place, with the deadline. */
static dyn_status allreduce_on(rt_stages *ss, MPI_Comm comm, void *buf, size_t count, MPI_Datatype t, const char *what,
                               dyn_error *err)
{
    size_t esz = t == MPI_DOUBLE ? 8 : 4;
    for (size_t at = 0; at < count; at += (size_t)1 << 30) {
        size_t c = count - at < ((size_t)1 << 30) ? count - at : (size_t)1 << 30; /* MPI counts are int */
        MPI_Request req;
        dyn_status st = dyn_rt_mpi_check(
            MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + at * esz, (int)c, t, MPI_SUM, comm, &req), what, err);
        if (st == DYN_OK) st = rt_wait(&req, ss->o->timeout_s, ss->poll, ss->poll_ctx, what, err);
        if (st != DYN_OK) return st;
    }
    return DYN_OK;
}

static dyn_status sum_shared(rt_stages *ss, dyn_error *err)
{
    for (int i = 0; i < ss->n_shared; i++) {
        rt_shared *sh = &ss->shared[i];
        memset(sh->sum, 0, sh->numel * sizeof(float));
        for (int32_t c = 0; c < sh->n_local; c++) {
            dyn_model *m = ss->models[sh->local[c]];
            const float *g = dyn_model_grads(m) + dyn_model_find_tensor(m, sh->name)->offset;
            for (size_t j = 0; j < sh->numel; j++) sh->sum[j] += g[j];
        }
        if (sh->comm != MPI_COMM_NULL) {
            dyn_status st = allreduce_on(ss, sh->comm, sh->sum, sh->numel, MPI_FLOAT, "the shared-tensor allreduce", err);
            if (st != DYN_OK) return st;
        }
        for (int32_t c = 0; c < sh->n_local; c++) {
            dyn_model *m = ss->models[sh->local[c]];
            memcpy(dyn_model_grads(m) + dyn_model_find_tensor(m, sh->name)->offset, sh->sum, sh->numel * sizeof(float));
        }
    }
    return DYN_OK;
}

dyn_status rt_stages_stage_done(rt_stages *ss, int32_t stage, dyn_error *err)
{
    return dp_start(ss, stage / ss->g->stages, err);
}

void rt_stages_poll(rt_stages *ss)
{
    for (int32_t c = 0; c < ss->n_local; c++)
        if (ss->dp_started[c])
            for (int k = 0; k < RT_DP_PARTS; k++)
                if (ss->dp_req[c][k] != MPI_REQUEST_NULL) {
                    int done = 0;
                    MPI_Test(&ss->dp_req[c][k], &done, MPI_STATUS_IGNORE);
                }
}

/* "nan", "inf" or "-inf" (glibc prints a negative NaN as "-nan"). */
static const char *nonfinite_name(double x) { return isnan(x) ? "nan" : x > 0 ? "inf" : "-inf"; }

dyn_status rt_stages_step(rt_stages *ss, int64_t k, double loss_sum, rt_step_out *out, dyn_error *err)
{
    /* The data-parallel sums started as each stage's backward finished
     * (rt_stages_stage_done); a replica idle this iteration starts them now. Then
     * the shared tensors' sums over their holders (sums commute: the order
     * of the two does not change the total). */
    dyn_status st = DYN_OK;
    for (int32_t c = 0; st == DYN_OK && c < ss->n_local; c++) {
        st = dp_start(ss, c, err);
        for (int p = 0; st == DYN_OK && ss->dp_started[c] && p < RT_DP_PARTS; p++)
            st = rt_wait(&ss->dp_req[c][p], ss->o->timeout_s, ss->poll, ss->poll_ctx, "the data-parallel gradient allreduce", err);
        ss->dp_started[c] = 0;
    }
    if (st == DYN_OK) st = sum_shared(ss, err);
    /* v[0]: the squared gradient norm; v[1]: the replica's loss sum (only
     * the last stage's is non-zero), so that every rank of the replica
     * sees a non-finite loss and stops at the same step, before the
     * optimizer writes it into the weights. */
    double v[2] = {0, loss_sum}, t0 = dyn_time_ms();
    for (int32_t c = 0; c < ss->n_local; c++) v[0] += dyn_model_grad_sqnorm_owned(ss->models[c]);
    out->ms = dyn_time_ms() - t0;
    if (st == DYN_OK) st = allreduce_on(ss, ss->g->pipe, v, 2, MPI_DOUBLE, "the gradient-norm allreduce", err);
    if (st != DYN_OK) return st;
    if (!isfinite(v[1]))
        return dyn_error_set(err, DYN_ERR_NUMERIC, "step %lld/%lld: loss is %s (stopped before the optimizer step)",
                             (long long)k + 1, (long long)ss->o->steps, nonfinite_name(v[1]));
    if (!isfinite(v[0]))
        return dyn_error_set(err, DYN_ERR_NUMERIC,
                             "step %lld/%lld: gradient norm is %s (stopped before the optimizer step)",
                             (long long)k + 1, (long long)ss->o->steps, nonfinite_name(v[0]));
    out->grad_norm = sqrt(v[0]);
    out->lr = dyn_lr_at(&ss->o->lr, k);
    t0 = dyn_time_ms();
    for (int32_t c = 0; c < ss->n_local; c++) {
        dyn_model_adamw_step_norm(ss->models[c], (float)out->lr, &ss->o->adamw, out->grad_norm, ss->o->clip_norm);
        dyn_model_zero_grad(ss->models[c]);
    }
    out->ms += dyn_time_ms() - t0;
    return DYN_OK;
}

/* ---- the whole model on rank 0 ----------------------------------------------- */

/* Bytes of this rank's owned tensors packed for --save: per tensor a
 * 96-byte name, a u64 float count, the floats. buf NULL: only count. */
static size_t pack_owned(const rt_stages *ss, char *buf)
{
    size_t at = 0;
    for (int32_t c = 0; c < ss->n_local; c++)
        for (int t = 0; t < dyn_model_num_tensors(ss->models[c]); t++) {
            const dyn_param_tensor *pt = dyn_model_tensor(ss->models[c], t);
            if (pt->shared_copy) continue;
            uint64_t numel = pt->numel;
            if (buf) {
                memset(buf + at, 0, 96);
                memcpy(buf + at, pt->name, strnlen(pt->name, 95));
                memcpy(buf + at + 96, &numel, 8);
                memcpy(buf + at + 104, dyn_model_params(ss->models[c]) + pt->offset, numel * sizeof(float));
            }
            at += 104 + numel * sizeof(float);
        }
    return at;
}

/* Rank 0: a whole model from the packed tensors of every stage. */
static dyn_status unpack_full(const rt_stages *ss, const char *all, size_t total, dyn_model **out, dyn_error *err)
{
    dyn_model *full = dyn_model_create(&ss->o->model, ss->o->seed, err);
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

dyn_status rt_stages_gather_full(const rt_stages *ss, dyn_model **out, dyn_error *err)
{
    *out = NULL;
    if (ss->g->replica != 0) return DYN_OK;
    size_t bytes = pack_owned(ss, NULL);
    if (bytes > (size_t)INT32_MAX) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "--save: a stage of %zu bytes", bytes);
    char *buf = malloc(bytes ? bytes : 1);
    if (buf == NULL) return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for --save");
    pack_owned(ss, buf);
    dyn_rt_gathered all;
    dyn_status st = dyn_rt_gather_bytes(ss->g->pipe, buf, (int)bytes, ss->o->timeout_s, "the weights gather", &all, err);
    free(buf);
    if (st == DYN_OK && ss->g->stage_rank == 0) st = unpack_full(ss, all.data, all.total, out, err);
    dyn_rt_gathered_free(&all);
    return st;
}
