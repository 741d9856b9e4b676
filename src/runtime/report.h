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
    int64_t tokens, target_tokens;
    int32_t schedule, n_mb;
    double eval_loss;     /* held-out loss after this step (--eval-every); < 0: not evaluated */
    double *peak_mb;      /* [world] allocated per rank */
    double *pred_peak_mb; /* [world] */
    double *compute_ms;   /* [world][2]: Forward + Backward* time per rank, measured and predicted */
    double *time_scale;   /* [stages][RT_CALIB_DIRS]: the calibration factors the plan carried per
                           * pipeline rank (--calibrate), else NULL */
} rt_iter;

/* The progress line of iteration it of `steps` (on a terminal rewritten in
 * place until the last). */
void rt_report_progress(const rt_iter *it, int64_t steps, int tty);

/* Iterations [first, end) of iters into path (rank 0). */
dyn_status rt_report_metrics(const char *path, const rt_iter *iters, int64_t first, int64_t end,
                             const dyn_rt_group *g, dyn_error *err);

/* Every rank's recorded instructions (rt_exec_events) gathered on world
 * rank 0 and written to path there; every rank calls it (waits end after
 * timeout_s). */
dyn_status rt_report_trace(const char *path, const rt_exec *x, const dyn_rt_group *g, double timeout_s, dyn_error *err);

#endif
