/*
 * data.h — where sample lengths come from and how they are cut into global
 * batches: the built-in FLAN-like multi-task length generator, a reader for
 * TSV length files, and the token-budget global-batch sampler with its
 * training order (held-out split, epochs, shuffle).
 *
 * Only lengths matter to planning, so a dataset is an array of dyn_sample
 * (id, task, input_len, target_len). Lengths are in tokens.
 *
 * Length limit (max_seqlen), the one rule used everywhere in this header:
 *   GPT and Llama (decoder-only): the sequence is input followed by target, so the
 *       limit applies to input_len + target_len.
 *   T5 (encoder-decoder): input and target are separate sequences, so the
 *       limit applies to input_len and to target_len separately.
 * Clipping (synthetic data always; TSV only with clip != 0):
 *   T5: each side is cut to max_seqlen.
 *   GPT and Llama: the input is shortened first, because target tokens carry the loss:
 *       target = min(target, max_seqlen - 1), then
 *       input  = min(input,  max_seqlen - target)   (so input >= 1).
 */
#ifndef DYNAPIPE_DATA_H
#define DYNAPIPE_DATA_H

#include "dynapipe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An owned array of samples; samples[i].id == i. Free with dyn_dataset_free
 * (also safe on a zeroed struct). */
typedef struct dyn_dataset {
    int32_t n;
    dyn_sample *samples;
} dyn_dataset;

/* Free ds->samples and zero *ds (NULL and a zeroed struct are no-ops). */
void dyn_dataset_free(dyn_dataset *ds);

/* 1 if (input_len, target_len) fits max_seqlen under the rule above for kind,
 * else 0. input_len must be >= 1; target_len >= 1 for T5, >= 0 for GPT
 * (decoder-only data with no target: the whole sequence is the sample). */
int dyn_lengths_fit(dyn_model_kind kind, int32_t max_seqlen, int32_t input_len, int32_t target_len);
/* Clip *input_len (>= 1) and *target_len (>= 1; GPT: >= 0) to max_seqlen (>= 2 for GPT,
 * >= 1 for T5) by the clipping rule above. */
void dyn_lengths_clip(dyn_model_kind kind, int32_t max_seqlen, int32_t *input_len,
                      int32_t *target_len);

/* ---- built-in FLAN-like generator (docs/workload.md) ---------------------
 * A mixture of task families. A sample draws its family with probability
 * `weight` (weights sum to 1), then input and target lengths independently
 * from log-normal distributions: len = round(exp(mu + sigma * z)), z ~ N(0,1),
 * at least min_*; then the pair is clipped to max_seqlen. */
typedef struct dyn_task_family {
    const char *name;
    double weight;        /* mixture probability */
    double input_mu;      /* log-normal parameters of input length (natural log of tokens) */
    double input_sigma;
    int32_t input_min;    /* tokens */
    double target_mu;     /* log-normal parameters of target length */
    double target_sigma;
    int32_t target_min;   /* tokens */
} dyn_task_family;

/* The built-in families (static table); *n receives their count. A sample's
 * `task` field indexes this table. */
const dyn_task_family *dyn_flan_families(int32_t *n);

/* n_samples samples drawn from the mixture with dyn_rng seeded by seed, clipped
 * to max_seqlen for kind. Same arguments -> same samples, bit for bit.
 * DYN_ERR_INVALID_ARG for n_samples < 0 or max_seqlen too small (< 2). */
dyn_status dyn_dataset_synthetic_flan(uint64_t seed, int32_t n_samples, int32_t max_seqlen,
                                      dyn_model_kind kind, dyn_dataset *out, dyn_error *err);

/* ---- TSV length files ----------------------------------------------------
 * One sample per line: `input_len<TAB>target_len` (positive integers, tokens;
 * for GPT the target may be 0). path "-" reads standard input.
 * Lines starting with '#' are comments; blank lines are skipped; the first
 * non-comment line may be a header (its first field not a number). Sample ids
 * are 0-based in file order (header and comments excluded); task = -1.
 * Errors (DYN_ERR_PARSE, message "path:line: what"): a wrong number of fields,
 * a non-integer, a length <= 0 (a GPT target: < 0), a length over max_seqlen (per the rule above)
 * unless clip != 0, in which case it is clipped. DYN_ERR_IO if unreadable. */
dyn_status dyn_dataset_read_tsv(const char *path, int32_t max_seqlen, dyn_model_kind kind,
                                int clip, dyn_dataset *out, dyn_error *err);

