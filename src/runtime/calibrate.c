/* calibrate.c — the online calibration's windows of factor estimates per
 * (pipeline rank, direction) and their medians (contract in calibrate.h). */
#include "runtime/calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h" /* defines: dyn_median */

struct rt_calib {
    int n_ranks, window;
    double threshold;
    int *n, *next;     /* [n_ranks * DIRS]: estimates held, ring position */
    double *est;       /* [n_ranks * DIRS][window]: carried x measured / predicted */
    double *applied;   /* [n_ranks * DIRS]: factor the planner carries */
    double *scratch;   /* [window] for the median */
};

rt_calib *rt_calib_create(int n_ranks, int window, double threshold)
{
    if (n_ranks < 1 || window < 1 || !(threshold >= 0)) return NULL;
    rt_calib *c = calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    size_t cells = (size_t)n_ranks * RT_CALIB_DIRS;
    c->n_ranks = n_ranks;
    c->window = window;
    c->threshold = threshold;
    c->n = calloc(cells, sizeof(int));
    c->next = calloc(cells, sizeof(int));
    c->est = calloc(cells * (size_t)window, sizeof(double));
    c->applied = calloc(cells, sizeof(double));
    c->scratch = calloc((size_t)window, sizeof(double));
    if (!c->n || !c->next || !c->est || !c->applied || !c->scratch) {
        rt_calib_free(c);
        return NULL;
    }
    for (size_t i = 0; i < cells; i++) c->applied[i] = 1.0;
    return c;
}

void rt_calib_free(rt_calib *c)
{
    if (c == NULL) return;
    free(c->n);
    free(c->next);
    free(c->est);
    free(c->applied);
    free(c->scratch);
    free(c);
}

/* Median of v[0..n) (left in place; sorted in scratch by dyn_median). */
static double median(const double *v, int n, double *scratch)
{
    memcpy(scratch, v, (size_t)n * sizeof *v);
    return dyn_median(scratch, n);
}

/* A level shift (the machine got slower or faster and stays so): the last
 * SHIFT_RUN estimates of a cell all beyond SHIFT_RATIO of the median of
 * the window. Then the window keeps only them, so the median follows in
 * SHIFT_RUN records instead of half a window; a single stall never
 * triggers it. */
#define SHIFT_RUN 3
#define SHIFT_RATIO 1.15

static void shift_check(rt_calib *c, size_t cell)
{
    int n = c->n[cell], W = c->window;
    if (n <= SHIFT_RUN || W <= SHIFT_RUN) return;
    double *e = c->est + cell * (size_t)W;
    double m = median(e, n, c->scratch);
    double last[SHIFT_RUN];
    int up = 0, down = 0;
    for (int i = 0; i < SHIFT_RUN; i++) {
        last[i] = e[((c->next[cell] - SHIFT_RUN + i) % W + W) % W];
        up += last[i] > m * SHIFT_RATIO;
        down += last[i] < m / SHIFT_RATIO;
    }
    if (up < SHIFT_RUN && down < SHIFT_RUN) return;
    memcpy(e, last, sizeof last);
    c->n[cell] = SHIFT_RUN;
    c->next[cell] = SHIFT_RUN % W;
}

void rt_calib_add(rt_calib *c, int r, const double meas_ms[RT_CALIB_DIRS], const double pred_ms[RT_CALIB_DIRS],
                  const double carried[RT_CALIB_DIRS])
{
    if (r < 0 || r >= c->n_ranks) return;
    for (int d = 0; d < RT_CALIB_DIRS; d++) {
        double e = carried[d] * meas_ms[d] / pred_ms[d];
        if (!(pred_ms[d] > 0) || !(meas_ms[d] > 0) || !(carried[d] > 0) || !isfinite(e) || !(e > 0)) continue;
        size_t cell = (size_t)r * RT_CALIB_DIRS + (size_t)d;
        c->est[cell * (size_t)c->window + (size_t)c->next[cell]] = e;
        c->next[cell] = (c->next[cell] + 1) % c->window;
        if (c->n[cell] < c->window) c->n[cell]++;
        shift_check(c, cell);
    }
}

int rt_calib_update(rt_calib *c, double *factor)
{
    size_t cells = (size_t)c->n_ranks * RT_CALIB_DIRS;
    int moved = 0;
    for (size_t i = 0; i < cells; i++) {
        if (c->n[i] == 0) continue;
        double f = median(c->est + i * (size_t)c->window, c->n[i], c->scratch);
        moved |= fabs(f / c->applied[i] - 1.0) > c->threshold;
    }
    if (!moved) return 0;
    for (size_t i = 0; i < cells; i++) {
        if (c->n[i] > 0) c->applied[i] = median(c->est + i * (size_t)c->window, c->n[i], c->scratch);
        factor[i] = c->applied[i];
    }
    return 1;
}
