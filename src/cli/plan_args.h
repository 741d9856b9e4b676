/* plan_args.h — the planning flags shared by `dynapipe plan`, `simulate`
 * and `train`: parse them, print their usage, and turn them into the
 * inputs of planning (model shape, machine, cost model, samples, sampler,
 * planner).
 *
 * Use:
 *   plan_args a;  plan_args_init(&a);          // the command may change defaults here
 *   cli_flag_set sets[] = {{my_flags, &mine}, {plan_args_flags, &a}};
 *   if (cli_flags_parse(cmd, sets, 2, argc, argv) != 0) ...  // flags.h
 *   if (plan_args_finish(cmd, &a) != 0) return CLI_EXIT_USAGE;
 *   plan_open po = {.tune = !a.untuned, .tune_split = 1, .tune_report = stderr, .warn = 1};
 *   plan_inputs in;  int rc = plan_inputs_open(cmd, &a, &po, &in);  // 0 or exit code
 *   while ((rc = plan_inputs_next(cmd, &in, &batch, &n)) == 0 && n > 0) ...
 *   plan_inputs_close(&in);
 * The arguments are read-only after plan_args_finish: what a run derives
 * from them (the shape, the tuned knob, the resolved memory limit) goes to
 * plan_inputs and the planner, never back into plan_args.
 * Errors are printed as one line "dynapipe <cmd>: ...". */
#ifndef DYN_CLI_PLAN_ARGS_H
#define DYN_CLI_PLAN_ARGS_H

#include <stdio.h>

#include "cli/flags.h" /* defines: cli_flag, cli_flag_set */
#include "dynapipe/corpus.h"
#include "dynapipe/cost.h"
#include "dynapipe/data.h"
#include "dynapipe/plan.h"

/* The largest --global-batch-tokens accepted (2^24, 256 times the DynaPipe
 * paper's budget): a larger one would only exhaust memory drawing samples. */
#define PLAN_MAX_BATCH_TOKENS (INT64_C(1) << 24)

typedef struct plan_args {
    /* model */
    int have_kind;              /* --model given */
    dyn_model_kind kind;
    const char *model_config;   /* --model-config: preset name or JSON file; NULL: the default below */
    const char *default_config[3]; /* per dyn_model_kind: the command's default preset; with a cost
                                 * table and no --model-config, the table's shape is the default */
    int32_t layers, dec_layers, hidden, heads, head_dim, ffn, vocab; /* overrides; 0 = keep */
    int have_init_model;        /* 1: the shape is init_model (train --init's config.json), not a preset */
    dyn_model_config init_model; /* every field of the folder's shape (a Llama's rotary and GQA fields too) */
    /* data */
    const char *lengths_path;   /* --lengths FILE.tsv */
    int synthetic;              /* --synthetic flan[:SEED] */
    uint64_t seed;
    const char *data_spec;      /* --data SPEC: a token source (include/dynapipe/corpus.h) */
    dyn_corpus_split split;     /* --split train|heldout (built-in --data) */
    const char *tokenizer;      /* --tokenizer DIR|FILE: encodes --data text (NULL: bytes) */
    const char *template_str;   /* --template "...{input}...{target}...": --data text pairs (NULL: none) */
    int clip;                   /* --clip / --truncate: clip over-long samples instead of failing */
    int64_t global_batch_tokens; /* --global-batch-tokens, tokens (input + target) per global batch */
    int32_t batches;            /* --batches: global batches to plan; 0 = default */
    /* costs */
    const char *cost_model;     /* "analytic" or a table file */
    const char *machine;        /* "auto" (measured here), built-in name, JSON file or inline JSON */
    int have_machine;           /* --machine given */
    int32_t threads;            /* threads per rank of the run (--machine auto's key); 0: cores / ranks */
    int cost_quiet;             /* plan_inputs_open does not print the measured machine's line */
    /* planning options (stages, dp, chunks, method, memory, recompute, knobs) */
    dyn_plan_options opt;
    int have_max_seqlen, have_stages; /* given, or defaulted by the command (train) */
    int have_method;            /* --method / --batching given */
    int untuned;    /* --untuned: a baseline's knob not given is the most that fit */
    int stage_split; /* --stage-split: PLAN_SPLIT_TUNED (default) or PLAN_SPLIT_MAXROW */
} plan_args;

