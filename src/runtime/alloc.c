/* alloc.c — the interpreter's grow-only pools, walked from the plans
 * (contract in alloc.h). Mirrors exec.c: acts_get / acts_put for the
 * arenas, slot_take for the buffers. */
#include "runtime/alloc.h"

#include <stdlib.h>
#include <string.h>

#include "dynapipe/sched.h"
#include "util/util.h" /* defines: dyn_calloc, DYN_RESERVE */

#define MB_BYTES (1024.0 * 1024.0)

/* One activation arena of a rank (exec.c's acts pool). */
typedef struct arena {
    double arena_mb;         /* largest stored + working memory held */
    double keep_mb;          /* largest split-backward kept buffer */
    double key;              /* largest rt_arena_key held */
    int32_t mb, stage;       /* what it holds now */
    int used;
} arena;

/* One rank's pools. */
typedef struct rank_pool {
    int32_t n, cap;          /* arenas */
    arena *ar;               /* [cap] */
    int32_t n_slots;
    size_t cap_slots;
    double *slot_mb;         /* [cap_slots], n_slots used: largest tensor held */
    double states_mb;        /* model states of the stages it holds (from its last busy iteration) */
} rank_pool;

/* The layer-to-stage assignment of a plan's stage count (kept_mb of a
 * stage sums its layers'). */
typedef struct assign_cache {
    int have;
    dyn_stage_assignment a;
} assign_cache;

struct rt_alloc {
    const dyn_cost_model *cm;
    int32_t n_ranks, dp;
    rank_pool *pools;        /* [dp * n_ranks] */
    assign_cache assign[2];  /* by n_stages: plain and chunked */
    double split_weight[DYN_LAYER_KIND_COUNT]; /* the run's (dyn_stage_assign_run) */
};

rt_alloc *rt_alloc_create(const dyn_cost_model *cm, int32_t n_ranks, int32_t dp, const double *split_weight,
                          dyn_error *err)
{
    if (cm == NULL || n_ranks < 1 || dp < 1) {
        dyn_error_set(err, DYN_ERR_INVALID_ARG, "allocation model: %d ranks x %d replicas", n_ranks, dp);
        return NULL;
    }
    rt_alloc *a = dyn_calloc(1, sizeof *a, "allocation model", err);
    if (a == NULL) return NULL;
    a->cm = cm;
    a->n_ranks = n_ranks;
    a->dp = dp;
    if (split_weight) memcpy(a->split_weight, split_weight, sizeof a->split_weight);
    a->pools = dyn_calloc((size_t)n_ranks * (size_t)dp, sizeof *a->pools, "allocation model", err);
    if (a->pools == NULL) {
        free(a);
        return NULL;
    }
    return a;
}

void rt_alloc_free(rt_alloc *a)
{
    if (a == NULL) return;
    for (int32_t i = 0; i < a->n_ranks * a->dp; i++) {
        rank_pool *p = &a->pools[i];
        free(p->ar), free(p->slot_mb);
    }
    for (int i = 0; i < 2; i++)
        if (a->assign[i].have) dyn_stage_assignment_free(&a->assign[i].a);
    free(a->pools);
    free(a);
}

rt_alloc *rt_alloc_copy(const rt_alloc *a, dyn_error *err)
{
    rt_alloc *c = rt_alloc_create(a->cm, a->n_ranks, a->dp, a->split_weight, err);
    if (c == NULL) return NULL;
    for (int32_t i = 0; i < a->n_ranks * a->dp; i++) {
        const rank_pool *p = &a->pools[i];
        rank_pool *q = &c->pools[i];
        *q = *p;
        q->ar = NULL, q->slot_mb = NULL, q->cap = p->n; /* the pointers are the copy's own */
        q->cap_slots = (size_t)p->n_slots;
        if (p->n > 0 && (q->ar = dyn_calloc((size_t)p->n, sizeof *q->ar, "allocation model", err)) == NULL) goto fail;
        if (p->n_slots > 0 &&
            (q->slot_mb = dyn_calloc((size_t)p->n_slots, sizeof *q->slot_mb, "allocation model", err)) == NULL)
            goto fail;
        if (p->n > 0) memcpy(q->ar, p->ar, (size_t)p->n * sizeof *q->ar);
        if (p->n_slots > 0) memcpy(q->slot_mb, p->slot_mb, (size_t)p->n_slots * sizeof *q->slot_mb);
    }
    return c; /* the stage-assignment cache refills on first use */
fail:
    rt_alloc_free(c);
    return NULL;
}

