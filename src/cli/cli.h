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

/* Format root (a cJSON tree) and write it to path atomically; on failure print
 * the one-line error and return -1 (no file is left), else 0. */
struct cJSON;
int cli_write_json(const char *cmd, const char *path, const struct cJSON *root);

/* Subcommands (one file each). */
int cli_plan_main(int argc, char **argv);     /* cli_plan.c */
int cli_simulate_main(int argc, char **argv); /* cli_simulate.c */
int cli_bench_main(int argc, char **argv);    /* cli_bench.c */
int cli_train_main(int argc, char **argv);    /* cli_train.c */
int cli_data_main(int argc, char **argv);     /* cli_data.c */
int cli_eval_main(int argc, char **argv);     /* cli_eval.c */

#endif
