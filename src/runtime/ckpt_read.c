/* ckpt_read.c — reading a checkpoint (checkpoint.h): resolving a root to
 * its `latest` step folder, verifying every file trainer_state.json lists
 * (size and FNV-1a hash) before any tensor is loaded, checking the run's
 * shape against the options, and loading a stage model or the whole model.
 * A fact the checkpoint stores twice must agree or the load is refused
 * naming both places: the file list against the layout, config.json
 * against trainer_state.json's model, the step and data cursor of every
 * optimizer shard against trainer_state.json; src/model checks the shards
 * against the index and the model (tensor set, shapes, dynapipe.config)
 * and refuses a NaN or infinity in any tensor.
 * No MPI: resume calls it on every rank, `dynapipe eval` without mpirun. */
#include "runtime/checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "dynapipe/model_config.h" /* defines: dyn_model_kind_name */
#include "model/safetensors.h"     /* defines: dyn_safetensors_open, dyn_safetensors_meta */
#include "runtime/ckpt_fs.h"       /* defines: rt_ckpt_pathf, rt_ckpt_fnv1a64, rt_ckpt_is_* */
#include "runtime/ckpt_state.h"    /* defines: rt_ckpt_state_from_json */
#include "util/util.h"

dyn_status rt_ckpt_resolve(const char *path, char *dir, size_t cap, dyn_error *err)
{
    if (rt_ckpt_check_root(path, err) != DYN_OK) return err->code;
    char p[RT_CKPT_PATH_CAP];
    rt_ckpt_pathf(p, sizeof p, "%s/trainer_state.json", path);
    if (rt_ckpt_is_file(p)) {
        rt_ckpt_pathf(dir, cap, "%s", path);
        return DYN_OK;
    }
    rt_ckpt_pathf(p, sizeof p, "%s/latest", path);
    if (!rt_ckpt_is_file(p))
        return dyn_error_set(err, DYN_ERR_IO, "%s: no checkpoint here (neither trainer_state.json nor latest)", path);
    char *text = NULL;
    dyn_status st = dyn_file_read_all(p, &text, NULL, err);
    if (st != DYN_OK) return st;
    size_t n = strcspn(text, "\n");
    text[n] = '\0';
    if (n == 0 || strchr(text, '/') != NULL || strcmp(text, "..") == 0) {
        st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: '%s' is not a checkpoint folder name", p, text);
    } else {
        rt_ckpt_pathf(dir, cap, "%s/%s", path, text);
        if (!rt_ckpt_is_dir(dir)) st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s names %s, which does not exist", p, dir);
    }
    free(text);
    return st;
}

/* trainer_state.json's "files" (path) lists exactly the files the layout
 * of meta->n_stages plan stages holds (checkpoint.h): an emptied or
 * shortened list must not turn verification off. */
static dyn_status check_file_list(const rt_ckpt_meta *meta, const char *path, dyn_error *err)
{
    int32_t n = 2 * meta->n_stages + 2;
    for (int32_t i = 0; i < n; i++) {
        char want[64];
        if (i < 2) snprintf(want, sizeof want, "%s", i == 0 ? "config.json" : "model.safetensors.index.json");
        else rt_ckpt_shard_name(want, sizeof want, (i - 2) % 2 ? "optimizer" : "model", (i - 2) / 2, meta->n_stages);
        int32_t k = 0;
        while (k < meta->n_files && strcmp(meta->files[k].name, want) != 0) k++;
        if (k == meta->n_files)
            return dyn_error_set(err, DYN_ERR_CORRUPT,
                                 "%s: \"files\" does not list %s, which a checkpoint of %d plan stages holds "
                                 "(stage_first_layer)",
                                 path, want, meta->n_stages);
    }
    if (meta->n_files != n) /* every required name is there once or more: an extra or repeated one */
        return dyn_error_set(err, DYN_ERR_CORRUPT,
                             "%s: \"files\" lists %d files, a checkpoint of %d plan stages holds %d (stage_first_layer)",
                             path, meta->n_files, meta->n_stages, n);
    return DYN_OK;
}

/* dir/config.json (already verified against its hash) says what
 * trainer_state.json's model says: the first key that differs is named
 * with both values. */
