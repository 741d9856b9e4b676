/* flags.h — one table-driven mechanism for the subcommands' flags: each flag
 * is a row (name, value type, the field it sets, its range, its help line),
 * and parsing, the one-line range errors and the --help text are all made
 * from the rows.
 *
 * A table is an array of cli_flag ending with CLI_END; CLI_SECTION rows
 * only print a heading in --help. Fields are offsets into one arguments
 * struct (offsetof), so a table is static const data and the struct it
 * fills is the caller's:
 *
 *   static const cli_flag my_flags[] = {
 *       CLI_SECTION("training:"),
 *       CLI_I64("--steps", "N", my_args, steps, 1, 100000000, "iterations (global batches)"),
 *       CLI_BOOL("--quiet", my_args, quiet, 1, "no progress line"),
 *       CLI_END,
 *   };
 *
 * Adding a flag is adding one row. A command may combine several tables,
 * each over its own struct (cli_flag_set): parsing tries them in order, so
 * a command's own row shadows a shared row of the same name, and --help
 * shows only the row that parses.
 *
 * Errors are one line "dynapipe <cmd>: ..." on stderr (cli_errorf):
 *   --stages: 0 is out of range [1, 4096]
 *   --stages needs a value
 *   --split: 'x' is not train or heldout
 *   --save: an empty path (PATH rows; FN rows that take a path call cli_flag_path)
 *   unknown flag '--frob' (try 'dynapipe plan --help') */
#ifndef DYN_CLI_FLAGS_H
#define DYN_CLI_FLAGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum cli_flag_type {
    CLI_FLAG_END = 0, /* the row that ends a table */
    CLI_FLAG_SECTION, /* a heading in --help (help = its text), parses nothing */
    CLI_FLAG_I32,     /* int32_t field, range [min, max] */
    CLI_FLAG_I64,     /* int64_t (or uint64_t) field, range [min, max] */
    CLI_FLAG_F64,     /* double field, range [fmin, fmax] */
    CLI_FLAG_F32,     /* float field, range [fmin, fmax] */
    CLI_FLAG_STR,     /* const char * field: the argument itself (argv outlives the run) */
    CLI_FLAG_PATH,    /* as STR, for a file, folder, prefix or spec: '' is refused, naming the flag */
    CLI_FLAG_BOOL,    /* int field, no value: stores `set` (1, or 0 for a --no-X, or another value) */
    CLI_FLAG_ENUM,    /* int field: the index of the value in `names` */
    CLI_FLAG_FN,      /* the row's parse function reads the value (lists, compound values) */
} cli_flag_type;

struct cli_flag;
/* A CLI_FLAG_FN row's parser: value is the flag's argument (NULL for a row
 * without metavar), args the struct the table's offsets point into.
 * Returns 0, or -1 after printing one line (cli_errorf). */
typedef int (*cli_flag_parse_fn)(const char *cmd, const struct cli_flag *f, const char *value, void *args);

typedef struct cli_flag {
    const char *name;          /* "--stages"; NULL for SECTION and END */
    const char *metavar;       /* the value in --help ("S"); NULL: the flag takes no value */
    cli_flag_type type;
    size_t field;              /* offsetof the field it sets */
    size_t given;              /* CLI_GIVEN: offsetof + 1 of an int set to 1 when given; 0: none */
    int64_t min, max;          /* I32, I64: inclusive range */
    double fmin, fmax;         /* F64, F32: inclusive range */
    int set;                   /* BOOL: the value stored */
    const char *const *names;  /* ENUM: the values, NULL-terminated */
    cli_flag_parse_fn parse;   /* FN */
    const char *help;          /* --help text; '\n' continues it on the next line; NULL: not shown
                                * (a row that only refuses a flag with a message, see FN) */
    const char *def;           /* --help default: "required", a text, or NULL (the struct's value) */
} cli_flag;

/* 1 + the offset of an int "given" field (0 means none). */
#define CLI_GIVEN(T, m) (offsetof(T, m) + 1)

