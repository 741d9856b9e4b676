/* hf_load.h — starting a model from a Hugging Face model folder
 * (`dynapipe train --init DIR`): config.json mapped to a dyn_model_config,
 * and the weights of model.safetensors or model.safetensors.index.json's
 * shards read memory-mapped, one stage model's tensors at a time.
 *
 * The architectures are rows of one table (hf_config.h: the name in
 * config.json's "architectures", the model kind it builds, config.json's
 * fields mapped to the shape, refusing any field the model cannot honour,
 * the prefix Hugging Face's save_pretrained may put before every name
 * ("transformer." for GPT-2), and the names a file may carry that the
 * model does not hold: tied copies, attention-mask and rotary buffers).
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
#include "model/hf_config.h" /* defines: dyn_hf_config, dyn_hf_arch, dyn_hf_config_read */
#include "model/model.h"

/* An opened folder: config.json read and every shard mapped and its header
 * parsed. */
typedef struct dyn_hf_folder dyn_hf_folder;

/* Open dir: config.json (max_len: the run's sequence limit, as
 * dyn_hf_config_read takes it), then model.safetensors.index.json and its shards
 * if the index exists, else model.safetensors. A header that is not
 * safetensors, or a tensor whose bytes lie past the end of its file (a
 * truncated shard), fails naming the file (and the tensor). */
dyn_hf_folder *dyn_hf_open(const char *dir, int32_t max_len, dyn_error *err);
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
