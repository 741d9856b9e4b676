/* checkpoint.h — sharded training checkpoints of `dynapipe train`: save
 * (collective over the ranks, atomic as a whole), verify, resume, and the
 * whole model for `dynapipe eval`.
 *
 * Layout of a checkpoint root DIR (--save DIR):
 *   DIR/latest                      "step-00000040\n": the newest complete
 *                                   checkpoint (replaced atomically)
 *   DIR/step-00000040/
 *     config.json                   Hugging Face config (GPT2LMHeadModel,
 *                                   T5ForConditionalGeneration,
 *                                   LlamaForCausalLM or Qwen2ForCausalLM;
 *                                   the model's shape; token ids: the
 *                                   tokenizer's the data was read with, else
 *                                   the --init folder's, else the byte
 *                                   vocabulary's pad 256, bos / decoder
 *                                   start 257, eos 258: rt_ckpt_tokens)
 *     model.safetensors.index.json  the Hub's sharded-weights index:
 *                                   {"metadata": {"total_size": bytes},
 *                                    "weight_map": {name: shard file}}
 *     model-0000s-of-0000N.safetensors    plan stage s-1's owned tensors
 *                                   (Hugging Face names and layouts)
 *     optimizer-0000s-of-0000N.safetensors AdamW moments of every tensor
 *                                   stage s-1 holds, and its step count
 *     trainer_state.json            step, sampler position, the run's shape
 *                                   (model, stages, layer cuts, data, batch
 *                                   tokens), the data settings (truncation,
 *                                   tokenizer file and hash, template,
 *                                   special ids) and the size and FNV-1a 64
 *                                   hash of every file above
 * N = plan stages (stages x chunks). Training draws no random numbers after
 * initialisation (no dropout; the sampler's order is a pure function of its
 * position, the seed and the data, data.h dyn_sampler_create_ex, and the
 * planner is deterministic), so the sampler position and the step are the
 * whole training position; trainer_state.json says so ("rng": "none") and
 * records the order's settings ("order": shuffle, epochs, held-out
 * fraction, samples per epoch, the position as epoch and index).
 *
 * Atomicity: everything is written into DIR/step-K.tmp (each file written to
 * a temporary name, fsync'ed, renamed), the folder is fsync'ed and renamed to
 * DIR/step-K, then DIR/latest is replaced (temporary file, fsync, rename)
 * and DIR fsync'ed. A crash at any point leaves the previous `latest` and
 * its folder untouched; a stale step-K.tmp is removed by the next save.
 *
 * Where each part lives: the collective save in checkpoint.c, reading and
 * verification in ckpt_read.c, trainer_state.json's schema (one field
 * table for both directions) in ckpt_state.c, config.json in
 * ckpt_config.c, the file-system helpers in ckpt_fs.c; the index format
 * is src/model's (dyn_model_index_write / dyn_model_load_index). */
#ifndef DYN_RUNTIME_CHECKPOINT_H
#define DYN_RUNTIME_CHECKPOINT_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "dynapipe/common.h"
#include "model/hf_config.h" /* defines: dyn_hf_tokens */
#include "model/model.h"
#include "runtime/group.h"
#include "runtime/train.h"

#define RT_CKPT_MAX_STAGES 64
#define RT_CKPT_MAX_FILES (2 * RT_CKPT_MAX_STAGES + 2)

typedef struct rt_ckpt_file {
    char name[64];
    uint64_t bytes;
    uint64_t fnv;  /* FNV-1a 64 of the file's bytes */
} rt_ckpt_file;

/* The data settings a checkpoint records (trainer_state.json's object
 * "data_options"; ckpt_data.c): how the run read its data, so that `eval`
 * and `train --resume` read it the same way. A checkpoint written before
 * they were recorded has recorded = 0 (bytes, no template, no truncation
 * are then assumed, and nothing is compared). */
