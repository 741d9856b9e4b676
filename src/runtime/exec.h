/* exec.h — the instruction interpreter: executes one rank's instruction
 * list of a validated dyn_exec_plan, in order, and nothing else.
 *
 * One handler per instruction kind, in a table indexed by dyn_op and checked
 * complete at compile time. Start instructions post non-blocking MPI
 * (MPI_Isend / MPI_Irecv on the pipeline communicator, one tag per kind, so
 * that messages between two ranks match in posting order as the validator
 * assumed); Finish instructions wait for their request with a deadline.
 * Message sizes come from the micro-batch shape in the plan and the model's
 * boundary sizes, never from the wire; the plan's byte count must agree
 * (a disagreement is a bug, reported as one).
 *
 * Open MPI has no asynchronous progress thread: a message above the eager
 * limit moves only while both ranks are inside MPI. So between instructions
 * the interpreter tests every outstanding request (MPI_Testsome) and calls
 * the caller's poll hook (which progresses the delivery of the next
 * iteration's plans).
 *
 * Memory: buffer slots and activation arenas are kept across iterations and
 * only grow, so steady-state training allocates nothing. */
#ifndef DYN_RUNTIME_EXEC_H
#define DYN_RUNTIME_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "runtime/group.h"
#include "runtime/source.h"
#include "runtime/work.h"

/* What the interpreter runs on. */
typedef struct rt_exec_env {
    const dyn_rt_group *g;
    dyn_model_kind kind;
    /* the model (parameters of) plan stage s, which this rank holds */
    dyn_model *(*model_of)(void *ctx, int32_t stage);
    void *model_ctx;
    const int32_t *lay_first; /* [n_stages + 1]: plan stage s = model layers [lay_first[s], lay_first[s+1]) */
    int32_t n_stages;
    int32_t n_layers;         /* L of the model */
    rt_source *src;          /* this thread's handle */
    double timeout_s;         /* deadline of every wait */
    void (*poll)(void *ctx);  /* called between instructions and while waiting */
    void *poll_ctx;
    /* called (with poll_ctx) right after the last instruction of this
     * iteration that adds to stage s's weight gradients (its last BACKWARD
     * or BACKWARD_WEIGHT), so the caller can start that stage's gradient
     * allreduce while the rest of the plan runs; NULL: none */
    void (*stage_done)(void *ctx, int32_t stage);
    int record;               /* 1: keep one event per instruction (trace) */
} rt_exec_env;

/* One executed instruction, times in ms since the run's epoch. */
typedef struct rt_event {
    int32_t op, microbatch, stage, instr;
    double t0_ms, t1_ms;
    double useful; /* the micro-batch's useful fraction (work.h), 1 when it has none */
    double pred_ms; /* the plan's predicted time: Forward, or the whole backward at Backward and
                     * BackwardInput (BackwardWeight 0); 0 for other instructions */
    int32_t rows, len; /* the micro-batch's shape (len: padded encoder length); 0 when none */
} rt_event;

/* Per-iteration measurements of this rank. */
typedef struct rt_exec_stats {
    double loss_sum;      /* target-token losses summed (last stage only) */
    int64_t target_tokens; /* target tokens whose loss this rank computed */
    double wall_ms;       /* first to last instruction */
    double busy_ms;       /* in Forward / Backward* */
    double comm_wait_ms;  /* blocked in Finish and Barrier: communication not hidden */
    int64_t comm_bytes;   /* sent by this rank (activations and gradients) */
    size_t alloc_bytes;   /* activation arenas, their kept buffers + buffer slots allocated (grow-only) */
    double meas_ms[2];    /* measured Forward [0] and Backward* [1] time, ms */
    double pred_ms[2];    /* the plan's predicted time of the same instructions, ms */
} rt_exec_stats;

typedef struct rt_exec rt_exec;

rt_exec *rt_exec_create(const rt_exec_env *env, dyn_error *err);
void rt_exec_free(rt_exec *x);
/* Run this rank's instruction list of w (w->plan.ranks[stage_rank]).
 * Micro-batches are built from the samples of w on first use. epoch_ms:
 * dyn_time_ms() of the run's start, for event times. A wait past the
 * deadline fails with DYN_ERR_INTERNAL naming the instruction and peer. */
dyn_status rt_exec_run(rt_exec *x, const dyn_rt_work *w, double epoch_ms, rt_exec_stats *st, dyn_error *err);
/* Test every outstanding request and call the env's poll hook: what the
 * interpreter does between instructions; the model calls it between layers
 * (dyn_model_set_progress) so transfers move during long compute. */
void rt_exec_poll(void *x);

/* Events recorded so far (env.record), and forget them. */
const rt_event *rt_exec_events(const rt_exec *x, int64_t *n);
void rt_exec_clear_events(rt_exec *x);

/* Wait for req with a deadline, calling poll meanwhile; what/peer name it
 * in the timeout message. Shared by the interpreter and the step's
 * collectives. */
dyn_status rt_wait(MPI_Request *req, double timeout_s, void (*poll)(void *), void *poll_ctx,
                   const char *what, dyn_error *err);

#endif
