/* hostfile.c — reading and checking an Open MPI hostfile (hostfile.h). */
#include "runtime/hostfile.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FILE_MAX_BYTES (1 << 20) /* a hostfile of a million bytes is not a hostfile */

static int host_char(unsigned char c)
{
    return isalnum(c) || c == '.' || c == '-' || c == '_' || c == ':' || c == '@' || c == '[' || c == ']';
}

/* A positive integer count "N" of key at path:line into *out. */
static dyn_status parse_count(const char *path, int line, const char *key, const char *v, int64_t *out,
                              dyn_error *err)
{
    char *end;
    errno = 0;
    long long n = *v >= '0' && *v <= '9' ? strtoll(v, &end, 10) : (end = (char *)v, 0);
    if (end == v || *end != '\0' || errno != 0 || n < 1 || n > DYN_RT_HOSTFILE_MAX_SLOTS)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s:%d: %s=%s is not a slot count (1 to %d)", path, line, key,
                             v, DYN_RT_HOSTFILE_MAX_SLOTS);
    *out = n;
    return DYN_OK;
}

/* One line, comment cut off; 0 tokens is a blank line. */
static dyn_status parse_line(const char *path, int line, char *text, rt_hostfile_info *info, dyn_error *err)
{
    char *save = NULL, *tok = strtok_r(text, " \t\r", &save);
    if (tok == NULL) return DYN_OK;
    for (const unsigned char *p = (const unsigned char *)tok; *p; p++)
        if (!host_char(*p))
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s:%d: byte 0x%02x is not part of a host name", path,
                                 line, *p);
    int64_t slots = 0, max_slots = 0;
    while ((tok = strtok_r(NULL, " \t\r", &save)) != NULL) {
        char *eq = strchr(tok, '=');
        if (eq == NULL)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s:%d: '%.40s' is not slots=N or max_slots=N", path,
                                 line, tok);
        *eq = '\0';
        const char *key = tok, *v = eq + 1;
        int is_slots = !strcmp(key, "slots") || !strcmp(key, "slot") || !strcmp(key, "count") || !strcmp(key, "cpu");
        int is_max = !strcmp(key, "max_slots") || !strcmp(key, "max-slots") || !strcmp(key, "maxslots");
        if (!is_slots && !is_max)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s:%d: '%.40s=' is not slots=N or max_slots=N", path,
                                 line, key);
        dyn_status st = parse_count(path, line, key, v, is_slots ? &slots : &max_slots, err);
        if (st != DYN_OK) return st;
    }
    if (max_slots > 0 && slots > max_slots)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s:%d: slots=%lld is above max_slots=%lld", path, line,
                             (long long)slots, (long long)max_slots);
    info->hosts++;
    if (slots == 0 || info->slots < 0) info->slots = -1; /* mpirun counts that host's cores */
    else info->slots += slots;
    return DYN_OK;
}

dyn_status rt_hostfile_read(const char *path, rt_hostfile_info *info, dyn_error *err)
{
    info->hosts = 0;
    info->slots = 0;
    struct stat sb;
    if (stat(path, &sb) != 0) return dyn_error_set(err, DYN_ERR_IO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: not a regular file", path);
    if (sb.st_size > FILE_MAX_BYTES)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: %lld bytes; a hostfile is at most %d", path,
                             (long long)sb.st_size, FILE_MAX_BYTES);
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) return dyn_error_set(err, DYN_ERR_IO, "%s: %s", path, strerror(errno));
    char *text = malloc(FILE_MAX_BYTES + 1);
    size_t n = text ? fread(text, 1, FILE_MAX_BYTES + 1, fp) : 0;
    int bad_read = text == NULL || ferror(fp) || n > FILE_MAX_BYTES;
    fclose(fp);
    if (bad_read) {
        dyn_status code = text == NULL ? DYN_ERR_NOMEM : DYN_ERR_IO;
        free(text);
        return dyn_error_set(err, code, "%s: cannot read it whole", path);
    }
    text[n] = '\0';
    dyn_status st = DYN_OK;
    int line = 1;
    for (size_t start = 0; st == DYN_OK && start < n; line++) {
        size_t end = start;
        while (end < n && text[end] != '\n' && text[end] != '\0') end++;
        if (end < n && text[end] == '\0') {
            st = dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s:%d: byte 0x00 is not part of a host name", path, line);
            break;
        }
        text[end] = '\0';
        char *hash = strchr(text + start, '#');
        if (hash) *hash = '\0';
        st = parse_line(path, line, text + start, info, err);
        start = end + 1;
    }
    free(text);
    if (st == DYN_OK && info->hosts == 0)
        st = dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: no hosts (every line is blank or a comment)", path);
    return st;
}