static dyn_status check_config(const char *dir, const rt_ckpt_meta *meta, dyn_error *err)
{
    char p[RT_CKPT_PATH_CAP];
    rt_ckpt_pathf(p, sizeof p, "%s/config.json", dir);
    dyn_hf_tokens tok = rt_ckpt_tokens(&meta->model, &meta->data, &meta->tokens);
    char *want_text = rt_ckpt_hf_config(&meta->model, &tok, err), *text = NULL;
    if (want_text == NULL) return err->code;
    dyn_status st = dyn_file_read_all(p, &text, NULL, err);
    cJSON *want = cJSON_Parse(want_text), *have = st == DYN_OK ? cJSON_Parse(text) : NULL;
    free(want_text);
    free(text);
    if (st == DYN_OK && want == NULL) st = dyn_error_set(err, DYN_ERR_NOMEM, "out of memory reading %s", p);
    if (st == DYN_OK && !cJSON_IsObject(have)) st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: not a JSON object", p);
    const cJSON *w = NULL;
    for (w = want ? want->child : NULL; st == DYN_OK && w != NULL; w = w->next) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(have, w->string);
        if (h != NULL && cJSON_Compare(w, h, 1)) continue;
        char *hs = h ? cJSON_PrintUnformatted(h) : NULL, *ws = cJSON_PrintUnformatted(w);
        st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"%s\" is %s, but trainer_state.json's model gives %s", p,
                           w->string, hs ? hs : "missing", ws ? ws : "?");
        free(hs);
        free(ws);
    }
    for (const cJSON *h = have ? have->child : NULL; st == DYN_OK && h != NULL; h = h->next)
        if (cJSON_GetObjectItemCaseSensitive(want, h->string) == NULL)
            st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: \"%s\" is not part of the config trainer_state.json's model gives",
                               p, h->string);
    cJSON_Delete(want);
    cJSON_Delete(have);
    return st;
}

/* Every optimizer shard's recorded step and data cursor (metadata
 * dynapipe.step, dynapipe.data_cursor) equal trainer_state.json's step and
 * sampler_position: checked here, before any rank starts, so that a resume
 * cannot replay or skip data. (rt_ckpt_load_stage checks the values it
 * loads again.) */
static dyn_status check_optimizer_meta(const char *dir, const rt_ckpt_meta *meta, dyn_error *err)
{
    dyn_status st = DYN_OK;
    for (int32_t s = 0; st == DYN_OK && s < meta->n_stages; s++) {
        char name[64], p[RT_CKPT_PATH_CAP];
        rt_ckpt_shard_name(name, sizeof name, "optimizer", s, meta->n_stages);
        rt_ckpt_pathf(p, sizeof p, "%s/%s", dir, name);
        dyn_safetensors *f = dyn_safetensors_open(p, err);
        if (f == NULL) return err->code;
        const char *keys[2] = {"dynapipe.step", "dynapipe.data_cursor"};
        const char *what[2] = {"step", "data cursor"}, *theirs[2] = {"step", "sampler_position"};
        long long want[2] = {(long long)meta->step, (long long)meta->sampler_pos};
        for (int k = 0; st == DYN_OK && k < 2; k++) {
            const char *v = dyn_safetensors_meta(f, keys[k]);
            char *end = NULL;
            long long x = v ? strtoll(v, &end, 10) : -1;
            if (v == NULL || end == v || *end != '\0')
                st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: metadata '%s' missing or not an integer", p, keys[k]);
            else if (x != want[k])
                st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: %s %lld, but %s/trainer_state.json's %s is %lld", p,
                                   what[k], x, dir, theirs[k], want[k]);
        }
        dyn_safetensors_free(f);
    }
    return st;
}

dyn_status rt_ckpt_read_state(const char *dir, rt_ckpt_meta *meta, dyn_error *err)
{
    if (rt_ckpt_check_root(dir, err) != DYN_OK) return err->code;
    char p[RT_CKPT_PATH_CAP];
    rt_ckpt_pathf(p, sizeof p, "%s/trainer_state.json", dir);
    char *text = NULL;
    dyn_status st = dyn_file_read_all(p, &text, NULL, err);
    if (st != DYN_OK) return st;
    cJSON *r = cJSON_Parse(text);
    free(text);
    if (r == NULL) return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: not valid JSON", p);
    st = rt_ckpt_state_from_json(r, p, meta, err);
    cJSON_Delete(r);
    return st;
}

