/* train_init.h — `dynapipe train --init DIR`: the run's shape from a
 * Hugging Face model folder's config.json, and the folder checked before
 * any rank starts (model/hf_load.h does the reading). */
#ifndef DYN_CLI_TRAIN_INIT_H
#define DYN_CLI_TRAIN_INIT_H

#include "cli/plan_args.h"   /* defines: plan_args */
#include "model/hf_config.h" /* defines: dyn_hf_tokens */

/* *dir: a Hugging Face model folder, or a checkpoint root of `train
 * --save DIR` (then *dir becomes its latest step folder). Set a's model kind and shape flags from dir/config.json, refusing
 * --model-config, a --model of another kind, a shape flag of another value
 * than the file's (naming both) and, where the weights fix it (GPT-2's
 * n_positions), another --max-seqlen. *tokens: the file's bos / eos / pad
 * ids, for the run's checkpoints. argv: the command line (to tell a
 * --max-seqlen the user gave from training's default). 0 or an exit code
 * (message printed). */
int train_init_apply(const char *cmd, const char **dir, int argc, char **argv, plan_args *a, dyn_hf_tokens *tokens);

/* The launcher's check of dir against the resolved shape: config.json,
 * every shard's header (missing, extra, wrong-shape tensors, dtypes,
 * truncation). 0, or -1 with one line printed. */
int train_init_check(const char *cmd, const char *dir, const dyn_model_config *model);

#endif
