/* calibrate.h — online calibration of the planner's predictions from what
 * the ranks measure (`dynapipe train --calibrate`).
 *
 * Every rank sums, per iteration, the measured time of its Forward, of its
 * Backward* instructions and of its optimizer step, and the predicted time
 * of the same work (rt_exec_stats.meas_ms / pred_ms; the planner's
 * optimizer prediction); rank 0 gathers them with the metrics and feeds
 * one record per pipeline rank and iteration here, with the factors the
 * prediction already carried. A record's estimate of the factor is
 * carried × measured / predicted: an absolute estimate, so records of
 * iterations planned before and after a correction mix in one window (no
 * restart, no wait for the new plans). The factor per (pipeline rank,
 * direction) is the median of the last `window` estimates (robust: a rank
 * stalled once by another process moves a median by one place, not the
 * mean by its size), from the first record on, so the first correction
 * follows the first warm iteration; after a level shift (three estimates
 * in a row beyond 15 % of the median) the window restarts from those
 * three, so the factor follows in three iterations. When some factor moved by more than
 * `threshold` (relative) from the one applied, all are posted to the
 * planner thread (rt_planner_set_time_scale), which applies them before
 * its next batch.
 *
 * Why per pipeline rank, not per layer kind: an instruction runs a whole
 * stage (several layer kinds), so per-kind factors are not identifiable
 * from per-stage records unless stages differ in their mix, which they
 * barely do (the embedding and the head are small); a factor per rank
 * absorbs what differs between ranks (the last stage's head, two ranks
 * sharing cores and memory bandwidth) and the profile keeps the relative
 * costs of shapes and kinds. */
#ifndef DYN_RUNTIME_CALIBRATE_H
#define DYN_RUNTIME_CALIBRATE_H

#include <stdint.h>

/* Directions: forward, backward (whole or both halves), optimizer step. */
enum { RT_CALIB_FWD, RT_CALIB_BWD, RT_CALIB_OPT, RT_CALIB_DIRS };

typedef struct rt_calib rt_calib;

/* n_ranks >= 1 pipeline ranks; window >= 1 records per (rank, direction);
 * threshold >= 0 (e.g. 0.03). NULL on bad arguments or out of memory. */
rt_calib *rt_calib_create(int n_ranks, int window, double threshold);
void rt_calib_free(rt_calib *c);

/* Pipeline rank r's iteration: measured and predicted ms per direction,
 * and the factor the prediction carried (1 before any correction).
 * Directions with a prediction or measurement <= 0 (or a non-finite
 * ratio) are skipped; so is an r out of range. */
void rt_calib_add(rt_calib *c, int r, const double meas_ms[RT_CALIB_DIRS], const double pred_ms[RT_CALIB_DIRS],
                  const double carried[RT_CALIB_DIRS]);

/* The factors the planner should now carry, factor[r * RT_CALIB_DIRS + d]
 * (1 where a (rank, direction) has no record yet), and 1 when one of them
 * differs from the applied one by more than the threshold (then they count
 * as applied). 0 otherwise (factor untouched). */
int rt_calib_update(rt_calib *c, double *factor);

#endif
