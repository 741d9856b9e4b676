/* calibrate.c — the online calibration's record windows and median fit
 * (contract in calibrate.h). */
#include "runtime/calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct rt_calib {
    int window, n[2], next[2];
    double threshold;
    double applied[2]; /* factor the planner's model carries */
    double *ratio[2];  /* [window] ring of measured / predicted */
    double *scratch;   /* [window] for the median */
};

rt_calib *rt_calib_create(int window, double threshold)
{
    if (window < 1 || !(threshold >= 0)) return NULL;
    rt_calib *c = calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    c->window = window;
    c->threshold = threshold;
    c->applied[0] = c->applied[1] = 1.0;
    c->ratio[0] = calloc((size_t)window, sizeof(double));
    c->ratio[1] = calloc((size_t)window, sizeof(double));
    c->scratch = calloc((size_t)window, sizeof(double));
    if (!c->ratio[0] || !c->ratio[1] || !c->scratch) {
        rt_calib_free(c);
        return NULL;
    }
    return c;
}

void rt_calib_free(rt_calib *c)
{
    if (c == NULL) return;
    free(c->ratio[0]);
    free(c->ratio[1]);
    free(c->scratch);
    free(c);
}

void rt_calib_add(rt_calib *c, const double meas_ms[2], const double pred_ms[2])
{
    for (int d = 0; d < 2; d++) {
        if (!(pred_ms[d] > 0) || !(meas_ms[d] > 0) || !isfinite(meas_ms[d] / pred_ms[d])) continue;
        c->ratio[d][c->next[d]] = meas_ms[d] / pred_ms[d];
        c->next[d] = (c->next[d] + 1) % c->window;
        if (c->n[d] < c->window) c->n[d]++;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n, double *scratch)
{
    memcpy(scratch, v, (size_t)n * sizeof *v);
    qsort(scratch, (size_t)n, sizeof *scratch, cmp_double);
    return n % 2 ? scratch[n / 2] : 0.5 * (scratch[n / 2 - 1] + scratch[n / 2]);
}

int rt_calib_update(rt_calib *c, double factor[2])
{
    /* Wait for a few records: one iteration's ranks are not a trend. */
    int need = c->window < 4 ? c->window : 4;
    if (c->n[0] < need || c->n[1] < need) return 0;
    double f[2];
    int moved = 0;
    for (int d = 0; d < 2; d++) {
        f[d] = c->applied[d] * median(c->ratio[d], c->n[d], c->scratch);
        moved |= fabs(f[d] / c->applied[d] - 1.0) > c->threshold;
    }
    if (!moved) return 0;
    for (int d = 0; d < 2; d++) {
        c->applied[d] = factor[d] = f[d];
        c->n[d] = c->next[d] = 0;
    }
    return 1;
}
