/* util.h — small helpers every part uses: checked allocation, a monotonic
 * clock, whole-file reads and atomic file writes.
 *
 * Atomic writes: output files are written to "<path>.tmp.<pid>", flushed,
 * fsync'ed and renamed over <path>, so a reader never sees a half-written
 * file and a failed run leaves nothing behind. */
#ifndef DYN_UTIL_UTIL_H
#define DYN_UTIL_UTIL_H

#include <stddef.h>
#include <stdio.h>

#include "dynapipe/common.h"

/* calloc that sets err (DYN_ERR_NOMEM, naming what) and returns NULL on
 * failure; n * size is checked for overflow. */
void *dyn_calloc(size_t n, size_t size, const char *what, dyn_error *err);

/* Monotonic wall clock in milliseconds. */
double dyn_time_ms(void);

/* Median of v[0..n) (n >= 1; the mean of the middle two when n is even).
 * Sorts v in place. For benchmarks, which report medians of repeats. */
double dyn_median(double *v, int n);

/* Print "load average <when>: l1 l5 l15" (from /proc/loadavg; -1 where it
 * cannot be read), so a benchmark records how busy the machine was. */
void dyn_loadavg_print(const char *when);

/* Read a whole file into a NUL-terminated buffer the caller frees.
 * *len (if not NULL) receives the byte count without the NUL. */
dyn_status dyn_file_read_all(const char *path, char **data, size_t *len, dyn_error *err);

/* Atomic write: open a temporary file beside path; write into *out; then
 * commit (flush, fsync, rename) or abort (close, unlink). */
typedef struct dyn_atomic_file {
    FILE *fp;
    char *path;
    char *tmp_path;
} dyn_atomic_file;

dyn_status dyn_atomic_open(dyn_atomic_file *af, const char *path, dyn_error *err);
dyn_status dyn_atomic_commit(dyn_atomic_file *af, dyn_error *err);
void dyn_atomic_abort(dyn_atomic_file *af);
/* Write len bytes to path atomically. */
dyn_status dyn_file_write_atomic(const char *path, const void *data, size_t len, dyn_error *err);

#endif
