/* util.h — small helpers every part uses: checked allocation, a monotonic
 * clock, whole-file reads and atomic file writes.
 *
 * Atomic writes: output files are written to "<path>.tmp.<pid>", flushed,
 * fsync'ed and renamed over <path>, so a reader never sees a half-written
 * file and a failed run leaves nothing behind. Only regular files (or a path
 * that does not exist yet) are replaced that way: a character device such as
 * /dev/null or /dev/stdout, or a FIFO, is written directly (renaming over it
 * would turn it into a regular file, for root), and any other kind of file
 * (directory, block device, socket) is refused. A run with several outputs
 * writes them all, then finishes every one (flush, fsync, close) and only then
 * publishes them (rename), so that a failure in any output leaves none:
 * dyn_atomic_commit_all. */
#ifndef DYN_UTIL_UTIL_H
#define DYN_UTIL_UTIL_H

#include <stddef.h>
#include <stdio.h>

#include "dynapipe/common.h"

/* calloc that sets err (DYN_ERR_NOMEM, naming what) and returns NULL on
 * failure; n * size is checked for overflow. */
void *dyn_calloc(size_t n, size_t size, const char *what, dyn_error *err);

/* dyn_calloc for large arrays that hot loops stream through (parameters,
 * gradients, activation arenas): from 2 MB up the memory is 2 MB-aligned,
 * zeroed now (every page touched) and asked to live on transparent huge
 * pages (alloc_huge.c says why); smaller requests are dyn_calloc. Release
 * with free(). */
void *dyn_calloc_huge(size_t n, size_t size, const char *what, dyn_error *err);

/* From now on memory this process frees stays in it for its next
 * allocations instead of going back to the system (glibc: no mmap for large
 * blocks, no trimming of the heap; elsewhere nothing). For processes whose
 * pools grow and are replaced while they run, where a page handed back and
 * taken again is faulted in and zeroed anew (alloc_huge.c says what that
 * costs). Call it before the pools are allocated. */
void dyn_alloc_keep_freed(void);

/* Growth of an array, the one way the project grows one. *p points to room
 * for *cap elements of elem bytes (NULL and 0 at first). When need > *cap,
 * *p is reallocated to max(need, 2 * *cap) elements (contents kept, the new
 * tail uninitialised) and *cap set to that; otherwise nothing changes.
 * Returns 0, or -1 when the byte count overflows size_t or realloc fails,
 * and then *p and *cap are unchanged (the caller still owns and frees *p).
 * Call it through DYN_RESERVE, which passes the element size:
 *     if (DYN_RESERVE(v, cap, n + 1) != 0) return dyn_error_set(err, ...);
 * Several arrays that share one capacity each grow from a copy of it
 * (DYN_RESERVE(a, (size_t){old}, need)): from the same old capacity and
 * need, each gets the same new one, max(need, 2 * old). */
int dyn_reserve(void **p, size_t *cap, size_t need, size_t elem);
#define DYN_RESERVE(arr, cap, need) dyn_reserve((void **)&(arr), &(cap), (size_t)(need), sizeof *(arr))

/* Parse all of text as a finite number (strtod syntax, nothing after it;
 * "inf", "nan" and overflowing values refused). Returns 0 and sets *out,
 * or -1. The shared number parser of the cost-table and what-if readers. */
int dyn_parse_finite(const char *text, double *out);

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
/* The same from an open stream (standard input for a path "-"); name is
 * what messages call it. The stream is not closed. */
dyn_status dyn_stream_read_all(FILE *fp, const char *name, char **data, size_t *len, dyn_error *err);

/* Atomic write: open a temporary file beside path (or the device / FIFO
 * itself); write into af->fp; then commit (flush, fsync, rename) or abort
 * (close, unlink). */
typedef struct dyn_atomic_file {
    FILE *fp;       /* NULL once finished */
    char *path;
    char *tmp_path; /* NULL when writing straight to a device or FIFO */
} dyn_atomic_file;

dyn_status dyn_atomic_open(dyn_atomic_file *af, const char *path, dyn_error *err);
/* Flush, fsync and close the temporary file, keeping it unpublished. On
 * failure the temporary file is removed and af released. */
dyn_status dyn_atomic_finish(dyn_atomic_file *af, dyn_error *err);
/* Rename a finished file over its path and release af. */
dyn_status dyn_atomic_publish(dyn_atomic_file *af, dyn_error *err);
/* finish + publish. */
dyn_status dyn_atomic_commit(dyn_atomic_file *af, dyn_error *err);
/* Close and unlink (open or finished); releases af. A zeroed af is a no-op. */
void dyn_atomic_abort(dyn_atomic_file *af);
/* Commit n open files together: finish all, then publish all. On any failure
 * every one not yet published is aborted (a rename failing after another
 * succeeded is the one case that leaves part of the outputs). */
dyn_status dyn_atomic_commit_all(dyn_atomic_file *afs, int n, dyn_error *err);
/* Write len bytes to path atomically. */
dyn_status dyn_file_write_atomic(const char *path, const void *data, size_t len, dyn_error *err);

#endif