static const dyn_stage_assignment *assign_of(rt_alloc *a, int32_t n_stages, dyn_error *err)
{
    for (int i = 0; i < 2; i++)
        if (a->assign[i].have && a->assign[i].a.n_stages == n_stages) return &a->assign[i].a;
    int i = a->assign[0].have ? 1 : 0;
    if (a->assign[i].have) dyn_stage_assignment_free(&a->assign[i].a);
    a->assign[i].have = 0;
    if (dyn_stage_assign_run(a->cm, n_stages, a->split_weight, &a->assign[i].a, err) != DYN_OK) return NULL;
    a->assign[i].have = 1;
    return &a->assign[i].a;
}

/* The best-fitting free arena (a new one when none is), as acts_get does. */
static int32_t arena_take(rank_pool *p, int32_t mb, int32_t stage, double key, dyn_error *err)
{
    int32_t f = -1;
    for (int32_t i = 0; i < p->n; i++)
        if (!p->ar[i].used && (f < 0 || rt_arena_prefer(key, p->ar[i].key, p->ar[f].key))) f = i;
    if (f < 0) {
        if (p->n == p->cap) {
            size_t c = (size_t)p->cap;
            if (DYN_RESERVE(p->ar, c, c ? c + 1 : 8) != 0) {
                dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the allocation model");
                return -1;
            }
            p->cap = (int32_t)c;
        }
        f = p->n++;
        p->ar[f].arena_mb = p->ar[f].keep_mb = p->ar[f].key = 0;
    }
    if (key > p->ar[f].key) p->ar[f].key = key;
    p->ar[f].used = 1;
    p->ar[f].mb = mb;
    p->ar[f].stage = stage;
    return f;
}

static int32_t arena_find(const rank_pool *p, int32_t mb, int32_t stage)
{
    for (int32_t i = 0; i < p->n; i++)
        if (p->ar[i].used && p->ar[i].mb == mb && p->ar[i].stage == stage) return i;
    return -1;
}