typedef struct rt_ckpt_data {
    int32_t recorded;        /* 1 when trainer_state.json has "data_options" */
    int32_t truncate;        /* 1: samples over max_seqlen were clipped */
    char tokenizer[1024];    /* "bytes", or the tokenizer file's absolute path */
    uint64_t tokenizer_fnv;  /* FNV-1a 64 of that file's bytes (its identity); 0 for bytes */
    int32_t vocab;           /* the tokenizer's ids */
    char template_str[1024]; /* "" for none */
    uint64_t chat_fnv;       /* FNV-1a 64 of the tokenizer folder's chat template; 0 when none */
    dyn_model_specials sp;   /* pad, bos, eos, decoder start */
} rt_ckpt_data;

/* The settings of a run reading its data with tokenizer (NULL or "bytes":
 * bytes), template tmpl (NULL: none) and truncate, for a model of kind:
 * the tokenizer is loaded (its file hashed, its special ids read). NULL +
 * err on a tokenizer or template the data layer refuses, or a template or
 * path longer than the fields hold. */
dyn_status rt_ckpt_data_of(const char *tokenizer, const char *tmpl, int truncate, dyn_model_kind kind,
                           rt_ckpt_data *d, dyn_error *err);

/* Whether run's settings read data as the checkpoint's did: the first
 * difference as one message naming the flag (--truncate, --template,
 * --tokenizer: another file, another identity of the same file, other
 * special ids). DYN_OK when ckpt->recorded is 0. */
dyn_status rt_ckpt_data_check(const rt_ckpt_data *ckpt, const rt_ckpt_data *run, dyn_error *err);

/* What trainer_state.json records. */
typedef struct rt_ckpt_meta {
    int64_t step;          /* optimizer steps taken = the next iteration to train */
    int64_t sampler_pos;   /* the sampler's position after batch step-1 */
    int32_t stages, dp, chunks, n_stages; /* ranks per replica, replicas, chunks per rank, plan stages */
    int32_t lay_first[RT_CKPT_MAX_STAGES + 1]; /* plan stage s = model layers [lay_first[s], lay_first[s+1]) */
    dyn_model_config model;
    dyn_hf_tokens tokens;  /* config.json's bos / eos / pad ids (-1: null) */
    uint64_t seed;
    char data_spec[512];
    int32_t n_samples, split;
    int64_t global_batch_tokens;
    /* the training order ("order"; all 0 in a checkpoint from before it was
     * recorded: dataset order, nothing held out): with seed and the data it
     * decides which sample trains at each position */
    int32_t shuffle;       /* 1: a permutation per epoch drawn from (seed, epoch) */
    int64_t epochs;        /* --epochs; 0: no limit */
    double eval_split;     /* fraction held out of training (dyn_eval_split) */
    int32_t per_epoch;     /* samples per epoch: the data less the held-out ones */
    int64_t epoch, index;  /* sampler_pos as (epoch, index within it): = epoch * per_epoch + index */
    char eval_data[512];   /* --eval-data, "" for none */
    dyn_lr_schedule lr;    /* the saving run's schedule; total_steps 0 when not recorded */
    rt_ckpt_data data;     /* how the run read its data */
    int32_t n_files;
    rt_ckpt_file files[RT_CKPT_MAX_FILES];
} rt_ckpt_meta;

/* A --resume or --checkpoint argument: a checkpoint root (its `latest` is
 * followed) or one step folder. dir[cap] gets the step folder. */
dyn_status rt_ckpt_resolve(const char *path, char *dir, size_t cap, dyn_error *err);

/* Read dir/trainer_state.json into *meta and check every file it lists
 * (size and hash): a missing, truncated or altered file is
 * DYN_ERR_CORRUPT naming it. Then every fact stored twice: the list names
 * exactly the layout's files (it cannot be emptied), config.json is what
 * meta->model gives, and every optimizer shard's step and data cursor are
 * meta's; a disagreement is DYN_ERR_CORRUPT naming both places. Reads
 * every file once and the optimizer shards twice. */
dyn_status rt_ckpt_read(const char *dir, rt_ckpt_meta *meta, dyn_error *err);
/* dir/trainer_state.json alone into *meta (no file checked): what a command
 * line needs before it plans (train --resume adopts the data settings). */