/* ---- global-batch sampler --------------------------------------------------
 * Walks the training order of a dataset and returns global batches of its
 * next samples: a batch takes samples while the running total of input_len +
 * target_len stays <= budget_tokens. The sampler borrows the dataset (it must
 * outlive the sampler).
 *
 * The training order (dyn_sampler_create_ex) is a pure function of the
 * position p = epoch * n_train + k, so that a checkpoint's position resumes it
 * bit for bit: the samples not held out (dyn_eval_split) in dataset order,
 * permuted per epoch by a permutation drawn from (seed, epoch) alone. A
 * batch never crosses the end of an epoch. dyn_sampler_create is one pass in
 * dataset order, nothing held out. */
typedef struct dyn_sampler dyn_sampler;

typedef struct dyn_sampler_options {
    uint64_t seed;      /* the run's seed: the shuffle of epoch e is drawn from (seed, e) */
    int shuffle;        /* 1: a permutation per epoch; 0: dataset order */
    int64_t epochs;     /* passes before the end (dyn_sampler_next gives n == 0); 0: no limit */
    double eval_split;  /* fraction in [0, 1) held out of training (dyn_eval_split) */
} dyn_sampler_options;

/* seed 1, shuffle, no epoch limit, nothing held out. */
void dyn_sampler_options_default(dyn_sampler_options *o);

/* The held-out split of n samples: exactly round(fraction * n) of them (at
 * least 1 when fraction > 0, and at most n - 1: training keeps one), chosen
 * by a fixed hash of the sample index, independent of any seed, so that the
 * training run and a later evaluation hold out the same samples.
 * heldout[i] (n bytes) = 1 for a held-out sample, 0 for training.
 * DYN_ERR_INVALID_ARG for a fraction outside [0, 1) or n < 2 with one > 0. */
dyn_status dyn_eval_split(int32_t n, double fraction, uint8_t *heldout, int32_t *n_heldout, dyn_error *err);

/* budget_tokens > 0 (tokens per global batch). NULL + err on bad arguments. */
dyn_sampler *dyn_sampler_create(const dyn_dataset *ds, int64_t budget_tokens, dyn_error *err);
/* The training order of o (NULL: the defaults). Batches point into the
 * sampler (valid until its next call) unless o keeps dataset order with
 * nothing held out; dyn_sample.id stays the dataset index. */
dyn_sampler *dyn_sampler_create_ex(const dyn_dataset *ds, int64_t budget_tokens, const dyn_sampler_options *o,
                                   dyn_error *err);
/* The epoch (0-based) of the last batch returned, -1 before the first (or
 * after a reset or seek); 1 if that batch was the last of its epoch (a pass
 * over the training samples ended with it). */
int64_t dyn_sampler_epoch(const dyn_sampler *s);
int dyn_sampler_epoch_ended(const dyn_sampler *s);
/* Samples per epoch (the dataset less the held-out ones). */
int32_t dyn_sampler_train_count(const dyn_sampler *s);
/* The end position epochs * train_count, or -1 without an epoch limit. */
int64_t dyn_sampler_end(const dyn_sampler *s);
/* Next global batch: *batch points into the dataset, *n its sample count.
 * At the end of the dataset returns DYN_OK with *n == 0 and *batch == NULL.
 * DYN_ERR_INFEASIBLE, naming the sample id and its tokens, when the next
 * sample alone exceeds the budget (the sampler then stays at that sample). */
dyn_status dyn_sampler_next(dyn_sampler *s, const dyn_sample **batch, int32_t *n, dyn_error *err);
/* Start again from the first sample. */
void dyn_sampler_reset(dyn_sampler *s);
/* The position: index of the next sample to hand out in the training order
 * (dyn_sampler_create: 0..ds->n, ds->n at the end of the dataset). A
 * checkpoint records it after the last trained batch; dyn_sampler_seek(s,
 * pos) makes the next dyn_sampler_next return the batch the sampler would
 * have returned there. DYN_ERR_INVALID_ARG, naming both, when pos is outside
 * [0, dyn_sampler_end] (any pos >= 0 without an epoch limit). */
int64_t dyn_sampler_position(const dyn_sampler *s);
dyn_status dyn_sampler_seek(dyn_sampler *s, int64_t pos, dyn_error *err);
void dyn_sampler_free(dyn_sampler *s); /* NULL is a no-op; the dataset is not freed */

#ifdef __cplusplus
}
#endif
#endif /* DYNAPIPE_DATA_H */
