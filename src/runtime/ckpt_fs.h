/* ckpt_fs.h — the file-system helpers of the checkpoints (checkpoint.h):
 * bounded paths, the FNV-1a 64 hash that trainer_state.json records per
 * file, fsync of folders, removal of a flat folder, shard names and JSON
 * files written atomically. No MPI, no model. */
#ifndef DYN_RUNTIME_CKPT_FS_H
#define DYN_RUNTIME_CKPT_FS_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "dynapipe/common.h"

/* Paths: the entry points refuse folders longer than RT_CKPT_ROOT_MAX
 * (rt_ckpt_check_root), so the names built under them (at most a few
 * dozen bytes more) always fit in RT_CKPT_PATH_CAP. */
#define RT_CKPT_PATH_CAP 4096
#define RT_CKPT_ROOT_MAX 3900

/* snprintf into a path buffer (cut at cap; see RT_CKPT_ROOT_MAX). */
void rt_ckpt_pathf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* DYN_ERR_INVALID_ARG when folder p is longer than RT_CKPT_ROOT_MAX. */
dyn_status rt_ckpt_check_root(const char *p, dyn_error *err);

/* FNV-1a 64 of n bytes. */
uint64_t rt_ckpt_fnv1a64(const unsigned char *p, size_t n);

/* fsync a folder (so renames inside it are durable). */
dyn_status rt_ckpt_fsync_dir(const char *dir, dyn_error *err);

/* Remove a flat folder (files only: a stale or replaced checkpoint); a
 * folder that does not exist is DYN_OK. */
dyn_status rt_ckpt_remove_flat_dir(const char *dir, dyn_error *err);

int rt_ckpt_is_dir(const char *p);
int rt_ckpt_is_file(const char *p);

/* "<kind>-0000s-of-0000N.safetensors" of plan stage s (0-based) of n. */
void rt_ckpt_shard_name(char *out, size_t cap, const char *kind, int32_t s, int32_t n);

/* root printed (cJSON_Print) and a newline, written atomically to path;
 * root NULL (a failed build) is out of memory. */
dyn_status rt_ckpt_write_json(const char *path, cJSON *root, dyn_error *err);

#endif
