/* cli_machine.h — the cost model the planning commands default to, and the
 * lines that say which one a run uses: `--machine auto` (measured here and
 * cached; src/model/machine_auto.h), the cache folder shared with
 * `--profile auto`, the oversubscription share, and the setup header of
 * `dynapipe train`. Kept out of the flag parsing so that parsing stays a
 * table. */
#ifndef DYN_CLI_MACHINE_H
#define DYN_CLI_MACHINE_H

#include <stddef.h>
#include <stdio.h>

#include "cli/plan_args.h"

/* The cache folder: $XDG_CACHE_HOME/dynapipe, else ~/.cache/dynapipe, else
 * build/dynapipe-cache. */
void cli_cache_dir(char *dir, size_t cap);

/* Threads per rank the run will use: a->threads, else cores / (stages x
 * dp), at least 1. Ranks: stages x dp. */
int cli_run_threads(const plan_args *a);

/* --machine auto: this machine measured for cfg with the run's threads per
 * rank (cached; measured first, saying so on stderr, when not), then scaled
 * for oversubscription (dyn_machine_core_share). Makes the process select
 * its BLAS kernel first (dyn_threads_init, which may re-execute it). 0 or an
 * exit code (message printed). */
int cli_machine_auto(const char *cmd, const plan_args *a, const dyn_model_config *cfg, dyn_machine *out);

/* Before anything is read (stdin included): select the BLAS kernel,
 * which may re-execute the program (dyn_threads_init); the kernel is part
 * of --machine auto's cache key. */
void cli_machine_auto_prepare(void);

/* When this process measured the machine (not when it read the cache),
 * unless a->cost_quiet: one stderr line "dynapipe <cmd>: cost model: ..."
 * with what was measured, once, after planning inputs are built (a run
 * whose inputs fail prints only its error). */
void cli_machine_auto_say(const char *cmd, const plan_args *a, const plan_inputs *in);

/* One line (no newline) naming the cost model of a run built from a and in:
 * a profile table, a machine measured here (and when), a built-in
 * description of another machine, or a machine file; and, when ranks x
 * threads exceed the cores, that the run is oversubscribed. */
void cli_cost_describe(const plan_args *a, const plan_inputs *in, char *buf, size_t cap);

/* What `dynapipe train` defaulted to, for its header. */
typedef struct cli_train_defaults {
    int model_config, max_seqlen, global_batch_tokens, stages;
} cli_train_defaults;

/* The setup header of `dynapipe train` into buf (two lines, each ending in
 * a newline): the cost model (cli_cost_describe), then the model preset,
 * longest length, tokens per global batch and stages, each marked
 * "(default)" when not given. */
void cli_train_header(char *buf, size_t cap, const plan_args *a, const plan_inputs *in,
                      const cli_train_defaults *d);

/* argv for the ranks: argv with "--machine <the machine as JSON>" added
 * when the run's machine was measured here, so every rank plans with
 * exactly the launcher's; else argv itself. *argc_out is its length. NULL
 * when out of memory. Free with cli_rank_argv_free. */
char **cli_rank_argv(int argc, char **argv, const dyn_machine *m, int measured, int *argc_out);
void cli_rank_argv_free(char **av, char **argv);

#endif