#define CLI_END {.type = CLI_FLAG_END}
#define CLI_SECTION(text) {.type = CLI_FLAG_SECTION, .help = (text)}
#define CLI_I32(nm, mv, T, m, lo, hi, h) \
    {.name = (nm), .metavar = (mv), .type = CLI_FLAG_I32, .field = offsetof(T, m), .min = (lo), .max = (hi), .help = (h)}
#define CLI_I64(nm, mv, T, m, lo, hi, h) \
    {.name = (nm), .metavar = (mv), .type = CLI_FLAG_I64, .field = offsetof(T, m), .min = (lo), .max = (hi), .help = (h)}
#define CLI_F64(nm, mv, T, m, lo, hi, h) \
    {.name = (nm), .metavar = (mv), .type = CLI_FLAG_F64, .field = offsetof(T, m), .fmin = (lo), .fmax = (hi), .help = (h)}
#define CLI_F32(nm, mv, T, m, lo, hi, h) \
    {.name = (nm), .metavar = (mv), .type = CLI_FLAG_F32, .field = offsetof(T, m), .fmin = (lo), .fmax = (hi), .help = (h)}
#define CLI_STR(nm, mv, T, m, h) \
    {.name = (nm), .metavar = (mv), .type = CLI_FLAG_STR, .field = offsetof(T, m), .help = (h)}
#define CLI_PATH(nm, mv, T, m, h) \
    {.name = (nm), .metavar = (mv), .type = CLI_FLAG_PATH, .field = offsetof(T, m), .help = (h)}
#define CLI_BOOL(nm, T, m, value, h) \
    {.name = (nm), .type = CLI_FLAG_BOOL, .field = offsetof(T, m), .set = (value), .help = (h)}
#define CLI_ENUM(nm, mv, T, m, list, h) \
    {.name = (nm), .metavar = (mv), .type = CLI_FLAG_ENUM, .field = offsetof(T, m), .names = (list), .help = (h)}
#define CLI_FN(nm, mv, fn, h) {.name = (nm), .metavar = (mv), .type = CLI_FLAG_FN, .parse = (fn), .help = (h)}

/* One table and the struct its offsets point into. */
typedef struct cli_flag_set {
    const cli_flag *flags;
    void *args;
} cli_flag_set;

/* A command's replacement for a row's --help default (name, text), e.g.
 * train's {"--stages", "2"}; lists end with {NULL, NULL}. */
typedef struct cli_flag_default {
    const char *name;
    const char *text;
} cli_flag_default;

/* Try argv[*i] against the sets in order. Returns 1 when a row took it (its
 * value consumed, *i advanced past it, the field and its given flag set),
 * 0 when no row names it, -1 on a bad or missing value (printed). */
int cli_flags_parse_one(const char *cmd, const cli_flag_set *sets, int n_sets, int argc, char **argv, int *i);

/* A path flag's value: 0, or -1 after "FLAG: an empty path" when it is ''
 * (an empty name would write beside the current folder or fail late). */
int cli_flag_path(const char *cmd, const char *flag, const char *value);

/* Parse argv[1..argc-1] whole: returns 0, 1 when --help / -h was given
 * (nothing printed), or -1 after printing one line for a bad value or an
 * unknown flag ("unknown flag 'X' (try 'dynapipe <cmd> --help')"). */
int cli_flags_parse(const char *cmd, const cli_flag_set *sets, int n_sets, int argc, char **argv);

/* The sets' rows as --help text: "  --name METAVAR  help (default D)", one
 * row per flag (continuation lines indented), headings as given. A row
 * shadowed by an earlier set's row of the same name is left out. The
 * default shown: defaults' text for the name, else the row's def
 * ("required" prints "(required)"), else the struct's own value (the sets'
 * args as initialised, before parsing) when it is a non-zero number or a
 * string; booleans show none. */
void cli_flags_usage(FILE *out, const cli_flag_set *sets, int n_sets, const cli_flag_default *defaults);
/* The same for sets[from..n_sets-1] only (the earlier sets still shadow). */
void cli_flags_usage_from(FILE *out, const cli_flag_set *sets, int n_sets, int from,
                          const cli_flag_default *defaults);

#endif