/* --stage-split values (the order of its names in plan_args.c). */
enum { PLAN_SPLIT_TUNED = 0, PLAN_SPLIT_MAXROW = 1 };

/* The planning flags, over plan_args (flags.h). */
extern const cli_flag plan_args_flags[];

/* The defaults of `dynapipe plan` and `simulate`. */
void plan_args_init(plan_args *a);
/* Check required flags and combinations after parsing; -1 (printed) on error. */
int plan_args_finish(const char *cmd, plan_args *a);
/* The method knobs given (--mb-samples, --pack-rows, --mb-tokens) against the batching methods the run plans with: a knob
 * that none of them reads is refused, naming the knob and the methods
 * ("--pack-rows 4 applies to --method packing or packing-docmask, not
 * dynapipe"). The knob-to-method table is the C twin of the Python
 * package's _KNOB_METHODS. 0, or -1 (printed). */
int plan_args_check_methods(const char *cmd, const plan_args *a, const dyn_batching *methods, int n_methods);
/* The planning flags' usage text, with the defaults of a (as initialised);
 * rows named in shadow (the command's own table, which parses first; or
 * NULL) are left out. */
void plan_args_usage(FILE *out, const plan_args *a, const cli_flag *shadow);

/* How plan_inputs_open runs: the caller's choices, not flags. */
typedef struct plan_open {
    int tune;              /* tune a baseline's zero knob (plan_tune_method); 0: leave it */
    int tune_split;        /* then the layer split, unless --stage-split maxrow (plan_tune_split) */
    FILE *tune_report;     /* the tuning line goes here; NULL: not said */
    int32_t order_groups;  /* auto's order search while tuning (0: its default) */
    int warn;              /* say once when --max-seqlen passes a cost table's grid */
} plan_open;

/* Everything planning needs, built from plan_args. */
typedef struct plan_inputs {
    dyn_model_config model;
    dyn_machine machine;
    int machine_auto;           /* 1: machine measured here (--machine auto, cli_machine.h) */
    dyn_cost_model *cm;
    dyn_dataset ds;
    dyn_sampler *sampler;
    dyn_planner *planner;
    int32_t batches_left;       /* global batches still to hand out; < 0: all */
    int64_t global_batch_tokens; /* the sampler's budget */
} plan_inputs;

/* Build the inputs: returns 0, or CLI_EXIT_FAIL / CLI_EXIT_USAGE (printed). */
int plan_inputs_open(const char *cmd, const plan_args *a, const plan_open *po, plan_inputs *in);
/* The model shape of the analytic cost model: the preset or file (or the
 * command's default), then the shape flags; max_seqlen from --max-seqlen.
 * 0, or CLI_EXIT_FAIL / CLI_EXIT_USAGE (printed). */
int plan_model_resolve(const char *cmd, const plan_args *a, dyn_model_config *cfg);
/* Next global batch (pointer into in->ds): 0 with *n > 0, 0 with *n == 0 at
 * the end, or CLI_EXIT_FAIL (printed). */
int plan_inputs_next(const char *cmd, plan_inputs *in, const dyn_sample **batch, int32_t *n);
void plan_inputs_close(plan_inputs *in);
/* A baseline whose size knob in opt is 0: tune it (dyn_pipeline_tune, schedule
 * auto) on the first global batches of in's data and set it in opt; report,
 * order_groups: auto's order search (0: its default); report,
 * if not NULL, gets one line saying the value and what was tried. Nothing
 * for dynapipe or an explicit knob. 0, or CLI_EXIT_FAIL / _USAGE (printed). */
int plan_tune_method(const char *cmd, plan_inputs *in, dyn_plan_options *opt, int32_t order_groups,
                     FILE *report);
/* The layers-to-stages split for opt (its knob already tuned): balanced
 * for the micro-batches of the same first global batches
 * (dyn_pipeline_tune_split, schedule auto), set in opt->split_weight when
 * that simulates faster than the max-length row's split; then, with
 * retune_knob (the knob was tuned, not given), the knob is tuned again
 * under the new split. report, if not NULL, gets one line saying the
 * layers per stage and both simulated times when another split was tried
 * (and the knob's line again when re-tuned). Any method. 0, or CLI_EXIT_FAIL / _USAGE (printed). */
int plan_tune_split(const char *cmd, plan_inputs *in, dyn_plan_options *opt, int32_t order_groups, int retune_knob,
                    FILE *report);

#endif
