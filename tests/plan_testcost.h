/* plan_testcost.h — a small, monotone micro-batch cost function for the
 * planner tests: time has a fixed per-micro-batch overhead, a per-token term
 * and an attention term quadratic in length, so merging samples saves
 * overhead but padding costs; memory is linear in tokens plus attention.
 * Used through dyn_planner_create_custom, so the tests need no cost model. */
#ifndef DYN_PLAN_TESTCOST_H
#define DYN_PLAN_TESTCOST_H

#include "dynapipe/plan.h"

typedef struct test_cost {
    double overhead_ms;  /* per micro-batch */
    double token_ms;     /* per padded token */
    double attn_ms;      /* per attended (query, key) pair, in units of 1e-3 */
    double token_mb;     /* stored activation per padded token */
} test_cost;

static dyn_status test_cost_fn(void *ctx, const dyn_mb_shape *mb, dyn_mb_cost *out, dyn_error *err)
{
    (void)err;
    const test_cost *c = ctx;
    double tokens = (double)mb->rows * (mb->enc_len + mb->dec_len);
    double attn = mb->enc_attn ? (double)mb->enc_attn : (double)mb->rows * mb->enc_len * mb->enc_len;
    if (mb->dec_len) {
        attn += mb->dec_attn ? (double)mb->dec_attn : (double)mb->rows * mb->dec_len * mb->dec_len;
        attn += mb->cross_attn ? (double)mb->cross_attn : (double)mb->rows * mb->dec_len * mb->enc_len;
    }
    out->time_ms = c->overhead_ms + c->token_ms * tokens + c->attn_ms * 1e-3 * attn;
    out->stored_mb = c->token_mb * tokens;
    out->peak_mb = out->stored_mb * 1.25 + 1e-4 * attn;
    return DYN_OK;
}

static const test_cost test_cost_default = {2.0, 0.01, 0.02, 0.05};

#endif
