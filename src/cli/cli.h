/* cli.h — the `dynapipe` command: subcommand entry points and the small
 * argument-parsing helpers they share.
 *
 * Each subcommand lives in its own file cli_<name>.c with an entry point
 * `int cli_<name>_main(int argc, char **argv)` where argv[0] is the
 * subcommand name. It returns the process exit status: 0 success, 1 runtime
 * failure (bad input file, infeasible plan), 2 usage error (bad flag). Errors
 * are one line on stderr, prefixed "dynapipe <name>: ". */
#ifndef DYN_CLI_H
#define DYN_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "dynapipe/common.h"

#define CLI_EXIT_OK 0
#define CLI_EXIT_FAIL 1
#define CLI_EXIT_USAGE 2

/* Print "dynapipe <cmd>: <message>\n" to stderr. */
void cli_errorf(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The value of flag argv[*i], advancing *i past it; NULL (error printed)
 * when the flag is the last argument. */
const char *cli_flag_value(const char *cmd, int argc, char **argv, int *i);

/* Parse a whole-string integer / number for flag `flag` in [min, max];
 * on failure print a one-line error naming the flag and return -1. */
int cli_parse_i64(const char *cmd, const char *flag, const char *text, int64_t min, int64_t max,
                  int64_t *out);
int cli_parse_i32(const char *cmd, const char *flag, const char *text, int32_t min, int32_t max,
                  int32_t *out);
int cli_parse_f64(const char *cmd, const char *flag, const char *text, double min, double max,
                  double *out);
/* A fraction held out of the data (--eval-split P): a number in (0, 1). */
int cli_parse_fraction(const char *cmd, const char *flag, const char *text, double *out);

/* An output the run will write at its end, checked before any work starts
 * so that no hours of work are lost to a late error: `path` (a file, or a
 * folder when is_dir) must be creatable — its folder exists, is a folder
 * and is writable — and, when it exists, be of that kind and writable.
 * Nothing is created. 0, or -1 after one line naming the flag and path. */
int cli_output_check(const char *cmd, const char *flag, const char *path, int is_dir);

/* Format root (a cJSON tree) and write it to path atomically; on failure print
 * the one-line error and return -1 (no file is left), else 0. */
struct cJSON;
int cli_write_json(const char *cmd, const char *path, const struct cJSON *root);

/* Format root into a finished but unpublished atomic file *af (util.h), for
 * a run that publishes all its outputs together (dyn_atomic_commit_all); on
 * failure print the one-line error and return -1 (nothing is left). */
struct dyn_atomic_file;
int cli_json_stage(const char *cmd, const char *path, const struct cJSON *root, struct dyn_atomic_file *af);

/* Subcommands (one file each). */
int cli_plan_main(int argc, char **argv);     /* cli_plan.c */
int cli_simulate_main(int argc, char **argv); /* cli_simulate.c */
int cli_bench_main(int argc, char **argv);    /* cli_bench.c */
int cli_train_main(int argc, char **argv);    /* cli_train.c */
int cli_data_main(int argc, char **argv);     /* cli_data.c */
int cli_profile_main(int argc, char **argv);  /* cli_profile.c */

/* cli_profile.c, for `dynapipe train --profile auto`: profile cfg with
 * `threads` threads (quick grid, 3 repeats) into path (show_progress: 1 bar,
 * 0 summary line only, -1 quiet); returns an exit code (message printed). */
int cli_profile_write(const dyn_model_config *cfg, int threads, int repeats, int sweeps, int quick, int32_t max_rows,
                      int64_t max_tokens, int show_progress, const char *path);
/* The cache path of cfg's profile ($XDG_CACHE_HOME/dynapipe, else
 * ~/.cache/dynapipe, else build/dynapipe-cache; the name carries the whole
 * shape, the thread count and max_tokens) into path; make != 0: profile it
 * first when absent, grid points over max_tokens rows x tokens scaled
 * (dyn_profiler_set_max_tokens). Returns an exit code. */
int cli_profile_cached(const dyn_model_config *cfg, int threads, int64_t max_tokens, char *path, size_t cap,
                       int make);
int cli_eval_main(int argc, char **argv);     /* cli_eval.c */

#endif
