/* checkpoint.c — the collective save of `dynapipe train --save DIR` (see
 * checkpoint.h for the layout and the atomicity argument).
 *
 * Collective over the world: rank 0 makes DIR/step-K.tmp; every rank of
 * replica 0 writes, per plan stage it holds, the stage's weight shard
 * (dyn_model_save: owned tensors only) and optimizer shard (the moments of
 * every tensor held); their tensor names travel to rank 0 over the pipeline
 * communicator (dyn_rt_gather_bytes); rank 0 writes the index
 * (dyn_model_index_write), config.json (ckpt_config.c) and
 * trainer_state.json (ckpt_state.c, hashing every shard), then commits
 * (rename, `latest`). Between the phases all ranks agree on success with
 * one small allreduce, so a failure anywhere leaves no step-K folder and
 * the previous `latest` standing.
 *
 * Reading is ckpt_read.c's; the file-system helpers are ckpt_fs.c's. */
#include "runtime/checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "runtime/ckpt_fs.h"    /* defines: rt_ckpt_pathf, rt_ckpt_shard_name, rt_ckpt_fsync_dir, ... */
#include "runtime/ckpt_state.h" /* defines: rt_ckpt_state_to_json */
#include "runtime/exec.h"       /* defines: rt_wait */
#include "util/util.h"

/* Every rank's status -> the same status everywhere: DYN_OK only if all
 * succeeded. A rank that did not fail itself reports the failure elsewhere. */
static dyn_status agree(const rt_ckpt_job *j, dyn_status mine, dyn_error *err)
{
    int bad = mine != DYN_OK, any = 0;
    MPI_Request req;
    dyn_error e2;
    dyn_status st = dyn_rt_mpi_check(MPI_Iallreduce(&bad, &any, 1, MPI_INT, MPI_MAX, j->g->world, &req),
                                     "MPI_Iallreduce (checkpoint)", &e2);
    if (st == DYN_OK) st = rt_wait(&req, j->o->timeout_s, NULL, NULL, "the checkpoint agreement", &e2);
    if (mine != DYN_OK) return mine;
    if (st != DYN_OK) {
        *err = e2;
        return st;
    }
    if (any) return dyn_error_set(err, DYN_ERR_IO, "checkpoint: another rank failed to write its part");
    return DYN_OK;
}

/* This rank's shards (replica 0 only); the names of its owned tensors, as
 * "stage name bytes\n" lines, into *list. */
static dyn_status write_shards(const rt_ckpt_job *j, const char *tmp, char **list, size_t *list_len, dyn_error *err)
{
    size_t cap = 256, len = 0;
    char *buf = malloc(cap);
    if (buf == NULL) return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for checkpoint names");
    buf[0] = '\0';
    dyn_status st = DYN_OK;
    for (int32_t c = 0; st == DYN_OK && c < j->n_local; c++) {
        int32_t s = c * j->g->stages + j->g->stage_rank;
        dyn_model *m = j->models[c];
        char name[128], p[RT_CKPT_PATH_CAP];
        rt_ckpt_shard_name(name, sizeof name, "model", s, j->n_stages);
        rt_ckpt_pathf(p, sizeof p, "%s/%s", tmp, name);
        st = dyn_model_save(m, p, err);
        rt_ckpt_shard_name(name, sizeof name, "optimizer", s, j->n_stages);
        rt_ckpt_pathf(p, sizeof p, "%s/%s", tmp, name);
        dyn_train_state ts;
        memset(&ts, 0, sizeof ts);
        ts.data_cursor = j->sampler_pos;
        if (st == DYN_OK) st = dyn_model_save_train_state(m, &ts, p, err);
        for (int t = 0; st == DYN_OK && t < dyn_model_num_tensors(m); t++) {
            const dyn_param_tensor *pt = dyn_model_tensor(m, t);
            if (pt->shared_copy) continue;
            if (DYN_RESERVE(buf, cap, len + strlen(pt->name) + 48) != 0) {
                st = dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for checkpoint names");
                break;
            }
            len += (size_t)snprintf(buf + len, cap - len, "%d %s %zu\n", s, pt->name, pt->numel * sizeof(float));
        }
    }
    *list = buf;
    *list_len = len;
    return st;
}

