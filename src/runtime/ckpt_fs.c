/* ckpt_fs.c — file-system helpers of the checkpoints (see ckpt_fs.h). */
#include "runtime/ckpt_fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/util.h" /* defines: dyn_file_write_atomic */

void rt_ckpt_pathf(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

dyn_status rt_ckpt_check_root(const char *p, dyn_error *err)
{
    if (strlen(p) > RT_CKPT_ROOT_MAX)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "checkpoint path of %zu bytes, at most %d", strlen(p),
                             RT_CKPT_ROOT_MAX);
    return DYN_OK;
}

uint64_t rt_ckpt_fnv1a64(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

dyn_status rt_ckpt_fsync_dir(const char *dir, dyn_error *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return dyn_error_set(err, DYN_ERR_IO, "%s: cannot open folder: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0) return dyn_error_set(err, DYN_ERR_IO, "%s: fsync: %s", dir, strerror(e));
    return DYN_OK;
}

dyn_status rt_ckpt_remove_flat_dir(const char *dir, dyn_error *err)
{
    DIR *d = opendir(dir);
    if (d == NULL) return errno == ENOENT ? DYN_OK : dyn_error_set(err, DYN_ERR_IO, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    char p[RT_CKPT_PATH_CAP];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        rt_ckpt_pathf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) != 0) {
            closedir(d);
            return dyn_error_set(err, DYN_ERR_IO, "%s: cannot remove: %s", p, strerror(errno));
        }
    }
    closedir(d);
    if (rmdir(dir) != 0) return dyn_error_set(err, DYN_ERR_IO, "%s: cannot remove: %s", dir, strerror(errno));
    return DYN_OK;
}

int rt_ckpt_is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int rt_ckpt_is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

void rt_ckpt_shard_name(char *out, size_t cap, const char *kind, int32_t s, int32_t n)
{
    snprintf(out, cap, "%s-%05d-of-%05d.safetensors", kind, s + 1, n);
}

dyn_status rt_ckpt_write_json(const char *path, cJSON *root, dyn_error *err)
{
    char *text = root ? cJSON_Print(root) : NULL;
    if (text == NULL) return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory writing %s", path);
    size_t n = strlen(text);
    char *t2 = realloc(text, n + 2);
    if (t2 == NULL) {
        free(text);
        return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory writing %s", path);
    }
    t2[n] = '\n';
    t2[n + 1] = '\0';
    dyn_status st = dyn_file_write_atomic(path, t2, n + 1, err);
    free(t2);
    return st;
}
