/*
 * dynapipe.h — the one header a user of libdynapipe includes.
 *
 * dynapipe plans variable-length micro-batches for pipeline-parallel
 * training: it cuts each global batch of samples (input and target lengths
 * in tokens) into micro-batches by dynamic programming against a cost model,
 * schedules them through the pipeline by simulation, and emits one validated
 * execution plan per data-parallel replica. The library is pure and
 * deterministic: no MPI, no model code, no global state.
 *
 * A typical use is five calls (docs/guide-c.md has the whole program):
 *
 *   cm   = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("a100"), &err);
 *   pl   = dyn_planner_create(cm, &plan_opt, &err);      borrows cm
 *   pipe = dyn_pipeline_create(pl, &pipe_opt, &err);     borrows pl
 *   for each global batch (dyn_sampler_next gives one):
 *       dyn_pipeline_plan(pipe, samples, n, &res, &err); res.batch, res.replicas[d].plan
 *       dyn_pipeline_result_free(&res);
 *   dyn_pipeline_free(pipe); dyn_planner_free(pl); dyn_cost_model_free(cm);
 *
 * Error convention (common.h): a function that can fail returns dyn_status
 * (DYN_OK is 0) and takes a `dyn_error *err` last, which it fills with a
 * one-line message naming what is wrong and where; constructors return NULL
 * instead. Handles made by *_create are released by *_free, which accepts
 * NULL. Units: tokens, milliseconds (ms), MiB (MB).
 *
 * What each header holds:
 *   common.h        status codes, dyn_error, dyn_sample, model and machine types
 *   version.h       DYN_VERSION_STRING, dyn_version, dyn_abi_sizeof
 *   model_config.h  model shapes and machines: presets, JSON files, validation
 *   cost.h          the cost and memory model (analytic or profiled table)
 *   data.h          length datasets (built-in, TSV) and the global-batch sampler
 *   corpus.h        token-bearing training data (built-in, JSONL, Megatron)
 *   plan.h          micro-batching: the planner and its baselines
 *   sched.h         schedules, the execution plan, validation, serialization
 *   sim.h           the simulator, its trace and SVG outputs, what-if files
 *   pipeline.h      one global batch in, every replica's execution plan out
 */
#ifndef DYNAPIPE_DYNAPIPE_H
#define DYNAPIPE_DYNAPIPE_H

#include "dynapipe/common.h"
#include "dynapipe/version.h"
#include "dynapipe/model_config.h"
#include "dynapipe/cost.h"
#include "dynapipe/data.h"
#include "dynapipe/corpus.h"
#include "dynapipe/plan.h"
#include "dynapipe/sched.h"
#include "dynapipe/sim.h"
#include "dynapipe/pipeline.h"

#endif /* DYNAPIPE_DYNAPIPE_H */
