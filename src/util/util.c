/* util.c — checked allocation, number parsing, clock, whole-file read,
 * atomic write. */
#include "util/util.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

void *dyn_calloc(size_t n, size_t size, const char *what, dyn_error *err)
{
    if (size != 0 && n > SIZE_MAX / size) {
        dyn_error_set(err, DYN_ERR_NOMEM, "allocation of %zu x %zu bytes for %s overflows", n, size, what);
        return NULL;
    }
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL)
        dyn_error_set(err, DYN_ERR_NOMEM, "out of memory allocating %zu bytes for %s", n * size, what);
    return p;
}

int dyn_reserve(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t want = *cap > SIZE_MAX / 2 ? need : 2 * *cap;
    if (want < need) want = need;
    if (elem != 0 && want > SIZE_MAX / elem) {
        want = need; /* doubling overflows; the exact need may not */
        if (need > SIZE_MAX / elem) return -1;
    }
    /* *p is any object pointer passed as void **: read and write it through
     * memcpy, so the store does not alias a typed pointer as void * (object
     * pointers share one representation on every platform POSIX runs on). */
    void *old;
    memcpy(&old, p, sizeof old);
    size_t bytes = want * elem;
    void *grown = realloc(old, bytes != 0 ? bytes : 1);
    if (grown == NULL) return -1;
    memcpy(p, &grown, sizeof grown);
    *cap = want;
    return 0;
}

int dyn_parse_finite(const char *text, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno == ERANGE || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

double dyn_time_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double dyn_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void dyn_loadavg_print(const char *when)
{
    double l1 = -1, l5 = -1, l15 = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &l1, &l5, &l15) != 3) l1 = l5 = l15 = -1;
        fclose(f);
    }
    printf("load average %s: %.2f %.2f %.2f\n", when, l1, l5, l15);
}

dyn_status dyn_stream_read_all(FILE *fp, const char *path, char **data, size_t *len, dyn_error *err)
{
    size_t cap = 0, n = 0;
    char *buf = NULL;
    for (;;) {
        if (n + 1 >= cap && DYN_RESERVE(buf, cap, cap ? cap + 1 : (size_t)1 << 16) != 0) {
            free(buf);
            return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory reading file", path);
        }
        size_t got = fread(buf + n, 1, cap - n - 1, fp);
        n += got;
        if (got == 0) break;
    }
    if (ferror(fp)) {
        free(buf);
        return dyn_error_set(err, DYN_ERR_IO, "%s: read error", path);
    }
    buf[n] = '\0';
    *data = buf;
    if (len) *len = n;
    return DYN_OK;
}

dyn_status dyn_file_read_all(const char *path, char **data, size_t *len, dyn_error *err)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return dyn_error_set(err, DYN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    dyn_status st = dyn_stream_read_all(fp, path, data, len, err);
    fclose(fp);
    return st;
}

/* Is path an existing character device or FIFO (written directly)? 1 yes,
 * 0 a regular file or no file, -1 another kind (set in err). */
static int atomic_direct_target(const char *path, dyn_error *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0) return 0;
    if (S_ISREG(sb.st_mode)) return 0;
    if (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode)) return 1;
    dyn_error_set(err, DYN_ERR_IO, "%s: not a regular file, character device or FIFO; refusing to replace it",
                  path);
    return -1;
}

dyn_status dyn_atomic_open(dyn_atomic_file *af, const char *path, dyn_error *err)
{
    memset(af, 0, sizeof *af);
    int direct = atomic_direct_target(path, err);
    if (direct < 0) return DYN_ERR_IO;
    size_t plen = strlen(path);
    af->path = malloc(plen + 1);
    af->tmp_path = direct ? NULL : malloc(plen + 32);
    if (af->path == NULL || (!direct && af->tmp_path == NULL)) {
        free(af->path);
        free(af->tmp_path);
        memset(af, 0, sizeof *af);
        return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(af->path, path, plen + 1);
    if (!direct) snprintf(af->tmp_path, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    af->fp = fopen(direct ? path : af->tmp_path, "wb");
    if (af->fp == NULL) {
        dyn_status st = dyn_error_set(err, DYN_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        free(af->path);
        free(af->tmp_path);
        memset(af, 0, sizeof *af);
        return st;
    }
    return DYN_OK;
}

static void atomic_release(dyn_atomic_file *af)
{
    free(af->path);
    free(af->tmp_path);
    memset(af, 0, sizeof *af);
}

dyn_status dyn_atomic_finish(dyn_atomic_file *af, dyn_error *err)
{
    if (af->fp == NULL) return DYN_OK;
    /* A device or FIFO cannot be fsync'ed (EINVAL); flushing is all. */
    int bad = ferror(af->fp) || fflush(af->fp) != 0 || (af->tmp_path && fsync(fileno(af->fp)) != 0);
    int saved = errno;
    if (fclose(af->fp) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    af->fp = NULL;
    if (bad) {
        dyn_status st = dyn_error_set(err, DYN_ERR_IO, "%s: write failed: %s", af->path, strerror(saved));
        if (af->tmp_path) unlink(af->tmp_path);
        atomic_release(af);
        return st;
    }
    return DYN_OK;
}

dyn_status dyn_atomic_publish(dyn_atomic_file *af, dyn_error *err)
{
    if (af->tmp_path && rename(af->tmp_path, af->path) != 0) {
        dyn_status st = dyn_error_set(err, DYN_ERR_IO, "%s: write failed: %s", af->path, strerror(errno));
        unlink(af->tmp_path);
        atomic_release(af);
        return st;
    }
    atomic_release(af);
    return DYN_OK;
}

dyn_status dyn_atomic_commit(dyn_atomic_file *af, dyn_error *err)
{
    dyn_status st = dyn_atomic_finish(af, err);
    return st != DYN_OK ? st : dyn_atomic_publish(af, err);
}

void dyn_atomic_abort(dyn_atomic_file *af)
{
    if (af->fp) fclose(af->fp);
    if (af->tmp_path) unlink(af->tmp_path);
    atomic_release(af);
}

dyn_status dyn_atomic_commit_all(dyn_atomic_file *afs, int n, dyn_error *err)
{
    dyn_status st = DYN_OK;
    for (int i = 0; i < n && st == DYN_OK; i++) st = dyn_atomic_finish(&afs[i], err);
    for (int i = 0; i < n && st == DYN_OK; i++) st = dyn_atomic_publish(&afs[i], err);
    for (int i = 0; i < n; i++)
        if (afs[i].path) dyn_atomic_abort(&afs[i]);
    return st;
}

dyn_status dyn_file_write_atomic(const char *path, const void *data, size_t len, dyn_error *err)
{
    dyn_atomic_file af;
    dyn_status st = dyn_atomic_open(&af, path, err);
    if (st != DYN_OK) return st;
    if (len > 0 && fwrite(data, 1, len, af.fp) != len) {
        int saved = errno;
        dyn_atomic_abort(&af);
        return dyn_error_set(err, DYN_ERR_IO, "%s: write failed: %s", path, strerror(saved));
    }
    return dyn_atomic_commit(&af, err);
}
