/*
 * sim.h — event-driven simulator of an execution plan, its trace and SVG
 * outputs, and the "what-if" micro-batch file.
 *
 * The simulator runs the very plan the runtime would run (dyn_exec_plan):
 * every rank executes its instructions in order; compute instructions take
 * the time dyn_stage_costs gives; a message takes latency + bytes / bandwidth
 * of the link model once both its send and its receive are posted; FINISH
 * instructions wait for their message. It reports makespan, busy time and
 * peak memory per rank, the bubble fraction, throughput and one event
 * (start, end, memory) per instruction. A plan that cannot make progress is reported as a
 * deadlock (DYN_ERR_INVALID_ARG naming the blocked ranks), never a hang.
 *
 * Semantics in detail (docs/simulator.md has the long form):
 *   - FORWARD, BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT of (mb, stage) take
 *     fwd_ms / bwd_ms / bwd_input_ms / bwd_weight_ms[mb * n_stages + stage].
 *     The costs are those of one recompute mode; an instruction's recompute
 *     field is not consulted (build the costs for the mode the plan uses).
 *   - LOAD_INPUT, *_START and FREE_BUFFER take no rank time.
 *   - Cost: O(N log R) for N instructions on R ranks, plus a linear checking
 *     and matching pass.
 *   - Messages are matched per (kind act|grad, sender, receiver) in posting
 *     order, like MPI with one tag per kind (the contract of sched.h); a
 *     pair naming different micro-batches or bytes is an error. A transfer starts
 *     when both sides are posted and the directed link sender->receiver is
 *     free (one transfer at a time per directed link, in order of start);
 *     it occupies the link for bytes / bandwidth and arrives latency later.
 *   - BARRIER: the k-th BARRIER of every rank ends when the last rank
 *     reaches it (the cyclic schedule's cycle barrier).
 *   - SEND_*_FINISH ends when the transfer has arrived (rendezvous, like a
 *     large MPI message); RECV_*_FINISH ends when the data has arrived.
 *   - Memory of a rank (MB): model states of its stages (states_mb) + stored
 *     activations (stored_mb, from the start of FORWARD until the end of
 *     BACKWARD or BACKWARD_WEIGHT) + peak_mb on top while a compute
 *     instruction runs + with slot_memory, live buffer slots (instr.bytes,
 *     from the writing instruction until FREE_BUFFER). The cost model of
 *     src/cost already counts stage-boundary tensors in stored_mb / peak_mb
 *     (sched.h "Memory model"), so plans built from it are simulated without
 *     slot_memory; hand-written costs that leave them out can turn it on.
 *
 * A dyn_sim is a reusable workspace: it grows to the largest plan it has
 * seen and then runs without allocating, so an order search can simulate
 * hundreds of candidates cheaply. Single-threaded per handle.
 */
#ifndef DYNAPIPE_SIM_H
#define DYNAPIPE_SIM_H

#include <stdio.h>

#include "dynapipe/common.h"
#include "dynapipe/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dyn_sim_options {
    double link_latency_ms; /* per message, ms (>= 0) */
    double link_gbps;       /* GB/s (1e9 bytes/s) per directed link; <= 0: infinite */
    int64_t real_tokens;    /* real (unpadded) tokens of the batch, for tokens_per_s */
    int32_t slot_memory;    /* 1: count buffer slots (instr.bytes) in memory; 0: not */
    int32_t skip_events;    /* 1: do not record per-instruction events (searches: faster) */
} dyn_sim_options;

/* Options from a machine description (its link fields) and a token count;
 * slot_memory 0. */
void dyn_sim_options_from_machine(dyn_sim_options *opt, const dyn_machine *m, int64_t real_tokens);

/* What one instruction did: one record per instruction, so the simulator
 * writes one stream. Times in ms, memory of its rank in MB. */
