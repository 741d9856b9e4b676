/* flags.c — the flag tables of flags.h: parse a flag into its field, print
 * the one-line error when its value is missing, malformed or out of range,
 * and make the --help text from the same rows. */
#include "cli/flags.h"

#include <string.h>

#include "cli/cli.h" /* defines: cli_errorf, cli_flag_value, cli_parse_* */

/* The int fields of BOOL and ENUM rows are `int`; structs that hold int32_t
 * flags rely on the two being one type. */
_Static_assert(sizeof(int) == sizeof(int32_t), "int is 32 bits");

/* ENUM: "'x' is not a, b or c". */
static int parse_enum(const char *cmd, const cli_flag *f, const char *v, int *out)
{
    int n = 0;
    for (; f->names[n] != NULL; n++) {
        if (strcmp(v, f->names[n]) == 0) {
            *out = n;
            return 0;
        }
    }
    char list[256] = "";
    size_t len = 0;
    for (int k = 0; k < n && len < sizeof list; k++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", k == 0 ? "" : k == n - 1 ? " or " : ", ",
                                f->names[k]);
    cli_errorf(cmd, "%s: '%s' is not %s", f->name, v, list);
    return -1;
}

int cli_flag_path(const char *cmd, const char *flag, const char *value)
{
    if (value != NULL && value[0] == '\0') {
        cli_errorf(cmd, "%s: an empty path", flag);
        return -1;
    }
    return 0;
}

/* Set row f's field in args from its value v (NULL for a flag without one). */
static int parse_row(const char *cmd, const cli_flag *f, const char *v, char *args)
{
    void *field = args + f->field;
    switch (f->type) {
    case CLI_FLAG_I32:
        return cli_parse_i32(cmd, f->name, v, (int32_t)f->min, (int32_t)f->max, field);
    case CLI_FLAG_I64: {
        int64_t x;
        if (cli_parse_i64(cmd, f->name, v, f->min, f->max, &x) != 0) return -1;
        memcpy(field, &x, sizeof x); /* an int64_t or a uint64_t of a non-negative range */
        return 0;
    }
    case CLI_FLAG_F64:
        return cli_parse_f64(cmd, f->name, v, f->fmin, f->fmax, field);
    case CLI_FLAG_F32: {
        double x;
        if (cli_parse_f64(cmd, f->name, v, f->fmin, f->fmax, &x) != 0) return -1;
        float y = (float)x;
        memcpy(field, &y, sizeof y);
        return 0;
    }
    case CLI_FLAG_PATH:
        if (cli_flag_path(cmd, f->name, v) != 0) return -1;
        memcpy(field, &v, sizeof v);
        return 0;
    case CLI_FLAG_STR:
        memcpy(field, &v, sizeof v);
        return 0;
    case CLI_FLAG_BOOL:
        memcpy(field, &f->set, sizeof f->set);
        return 0;
    case CLI_FLAG_ENUM: {
        int x;
        if (parse_enum(cmd, f, v, &x) != 0) return -1;
        memcpy(field, &x, sizeof x);
        return 0;
    }
    case CLI_FLAG_FN:
        return f->parse(cmd, f, v, args);
    default:
        return -1;
    }
}

int cli_flags_parse_one(const char *cmd, const cli_flag_set *sets, int n_sets, int argc, char **argv, int *i)
{
    for (int s = 0; s < n_sets; s++) {
        for (const cli_flag *f = sets[s].flags; f->type != CLI_FLAG_END; f++) {
            if (f->name == NULL || strcmp(f->name, argv[*i]) != 0) continue;
            const char *v = NULL;
            if (f->metavar != NULL && (v = cli_flag_value(cmd, argc, argv, i)) == NULL) return -1;
            if (parse_row(cmd, f, v, sets[s].args) != 0) return -1;
            if (f->given) {
                int one = 1;
                memcpy((char *)sets[s].args + f->given - 1, &one, sizeof one);
            }
            return 1;
        }
    }
    return 0;
}

int cli_flags_parse(const char *cmd, const cli_flag_set *sets, int n_sets, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
        int r = cli_flags_parse_one(cmd, sets, n_sets, argc, argv, &i);
        if (r < 0) return -1;
        if (r == 0) {
            cli_errorf(cmd, "unknown flag '%s' (try 'dynapipe %s --help')", argv[i], cmd);
            return -1;
        }
    }
    return 0;
}

/* ---- --help ---------------------------------------------------------------- */

#define HELP_COL 28   /* where help text starts */
#define HELP_WIDTH 100 /* a default that would pass this goes on its own line */

/* The field's value as a default, into buf: "" for zero, NULL and flags
 * without a value. */
