/* sim_internal.h — what the simulator's files share and the public API does
 * not show: the last run's results for the trace and SVG writers. */
#ifndef DYN_SIM_INTERNAL_H
#define DYN_SIM_INTERNAL_H

#include "dynapipe/sim.h"

/* Results of sim's last successful run, or NULL before the first. */
const dyn_sim_result *sim_last_result(const dyn_sim *sim);

#endif