typedef struct dyn_sim_event {
    double start_ms;
    double end_ms;
    double mem_mb;      /* memory of the rank after the instruction */
    double mem_peak_mb; /* highest memory of the rank while it ran */
} dyn_sim_event;

/* Results of the last run. Arrays are owned by the dyn_sim and valid until
 * its next run or free. Instruction (rank r, index i) is at flat index
 * rank_offset[r] + i. */
typedef struct dyn_sim_result {
    int32_t n_ranks;
    int32_t n_instrs;        /* total over ranks */
    double makespan_ms;      /* end of the last instruction on any rank */
    double bubble_fraction;  /* 1 - sum(busy) / (n_ranks * makespan) */
    double tokens_per_s;     /* real_tokens / makespan (0 if makespan is 0) */
    double max_peak_mb;      /* max over ranks of peak_mb */
    const double *busy_ms;   /* [n_ranks] time spent in compute instructions */
    const double *peak_mb;   /* [n_ranks] peak memory, MB */
    const int32_t *rank_offset; /* [n_ranks + 1] */
    const dyn_sim_event *events; /* [n_instrs]; NULL when run with skip_events */
} dyn_sim_result;

typedef struct dyn_sim dyn_sim;

/* An empty workspace (NULL + DYN_ERR_NOMEM on allocation failure); free with
 * dyn_sim_free (NULL is a no-op), which also invalidates its last results. */
dyn_sim *dyn_sim_create(dyn_error *err);
void dyn_sim_free(dyn_sim *sim);

/* Simulate plan with costs (which must have the plan's n_microbatches and
 * n_stages); at most 1024 ranks. On success *res (if not NULL) points at the results. Errors:
 * DYN_ERR_INVALID_ARG for an inconsistent plan (out-of-range fields, a send
 * without its receive, a FINISH without its START) or a deadlock (message
 * names each blocked rank, its instruction and what it waits for);
 * DYN_ERR_NOMEM. */
dyn_status dyn_sim_run(dyn_sim *sim, const dyn_exec_plan *plan, const dyn_stage_costs *costs,
                       const dyn_sim_options *opt, const dyn_sim_result **res, dyn_error *err);

/* The trace's names of instruction kinds: label ("F", "Bi", "W", "send
 * act", "wait recv grad", ...; a slice is the label and the micro-batch,
 * e.g. "F3") and category ("forward", "backward", "communication",
 * "memory", "sync"). Static strings; "?" for an unknown kind. The runtime's
 * trace of what ranks really did uses the same names. */
const char *dyn_sim_op_label(int op);
const char *dyn_sim_op_category(int op);

/* Chrome / Perfetto trace JSON of the last run of sim on plan (the same
 * plan): one track per rank, one complete ("X") event per instruction with
 * micro-batch, stage and op in its args, and one memory counter track per
 * rank. Times in microseconds as the format wants. Written atomically. */
dyn_status dyn_sim_write_trace(const dyn_sim *sim, const dyn_exec_plan *plan, const char *path,
                               dyn_error *err);
/* The same trace to an open stream (for a caller that publishes several
 * outputs together). */
dyn_status dyn_sim_trace_to_stream(const dyn_sim *sim, const dyn_exec_plan *plan, FILE *out, dyn_error *err);

/* SVG timeline of the last run: one row per rank, one box per compute
 * instruction, its lightness saying the kind (FORWARD light,
 * BACKWARD_INPUT medium, BACKWARD dark, BACKWARD_WEIGHT medium and hatched)
 * and its hue the micro-batch (beyond 24 micro-batches: the micro-batch's
 * size class, log2 of its padded tokens, with a swatch per class), labelled
 * with its number where it fits; the plot widens to about 14 px per box on
 * the busiest rank (1100 to 8000 px); a time axis in ms and a legend naming
 * every kind. title may be NULL. Atomic. */
dyn_status dyn_sim_write_svg(const dyn_sim *sim, const dyn_exec_plan *plan, const char *title,
                             const char *path, dyn_error *err);
