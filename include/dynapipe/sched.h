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
 *   BARRIER           (the cyclic schedule's cycles) the k-th BARRIER of a
 *                     rank waits until every rank has reached its k-th
 *                     BARRIER; all ranks have the same number. microbatch,
 *                     stage, peer, slots are -1. See "Cycle barriers" below.
 *
 * Conventions the generators in src/sched follow (and the validator checks):
 *   - SEND_* and RECV_* name the stage that this rank serves: SEND_ACT_START
 *     of (mb, s) carries the output of FORWARD (mb, s) to the rank of stage
 *     s+1, whose RECV_ACT_* name (mb, s+1); SEND_GRAD of (mb, s) carries the
 *     input gradient of BACKWARD (mb, s) to the rank of s-1, whose RECV_GRAD
 *     name (mb, s-1). Messages between a pair of ranks are matched per
 *     direction and kind (activation / gradient) in posting order, like MPI
 *     with one tag per kind.
 *   - LOAD_INPUT without flags loads the tokens into the input slot of stage
 *     0; with DYN_INSTR_FLAG_TARGETS it loads the targets on the last stage,
 *     and the last stage's FORWARD (which computes the loss) reads that slot
 *     implicitly; it is freed right after that FORWARD.
 *   - A slot that feeds a FORWARD or BACKWARD is freed right after it (what
 *     backward needs is kept in the stored activations, not in slots); a slot
 *     being sent is freed after its SEND_*_FINISH.
 *   - When two consecutive stages sit on the same rank (S = 1 with chunks),
 *     the producer's buf_out is the consumer's buf_in, with no SEND/RECV.
 *
 * Cycle barriers. DynaPipe's cyclic schedule runs in cycles: in each cycle
 * each rank does at most one backward and one forward per stage it holds, and
 * no rank starts cycle c+1 before every rank finished cycle c's compute. The
 * plan represents this with one BARRIER per rank between consecutive cycles
 * (a rank idle in a cycle still has its BARRIER). The wait-free cyclic plan is
 * the identical instruction list without the BARRIERs.
 *
 * Memory model (dyn_exec_plan_memory, the generators' throttling): a rank
 * holds the states_mb of its stages, plus stored_mb of every (mb, stage) it
 * has run FORWARD on and not yet BACKWARD (or BACKWARD_WEIGHT), plus, while a
 * FORWARD or BACKWARD* of (mb, stage) runs, that pair's peak_mb (a FORWARD
 * already counts its own stored_mb). Boundary tensors in slots are part of
 * stored_mb / peak_mb in the cost model and are not counted again.
 */
#ifndef DYNAPIPE_SCHED_H
#define DYNAPIPE_SCHED_H

#include <stdio.h>

#include "dynapipe/common.h"
#include "dynapipe/cost.h"
#include "dynapipe/plan.h"

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
    DYN_OP_FREE_BUFFER = 13,
    DYN_OP_BARRIER = 14 /* cycle barrier of the cyclic schedule (see above) */
} dyn_op;
#define DYN_OP_COUNT 15

/* dyn_instr.flags bits. */
#define DYN_INSTR_FLAG_TARGETS 0x1u /* LOAD_INPUT: targets of the last stage, not tokens */

/* One instruction. Fixed size and layout so that serialisation is a plain
 * little-endian field-by-field copy. */
