/* optim.c — AdamW, global-norm clipping and the warm-up + cosine schedule.
 * See optim.h for the decay policy and the determinism argument. */
#include "model/optim.h"
#include "model/threads.h" /* defines: dyn_par */

#include <math.h>

dyn_adamw_config dyn_adamw_default(void)
{
    dyn_adamw_config c = {0.9f, 0.999f, 1e-8f, 0.01f};
    return c;
}

void dyn_adamw_update(float *p, const float *g, float *m, float *v, size_t n, int64_t t, float lr,
                      const dyn_adamw_config *cfg, int decay)
{
    /* Bias corrections in double: for small t, 1 - beta^t loses digits in
     * float. */
    double bc1 = 1.0 - pow((double)cfg->beta1, (double)t);
    double bc2 = 1.0 - pow((double)cfg->beta2, (double)t);
    float b1 = cfg->beta1, b2 = cfg->beta2, eps = cfg->eps;
    float wd = decay ? cfg->weight_decay : 0.0f;
    float ibc1 = (float)(1.0 / bc1), ibc2 = (float)(1.0 / bc2);
#pragma omp parallel for schedule(static) if (dyn_par(n))
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi * ibc1, vhat = vi * ibc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    }
}

double dyn_grad_norm(const float *g, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * (double)g[i];
    return sqrt(s);
}

double dyn_grad_clip(float *g, size_t n, double max_norm)
{
    double norm = dyn_grad_norm(g, n);
    if (max_norm > 0.0 && norm > max_norm) {
        float scale = (float)(max_norm / norm);
        for (size_t i = 0; i < n; i++) g[i] *= scale;
    }
    return norm;
}

float dyn_lr_at(const dyn_lr_schedule *s, int64_t step)
{
    if (step < 0) step = 0;
    if (step < s->warmup_steps) return s->max_lr * (float)(step + 1) / (float)s->warmup_steps;
    int64_t decay_steps = s->total_steps - 1 - s->warmup_steps;
    if (step >= s->total_steps - 1 || decay_steps <= 0) return s->min_lr;
    const double pi = 3.14159265358979323846;
    double frac = (double)(step - s->warmup_steps) / (double)decay_steps; /* 0..1 */
    double coeff = 0.5 * (1.0 + cos(pi * frac));                          /* 1..0 */
    return (float)(s->min_lr + coeff * (s->max_lr - s->min_lr));
}