static void value_text(const cli_flag *f, const char *args, char *buf, size_t cap)
{
    const void *field = args + f->field;
    buf[0] = '\0';
    int32_t i32;
    int64_t i64;
    double f64;
    float f32;
    const char *str;
    int e;
    switch (f->type) {
    case CLI_FLAG_I32:
        if (memcpy(&i32, field, sizeof i32), i32 != 0) snprintf(buf, cap, "%d", i32);
        break;
    case CLI_FLAG_I64:
        if (memcpy(&i64, field, sizeof i64), i64 != 0) snprintf(buf, cap, "%lld", (long long)i64);
        break;
    case CLI_FLAG_F64:
        if (memcpy(&f64, field, sizeof f64), f64 != 0) snprintf(buf, cap, "%g", f64);
        break;
    case CLI_FLAG_F32:
        if (memcpy(&f32, field, sizeof f32), f32 != 0) snprintf(buf, cap, "%g", (double)f32);
        break;
    case CLI_FLAG_STR:
    case CLI_FLAG_PATH:
        if (memcpy(&str, field, sizeof str), str != NULL) snprintf(buf, cap, "%s", str);
        break;
    case CLI_FLAG_ENUM:
        memcpy(&e, field, sizeof e);
        snprintf(buf, cap, "%s", f->names[e]);
        break;
    default:
        break;
    }
}

/* The default row f shows, into buf ("" for none): the command's text for
 * it, else the row's def, else the field's value. A "required" row whose
 * field the command set (its given flag, or a non-zero value) shows that. */
static void default_text(const cli_flag *f, const char *args, const cli_flag_default *defaults, char *buf,
                         size_t cap)
{
    char value[128];
    value_text(f, args, value, sizeof value);
    const char *text = f->def;
    if (text != NULL && strcmp(text, "required") == 0) {
        int given = 0;
        if (f->given) memcpy(&given, args + f->given - 1, sizeof given);
        if (f->given ? given : value[0] != '\0') text = NULL;
    }
    for (const cli_flag_default *d = defaults; d && d->name; d++)
        if (strcmp(d->name, f->name) == 0) text = d->text;
    if (text == NULL) text = value;
    buf[0] = '\0';
    if (strcmp(text, "required") == 0) snprintf(buf, cap, "(required)");
    else if (text[0] != '\0') snprintf(buf, cap, "(default %s)", text);
}

/* 1 when a set before s has a row named name (it parses instead). */
static int shadowed(const cli_flag_set *sets, int s, const char *name)
{
    for (int t = 0; t < s; t++)
        for (const cli_flag *f = sets[t].flags; f->type != CLI_FLAG_END; f++)
            if (f->name && strcmp(f->name, name) == 0) return 1;
    return 0;
}

static void usage_row(FILE *out, const cli_flag *f, const char *args, const cli_flag_default *defaults)
{
    char left[128];
    int n = snprintf(left, sizeof left, "  %s%s%s", f->name, f->metavar ? " " : "", f->metavar ? f->metavar : "");
    fputs(left, out);
    int col = n;
    if (col + 1 >= HELP_COL) {
        fputc('\n', out);
        col = 0;
    }
    fprintf(out, "%*s", HELP_COL - col, "");
    col = HELP_COL;
    for (const char *p = f->help; *p; p++) {
        fputc(*p, out);
        col++;
        if (*p == '\n') {
            fprintf(out, "%*s", HELP_COL, "");
            col = HELP_COL;
        }
    }
    char def[160];
    default_text(f, args, defaults, def, sizeof def);
    if (def[0] != '\0') {
        if (col + 1 + (int)strlen(def) > HELP_WIDTH) fprintf(out, "\n%*s%s", HELP_COL, "", def);
        else fprintf(out, " %s", def);
    }
    fputc('\n', out);
}

void cli_flags_usage(FILE *out, const cli_flag_set *sets, int n_sets, const cli_flag_default *defaults)
{
    cli_flags_usage_from(out, sets, n_sets, 0, defaults);
}

void cli_flags_usage_from(FILE *out, const cli_flag_set *sets, int n_sets, int from,
                          const cli_flag_default *defaults)
{
    for (int s = from; s < n_sets; s++) {
        for (const cli_flag *f = sets[s].flags; f->type != CLI_FLAG_END; f++) {
            if (f->type == CLI_FLAG_SECTION) {
                fprintf(out, "%s\n", f->help);
                continue;
            }
            if (f->help == NULL || shadowed(sets, s, f->name)) continue;
            usage_row(out, f, sets[s].args, defaults);
        }
    }
}
