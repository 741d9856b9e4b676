/* main.c — `dynapipe`: dispatch to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h" /* defines: cli_*_main, CLI_EXIT_* */

typedef struct cli_command {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *summary;
} cli_command;

/* One line per subcommand; each lives in src/cli/cli_<name>.c. */
static const cli_command commands[] = {
    /* planning */
    {"plan", cli_plan_main, "cut global batches into micro-batches (the DP) and print the plan"},

    /* simulation */
    {"simulate", cli_simulate_main, "schedule and simulate plans; compare batching methods and schedules"},

    /* data */
    {"data", cli_data_main, "convert, inspect and measure token data (JSONL, Megatron, built-in)"},

    /* model and training */
    {"train", cli_train_main, "train GPT or T5 on a pipeline of MPI ranks with dynamic micro-batches"},
    {"profile", cli_profile_main, "measure the layers on this machine into a cost table (--cost-model FILE)"},
    {"eval", cli_eval_main, "held-out loss, per-task accuracy and generation of a training checkpoint"},
    {"bench", cli_bench_main, "benchmark model layers on this CPU (bench layer)"},

    {NULL, NULL, NULL}
};

static void print_usage(FILE *out)
{
    fprintf(out, "usage: dynapipe <command> [options]\n\n"
                 "Multi-task transformer training with dynamic micro-batching and pipelines.\n\n"
                 "commands:\n");
    for (const cli_command *c = commands; c->name; c++)
        fprintf(out, "  %-10s %s\n", c->name, c->summary);
    fprintf(out, "\n'dynapipe <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        print_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("dynapipe 0.1.0\n");
        return CLI_EXIT_OK;
    }
    for (const cli_command *c = commands; c->name; c++)
        if (strcmp(argv[1], c->name) == 0) return c->main(argc - 1, argv + 1);
    fprintf(stderr, "dynapipe: unknown command '%s' (try 'dynapipe --help')\n", argv[1]);
    return CLI_EXIT_USAGE;
}
