/* safetensors.h — read and write the Hugging Face safetensors format.
 *
 * File layout (all little-endian):
 *   u64 N                 header length in bytes
 *   N bytes               JSON object: "name": {"dtype": "F32", "shape": [..],
 *                         "data_offsets": [begin, end]} per tensor, plus an
 *                         optional "__metadata__": {string: string}; padded
 *                         with spaces so the data starts 8-byte aligned
 *   data                  raw tensor bytes; offsets are relative to here
 *
 * The reader maps the file read-only (so a reader of some tensors of a big
 * shard touches only their pages), then validates everything before any
 * tensor can be read: header length within the file, JSON well formed, every
 * entry with a known dtype, non-negative shape, offsets inside the data
 * section whose size matches shape x dtype, no two tensors overlapping and
 * no unindexed holes (the format forbids them), no duplicate names. A caller
 * that loads a model reads every tensor into a staging copy first (see
 * checkpoint.c), so a bad file never leaves a half-loaded model.
 *
 * This module only stores and checks bytes; which names and shapes a model
 * expects is checkpoint.c's business. dynapipe writes F32 only; it reads
 * F32, F16 and BF16. */
#ifndef DYN_MODEL_SAFETENSORS_H
#define DYN_MODEL_SAFETENSORS_H

#include <stdint.h>

#include "dynapipe/common.h"

#define DYN_ST_MAX_DIMS 4

/* One tensor to write: F32, row-major, product(shape) floats at data. */
typedef struct dyn_st_entry {
    const char *name;
    int32_t ndim; /* 0..DYN_ST_MAX_DIMS */
    int64_t shape[DYN_ST_MAX_DIMS];
    const float *data;
} dyn_st_entry;

/* Write n tensors (in the given order) and n_meta metadata pairs
 * (meta[2i] = key, meta[2i+1] = value) to path atomically (temporary file,
 * fsync, rename). Names must be unique. A tensor holding a NaN or an
 * infinity is refused (naming it and the element) before anything is
 * written. */
dyn_status dyn_safetensors_write(const char *path, const dyn_st_entry *tensors, int n,
                                 const char *const *meta, int n_meta, dyn_error *err);

/* A parsed, validated file held in memory. */
typedef struct dyn_safetensors dyn_safetensors;

/* Read and validate path; NULL (err set) if it is malformed. */
dyn_safetensors *dyn_safetensors_open(const char *path, dyn_error *err);
void dyn_safetensors_free(dyn_safetensors *st);

/* Number of tensors and the name of tensor i (0 <= i < count), in file
 * offset order. Names stay valid until dyn_safetensors_free. */
int dyn_safetensors_count(const dyn_safetensors *st);
const char *dyn_safetensors_name(const dyn_safetensors *st, int i);

/* Shape of tensor `name`: returns ndim (and fills shape if not NULL), or -1
 * if there is no such tensor. *dtype (if not NULL) gets its dtype string. */
int dyn_safetensors_shape(const dyn_safetensors *st, const char *name, int64_t *shape,
                          const char **dtype);

/* Copy tensor `name` into dst (product(shape) floats), F16 and BF16
 * widened to float exactly. Fails, naming the tensor and what was expected,
 * if it is missing, of another dtype, or its shape is not exactly (ndim,
 * shape), or if it holds a NaN or an infinity (naming the first such
 * element; dst is then partly written). */
dyn_status dyn_safetensors_read(const dyn_safetensors *st, const char *name, int32_t ndim,
                                const int64_t *shape, float *dst, dyn_error *err);

/* Metadata value for key, or NULL. */
const char *dyn_safetensors_meta(const dyn_safetensors *st, const char *key);

#endif
