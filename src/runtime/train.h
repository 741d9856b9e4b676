/* train.h — `dynapipe train`: pipeline-parallel training on MPI ranks that
 * execute the planner's validated execution plans.
 *
 * One MPI rank per pipeline stage per data-parallel replica (group.h). World
 * rank 0 also runs the planner thread, which plans global batches ahead
 * (sampler -> micro-batches -> schedule -> per-replica plans) and makes no
 * MPI calls; its main thread sends each rank its work (work.h) with
 * non-blocking MPI while the previous iteration trains. Every rank
 * interprets its instruction list (exec.h), then the step: gradients of
 * shared tensors and of data-parallel replicas are summed, the global
 * gradient norm clipped, AdamW applied (train.c, "The step"). */
#ifndef DYN_RUNTIME_TRAIN_H
#define DYN_RUNTIME_TRAIN_H

#include <stdint.h>

#include "dynapipe/common.h"
#include "dynapipe/pipeline.h" /* defines: DYN_SCHEDULE_AUTO */
#include "dynapipe/plan.h"
#include "model/hf_config.h" /* defines: dyn_hf_tokens */
#include "model/optim.h" /* defines: dyn_adamw_config, dyn_lr_schedule */


typedef struct dyn_train_options {
    /* model and costs */
    dyn_model_config model;  /* shape; model.max_seqlen = the run's sequence limit */
    dyn_machine machine;     /* the planner's machine description */
    const char *cost_table;  /* cost table file, or NULL for the analytic model on machine */
    /* planning */
    dyn_plan_options plan;   /* method, stages S, dp D, chunks, memory, rounding, baseline knobs */
    dyn_schedule schedule;        /* dyn_schedule or DYN_SCHEDULE_AUTO (pipeline.h) */
    int32_t order_groups;    /* auto's order search, 1..4 */
    int32_t plan_ahead;      /* global batches planned ahead of training, >= 1 */
    /* data */
    const char *data_spec;   /* a token corpus (corpus.h): builtin[:SEED], FILE.jsonl, Megatron PREFIX */
    int32_t n_samples;       /* samples of the built-in dataset */
    int32_t split;           /* dyn_corpus_split of the built-in dataset */
    int32_t truncate;        /* clip samples over max_seqlen instead of failing */
    const char *tokenizer;   /* text data: tokenizer.json, SentencePiece model or model folder; NULL: bytes */
    const char *template_str; /* text pairs: "...{input}...{target}..." (corpus.h, dyn_codec); NULL: none */
    int64_t global_batch_tokens; /* input + target tokens per global batch */
    /* the training order (data.h dyn_sampler_create_ex): a permutation per
     * epoch drawn from (seed, epoch), the held-out fraction never trained */
    int32_t shuffle;         /* 1: shuffle every epoch with `seed`; 0: dataset order */
    int64_t epochs;          /* passes over the data; 0: no limit (steps decide). The
                              * command sets steps to the first end of the two */
    double eval_split;       /* fraction in [0, 1) of the data held out of training
                              * (dyn_eval_split: the same samples whatever the seed) */
    const char *eval_data;   /* --eval-every's validation corpus; NULL: the held-out split */
    const char *dump_order;  /* JSONL: the samples of every step, in training order (rank 0) */
    /* training */
    int64_t steps;
    uint64_t seed;           /* model initialisation and the shuffle */
    dyn_lr_schedule lr;
    dyn_adamw_config adamw;
    double clip_norm;        /* global gradient-norm clip; <= 0: none */
    int32_t threads;         /* per rank; 0: cores / ranks on this host, at least 1 */
    double timeout_s;        /* deadline of every wait (message, plan, collective) */
    int32_t calibrate;       /* 1: online calibration of the planner's costs (calibrate.h) */
    int32_t calibrate_window; /* records (ranks x iterations) in its median, >= 1 */
    /* outputs (written at the end, only if the run succeeds) */
    const char *metrics_path; /* JSONL, one record per iteration */
    const char *trace_path;   /* Chrome/Perfetto trace of every rank */
    const char *save_path;    /* final weights, one safetensors file (Hugging Face names) */
    /* checkpoints (checkpoint.h) and evaluation */
    const char *save_dir;     /* checkpoint root: every save_every steps, at the end, and on
                               * SIGINT/SIGTERM (at the next iteration boundary) */
    int64_t save_every;       /* steps between checkpoints; 0: only at the end and on a signal */
    const char *resume_dir;   /* continue from this checkpoint (root or step folder) */
    const char *init_dir;     /* start from this Hugging Face model folder's weights
                               * (model/hf_load.h): step 0, fresh optimizer */
    int32_t have_tokens;      /* 1: tokens are the --init folder's config.json ids (a resumed
                               * run takes its checkpoint's); 0: the byte vocabulary's */
    dyn_hf_tokens tokens;     /* bos / eos / pad ids a checkpoint's config.json names (-1: null) */
    int64_t eval_every;       /* eval loss every N steps into the metrics; 0: never. On
                               * eval_data, else the eval_split held out, else the
                               * built-in held-out stream, else the training file
                               * itself (then said: "train-data loss") */
    int32_t eval_samples;     /* samples per evaluation (the first of the eval set) */
    int32_t progress;         /* 1 live line, 0 plain lines, -1 quiet; set from isatty */
    int32_t oversubscribe_ok; /* launch.c: more ranks than LAUNCH_RANKS_PER_SLOT x slots (or cores) */
    int32_t verbose;
    /* fault injection for the tests: rank kill_rank raises SIGKILL at the start of
     * step kill_step (its 1st instruction); hang_rank stops answering at hang_step */
    int32_t kill_rank, kill_step, hang_rank, hang_step;
} dyn_train_options;

/* Defaults for everything but the model and machine. */
void dyn_train_options_default(dyn_train_options *o);

/* Run training on this MPI rank (the process must have been started by
 * mpirun with stages * dp ranks). argc/argv go to MPI_Init. Returns the
 * exit status: 0, or 1 after printing one error line (a failure on one rank
 * aborts the whole job with MPI_Abort). */
int dyn_train_rank_main(const dyn_train_options *o, int *argc, char ***argv);

/* Not under mpirun: run this program as `mpirun -np stages*dp` with the
 * flags this machine needs (oversubscription when ranks exceed cores;
 * --allow-run-as-root and the OMPI_ALLOW_RUN_AS_ROOT variables as root),
 * same arguments, as a supervised child (signals forwarded, stderr
 * filtered, killed 10 s after a rank reported a fatal error: launch.c).
 * hostfile: passed to mpirun with --map-by slot (NULL: this host). Returns
 * mpirun's exit status, or 1 with a message when it cannot start. */
int dyn_train_launch(const dyn_train_options *o, const char *hostfile, int argc, char **argv);
/* What dyn_train_launch checks before it starts anything: the hostfile,
 * and the rank count against the room the hosts have. 0, or an exit code
 * after one line on stderr (1: a bad hostfile, 2: too many ranks). */
int dyn_train_launch_check(const dyn_train_options *o, const char *hostfile);

#endif