/* Rank 0: the index of the shards from the gathered name lists ("stage
 * name bytes\n" lines, write_shards). */
static dyn_status write_index(const rt_ckpt_job *j, const char *tmp, char *names, dyn_error *err)
{
    int cap = 0;
    for (const char *c = names; *c; c++) cap += *c == '\n';
    dyn_index_entry *e = dyn_calloc((size_t)cap + 1, sizeof *e, "the index", err);
    char (*shard)[64] = e ? dyn_calloc((size_t)j->n_stages, sizeof *shard, "the index", err) : NULL;
    dyn_status st = shard ? DYN_OK : DYN_ERR_NOMEM;
    for (int32_t s = 0; st == DYN_OK && s < j->n_stages; s++)
        rt_ckpt_shard_name(shard[s], sizeof shard[s], "model", s, j->n_stages);
    int n = 0;
    for (char *line = names; st == DYN_OK && *line; n++) {
        char *nl = strchr(line, '\n'); /* every line ends in one (write_shards) */
        char *name = strchr(line, ' '), *sp = name ? strchr(name + 1, ' ') : NULL;
        int s = -1;
        unsigned long long bytes = 0;
        if (n == cap || nl == NULL || sp == NULL || sp > nl || sscanf(line, "%d", &s) != 1 ||
            sscanf(sp + 1, "%llu", &bytes) != 1 || s < 0 || s >= j->n_stages) {
            st = dyn_error_set(err, DYN_ERR_INTERNAL, "checkpoint: bad tensor list line");
            break;
        }
        *sp = '\0';
        name++;
        e[n] = (dyn_index_entry){name, shard[s], bytes};
        line = nl + 1;
    }
    if (st == DYN_OK) st = dyn_model_index_write(tmp, e, n, err);
    free(shard);
    free(e);
    return st;
}

/* Rank 0: config.json into tmp. */
static dyn_status write_config(const rt_ckpt_job *j, const char *tmp, dyn_error *err)
{
    char p[RT_CKPT_PATH_CAP];
    dyn_hf_tokens tok = rt_ckpt_tokens(&j->o->model, j->data, j->o->have_tokens ? &j->o->tokens : NULL);
    char *cfg = rt_ckpt_hf_config(&j->o->model, &tok, err);
    if (cfg == NULL) return err->code;
    rt_ckpt_pathf(p, sizeof p, "%s/config.json", tmp);
    dyn_status st = dyn_file_write_atomic(p, cfg, strlen(cfg), err);
    free(cfg);
    return st;
}

/* What trainer_state.json records of the job, without the files. */
static void meta_of_job(const rt_ckpt_job *j, rt_ckpt_meta *m)
{
    const dyn_train_options *o = j->o;
    m->step = j->step;
    m->sampler_pos = j->sampler_pos;
    m->stages = j->g->stages;
    m->dp = j->g->dp;
    m->chunks = j->n_stages / j->g->stages;
    m->n_stages = j->n_stages;
    memcpy(m->lay_first, j->lay_first, ((size_t)j->n_stages + 1) * sizeof(int32_t));
    m->model = o->model;
    m->tokens = o->have_tokens ? o->tokens : rt_ckpt_byte_tokens(o->model.kind);
    m->seed = o->seed;
    snprintf(m->data_spec, sizeof m->data_spec, "%s", o->data_spec);
    m->n_samples = o->n_samples;
    m->split = o->split;
    m->global_batch_tokens = o->global_batch_tokens;
    m->shuffle = o->shuffle != 0;
    m->epochs = o->epochs;
    m->eval_split = o->eval_split;
    m->per_epoch = j->per_epoch;
    m->epoch = j->per_epoch > 0 ? j->sampler_pos / j->per_epoch : 0;
    m->index = j->per_epoch > 0 ? j->sampler_pos % j->per_epoch : j->sampler_pos;
    snprintf(m->eval_data, sizeof m->eval_data, "%s", o->eval_data ? o->eval_data : "");
    m->lr = o->lr;
    if (j->data != NULL) {
        m->data = *j->data;
    } else { /* a job without data settings: the byte vocabulary's */
        memset(&m->data, 0, sizeof m->data);
        m->data.truncate = o->truncate != 0;
        snprintf(m->data.tokenizer, sizeof m->data.tokenizer, "bytes");
        m->data.vocab = DYN_VOCAB_BYTES;
        m->data.sp = dyn_model_specials_bytes();
    }
    m->data.recorded = 1;
}

