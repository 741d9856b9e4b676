/* plan.c — execution-plan basics: names, options, freeing, stage-cost
 * arrays, the schedule dispatcher, the static memory model, and the per-rank
 * order helpers the generators share (sched_internal.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched/instr.h"          /* defines: sched_op, sched_mem_step */
#include "sched/sched_internal.h" /* defines: sched_orders_*, sched_check_inputs, sched_stored */
#include "util/util.h"            /* defines: dyn_calloc */

/* The one name table of dyn_schedule, "auto" included (the CLI, the
 * pipeline and the Python binding all parse and print through it). */
static const char *const schedule_names[DYN_SCHEDULE_AUTO + 1] = {"1f1b", "cyclic", "wait-free-cyclic",
                                                                  "interleaved", "zb", "auto"};

const char *dyn_schedule_name(dyn_schedule s)
{
    return (unsigned)s <= DYN_SCHEDULE_AUTO ? schedule_names[s] : "?";
}

dyn_status dyn_schedule_parse(const char *name, dyn_schedule *out, dyn_error *err)
{
    for (int i = 0; i <= DYN_SCHEDULE_AUTO; i++) {
        if (name != NULL && strcmp(name, schedule_names[i]) == 0) {
            *out = (dyn_schedule)i;
            return DYN_OK;
        }
    }
    return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                         "unknown schedule '%s' (expected 1f1b, cyclic, wait-free-cyclic, "
                         "interleaved, zb or auto)",
                         name ? name : "(null)");
}

void dyn_sched_options_default(dyn_sched_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->n_ranks = 1;
    opt->chunks = 1;
    opt->memory_limit_mb = 0;
    opt->max_in_flight = 0;
    opt->recompute = DYN_RECOMPUTE_NONE;
    opt->replica = 0;
}

void dyn_exec_plan_free(dyn_exec_plan *plan)
{
    if (plan == NULL) return;
    if (plan->ranks != NULL) {
        for (int32_t r = 0; r < plan->n_ranks; r++) free(plan->ranks[r].instrs);
    }
    free(plan->ranks);
    free(plan->stage_rank);
    free(plan->mb_shape);
    memset(plan, 0, sizeof *plan);
}

dyn_status dyn_stage_costs_alloc(dyn_stage_costs *c, int32_t n_microbatches, int32_t n_stages,
                                 dyn_error *err)
{
    memset(c, 0, sizeof *c);
    if (n_microbatches < 1 || n_stages < 1)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "stage costs need >= 1 micro-batch and stage (got %d, %d)",
                             n_microbatches, n_stages);
    size_t n = (size_t)n_microbatches * (size_t)n_stages;
    c->n_microbatches = n_microbatches;
    c->n_stages = n_stages;
    double **arrays[] = {&c->fwd_ms,  &c->bwd_ms,  &c->bwd_input_ms, &c->bwd_weight_ms,
                         &c->stored_mb, &c->peak_mb, &c->send_mb};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        *arrays[i] = dyn_calloc(n, sizeof(double), "stage costs", err);
        if (*arrays[i] == NULL) {
            dyn_stage_costs_free(c);
            return DYN_ERR_NOMEM;
        }
    }
    c->states_mb = dyn_calloc((size_t)n_stages, sizeof(double), "stage states", err);
    if (c->states_mb == NULL) {
        dyn_stage_costs_free(c);
        return DYN_ERR_NOMEM;
    }
    return DYN_OK;
}

void dyn_stage_costs_free(dyn_stage_costs *c)
{
    if (c == NULL) return;
    free(c->fwd_ms);
    free(c->bwd_ms);
    free(c->bwd_input_ms);
    free(c->bwd_weight_ms);
    free(c->stored_mb);
    free(c->peak_mb);
    free(c->send_mb);
    free(c->states_mb);
    memset(c, 0, sizeof *c);
}

/* ---- shared helpers ---------------------------------------------------- */

double sched_stored(const dyn_stage_costs *c, int32_t mb, int32_t s)
{
    return c->stored_mb ? c->stored_mb[(size_t)mb * c->n_stages + s] : 0.0;
}