/* The same SVG to an open stream (for tests and composition). */
dyn_status dyn_sim_svg_to_stream(const dyn_sim *sim, const dyn_exec_plan *plan, const char *title,
                                 FILE *out, dyn_error *err);

/* Read a what-if micro-batch file (format in docs/simulator.md): a header
 * line naming columns (mb, stage, fwd_ms, bwd_ms required; bwd_input_ms,
 * bwd_weight_ms, stored_mb, peak_mb, send_mb, states_mb, tokens optional),
 * then one line per (micro-batch, stage). Fills *out (allocated; free with
 * dyn_stage_costs_free) and *real_tokens (sum of the tokens column over
 * micro-batches, 0 without it). Errors name path:line. */
dyn_status dyn_whatif_load(const char *path, dyn_stage_costs *out, int64_t *real_tokens,
                           dyn_error *err);
/* The same from text already in memory; name is used in messages. */
dyn_status dyn_whatif_parse(const char *name, const char *text, dyn_stage_costs *out,
                            int64_t *real_tokens, dyn_error *err);

/* ---- micro-batch order search (order_search.c) -----------------------------
 * The order micro-batches enter the pipeline changes the makespan when they
 * differ in size. The search groups the M micro-batches by predicted cost
 * (sum over stages of fwd + bwd): sorted by cost and cut into k = min(M,
 * max_groups) groups of near-equal count. Candidates, in this fixed order:
 *   0      the given order;
 *   1..k!  every permutation of the groups, concatenated, each group keeping
 *          the given relative order of its micro-batches;
 *   then   the groups dealt round-robin, costliest group first, and cheapest
 *          group first.
 * At most 1 + 4! + 2 = 27 candidates. Each is scheduled by the caller's
 * generator and simulated; the smallest makespan whose peak memory is within
 * the limit wins (ties: the earlier candidate). */

/* A schedule generator the search calls: build fills *out for costs whose
 * micro-batch i is micro-batch order[i] of the given order (so it can carry
 * the right shapes); free_plan releases it. */
typedef struct dyn_sched_gen {
    dyn_status (*build)(void *ctx, const dyn_stage_costs *costs, const int32_t *order,
                        dyn_exec_plan *out, dyn_error *err);
    void (*free_plan)(void *ctx, dyn_exec_plan *plan);
    void *ctx;
} dyn_sched_gen;

typedef struct dyn_order_result {
    int32_t *order;        /* [M], caller's array: position -> given micro-batch index */
    double makespan_ms;    /* of the winner */
    double max_peak_mb;    /* of the winner, MB */
    int32_t candidate;     /* index of the winner in the list above */
    int32_t n_candidates;  /* tried */
    int32_t n_feasible;    /* within the memory limit */
} dyn_order_result;

#define DYN_ORDER_MAX_GROUPS 4

/* Search orders of costs' micro-batches (above). max_groups in 1..4;
 * memory_limit_mb <= 0: no limit. On success *best_plan (if not NULL) holds
 * the winner's plan (free with gen->free_plan) and *best_costs (if not NULL)
 * its reordered costs (free with dyn_stage_costs_free). DYN_ERR_INFEASIBLE
 * when no candidate fits the limit (message: the smallest peak seen). A
 * generator error other than DYN_ERR_INFEASIBLE is returned as is. */
dyn_status dyn_order_search(dyn_sim *sim, const dyn_sched_gen *gen, const dyn_stage_costs *costs,
                            const dyn_sim_options *opt, int32_t max_groups,
                            double memory_limit_mb, dyn_order_result *res,
                            dyn_exec_plan *best_plan, dyn_stage_costs *best_costs,
                            dyn_error *err);