/* Rank 0: the size and hash of every file written so far into m->files:
 * config, index, then per plan stage its weight and optimizer shards. */
static dyn_status hash_files(const rt_ckpt_job *j, const char *tmp, rt_ckpt_meta *m, dyn_error *err)
{
    const char *fixed[2] = {"config.json", "model.safetensors.index.json"};
    dyn_status st = DYN_OK;
    for (int32_t i = 0; st == DYN_OK && i < 2 * j->n_stages + 2; i++) {
        rt_ckpt_file *f = &m->files[m->n_files++];
        if (i < 2) snprintf(f->name, sizeof f->name, "%s", fixed[i]);
        else rt_ckpt_shard_name(f->name, sizeof f->name, (i - 2) % 2 ? "optimizer" : "model", (i - 2) / 2, j->n_stages);
        char p[RT_CKPT_PATH_CAP];
        rt_ckpt_pathf(p, sizeof p, "%s/%s", tmp, f->name);
        char *data = NULL;
        size_t len = 0;
        st = dyn_file_read_all(p, &data, &len, err);
        if (st == DYN_OK) {
            f->bytes = len;
            f->fnv = rt_ckpt_fnv1a64((const unsigned char *)data, len);
        }
        free(data);
    }
    return st;
}

/* Rank 0: index, config and trainer state into tmp, given the gathered
 * name lists. */
static dyn_status write_rank0_files(const rt_ckpt_job *j, const char *tmp, char *names, dyn_error *err)
{
    rt_ckpt_meta *m = dyn_calloc(1, sizeof *m, "checkpoint", err);
    if (m == NULL) return DYN_ERR_NOMEM;
    meta_of_job(j, m);
    dyn_status st = write_index(j, tmp, names, err);
    if (st == DYN_OK) st = write_config(j, tmp, err);
    if (st == DYN_OK) st = hash_files(j, tmp, m, err);
    if (st == DYN_OK) {
        char p[RT_CKPT_PATH_CAP];
        cJSON *ts = rt_ckpt_state_to_json(m);
        rt_ckpt_pathf(p, sizeof p, "%s/trainer_state.json", tmp);
        st = rt_ckpt_write_json(p, ts, err);
        cJSON_Delete(ts);
    }
    free(m);
    return st;
}