typedef struct dyn_instr {
    uint8_t op;         /* dyn_op */
    uint8_t recompute;  /* dyn_recompute, for FORWARD and BACKWARD* */
    uint16_t flags;     /* DYN_INSTR_FLAG_* bits, else 0 */
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

/* Pipeline schedules. 0..DYN_SCHEDULE_COUNT-1 are schedules a plan is built
 * with; DYN_SCHEDULE_AUTO is a choice, not a schedule: the pipeline (and
 * sim.h's dyn_schedule_auto) picks schedule, micro-batch order and
 * recompute by simulation. An execution plan always names a real one. */
typedef enum dyn_schedule {
    DYN_SCHEDULE_1F1B = 0,             /* PipeDream-flush */
    DYN_SCHEDULE_CYCLIC = 1,           /* DynaPipe's cyclic schedule */
    DYN_SCHEDULE_WAIT_FREE_CYCLIC = 2, /* cyclic order, no cycle barriers */
    DYN_SCHEDULE_INTERLEAVED = 3,      /* interleaved 1F1B, v chunks per device */
    DYN_SCHEDULE_ZB = 4,               /* zero-bubble (ZB-H1 style), split backward */
    DYN_SCHEDULE_AUTO = 5           /* choose by simulation (not a schedule) */
} dyn_schedule;
#define DYN_SCHEDULE_COUNT 5 /* the real schedules, 0..4; AUTO follows them */

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

/* ---- Building plans ---------------------------------------------------- */

typedef struct dyn_sched_options {
    int32_t n_ranks;         /* S, pipeline ranks (devices), >= 1 */
    int32_t chunks;          /* v, model chunks per rank (interleaved, cyclic); stage s
                                runs on rank s % S; costs->n_stages must be S * v */
    double memory_limit_mb;  /* per rank (device), MB; <= 0: unlimited */
    int32_t max_in_flight;   /* per rank: micro-batches forwarded and not yet backwarded
                                (interleaved: chunk-stage forwards; zb: until their
                                BACKWARD_WEIGHT); <= 0: schedule default (1f1b S - r,
                                zb S, and its run-ahead candidate unlimited; cyclic
                                unlimited) */
    dyn_recompute recompute; /* recorded on compute instructions */
    int32_t replica;         /* recorded in the plan */
} dyn_sched_options;

/* S = 1, v = 1, no memory limit, no in-flight cap, no recompute, replica 0. */
void dyn_sched_options_default(dyn_sched_options *opt);

/* Build the execution plan of schedule `kind` for the M = costs->n_microbatches
 * micro-batches in their given order. shapes: [M] padded shapes copied into
 * the plan (NULL: zero shapes). Costs (ms, MB) drive W placement (zero
 * bubble), throttling and the order the generator emits instructions in.
 * Under opt->memory_limit_mb a schedule delays forwards (fewer micro-batches
 * in flight) so that dyn_exec_plan_memory stays within the limit, or fails
 * with DYN_ERR_INFEASIBLE naming the stage and the numbers. out is freed with
 * dyn_exec_plan_free (also safe on a zeroed struct). O(instructions * S). */
dyn_status dyn_schedule_build(dyn_schedule kind, const dyn_stage_costs *costs,
                              const dyn_mb_shape *shapes, const dyn_sched_options *opt,
                              dyn_exec_plan *out, dyn_error *err);

/* Parse "1f1b", "cyclic", "wait-free-cyclic", "interleaved", "zb" or
 * "auto" (DYN_SCHEDULE_AUTO); DYN_ERR_INVALID_ARG naming the choices. */
dyn_status dyn_schedule_parse(const char *name, dyn_schedule *out, dyn_error *err);

/* Static peak memory per rank (MB) of a plan under the memory model above:
 * peak_mb[r] for r in 0..n_ranks-1. costs must match the plan's M and
 * n_stages. Independent of timing: it follows each rank's own order. */
dyn_status dyn_exec_plan_memory(const dyn_exec_plan *plan, const dyn_stage_costs *costs,
                                double *peak_mb, dyn_error *err);

/* Readable dump: one line per instruction (rank, index, op, mb, stage, peer,
 * slots, shape, bytes) after a one-line header. */
void dyn_exec_plan_dump(FILE *fp, const dyn_exec_plan *plan);

/* ---- Stage costs and layer-to-stage assignment -------------------------- */

/* Allocate every array of c for M micro-batches and n_stages stages, zeroed. */
dyn_status dyn_stage_costs_alloc(dyn_stage_costs *c, int32_t n_microbatches, int32_t n_stages,
                                 dyn_error *err);
void dyn_stage_costs_free(dyn_stage_costs *c);

/* Layers of a model flattened in execution order: GPT [EMBED, ENCODER x
 * n_layers, LM_HEAD]; T5 [EMBED, ENCODER x n_layers, BRIDGE, DECODER x
 * n_dec_layers, LM_HEAD]. Stage s holds layers stage_first[s] ..
 * stage_first[s+1]-1; the embedding is always on stage 0, T5's bridge on
 * the stage of the last encoder block and the LM head on the last stage,
 * and every stage holds at least one ENCODER/DECODER block. */
typedef struct dyn_stage_assignment {
    int32_t n_stages;
    int32_t n_layers;     /* flattened layers */
    int32_t *layer_kind;  /* [n_layers] dyn_layer_kind */
    int32_t *stage_first; /* [n_stages + 1] */
    double max_stage_ms;  /* the balanced objective: slowest stage's weight (fwd + bwd ms on ref) */
} dyn_stage_assignment;

/* Balanced contiguous split of n blocks with costs block_ms[n] (ms) into
 * n_stages stages, where stage 0 also pays first_extra_ms and the last stage
 * last_extra_ms: minimises the slowest stage; ties go to the split whose
 * boundaries are lexicographically smallest. first[n_stages+1] receives block
 * boundaries (first[0] = 0, first[n_stages] = n). DYN_ERR_INVALID_ARG when
 * n_stages > n ("stages more than layers"). O(n_stages * n^2). */
dyn_status dyn_stage_split(const double *block_ms, int32_t n, int32_t n_stages, double first_extra_ms,
                           double last_extra_ms, int32_t *first, double *max_stage_ms,
                           dyn_error *err);

/* Per-layer-kind weights for the split: weight[k] = the fwd + bwd ms of
 * one layer of kind k (dyn_layer_kind) summed over the n >= 1 micro-batch
 * shapes under recompute mode rc; 0 for a kind the model lacks. On error
 * every weight is 0. */
dyn_status dyn_stage_weights_of_shapes(const dyn_cost_model *cm, const dyn_mb_shape *shapes, int32_t n,
                                       dyn_recompute rc, double weight[DYN_LAYER_KIND_COUNT], dyn_error *err);
/* Assign cm's layers to n_stages stages minimising the slowest stage's
 * summed weight (each layer weighs weight[its kind]; every weight finite
 * and >= 0, else DYN_ERR_INVALID_ARG). max_stage_ms is that stage's sum. */
dyn_status dyn_stage_assign_weights(const dyn_cost_model *cm, int32_t n_stages,
                                    const double weight[DYN_LAYER_KIND_COUNT], dyn_stage_assignment *out,
                                    dyn_error *err);
/* Assign cm's layers to n_stages stages balancing fwd + bwd time of the
 * reference micro-batch shape ref under recompute mode rc: the weights of
 * that one shape (dyn_stage_weights_of_shapes with n = 1). */
dyn_status dyn_stage_assign(const dyn_cost_model *cm, int32_t n_stages, const dyn_mb_shape *ref,
                            dyn_recompute rc, dyn_stage_assignment *out, dyn_error *err);
/* The assignment a run uses, fixed for the run: balanced for weight[]
 * (dyn_plan_options.split_weight, e.g. from dyn_pipeline_tune_split) when
 * weight is not NULL and some weight is not 0; else dyn_stage_assign for
 * one row of cm's max_seqlen tokens (T5: on both sides), no recompute.
 * The planner's stage costs and the runtime's layers per rank both come
 * from here with the run's options' weights, so they agree. */
dyn_status dyn_stage_assign_run(const dyn_cost_model *cm, int32_t n_stages, const double *weight,
                                dyn_stage_assignment *out, dyn_error *err);
void dyn_stage_assignment_free(dyn_stage_assignment *a);

/* Per-micro-batch, per-stage costs of the M shapes under assignment a: times
 * and stored memory are sums over the stage's layers, peak_mb the largest
 * layer peak, send_mb the boundary tensor (T5 decoder stages also forward the
 * encoder output), states_mb the sum of layer states. */
dyn_status dyn_stage_costs_build(const dyn_cost_model *cm, const dyn_stage_assignment *a,
                                 const dyn_mb_shape *shapes, int32_t n_microbatches,
                                 dyn_recompute rc, dyn_stage_costs *out, dyn_error *err);

/* The same for the micro-batches of bp that replica `replica` runs, in plan
 * order; *shapes_out (may be NULL) receives a malloc'ed [M] copy of their
 * shapes for dyn_schedule_build. */
dyn_status dyn_stage_costs_from_batch(const dyn_cost_model *cm, const dyn_stage_assignment *a,
                                      const dyn_batch_plan *bp, int32_t replica, dyn_recompute rc,
                                      dyn_stage_costs *out, dyn_mb_shape **shapes_out,
                                      dyn_error *err);

/* ---- Validation and serialisation --------------------------------------- */

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

/* Static names: an instruction kind ("FORWARD", "SEND_ACT_START", ...) and a
 * schedule ("1f1b", "cyclic", "wait-free-cyclic", "interleaved", "zb",
 * "auto"); "?" out of range. */
const char *dyn_op_name(dyn_op op);
const char *dyn_schedule_name(dyn_schedule s);

#ifdef __cplusplus
}
#endif
#endif /* DYNAPIPE_SCHED_H */
