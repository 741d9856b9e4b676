/* report.h — `dynapipe train`'s records of its iterations and their
 * outputs: the progress line on stderr, the metrics file (one JSON object
 * per iteration, written atomically at the end: docs/architecture.md,
 * "Metrics") and the Perfetto/Chrome trace with one track per rank. */
#ifndef DYN_RUNTIME_REPORT_H
#define DYN_RUNTIME_REPORT_H

#include <stdint.h>

#include "dynapipe/common.h"
#include "runtime/calibrate.h" /* defines: RT_CALIB_DIRS */
#include "runtime/exec.h"
#include "runtime/group.h"

/* One iteration as rank 0 gathered it from every rank. */
typedef struct rt_iter {
    int64_t step;
    double loss, iteration_ms, predicted_ms, bubble, plan_ms, plan_wait_ms, comm_wait_ms, comm_mb, lr, grad_norm;
    double exec_ms, step_ms; /* slowest rank's plan interpretation and optimizer step (sums, norm, AdamW) */
    double makespan_ms;      /* the plan's simulated makespan (predicted_ms less the fixed per-iteration part) */
    double ideal_ms;         /* the global batch's ideal bound (pipeline.h dyn_ideal_bound), ms */
    double efficiency;       /* ideal_ms / iteration_ms (measured); 0 when not timed */
    double ideal_rated_ms;   /* the bound at this run's measured rates: its compute part x (measured /
                              * predicted Forward + Backward time, summed over ranks), its optimizer
                              * step x (measured / predicted slowest step); = ideal_ms when the cost
                              * model matches the machine */
    double efficiency_rated; /* ideal_rated_ms / iteration_ms: the pipeline's own losses alone */
    int64_t tokens, target_tokens;
    int32_t schedule, n_mb;
    double eval_loss;     /* eval loss after this step (--eval-every); < 0: not evaluated */
    double eval_before;   /* the first step of a new run (not a resume) with --eval-every: the eval
                           * loss of the weights it started from (random or --init's), on the same
                           * set, before the step; < 0: none */
    const char *eval_on;  /* what eval_loss is on: "held-out", "validation" or "train-data" */
    double epoch;         /* epochs done after this step: samples trained / samples per epoch */
    double *peak_mb;      /* [world] allocated per rank */
    double *pred_peak_mb; /* [world] */
    double *compute_ms;   /* [world][2]: Forward + Backward* time per rank, measured and predicted */
    double *time_scale;   /* [stages][RT_CALIB_DIRS]: the calibration factors the plan carried per
                           * pipeline rank (--calibrate), else NULL */
} rt_iter;

/* The progress line of iteration it of `steps` (on a terminal rewritten in
 * place until the last). */
void rt_report_progress(const rt_iter *it, int64_t steps, int tty);

/* The end-of-run line on stderr (rank 0): over iterations [first, end),
 * skipping the first when there are more (it allocates), the median
 * tokens/s and iteration time, and the efficiency as the sum of the ideal
 * bounds over the sum of the measured iteration times, and the last eval
 * loss, named for what it is on (and the one before the first step, when
 * there is one). Nothing when the range is empty. */
void rt_report_summary(const rt_iter *iters, int64_t first, int64_t end);

/* Iterations [first, end) of iters into path (rank 0). */
dyn_status rt_report_metrics(const char *path, const rt_iter *iters, int64_t first, int64_t end,
                             const dyn_rt_group *g, dyn_error *err);

/* --dump-order: iterations [first, end) as JSONL into path (rank 0), one
 * line per step {"step": k, "epoch": e, "samples": [dataset indices in
 * training order]}; order[k] (order_n[k] ids) the samples of step k,
 * pos_after[k] the sampler position after it, per_epoch the samples of an
 * epoch (e = (pos_after[k] - order_n[k]) / per_epoch). Atomic, as the
 * metrics. */
dyn_status rt_report_order(const char *path, int32_t *const *order, const int32_t *order_n, const int64_t *pos_after,
                           int32_t per_epoch, int64_t first, int64_t end, dyn_error *err);

/* Every rank's recorded instructions (rt_exec_events) gathered on world
 * rank 0 and written to path there; every rank calls it (waits end after
 * timeout_s). */
dyn_status rt_report_trace(const char *path, const rt_exec *x, const dyn_rt_group *g, double timeout_s, dyn_error *err);

#endif