double sched_peak(const dyn_stage_costs *c, int32_t mb, int32_t s)
{
    return c->peak_mb ? c->peak_mb[(size_t)mb * c->n_stages + s] : 0.0;
}

double sched_rank_states(const dyn_stage_costs *c, int32_t rank, int32_t n_ranks)
{
    double sum = 0;
    if (c->states_mb == NULL) return 0;
    for (int32_t s = rank; s < c->n_stages; s += n_ranks) sum += c->states_mb[s];
    return sum;
}

double sched_unit_ms(const dyn_stage_costs *c, const sched_unit *u)
{
    size_t i = (size_t)u->mb * c->n_stages + u->stage;
    switch (u->kind) {
    case UNIT_F: return c->fwd_ms[i];
    case UNIT_B: return c->bwd_ms[i];
    case UNIT_BI: return c->bwd_input_ms ? c->bwd_input_ms[i] : 0.5 * c->bwd_ms[i];
    default: return c->bwd_weight_ms ? c->bwd_weight_ms[i] : 0.5 * c->bwd_ms[i];
    }
}

dyn_status sched_check_inputs(const dyn_stage_costs *c, const dyn_sched_options *opt,
                              int32_t need_split, dyn_error *err)
{
    if (c == NULL || opt == NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "schedule: costs and options are required");
    if (opt->n_ranks < 1 || opt->chunks < 1)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "schedule: need >= 1 rank and >= 1 chunk (got S=%d, v=%d)",
                             opt->n_ranks, opt->chunks);
    if (c->n_microbatches < 1)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "schedule: no micro-batches");
    if ((int64_t)opt->n_ranks * opt->chunks != c->n_stages)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "schedule: costs have %d stages but S x v = %d x %d", c->n_stages,
                             opt->n_ranks, opt->chunks);
    if ((int64_t)c->n_microbatches * c->n_stages > 4000000)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "schedule: %d micro-batches x %d stages is more than supported (4e6)",
                             c->n_microbatches, c->n_stages);
    if (c->fwd_ms == NULL || c->bwd_ms == NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "schedule: forward and backward times are required");
    if (need_split && (c->bwd_input_ms == NULL || c->bwd_weight_ms == NULL))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "schedule: zero-bubble needs bwd_input_ms and bwd_weight_ms");
    if ((unsigned)opt->recompute >= DYN_RECOMPUTE_COUNT)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "schedule: bad recompute mode %d",
                             (int)opt->recompute);
    size_t n = (size_t)c->n_microbatches * c->n_stages;
    for (size_t i = 0; i < n; i++) {
        double t[4] = {c->fwd_ms[i], c->bwd_ms[i], need_split ? c->bwd_input_ms[i] : 0,
                       need_split ? c->bwd_weight_ms[i] : 0};
        for (int k = 0; k < 4; k++)
            if (!(t[k] >= 0) || !isfinite(t[k]))
                return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                     "schedule: micro-batch %zu stage %zu has a negative or "
                                     "non-finite time",
                                     i / c->n_stages, i % c->n_stages);
    }
    return DYN_OK;
}

dyn_status sched_orders_init(sched_orders *o, int32_t n_ranks, int32_t n_stages, int32_t n_mb,
                             int32_t units_per_pair, dyn_error *err)
{
    memset(o, 0, sizeof *o);
    o->n_ranks = n_ranks;
    o->n_stages = n_stages;
    o->n_mb = n_mb;
    o->n = dyn_calloc((size_t)n_ranks, sizeof *o->n, "schedule order", err);
    o->cap = dyn_calloc((size_t)n_ranks, sizeof *o->cap, "schedule order", err);
    o->u = dyn_calloc((size_t)n_ranks, sizeof *o->u, "schedule order", err);
    if (o->n == NULL || o->cap == NULL || o->u == NULL) {
        sched_orders_free(o);
        return DYN_ERR_NOMEM;
    }
    for (int32_t r = 0; r < n_ranks; r++) {
        int32_t per_rank = (n_stages - r + n_ranks - 1) / n_ranks; /* stages s = r mod S */
        o->cap[r] = per_rank * n_mb * units_per_pair;
        o->u[r] = dyn_calloc((size_t)o->cap[r], sizeof(sched_unit), "schedule order", err);
        if (o->u[r] == NULL) {
            sched_orders_free(o);
            return DYN_ERR_NOMEM;
        }
    }
    return DYN_OK;
}