static dyn_status slot_grow(rank_pool *p, const dyn_instr *in, dyn_error *err)
{
    if (in->buf_out < 0) return DYN_OK;
    if (in->buf_out >= p->n_slots) {
        int32_t n = in->buf_out + 1;
        if (DYN_RESERVE(p->slot_mb, p->cap_slots, n) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for the allocation model");
        for (int32_t i = p->n_slots; i < n; i++) p->slot_mb[i] = 0;
        p->n_slots = n;
    }
    double mb = (double)in->bytes / MB_BYTES;
    if (mb > p->slot_mb[in->buf_out]) p->slot_mb[in->buf_out] = mb;
    return DYN_OK;
}

/* What a split backward of (shape, stage) keeps from B to W, MB. */
static dyn_status stage_kept(rt_alloc *a, const dyn_stage_assignment *as, const dyn_instr *in, double *out,
                             dyn_error *err)
{
    *out = 0;
    for (int32_t l = as->stage_first[in->stage]; l < as->stage_first[in->stage + 1]; l++) {
        dyn_layer_cost c;
        dyn_status st = dyn_cost_layer(a->cm, (dyn_layer_kind)as->layer_kind[l], &in->shape,
                                       (dyn_recompute)in->recompute, &c, err);
        if (st != DYN_OK) return st;
        *out += c.kept_mb;
    }
    return DYN_OK;
}

/* Rank pool p through its instruction list rk of one iteration (c: the
 * plan's stage costs, as: its layer assignment, S: its stages), as the
 * interpreter grows its arenas and buffer slots (exec.c). */
static dyn_status pool_replay(rt_alloc *a, rank_pool *p, const dyn_rank_plan *rk, const dyn_stage_costs *c,
                              const dyn_stage_assignment *as, int32_t S, dyn_error *err)
{
    for (int32_t i = 0; i < p->n; i++) p->ar[i].used = 0; /* as exec.c's prepare */
    for (int32_t i = 0; i < rk->n_instrs; i++) {
        const dyn_instr *in = &rk->instrs[i];
        size_t k = (size_t)in->microbatch * (size_t)S + (size_t)in->stage;
        int32_t f;
        dyn_status st = DYN_OK;
        switch (in->op) {
        case DYN_OP_FORWARD:
            if ((f = arena_take(p, in->microbatch, in->stage, rt_arena_key(&in->shape), err)) < 0) return err->code;
            if (c->stored_mb[k] + c->peak_mb[k] > p->ar[f].arena_mb) p->ar[f].arena_mb = c->stored_mb[k] + c->peak_mb[k];
            st = slot_grow(p, in, err);
            break;
        case DYN_OP_BACKWARD:
        case DYN_OP_BACKWARD_WEIGHT:
            st = slot_grow(p, in, err);
            if ((f = arena_find(p, in->microbatch, in->stage)) >= 0) p->ar[f].used = 0;
            break;
        case DYN_OP_BACKWARD_INPUT: {
            double kept = 0;
            st = slot_grow(p, in, err);
            if (st == DYN_OK) st = stage_kept(a, as, in, &kept, err);
            if (st == DYN_OK && (f = arena_find(p, in->microbatch, in->stage)) >= 0 && kept > p->ar[f].keep_mb)
                p->ar[f].keep_mb = kept;
            break;
        }
        case DYN_OP_RECV_ACT_START:
        case DYN_OP_RECV_GRAD_START: /* LOAD_INPUT's slot holds nothing (exec.c) */
            st = slot_grow(p, in, err);
            break;
        default:
            break;
        }
        if (st != DYN_OK) return st;
    }
    return DYN_OK;
}

/* Everything pool p holds, MB: states, arenas with what they keep, slots. */
static double pool_total(const rank_pool *p)
{
    double total = p->states_mb;
    for (int32_t i = 0; i < p->n; i++) total += p->ar[i].arena_mb + p->ar[i].keep_mb;
    for (int32_t i = 0; i < p->n_slots; i++) total += p->slot_mb[i];
    return total;
}

dyn_status rt_alloc_iteration(rt_alloc *a, int32_t replica, const dyn_replica_plan *rp, double *peak_mb,
                              dyn_error *err)
{
    if (replica < 0 || replica >= a->dp)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "allocation model: replica %d of %d", replica, a->dp);
    const dyn_exec_plan *plan = &rp->plan;
    const dyn_stage_costs *c = &rp->costs;
    int busy = rp->n_microbatches > 0;
    if (busy && plan->n_ranks != a->n_ranks)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "allocation model: a plan of %d ranks, %d expected",
                             plan->n_ranks, a->n_ranks);
    const dyn_stage_assignment *as = busy ? assign_of(a, plan->n_stages, err) : NULL;
    if (busy && as == NULL) return err->code;
    int32_t S = busy ? plan->n_stages : 0;
    for (int32_t r = 0; r < a->n_ranks; r++) {
        rank_pool *p = &a->pools[(size_t)replica * (size_t)a->n_ranks + (size_t)r];
        if (busy) {
            dyn_status st = pool_replay(a, p, &plan->ranks[r], c, as, S, err);
            if (st != DYN_OK) return st;
            p->states_mb = 0;
            for (int32_t s = 0; s < S; s++)
                if (plan->stage_rank[s] == r) p->states_mb += c->states_mb[s];
        }
        peak_mb[r] = pool_total(p);
    }
    return DYN_OK;
}
