/* sched_internal.h — what the schedule generators in src/sched share: the
 * per-rank compute order a schedule decides, the emitter that turns it into
 * instructions (communication, slots, loads), memory checks and plan setup.
 *
 * How a schedule is built. Each generator (sched_1f1b.c, sched_cyclic.c,
 * sched_interleaved.c, sched_zb.c) decides only the order of compute units
 * (FORWARD, BACKWARD, or B/W halves) on each rank. The emitter then walks all
 * ranks' units in one global order that respects the data dependencies (a
 * timed list schedule on the stage costs, or cycle by cycle for the cyclic
 * schedule) and writes the instructions: a receive is posted on the consumer
 * at the moment, in that global order, its sender starts the send; the
 * receive finishes just before the consumer; a send finishes lazily, before
 * the sender's second compute unit after the producer (and, in the timed
 * order, not before the receive was posted), and only while more than
 * SCHED_SEND_SLACK sends are in flight (or at the end). Every FINISH thus comes
 * after its matching START in one global order of all instructions, which is
 * a deadlock-free execution; dyn_exec_plan_validate checks it independently.
 */
#ifndef DYN_SCHED_INTERNAL_H
#define DYN_SCHED_INTERNAL_H

#include "dynapipe/sched.h"

/* Sends a rank keeps in flight before it finishes the oldest (each holds
 * its boundary slot). A FINISH blocks until the receiver has posted the
 * receive and entered MPI (rendezvous): the timed order below says when the
 * receive is posted, but a receiver that runs late by one unit would stall
 * the sender for that unit, and run-ahead schedules (sched_zb.c) keep the
 * receiver busy for several. With SCHED_SEND_SLACK sends in flight the sender
 * stalls only when the receiver is SCHED_SEND_SLACK sends behind. Real runs
 * (gpt-mini, 2 stages, max length 2048, 30-40 micro-batches, zero bubble)
 * waited 90-94 ms per rank and iteration (3 %) in sends before the
 * iteration's last compute with a finish due after two units, 41-61 ms with
 * four sends kept; the cost is up to four boundary tensors more per rank. */
#define SCHED_SEND_SLACK 4

enum { UNIT_F = 0, UNIT_B = 1, UNIT_BI = 2, UNIT_BW = 3 };

typedef struct sched_unit {
    int32_t kind; /* UNIT_* */
    int32_t mb;
    int32_t stage;
} sched_unit;

/* Per-rank compute order. Rank r's units are u[r][0 .. n[r]). */
typedef struct sched_orders {
    int32_t n_ranks, n_stages, n_mb;
    int32_t *n;      /* [n_ranks] */
    int32_t *cap;    /* [n_ranks] */
    sched_unit **u;  /* [n_ranks] */
} sched_orders;

/* Capacity per rank: stages_per_rank * M * units_per_pair (2, or 3 for split
 * backward). */
dyn_status sched_orders_init(sched_orders *o, int32_t n_ranks, int32_t n_stages, int32_t n_mb,
                             int32_t units_per_pair, dyn_error *err);
void sched_orders_free(sched_orders *o);
/* Append a unit to rank r (capacity checked: a full order is a bug). */
dyn_status sched_orders_push(sched_orders *o, int32_t r, int32_t kind, int32_t mb, int32_t stage,
                             dyn_error *err);

/* Duration (ms) of a unit under costs. */
double sched_unit_ms(const dyn_stage_costs *c, const sched_unit *u);

/* Check the costs match M, S * v and the options (1 <= S, 1 <= v). */
dyn_status sched_check_inputs(const dyn_stage_costs *c, const dyn_sched_options *opt,
                              int32_t need_split, dyn_error *err);

/* MB of the memory model (see sched.h). NULL arrays count as 0. */
double sched_stored(const dyn_stage_costs *c, int32_t mb, int32_t s);
double sched_peak(const dyn_stage_costs *c, int32_t mb, int32_t s);
double sched_rank_states(const dyn_stage_costs *c, int32_t rank, int32_t n_ranks);

/* The emitter. */
typedef struct sched_emitter sched_emitter;

/* Set up plan (zeroed on entry) and an emitter for orders; n_barriers is the
 * number of BARRIERs every rank will get. */
dyn_status sched_emitter_create(sched_emitter **e, dyn_exec_plan *plan, dyn_schedule kind,
                                const sched_orders *o, const dyn_stage_costs *c,
                                const dyn_mb_shape *shapes, const dyn_sched_options *opt,
                                int32_t n_barriers, dyn_error *err);
/* Emit the next unit of rank r (in a dependency-respecting global order). */
void sched_emit_unit(sched_emitter *e, int32_t r, const sched_unit *u);
/* Emit one BARRIER on every rank. */
void sched_emit_barrier(sched_emitter *e);
/* Finish every pending send; frees the emitter. DYN_ERR_INTERNAL if a rank
 * ran past its counted instructions (a bug; the caller frees the plan). */
dyn_status sched_emitter_finish(sched_emitter *e, dyn_error *err);
/* Free the emitter without finishing (error path; the caller frees plan). */
void sched_emitter_free(sched_emitter *e);

/* Emit all of o in the order of a timed list schedule on the costs (each
 * rank runs its next unit as soon as its input exists); fails with
 * DYN_ERR_INTERNAL naming the stuck ranks if the orders cannot all complete.*/
dyn_status sched_emit_timed(const sched_orders *o, const dyn_stage_costs *c,
                            const dyn_mb_shape *shapes, const dyn_sched_options *opt,
                            dyn_schedule kind, dyn_exec_plan *plan, dyn_error *err);

/* The 1F1B order (memory throttling and in-flight cap included, see
 * sched_1f1b.c) into o (initialised here; freed here on failure). split: each
 * BACKWARD becomes BACKWARD_INPUT then BACKWARD_WEIGHT of the same
 * micro-batch, back to back. who names the schedule in error messages. */
dyn_status sched_order_1f1b(const dyn_stage_costs *c, const dyn_sched_options *opt, int split,
                            const char *who, sched_orders *o, dyn_error *err);

/* Generators (one file each). */
dyn_status sched_build_1f1b(const dyn_stage_costs *c, const dyn_mb_shape *shapes,
                            const dyn_sched_options *opt, dyn_exec_plan *out, dyn_error *err);
dyn_status sched_build_cyclic(const dyn_stage_costs *c, const dyn_mb_shape *shapes,
                              const dyn_sched_options *opt, int32_t wait_free, dyn_exec_plan *out,
                              dyn_error *err);
dyn_status sched_build_interleaved(const dyn_stage_costs *c, const dyn_mb_shape *shapes,
                                   const dyn_sched_options *opt, dyn_exec_plan *out,
                                   dyn_error *err);
dyn_status sched_build_zb(const dyn_stage_costs *c, const dyn_mb_shape *shapes,
                          const dyn_sched_options *opt, dyn_exec_plan *out, dyn_error *err);

#endif