dyn_status rt_ckpt_read(const char *dir, rt_ckpt_meta *meta, dyn_error *err)
{
    char p[RT_CKPT_PATH_CAP];
    rt_ckpt_pathf(p, sizeof p, "%s/trainer_state.json", dir);
    dyn_status st = rt_ckpt_read_state(dir, meta, err);
    if (st == DYN_OK) st = check_file_list(meta, p, err);
    for (int32_t i = 0; st == DYN_OK && i < meta->n_files; i++) {
        const rt_ckpt_file *f = &meta->files[i];
        rt_ckpt_pathf(p, sizeof p, "%s/%s", dir, f->name);
        char *data = NULL;
        size_t len = 0;
        if (dyn_file_read_all(p, &data, &len, err) != DYN_OK) {
            st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: missing or unreadable (the checkpoint lists it)", p);
            break;
        }
        if (len != f->bytes)
            st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: %zu bytes, the checkpoint wrote %llu (truncated or replaced)",
                               p, len, (unsigned long long)f->bytes);
        else if (rt_ckpt_fnv1a64((const unsigned char *)data, len) != f->fnv)
            st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: contents differ from what the checkpoint wrote (corrupted)",
                               p);
        free(data);
    }
    if (st == DYN_OK) st = check_config(dir, meta, err);
    if (st == DYN_OK) st = check_optimizer_meta(dir, meta, err);
    return st;
}

dyn_status rt_ckpt_check(const rt_ckpt_meta *m, const dyn_train_options *o, dyn_error *err)
{
    const dyn_model_config *a = &m->model, *b = &o->model;
    if (a->kind != b->kind)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint of a %s model, this run trains %s",
                             dyn_model_kind_name(a->kind), dyn_model_kind_name(b->kind));
#define SAME(field, what)                                                                                         \
    if (a->field != b->field)                                                                                     \
    return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint has %s %d, this run %d", what, (int)a->field,      \
                         (int)b->field)
    SAME(n_layers, "layers");
    SAME(n_dec_layers, "decoder layers");
    SAME(hidden, "hidden size");
    SAME(heads, "heads");
    SAME(head_dim, "head dim");
    SAME(ffn, "ffn size");
    SAME(vocab, "vocabulary");
    SAME(max_seqlen, "max-seqlen");
#undef SAME
    int32_t chunks = o->schedule == DYN_SCHEDULE_INTERLEAVED ? o->plan.chunks : 1;
    if (m->stages != o->plan.stages)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint of %d pipeline stages, this run has --stages %d",
                             m->stages, o->plan.stages);
    if (m->chunks != chunks)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint of %d chunks per rank, this run has %d", m->chunks,
                             chunks);
    if (strcmp(m->data_spec, o->data_spec) != 0 || m->n_samples != o->n_samples || m->split != o->split)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint trained on --data %s (%d samples), this run on %s (%d)",
                             m->data_spec, m->n_samples, o->data_spec, o->n_samples);
    /* the training order: another one would train other samples from here */
    if (m->shuffle != (o->shuffle != 0))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint trained in %s order, this run in %s order (%s): "
                             "the order would differ", m->shuffle ? "shuffled" : "dataset",
                             o->shuffle ? "shuffled" : "dataset", m->shuffle ? "--shuffle" : "--no-shuffle");
    if (m->shuffle && m->seed != o->seed)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint shuffled with --seed %llu, this run has --seed %llu: "
                             "the order would differ", (unsigned long long)m->seed, (unsigned long long)o->seed);
    if (m->eval_split != o->eval_split)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint held out --eval-split %g of the data, this run %g",
                             m->eval_split, o->eval_split);
    if (o->epochs > 0 && m->per_epoch > 0 && m->sampler_pos >= o->epochs * (int64_t)m->per_epoch)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint is at epoch %lld, sample %lld; --epochs %lld leaves "
                             "nothing to train", (long long)m->epoch, (long long)m->index, (long long)o->epochs);
    if (m->data.recorded) {
        rt_ckpt_data run;
        dyn_status st = rt_ckpt_data_of(o->tokenizer, o->template_str, o->truncate, o->model.kind, &run, err);
        if (st == DYN_OK) st = rt_ckpt_data_check(&m->data, &run, err);
        if (st != DYN_OK) return st;
    }
    if (m->global_batch_tokens != o->global_batch_tokens)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint has --global-batch-tokens %lld, this run %lld",
                             (long long)m->global_batch_tokens, (long long)o->global_batch_tokens);
    if (m->step >= o->steps)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint is at step %lld; --steps %lld leaves nothing to train",
                             (long long)m->step, (long long)o->steps);
    return DYN_OK;
}

