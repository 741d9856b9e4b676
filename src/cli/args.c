/* args.c — checked number parsing, error printing, output checks and JSON
 * output for the subcommands. */
#include "cli/cli.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/util.h" /* defines: dyn_file_write_atomic, dyn_parse_finite */

void cli_errorf(const char *cmd, const char *fmt, ...)
{
    fprintf(stderr, "dynapipe %s: ", cmd);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

const char *cli_flag_value(const char *cmd, int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        cli_errorf(cmd, "%s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int cli_parse_i64(const char *cmd, const char *flag, const char *text, int64_t min, int64_t max,
                  int64_t *out)
{
    if (text == NULL) {
        cli_errorf(cmd, "%s needs a value", flag);
        return -1;
    }
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE) {
        cli_errorf(cmd, "%s: '%s' is not an integer", flag, text);
        return -1;
    }
    if (v < min || v > max) {
        cli_errorf(cmd, "%s: %lld is out of range [%lld, %lld]", flag, v, (long long)min,
                   (long long)max);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

int cli_parse_i32(const char *cmd, const char *flag, const char *text, int32_t min, int32_t max,
                  int32_t *out)
{
    int64_t v;
    if (cli_parse_i64(cmd, flag, text, min, max, &v) != 0) return -1;
    *out = (int32_t)v;
    return 0;
}

int cli_parse_f64(const char *cmd, const char *flag, const char *text, double min, double max,
                  double *out)
{
    if (text == NULL) {
        cli_errorf(cmd, "%s needs a value", flag);
        return -1;
    }
    double v;
    if (dyn_parse_finite(text, &v) != 0) {
        cli_errorf(cmd, "%s: '%s' is not a number", flag, text);
        return -1;
    }
    if (v < min || v > max) {
        cli_errorf(cmd, "%s: %g is out of range [%g, %g]", flag, v, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_fraction(const char *cmd, const char *flag, const char *text, double *out)
{
    double v;
    if (cli_parse_f64(cmd, flag, text, -1e308, 1e308, &v) != 0) return -1;
    if (!(v > 0 && v < 1)) {
        cli_errorf(cmd, "%s: %g is not a fraction in (0, 1) (the share of the data held out of training)", flag, v);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_output_check(const char *cmd, const char *flag, const char *path, int is_dir)
{
    struct stat st;
    if (stat(path, &st) == 0) {
        if (is_dir ? !S_ISDIR(st.st_mode) : S_ISDIR(st.st_mode)) {
            cli_errorf(cmd, "%s %s: %s", flag, path, is_dir ? "exists and is not a folder" : "is a folder");
            return -1;
        }
        if (access(path, W_OK) != 0) {
            cli_errorf(cmd, "%s %s: not writable (%s)", flag, path, strerror(errno));
            return -1;
        }
        return 0;
    }
    /* The folder it goes in: everything before the last '/' ("." without). */
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--; /* "dir/" names dir */
    const char *slash = NULL;
    for (size_t i = 0; i < n; i++)
        if (path[i] == '/') slash = path + i;
    char parent[4096];
    size_t len = slash == NULL ? 0 : slash == path ? 1 : (size_t)(slash - path);
    if (len >= sizeof parent) {
        cli_errorf(cmd, "%s: path too long", flag);
        return -1;
    }
    if (slash == NULL) strcpy(parent, ".");
    else memcpy(parent, path, len), parent[len] = '\0';
    int found = stat(parent, &st) == 0;
    if (!found || !S_ISDIR(st.st_mode)) {
        cli_errorf(cmd, "%s %s: %s %s", flag, path, parent,
                   found ? "is not a folder" : errno == ENOENT ? "does not exist" : strerror(errno));
        return -1;
    }
    if (access(parent, W_OK | X_OK) != 0) {
        cli_errorf(cmd, "%s %s: the folder %s is not writable (%s)", flag, path, parent, strerror(errno));
        return -1;
    }
    return 0;
}

/* Turn every finite number of the tree into a raw node holding the shortest
 * "%.{15,16,17}g" text that reads back as the same double. cJSON itself
 * prints 15 digits whenever they come within one DBL_EPSILON of the value,
 * so a reader (the Python binding's tests compare with the library) could
 * get a neighbouring double. Returns 0, or -1 when out of memory. */
static int json_numbers_exact(cJSON *node)
{
    for (; node != NULL; node = node->next) {
        if (cJSON_IsNumber(node) && isfinite(node->valuedouble)) {
            char buf[32];
            for (int digits = 15; digits <= 17; digits++) {
                snprintf(buf, sizeof buf, "%.*g", digits, node->valuedouble);
                if (strtod(buf, NULL) == node->valuedouble) break;
            }
            char *raw = malloc(strlen(buf) + 1); /* freed by cJSON_Delete (default hooks) */
            if (raw == NULL) return -1;
            memcpy(raw, buf, strlen(buf) + 1);
            node->type = cJSON_Raw;
            node->valuestring = raw;
        }
        if (json_numbers_exact(node->child) != 0) return -1;
    }
    return 0;
}

/* root as text with exact numbers; NULL when out of memory (printed). */
static char *json_text(const char *cmd, const char *path, const cJSON *root)
{
    cJSON *exact = cJSON_Duplicate(root, 1);
    char *text = exact != NULL && json_numbers_exact(exact) == 0 ? cJSON_Print(exact) : NULL;
    cJSON_Delete(exact);
    if (text == NULL) cli_errorf(cmd, "%s: out of memory formatting JSON", path);
    return text;
}

int cli_json_stage(const char *cmd, const char *path, const cJSON *root, dyn_atomic_file *af)
{
    char *text = json_text(cmd, path, root);
    if (text == NULL) return -1;
    dyn_error err;
    dyn_status st = dyn_atomic_open(af, path, &err);
    if (st == DYN_OK) {
        size_t len = strlen(text);
        if (fwrite(text, 1, len, af->fp) != len) {
            dyn_atomic_abort(af);
            st = dyn_error_set(&err, DYN_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        } else {
            st = dyn_atomic_finish(af, &err);
        }
    }
    free(text);
    if (st != DYN_OK) {
        cli_errorf(cmd, "%s", err.msg);
        return -1;
    }
    return 0;
}

int cli_write_json(const char *cmd, const char *path, const cJSON *root)
{
    char *text = json_text(cmd, path, root);
    if (text == NULL) return -1;
    dyn_error err;
    dyn_status st = dyn_file_write_atomic(path, text, strlen(text), &err);
    free(text);
    if (st != DYN_OK) {
        cli_errorf(cmd, "%s", err.msg);
        return -1;
    }
    return 0;
}
