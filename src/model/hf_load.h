/* hf_load.h — starting a model from a Hugging Face model folder
 * (`dynapipe train --init DIR`): config.json mapped to a dyn_model_config,
 * and the weights of model.safetensors or model.safetensors.index.json's
 * shards read memory-mapped, one stage model's tensors at a time.
 *
 * The architectures are rows of one table (hf_config.c): the name in
 * config.json's "architectures", the model kind it builds, the function
 * that maps config.json's fields to the shape (refusing any field the
 * model cannot honour), the prefix Hugging Face's save_pretrained may put
 * before every name ("transformer." for GPT-2), and the names a file may
 * carry that the model does not hold (tied copies, attention-mask buffers).
 *
 * Checks are split by cost. dyn_hf_open reads config.json and every shard's
 * header (the shard is mapped; only the pages holding the header are
 * touched); dyn_hf_check compares the headers with the tensor table of the
 * whole model: every tensor present, of its shape and of a handled dtype
 * (F32, F16, BF16), its bytes inside the file, no tensor the model does not
 * know. Both are cheap, so the launcher runs them before mpirun starts, and
 * every rank again before it loads. dyn_hf_load then converts only the
 * tensors the (stage) model holds into fp32, all-or-nothing. */
#ifndef DYN_MODEL_HF_LOAD_H
#define DYN_MODEL_HF_LOAD_H

#include <stdint.h>

#include "dynapipe/common.h"
#include "model/model.h"

/* What config.json says, mapped. */
typedef struct dyn_hf_config {
    char arch[64];          /* the architecture named, e.g. "GPT2LMHeadModel" */
    dyn_model_config model; /* the shape; max_seqlen see fixed_seqlen */
    int fixed_seqlen;       /* 1: the weights fix max_seqlen (GPT-2's n_positions rows of wpe);
                             * 0: any run length (T5's relative buckets), model.max_seqlen 0 */
} dyn_hf_config;

/* Read dir/config.json into *out. One-line errors name the file and the
 * field: not JSON, an architecture not in the table (the message lists the
 * supported ones), a missing or non-integer size, a setting the model
 * cannot honour (another layer_norm_epsilon, activation, T5 v1.0's
 * non-gated feed-forward, untied GPT-2 or tied T5 embeddings, ...). */
dyn_status dyn_hf_config_read(const char *dir, dyn_hf_config *out, dyn_error *err);

/* The architectures supported, ", "-separated, for messages. */
const char *dyn_hf_supported(void);

/* One row of the architecture table (hf_config.c). Adding an architecture
 * whose model kind src/model builds is a row: its name, kind, map (config.json
 * to the shape), prefix, alias_of and the config.json names of the shape
 * fields (for messages about contradicting flags). */
struct cJSON;
typedef struct dyn_hf_arch {
    const char *name;     /* config.json "architectures"[0] */
    dyn_model_kind kind;
    /* Fill out->model (and fixed_seqlen) from root; path names config.json
     * in errors. */
    dyn_status (*map)(const struct cJSON *root, const char *path, dyn_hf_config *out, dyn_error *err);
    const char *prefix;   /* a prefix save_pretrained may put before every name, or NULL */
    /* A name the file may carry that the model does not hold: NULL if not
     * one; "" for a buffer whose shape is not checked (GPT-2's attention
     * mask); else the tensor it must have the shape of (a tied copy). */
    const char *(*alias_of)(const char *name);
    /* config.json's names for n_layers, n_dec_layers, hidden, heads,
     * head_dim, ffn, vocab (NULL: not a field of this architecture). */
    const char *field[7];
} dyn_hf_arch;

/* The row of architecture name, or NULL. */
const dyn_hf_arch *dyn_hf_arch_find(const char *name);

/* An opened folder: config.json read and every shard mapped and its header
 * parsed. */
typedef struct dyn_hf_folder dyn_hf_folder;

/* Open dir: config.json, then model.safetensors.index.json and its shards
 * if the index exists, else model.safetensors. A header that is not
 * safetensors, or a tensor whose bytes lie past the end of its file (a
 * truncated shard), fails naming the file (and the tensor). */
dyn_hf_folder *dyn_hf_open(const char *dir, dyn_error *err);
void dyn_hf_close(dyn_hf_folder *f);
const dyn_hf_config *dyn_hf_folder_config(const dyn_hf_folder *f);

/* Check the folder against the whole model of shape cfg (the table only,
 * no parameters allocated): every tensor present, its shape (in Hugging
 * Face's layout), a handled dtype; no unknown tensor. */
dyn_status dyn_hf_check(const dyn_hf_folder *f, const dyn_model_config *cfg, dyn_error *err);

/* Load m's tensors (a whole model or a stage model, owned tensors and
 * shared copies) from the folder, converting F16 and BF16 to fp32 and
 * transposing where our layout differs from Hugging Face's. Reads only
 * those tensors' bytes. All-or-nothing: m is unchanged on failure. Does
 * not touch the optimizer moments or the step count. */
dyn_status dyn_hf_load(const dyn_hf_folder *f, dyn_model *m, dyn_error *err);

/* fp16 / bf16 bits to fp32, exact (subnormals, infinities and NaNs kept). */
float dyn_hf_f16_to_f32(uint16_t h);
float dyn_hf_bf16_to_f32(uint16_t b);

#endif
