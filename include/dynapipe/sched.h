/*
 * sched.h — pipeline schedules and the execution plan.
 *
 * The execution plan is the one interface between planning and execution:
 * the simulator (src/sim) and the MPI runtime (src/runtime) consume the very
 * same dyn_exec_plan, so a plan that simulates is a plan that runs.
 *
 * A plan covers one data-parallel replica's share of one global batch: M
 * micro-batches through n_stages pipeline stages (S devices x v chunks)
 * executed by n_ranks ranks. Each rank runs its instruction list in order.
 *
 * Buffers. Every rank numbers its buffer slots 0..n_buffers-1. A slot holds
 * one tensor (an activation or a gradient at a stage boundary, or a loaded
 * input); it is allocated by the instruction that writes it (LOAD_INPUT,
 * RECV_*_START, FORWARD/BACKWARD buf_out) and released by FREE_BUFFER. The
 * activations a stage stores for backward are not slots: FORWARD of (mb,
 * stage) creates them, BACKWARD (or BACKWARD_WEIGHT) of the same (mb, stage)
 * releases them.
 *
 * Instruction semantics (buf_in / buf_out are slots or -1):
 *   LOAD_INPUT        buf_out <- the micro-batch's tokens (first stage) or
 *                     targets (last stage); bytes = size.
 *   FORWARD           buf_in = input activation (loaded or received) ->
 *                     buf_out = output activation (-1 on the last stage,
 *                     which computes the loss instead).
 *   BACKWARD          buf_in = gradient of the output (received; -1 on the
 *                     last stage) -> buf_out = gradient of the input (-1 on
 *                     the first stage); weight gradients accumulate.
 *   BACKWARD_INPUT    the input-gradient half of BACKWARD (zero-bubble "B").
 *   BACKWARD_WEIGHT   the weight-gradient half (zero-bubble "W"); no slots.
 *   SEND_*_START      start sending buf_in to rank peer; SEND_*_FINISH waits
 *                     until buf_in may be reused (it does not free it).
 *   RECV_*_START      start receiving from rank peer into buf_out;
 *                     RECV_*_FINISH waits until buf_out holds the data.
 *   FREE_BUFFER       release slot buf_in.
 */
#ifndef DYNAPIPE_SCHED_H
#define DYNAPIPE_SCHED_H

#include "dynapipe/common.h"
#include "dynapipe/cost.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dyn_op {
    DYN_OP_LOAD_INPUT = 0,
    DYN_OP_FORWARD = 1,
    DYN_OP_BACKWARD = 2,
    DYN_OP_BACKWARD_INPUT = 3,
    DYN_OP_BACKWARD_WEIGHT = 4,
    DYN_OP_SEND_ACT_START = 5,
    DYN_OP_SEND_ACT_FINISH = 6,
    DYN_OP_RECV_ACT_START = 7,
    DYN_OP_RECV_ACT_FINISH = 8,
    DYN_OP_SEND_GRAD_START = 9,
    DYN_OP_SEND_GRAD_FINISH = 10,
    DYN_OP_RECV_GRAD_START = 11,
    DYN_OP_RECV_GRAD_FINISH = 12,
    DYN_OP_FREE_BUFFER = 13
} dyn_op;
#define DYN_OP_COUNT 14

/* One instruction. Fixed size and layout so that serialisation is a plain
 * little-endian field-by-field copy. */
typedef struct dyn_instr {
    uint8_t op;         /* dyn_op */
    uint8_t recompute;  /* dyn_recompute, for FORWARD and BACKWARD* */
    uint16_t flags;     /* reserved, 0 */
    int32_t microbatch; /* 0..M-1 */
    int32_t stage;      /* pipeline stage 0..n_stages-1 this instruction serves */
    int32_t peer;       /* peer rank for SEND/RECV, else -1 */
    int32_t buf_in;     /* slot read (see above), or -1 */
    int32_t buf_out;    /* slot written, or -1 */
    dyn_mb_shape shape; /* the micro-batch's padded shape */
    int64_t bytes;      /* bytes of the tensor moved or held in the slot */
} dyn_instr;

typedef struct dyn_rank_plan {
    int32_t n_instrs;
    int32_t n_buffers; /* slots used: 0..n_buffers-1 */
    dyn_instr *instrs;
} dyn_rank_plan;

typedef enum dyn_schedule {
    DYN_SCHED_1F1B = 0,             /* PipeDream-flush */
    DYN_SCHED_CYCLIC = 1,           /* DynaPipe's cyclic schedule */
    DYN_SCHED_WAIT_FREE_CYCLIC = 2, /* cyclic order, no cycle barriers */
    DYN_SCHED_INTERLEAVED = 3,      /* interleaved 1F1B, v chunks per device */
    DYN_SCHED_ZB = 4                /* zero-bubble (ZB-H1 style), split backward */
} dyn_schedule;
#define DYN_SCHEDULE_COUNT 5

typedef struct dyn_exec_plan {
    int32_t schedule;       /* dyn_schedule */
    int32_t replica;        /* data-parallel replica this plan is for */
    int32_t n_ranks;        /* pipeline ranks (devices) in the replica */
    int32_t n_stages;       /* n_ranks * chunks */
    int32_t n_microbatches;
    int32_t *stage_rank;    /* [n_stages]: rank that executes each stage */
    dyn_mb_shape *mb_shape; /* [n_microbatches] */
    dyn_rank_plan *ranks;   /* [n_ranks] */
} dyn_exec_plan;

/* Per-micro-batch, per-stage costs: the input schedules and the simulator
 * need, built from a dyn_batch_plan and a cost model, or read from a file.
 * Arrays are [mb * n_stages + stage]. */
typedef struct dyn_stage_costs {
    int32_t n_microbatches;
    int32_t n_stages;
    double *fwd_ms;
    double *bwd_ms;        /* whole backward */
    double *bwd_input_ms;  /* zero-bubble B part */
    double *bwd_weight_ms; /* zero-bubble W part */
    double *stored_mb;     /* activations held from forward to backward */
    double *peak_mb;       /* transient working memory while computing */
    double *send_mb;       /* activation sent from stage to stage+1 (its gradient comes back) */
    double *states_mb;     /* [n_stages]: parameters + gradients + optimizer moments */
} dyn_stage_costs;

/* Validate a plan: matching sends and receives between every pair of ranks in
 * a compatible order (so it cannot deadlock), every slot written before read
 * and freed exactly once, every micro-batch through every stage forward then
 * backward. The message names the rank, instruction index and the problem. */
dyn_status dyn_exec_plan_validate(const dyn_exec_plan *plan, dyn_error *err);

/* Binary form: little-endian, magic "DYNPLAN\0", version, length, CRC-32.
 * *buf is malloc'ed; the caller frees it. */
dyn_status dyn_exec_plan_serialize(const dyn_exec_plan *plan, uint8_t **buf, size_t *len,
                                   dyn_error *err);
dyn_status dyn_exec_plan_deserialize(const uint8_t *buf, size_t len, dyn_exec_plan *out,
                                     dyn_error *err);
void dyn_exec_plan_free(dyn_exec_plan *plan);

const char *dyn_op_name(dyn_op op);
const char *dyn_schedule_name(dyn_schedule s);

#ifdef __cplusplus
}
#endif
#endif /* DYNAPIPE_SCHED_H */
