/* optim.h — training pieces shared by every model: AdamW with decoupled
 * weight decay, global gradient-norm clipping and the learning-rate schedule
 * (linear warm-up, then cosine decay to a floor).
 *
 * All functions work on plain float arrays so that the same code updates a
 * whole model (one flat parameter buffer) or one pipeline stage's slice of it.
 * Every loop is elementwise or a sequential reduction in double, so the
 * result does not depend on the thread count.
 *
 * Which parameters get weight decay: matrices (linear weights, embeddings,
 * the LM head, T5 relative-bias tables) do; biases and norm gains do not —
 * decaying a LayerNorm/RMSNorm gain pulls it towards 0, i.e. towards
 * switching the layer off, which is not the regularisation intended. The
 * caller passes the decay flag per tensor (see dyn_model_param_tensors). */
#ifndef DYN_MODEL_OPTIM_H
#define DYN_MODEL_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "dynapipe/common.h"

typedef struct dyn_adamw_config {
    float beta1;        /* first-moment decay, e.g. 0.9 */
    float beta2;        /* second-moment decay, e.g. 0.95 or 0.999 */
    float eps;          /* added to sqrt(v_hat), e.g. 1e-8 */
    float weight_decay; /* decoupled decay coefficient, e.g. 0.1 */
} dyn_adamw_config;

/* Defaults: beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 0.01. */
dyn_adamw_config dyn_adamw_default(void);

/* One AdamW step on n parameters (t = step number, 1-based, for the bias
 * correction; lr the learning rate of this step). With decay != 0 the
 * parameter first shrinks by lr * weight_decay * p (decoupled, Loshchilov &
 * Hutter), then moves by -lr * m_hat / (sqrt(v_hat) + eps). Updates p, m, v
 * in place; g is read only. */
void dyn_adamw_update(float *p, const float *g, float *m, float *v, size_t n, int64_t t, float lr,
                      const dyn_adamw_config *cfg, int decay);

/* Global L2 norm of n gradient values (accumulated in double, in order). */
double dyn_grad_norm(const float *g, size_t n);

/* Global-norm clipping: if norm > max_norm (> 0), scale g by
 * max_norm / norm. Returns the norm before clipping. max_norm <= 0 disables
 * clipping (the norm is still returned). */
double dyn_grad_clip(float *g, size_t n, double max_norm);

/* Learning-rate schedule: lr rises linearly from max_lr/warmup to max_lr over
 * steps 0..warmup-1 (step s gets max_lr * (s+1)/warmup), then follows a
 * cosine from max_lr down to min_lr reached at step total-1 and held after. */
typedef struct dyn_lr_schedule {
    float max_lr;
    float min_lr;
    int64_t warmup_steps; /* >= 0 */
    int64_t total_steps;  /* > warmup_steps */
} dyn_lr_schedule;

/* Learning rate for 0-based step `step`. */
float dyn_lr_at(const dyn_lr_schedule *s, int64_t step);

#endif