void sched_orders_free(sched_orders *o)
{
    if (o->u != NULL)
        for (int32_t r = 0; r < o->n_ranks; r++) free(o->u[r]);
    free(o->u);
    free(o->n);
    free(o->cap);
    memset(o, 0, sizeof *o);
}

dyn_status sched_orders_push(sched_orders *o, int32_t r, int32_t kind, int32_t mb, int32_t stage,
                             dyn_error *err)
{
    if (o->n[r] >= o->cap[r])
        return dyn_error_set(err, DYN_ERR_INTERNAL, "schedule: rank %d order overflows (%d units)",
                             r, o->cap[r]);
    sched_unit *u = &o->u[r][o->n[r]++];
    u->kind = kind;
    u->mb = mb;
    u->stage = stage;
    return DYN_OK;
}

/* ---- dispatcher -------------------------------------------------------- */

dyn_status dyn_schedule_build(dyn_schedule kind, const dyn_stage_costs *costs,
                              const dyn_mb_shape *shapes, const dyn_sched_options *opt,
                              dyn_exec_plan *out, dyn_error *err)
{
    memset(out, 0, sizeof *out);
    switch (kind) {
    case DYN_SCHEDULE_1F1B: return sched_build_1f1b(costs, shapes, opt, out, err);
    case DYN_SCHEDULE_CYCLIC: return sched_build_cyclic(costs, shapes, opt, 0, out, err);
    case DYN_SCHEDULE_WAIT_FREE_CYCLIC: return sched_build_cyclic(costs, shapes, opt, 1, out, err);
    case DYN_SCHEDULE_INTERLEAVED: return sched_build_interleaved(costs, shapes, opt, out, err);
    case DYN_SCHEDULE_ZB: return sched_build_zb(costs, shapes, opt, out, err);
    case DYN_SCHEDULE_AUTO: break; /* a choice, not a schedule: sim.h dyn_schedule_auto */
    }
    return dyn_error_set(err, DYN_ERR_INVALID_ARG, "unknown schedule %d", (int)kind);
}

/* ---- static memory ----------------------------------------------------- */

dyn_status dyn_exec_plan_memory(const dyn_exec_plan *plan, const dyn_stage_costs *costs,
                                double *peak_mb, dyn_error *err)
{
    if (plan->ranks == NULL || plan->stage_rank == NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "plan memory: empty plan");
    if (costs->n_microbatches != plan->n_microbatches || costs->n_stages != plan->n_stages)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "plan memory: costs are for %d micro-batches x %d stages, plan for "
                             "%d x %d",
                             costs->n_microbatches, costs->n_stages, plan->n_microbatches,
                             plan->n_stages);
    for (int32_t r = 0; r < plan->n_ranks; r++) {
        double base = 0;
        for (int32_t s = 0; s < plan->n_stages; s++)
            if (plan->stage_rank[s] == r && costs->states_mb) base += costs->states_mb[s];
        double held = 0, peak = base;
        const dyn_rank_plan *rp = &plan->ranks[r];
        for (int32_t i = 0; i < rp->n_instrs; i++) {
            const dyn_instr *in = &rp->instrs[i];
            int32_t mb = in->microbatch, s = in->stage;
            if (!(sched_op(in->op) & SCHED_OP_COMPUTE)) continue;
            if (mb < 0 || mb >= plan->n_microbatches || s < 0 || s >= plan->n_stages)
                return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                     "plan memory: rank %d instr %d has micro-batch %d stage %d "
                                     "out of range",
                                     r, i, mb, s);
            const sched_mem_delta d = sched_mem_step(costs, in);
            double now = base + held + d.transient + d.acquire;
            if (now > peak) peak = now;
            held += d.acquire;
            held -= d.release;
        }
        peak_mb[r] = peak;
    }
    return DYN_OK;
}