/* ---- schedules chosen by simulation (auto.c) --------------------------------
 * dyn_schedule_search: schedule `kind` (src/sched, dyn_schedule_build with
 * sopt) in the best micro-batch order found by dyn_order_search (groups
 * order_groups, the memory limit sopt->memory_limit_mb). shapes [M] (or
 * NULL) are permuted with the micro-batches so the plan carries the right
 * ones. Outputs as dyn_order_search (free with dyn_exec_plan_free and
 * dyn_stage_costs_free). */
dyn_status dyn_schedule_search(dyn_sim *sim, dyn_schedule kind, const dyn_stage_costs *costs,
                               const dyn_mb_shape *shapes, const dyn_sched_options *sopt,
                               const dyn_sim_options *simopt, int32_t order_groups,
                               dyn_order_result *res, dyn_exec_plan *best_plan,
                               dyn_stage_costs *best_costs, dyn_error *err);

/* Stage costs of the batch's micro-batches (in the planner's order) for a
 * chunk count (stages = n_ranks * chunks) and recompute mode; *out stays
 * owned by the callee and valid until the auto call returns. */
typedef dyn_status (*dyn_costs_fn)(void *ctx, int32_t chunks, dyn_recompute rc,
                                   const dyn_stage_costs **out, dyn_error *err);

typedef struct dyn_auto_options {
    int32_t n_ranks;        /* S, pipeline ranks */
    int32_t chunks;         /* v for the interleaved schedule; <= 1: interleaved not tried */
    double memory_limit_mb; /* per device, MB; <= 0: none */
    int32_t order_groups;   /* 1..4, see dyn_order_search */
    uint32_t schedules;     /* bit (1 << dyn_schedule) per schedule to try; 0: all */
    int32_t replica;        /* recorded in the plan */
    int32_t no_prune;       /* 1: evaluate every candidate (for tests); 0: skip the
                               ones a lower bound shows cannot win (same winner) */
} dyn_auto_options;

typedef struct dyn_auto_choice {
    int32_t *order;          /* [M], caller's array: the winner's order */
    dyn_schedule schedule;
    dyn_recompute recompute;
    int32_t chunks;
    double makespan_ms;
    double max_peak_mb;
    int32_t order_candidate; /* index in dyn_order_search's candidate list */
    int32_t n_simulations;   /* candidates simulated in all */
    int32_t n_pruned;        /* candidates (phase 1) or phase 2 skipped by the lower bound */
} dyn_auto_choice;

/* `--schedule auto`: phase 1 schedules and simulates every schedule in
 * ao->schedules under every recompute mode, in the given order (cyclic is
 * skipped when wait-free cyclic is a candidate: same order without
 * barriers, never slower; a mode whose costs_fn result is the same array as
 * an earlier mode's is not tried twice); phase 2 runs dyn_schedule_search
 * with ao->order_groups on the phase-1 winner (schedule, recompute). The
 * smallest simulated makespan within the memory limit wins (ties: the
 * earlier, modes before schedules). At most 4 x 3 + 27 simulations.
 * Pruning (unless ao->no_prune; the winner is the same either way, a
 * tested property): phase-1 candidates are tried in order of an exact
 * lower bound on their makespan (per rank: release and delivery times of
 * the micro-batches plus the rank's compute, auto.c) and skipped once the
 * bound cannot beat the incumbent; phase 2 does not simulate the planner's
 * order again and is skipped when phase 1's winner meets its bound.
 * DYN_ERR_INFEASIBLE if nothing fits. best_plan / best_costs may be NULL. */
dyn_status dyn_schedule_auto(dyn_sim *sim, dyn_costs_fn costs_fn, void *costs_ctx,
                             const dyn_mb_shape *shapes, const dyn_auto_options *ao,
                             const dyn_sim_options *simopt, dyn_auto_choice *choice,
                             dyn_exec_plan *best_plan, dyn_stage_costs *best_costs,
                             dyn_error *err);

#ifdef __cplusplus
}
#endif
#endif /* DYNAPIPE_SIM_H */