dyn_status rt_ckpt_read_state(const char *dir, rt_ckpt_meta *meta, dyn_error *err);

/* Whether a run of options o can resume from *meta: one message naming
 * the first thing that differs (model shape, stages, chunks, data, the data
 * settings of rt_ckpt_data_check (loading o's tokenizer), the training
 * order: shuffle, its seed, the held-out fraction; global batch tokens, or a
 * checkpoint already at or past --steps or --epochs). */
dyn_status rt_ckpt_check(const rt_ckpt_meta *meta, const dyn_train_options *o, dyn_error *err);

/* Whether resuming *meta under options o moves the learning-rate schedule:
 * the checkpoint's run had another --steps, --lr, --min-lr or --warmup, so
 * from step meta->step on the rates follow o's schedule, not the one the
 * checkpoint was trained on (the cosine is that of the new total, there is
 * no second warm-up). 1 and a one-line note (no newline) in note[cap]
 * naming both schedules and the rate at the resumed step under each; 0 when
 * they agree or the checkpoint did not record its schedule. */
int rt_ckpt_schedule_note(const rt_ckpt_meta *meta, const dyn_train_options *o, char *note, size_t cap);

/* Load plan stage `stage`'s model m (dyn_model_create_stage of the same
 * cuts) from step folder dir: weights of every held tensor through the
 * index, moments and step count from its optimizer shard. All-or-nothing
 * for m. Refused, naming the file and tensor: a NaN or infinity, a tensor
 * the index or the stage does not expect, a step or data cursor other than
 * meta's. */
dyn_status rt_ckpt_load_stage(const char *dir, const rt_ckpt_meta *meta, int32_t stage, dyn_model *m,
                              dyn_error *err);

/* The whole model assembled from the shards of dir (for eval); NULL + err. */
dyn_model *rt_ckpt_load_model(const char *dir, rt_ckpt_meta *meta, dyn_error *err);

/* One rank's part of a save. */
typedef struct rt_ckpt_job {
    const dyn_rt_group *g;
    const dyn_train_options *o;
    dyn_model *const *models;  /* [n_local]: chunk c is plan stage c * stages + stage_rank */
    int32_t n_local;
    const int32_t *lay_first;  /* [n_stages + 1] */
    int32_t n_stages;
    int64_t step;              /* steps taken */
    int64_t sampler_pos;       /* rank 0: the sampler position after the last trained batch */
    int32_t per_epoch;         /* rank 0: samples per epoch of the training order */
    const rt_ckpt_data *data;  /* rank 0: the run's data settings (rt_ckpt_data_of) */
} rt_ckpt_job;

/* Write checkpoint step-<j->step> under o->save_dir. Collective over the
 * world (every rank calls it; replica 0's ranks write their shards, rank 0
 * the rest). Returns DYN_OK on every rank only if the whole checkpoint was
 * committed. */
dyn_status rt_ckpt_save(const rt_ckpt_job *j, dyn_error *err);

/* The token ids of dynapipe's byte vocabulary as config.json names them
 * for a model of kind k: pad 256, eos 258, and bos 258 for GPT-2 (its
 * convention: bos = eos), the decoder start 257 for T5, bos 257 for Llama. */
dyn_hf_tokens rt_ckpt_byte_tokens(dyn_model_kind k);

/* The token ids config.json names for a checkpoint of cfg: the special ids
 * of the tokenizer its data was read with (data recorded and not bytes),
 * else init (an --init folder's, when not NULL), else the byte
 * vocabulary's. */
dyn_hf_tokens rt_ckpt_tokens(const dyn_model_config *cfg, const rt_ckpt_data *data, const dyn_hf_tokens *init);

/* The Hugging Face config.json text for cfg (malloc'ed) with the token ids
 * tok (NULL: rt_ckpt_byte_tokens). T5 writes tok's bos as
 * decoder_start_token_id. */
char *rt_ckpt_hf_config(const dyn_model_config *cfg, const dyn_hf_tokens *tok, dyn_error *err);

#endif
