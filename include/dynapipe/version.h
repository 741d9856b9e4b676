/*
 * version.h — the library's version, and the sizes of its public structs for
 * bindings that lay them out themselves (the Python package's ctypes
 * mirrors check them when they load the library, so a library built from a
 * different version fails at import instead of corrupting memory).
 */
#ifndef DYNAPIPE_VERSION_H
#define DYNAPIPE_VERSION_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The release these headers belong to (CMake's project version; the build
 * checks that the two agree). */
#define DYN_VERSION_MAJOR 0
#define DYN_VERSION_MINOR 1
#define DYN_VERSION_PATCH 0
#define DYN_VERSION_STRING "0.1.0"

/* The version of the library actually loaded, "MAJOR.MINOR.PATCH" (a static
 * string). Compare with DYN_VERSION_STRING to detect a header/library
 * mismatch. */
const char *dyn_version(void);

/* sizeof the public struct named type_name (its C name without `struct`,
 * e.g. "dyn_batch_plan"), in bytes; 0 for a name the library does not know.
 * Covers the structs a binding passes by pointer: dyn_error, dyn_sample,
 * dyn_model_config, dyn_machine, dyn_mb_shape, dyn_plan_options,
 * dyn_plan_microbatch, dyn_batch_plan, dyn_dataset, dyn_instr,
 * dyn_rank_plan, dyn_exec_plan, dyn_stage_costs, dyn_pipeline_options,
 * dyn_replica_plan, dyn_pipeline_result. */
size_t dyn_abi_sizeof(const char *type_name);

#ifdef __cplusplus
}
#endif
#endif /* DYNAPIPE_VERSION_H */