/* Rank 0: tmp -> final, then `latest`. */
static dyn_status commit(const char *root, const char *tmp, const char *final, const char *leaf, dyn_error *err)
{
    dyn_status st = rt_ckpt_fsync_dir(tmp, err);
    char old[RT_CKPT_PATH_CAP];
    rt_ckpt_pathf(old, sizeof old, "%s.old", final);
    int replaced = 0;
    if (st == DYN_OK && rt_ckpt_is_dir(final)) { /* the same step saved again (e.g. after a resume) */
        st = rt_ckpt_remove_flat_dir(old, err);
        if (st == DYN_OK && rename(final, old) != 0)
            st = dyn_error_set(err, DYN_ERR_IO, "%s: cannot move aside: %s", final, strerror(errno));
        replaced = st == DYN_OK;
    }
    if (st == DYN_OK && rename(tmp, final) != 0)
        st = dyn_error_set(err, DYN_ERR_IO, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    if (st == DYN_OK) st = rt_ckpt_fsync_dir(root, err);
    char latest[RT_CKPT_PATH_CAP], text[128];
    rt_ckpt_pathf(latest, sizeof latest, "%s/latest", root);
    snprintf(text, sizeof text, "%s\n", leaf);
    if (st == DYN_OK) st = dyn_file_write_atomic(latest, text, strlen(text), err);
    if (st == DYN_OK) st = rt_ckpt_fsync_dir(root, err);
    if (st == DYN_OK && replaced) st = rt_ckpt_remove_flat_dir(old, err);
    return st;
}

dyn_status rt_ckpt_save(const rt_ckpt_job *j, dyn_error *err)
{
    const char *root = j->o->save_dir;
    if (rt_ckpt_check_root(root, err) != DYN_OK) return agree(j, err->code, err);
    char leaf[64], tmp[RT_CKPT_PATH_CAP], final[RT_CKPT_PATH_CAP];
    snprintf(leaf, sizeof leaf, "step-%08lld", (long long)j->step);
    rt_ckpt_pathf(final, sizeof final, "%s/%s", root, leaf);
    rt_ckpt_pathf(tmp, sizeof tmp, "%s.tmp", final);
    dyn_status st = DYN_OK;
    if (j->n_stages > RT_CKPT_MAX_STAGES)
        st = dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint: %d plan stages, at most %d", j->n_stages,
                           RT_CKPT_MAX_STAGES);
    if (st == DYN_OK && j->g->world_rank == 0) {
        if (mkdir(root, 0777) != 0 && errno != EEXIST)
            st = dyn_error_set(err, DYN_ERR_IO, "%s: cannot create: %s", root, strerror(errno));
        if (st == DYN_OK) st = rt_ckpt_remove_flat_dir(tmp, err); /* a save that crashed */
        if (st == DYN_OK && mkdir(tmp, 0777) != 0)
            st = dyn_error_set(err, DYN_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    st = agree(j, st, err);
    /* Every optimizer shard records the data cursor (rank 0's sampler
     * position), and a resume checks it against trainer_state.json's. */
    rt_ckpt_job jj = *j;
    if (st == DYN_OK) {
        MPI_Request req;
        st = dyn_rt_mpi_check(MPI_Ibcast(&jj.sampler_pos, 1, MPI_INT64_T, 0, j->g->world, &req),
                              "MPI_Ibcast (checkpoint data cursor)", err);
        if (st == DYN_OK) st = rt_wait(&req, j->o->timeout_s, NULL, NULL, "the checkpoint data-cursor broadcast", err);
        st = agree(j, st, err);
    }
    j = &jj;
    char *mine = NULL;
    size_t len = 0;
    dyn_rt_gathered names;
    memset(&names, 0, sizeof names);
    if (st == DYN_OK && j->g->replica == 0) {
        st = write_shards(j, tmp, &mine, &len, err);
        /* every pipeline rank takes part in the gather of the name lists
         * onto replica 0's rank 0, failed or not */
        dyn_error e2;
        dyn_status g = dyn_rt_gather_bytes(j->g->pipe, mine, st == DYN_OK ? (int)len : 0, j->o->timeout_s,
                                           "the checkpoint names gather", &names, st == DYN_OK ? err : &e2);
        if (st == DYN_OK) st = g;
    }
    free(mine);
    st = agree(j, st, err);
    if (st == DYN_OK && j->g->world_rank == 0) {
        st = write_rank0_files(j, tmp, names.data, err);
        if (st == DYN_OK) st = commit(root, tmp, final, leaf, err);
    }
    dyn_rt_gathered_free(&names);
    return agree(j, st, err);
}
