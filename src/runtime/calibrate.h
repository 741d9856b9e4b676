/* calibrate.h — online calibration of the planner's cost model from what
 * the ranks measure (`dynapipe train --calibrate`).
 *
 * Every rank sums, per iteration, the measured time of its Forward and of
 * its Backward* instructions and the plan's predicted time of the same
 * instructions (rt_exec_stats.meas_ms / pred_ms); rank 0 gathers them with
 * the metrics and feeds one record per rank and iteration here. The
 * correction per direction is the median of measured / predicted over the
 * last `window` records (robust: a rank stalled once by another process
 * moves a median by one place, not the mean by its size), and the planner
 * thread applies it to every layer kind of its cost model before planning
 * the next iteration (rt_planner_set_time_scale), when it moved by more
 * than `threshold` (relative) since the last time it was applied.
 *
 * Why one factor for all kinds: an instruction runs a whole stage (several
 * layer kinds), so per-kind factors are not identifiable from per-stage
 * records unless stages differ in their mix; the profile gets the relative
 * costs of kinds right, calibration tracks what the machine does now.
 * Planning cost: applying a factor rebuilds the planner's cost cache,
 * which the planner thread does ahead of training (it never blocks a rank
 * unless planning exceeds an iteration; plan_ms / plan_wait_ms in metrics
 * show it). */
#ifndef DYN_RUNTIME_CALIBRATE_H
#define DYN_RUNTIME_CALIBRATE_H

#include <stdint.h>

typedef struct rt_calib rt_calib;

/* window >= 1 records per direction; threshold >= 0 (e.g. 0.03). */
rt_calib *rt_calib_create(int window, double threshold);
void rt_calib_free(rt_calib *c);

/* One rank's iteration: measured and predicted ms of Forward [0] and
 * Backward* [1]. Records with a prediction <= 0 are ignored. */
void rt_calib_add(rt_calib *c, const double meas_ms[2], const double pred_ms[2]);

/* The factor per direction the planner's model should now carry (the
 * product of the factor it carries and the median ratio), and 1 when it
 * differs from the applied one by more than the threshold (then it counts
 * as applied and the window restarts: older records measured against the
 * old factor). 0 otherwise. */
int rt_calib_update(rt_calib *c, double factor[2]);

#endif