int rt_ckpt_schedule_note(const rt_ckpt_meta *meta, const dyn_train_options *o, char *note, size_t cap)
{
    const dyn_lr_schedule *a = &meta->lr, *b = &o->lr;
    if (a->total_steps == 0) return 0; /* not recorded */
    if (a->max_lr == b->max_lr && a->min_lr == b->min_lr && a->warmup_steps == b->warmup_steps &&
        a->total_steps == b->total_steps)
        return 0;
    /* The rate the checkpoint's run would have used next, and this run's. */
    snprintf(note, cap,
             "the checkpoint was trained on a schedule of %lld steps (lr %g, min-lr %g, warm-up %lld), this run's "
             "is %lld steps (lr %g, min-lr %g, warm-up %lld): step %lld trains at lr %.3g instead of %.3g",
             (long long)a->total_steps, (double)a->max_lr, (double)a->min_lr, (long long)a->warmup_steps,
             (long long)b->total_steps, (double)b->max_lr, (double)b->min_lr, (long long)b->warmup_steps,
             (long long)meta->step, (double)dyn_lr_at(b, meta->step), (double)dyn_lr_at(a, meta->step));
    return 1;
}

dyn_status rt_ckpt_load_stage(const char *dir, const rt_ckpt_meta *meta, int32_t stage, dyn_model *m, dyn_error *err)
{
    int first = 0, last = 0;
    dyn_model_stage_range(m, &first, &last);
    if (stage < 0 || stage >= meta->n_stages || meta->lay_first[stage] != first || meta->lay_first[stage + 1] != last)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "%s: plan stage %d holds layers [%d, %d) here, the checkpoint's [%d, %d) (another cost "
                             "model or stage split)",
                             dir, stage, first, last, stage < meta->n_stages ? meta->lay_first[stage] : -1,
                             stage < meta->n_stages ? meta->lay_first[stage + 1] : -1);
    char name[128], p[RT_CKPT_PATH_CAP];
    rt_ckpt_shard_name(name, sizeof name, "optimizer", stage, meta->n_stages);
    rt_ckpt_pathf(p, sizeof p, "%s/%s", dir, name);
    dyn_train_state ts;
    dyn_status st = dyn_model_load_train_state(m, &ts, p, err);
    if (st == DYN_OK && dyn_model_step_count(m) != meta->step)
        st = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: step %lld, but %s/trainer_state.json's step is %lld", p,
                           (long long)dyn_model_step_count(m), dir, (long long)meta->step);
    if (st == DYN_OK && ts.data_cursor != meta->sampler_pos)
        st = dyn_error_set(err, DYN_ERR_CORRUPT,
                           "%s: data cursor %lld, but %s/trainer_state.json's sampler_position is %lld", p,
                           (long long)ts.data_cursor, dir, (long long)meta->sampler_pos);
    if (st == DYN_OK) st = dyn_model_load_index(m, dir, err);
    return st;
}

dyn_model *rt_ckpt_load_model(const char *dir, rt_ckpt_meta *meta, dyn_error *err)
{
    if (rt_ckpt_read(dir, meta, err) != DYN_OK) return NULL;
    dyn_model *m = dyn_model_create(&meta->model, meta->seed, err);
    if (m == NULL) return NULL;
    if (dyn_model_load_index(m, dir, err) != DYN_OK) {
        dyn_model_free(m);
        return NULL;
    }
    dyn_model_set_step_count(m, meta->step);
    return m;
}
