"""_lib.py — finding and loading libdynapipe with ctypes, the mirrors of the
C structs the package passes, the prototypes of the C functions it calls,
and C errors turned into Python exceptions.

Where the library is looked for, first hit wins (``find_library`` says it
for one call):

1. ``DYNAPIPE_LIB``: the path of ``libdynapipe.so`` (or of the folder that
   holds it). When set, nothing else is tried: a wrong path is an error,
   not a silent fallback to another copy.
2. The build tree, when this package is imported from a source checkout
   (``python/dynapipe`` next to the repository's ``CMakeLists.txt``):
   ``build/libdynapipe.so`` of that checkout.
3. An installed prefix: ``DYNAPIPE_PREFIX`` if set, then the directory
   ``pkg-config --variable=libdir dynapipe`` names, then ``sys.prefix``,
   ``/usr/local`` and ``/usr`` (``lib``, ``lib64`` and the multiarch
   ``lib/<triplet>`` of each), then the loader's own search
   (``ctypes.util.find_library``).

The struct mirrors are checked against the loaded library's own sizes
(``dyn_abi_sizeof``), and its version against this package's, so a library
of another release fails at import with a clear message instead of
corrupting memory.
"""
import ctypes
import ctypes.util
import os
import subprocess
import sys
import sysconfig

__all__ = ["Error", "InvalidArgumentError", "FileError", "ParseError", "InfeasibleError",
           "CorruptError", "load", "find_library"]

VERSION = "0.1.0"
_LIBNAME = "libdynapipe.so"

# ---- errors -----------------------------------------------------------------


class Error(RuntimeError):
    """An error reported by the C library. ``status`` is the C status name
    ("invalid argument", "infeasible", ...); str() is the C message."""

    def __init__(self, message, status="internal error"):
        super().__init__(message)
        self.status = status


class InvalidArgumentError(Error, ValueError):
    """DYN_ERR_INVALID_ARG: the library refused a value."""


class FileError(Error, OSError):
    """DYN_ERR_IO: a file could not be opened, read or written."""


class ParseError(Error, ValueError):
    """DYN_ERR_PARSE: malformed input (the message gives file:line)."""


class InfeasibleError(Error):
    """DYN_ERR_INFEASIBLE: nothing satisfies the memory limit (the message
    names the sample or stage and the numbers)."""


class CorruptError(Error):
    """DYN_ERR_CORRUPT: bad magic, version, checksum or truncation."""


_STATUS_ERRORS = {1: InvalidArgumentError, 2: FileError, 3: ParseError, 4: MemoryError,
                  5: InfeasibleError, 6: CorruptError}

# ---- struct mirrors (include/dynapipe/*.h) -------------------------------------

i32, i64, f64 = ctypes.c_int32, ctypes.c_int64, ctypes.c_double
ERROR_MSG_MAX = 512


class DynError(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * ERROR_MSG_MAX)]


class DynSample(ctypes.Structure):
    _fields_ = [("id", i32), ("task", i32), ("input_len", i32), ("target_len", i32)]


class DynModelConfig(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("n_layers", i32), ("n_dec_layers", i32), ("hidden", i32),
                ("heads", i32), ("head_dim", i32), ("ffn", i32), ("vocab", i32), ("max_seqlen", i32),
                ("kv_heads", i32), ("tie_embeddings", i32), ("qkv_bias", i32), ("rope_scaling", i32),
                ("rope_theta", f64), ("rms_eps", f64), ("rope_factor", f64), ("rope_low_freq", f64),
                ("rope_high_freq", f64), ("rope_orig_ctx", i32)]


class DynMachine(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 64), ("matmul_gflops", f64), ("attn_gflops", f64),
                ("mem_gbps", f64), ("bytes_per_elem", i32), ("device_memory_mb", f64),
                ("link_latency_ms", f64), ("link_gbps", f64), ("dp_link_gbps", f64),
                ("gemm_n_half", f64), ("layer_overhead_ms", f64), ("optimizer_ms_per_mparam", f64)]


class DynMbShape(ctypes.Structure):
    _fields_ = [("rows", i32), ("enc_len", i32), ("dec_len", i32), ("enc_attn", i64),
                ("dec_attn", i64), ("cross_attn", i64)]


class DynPlanOptions(ctypes.Structure):
    _fields_ = [("method", ctypes.c_int), ("stages", i32), ("chunks", i32), ("dp", i32),
                ("memory_limit_mb", f64), ("round_to", i32), ("max_seqlen", i32),
                ("recompute", ctypes.c_int), ("mb_samples", i32), ("pack_rows", i32),
                ("mb_tokens", i64), ("enable_packing", i32),
                ("split_weight", f64 * 5),  # DYN_LAYER_KIND_COUNT
                ("stage_objective", i32)]


class DynPlanMicrobatch(ctypes.Structure):
    _fields_ = [("first", i32), ("n_samples", i32), ("replica", i32), ("shape", DynMbShape),
                ("time_ms", f64), ("stored_mb", f64), ("peak_mb", f64)]


class DynBatchPlan(ctypes.Structure):
    _fields_ = [("n_microbatches", i32), ("mbs", ctypes.POINTER(DynPlanMicrobatch)),
                ("n_samples", i32), ("sample_ids", ctypes.POINTER(i32)),
                ("sample_row", ctypes.POINTER(i32)), ("sample_offset", ctypes.POINTER(i32)),
                ("objective_ms", f64), ("plan_time_ms", f64),
                ("sample_dec_offset", ctypes.POINTER(i32)), ("balanced_ms", f64),
                ("device_peak_mb", f64), ("real_tokens", i64), ("padded_tokens", i64),
                ("method", i32), ("knob", i64)]


class DynDataset(ctypes.Structure):
    _fields_ = [("n", i32), ("samples", ctypes.POINTER(DynSample))]


class DynInstr(ctypes.Structure):
    _fields_ = [("op", ctypes.c_uint8), ("recompute", ctypes.c_uint8), ("flags", ctypes.c_uint16),
                ("microbatch", i32), ("stage", i32), ("peer", i32), ("buf_in", i32), ("buf_out", i32),
                ("shape", DynMbShape), ("bytes", i64)]


class DynRankPlan(ctypes.Structure):
    _fields_ = [("n_instrs", i32), ("n_buffers", i32), ("instrs", ctypes.POINTER(DynInstr))]


class DynExecPlan(ctypes.Structure):
    _fields_ = [("schedule", i32), ("replica", i32), ("n_ranks", i32), ("n_stages", i32),
                ("n_microbatches", i32), ("stage_rank", ctypes.POINTER(i32)),
                ("mb_shape", ctypes.POINTER(DynMbShape)), ("ranks", ctypes.POINTER(DynRankPlan))]


_PD = ctypes.POINTER(f64)


class DynStageCosts(ctypes.Structure):
    _fields_ = [("n_microbatches", i32), ("n_stages", i32), ("fwd_ms", _PD), ("bwd_ms", _PD),
                ("bwd_input_ms", _PD), ("bwd_weight_ms", _PD), ("stored_mb", _PD), ("peak_mb", _PD),
                ("send_mb", _PD), ("states_mb", _PD)]


class DynPipelineOptions(ctypes.Structure):
    _fields_ = [("schedule", i32), ("order_groups", i32)]


class DynReplicaPlan(ctypes.Structure):
    _fields_ = [("replica", i32), ("n_microbatches", i32), ("plan", DynExecPlan), ("costs", DynStageCosts),
                ("mb_index", ctypes.POINTER(i32)), ("schedule", ctypes.c_int), ("recompute", ctypes.c_int),
                ("chunks", i32), ("makespan_ms", f64), ("max_peak_mb", f64), ("rank_busy_ms", _PD),
                ("rank_peak_mb", _PD)]


class DynIdealBound(ctypes.Structure):
    _fields_ = [("compute_ms", f64), ("step_ms", f64), ("bound_ms", f64)]


class DynPipelineResult(ctypes.Structure):
    _fields_ = [("batch", DynBatchPlan), ("n_replicas", i32), ("replicas", ctypes.POINTER(DynReplicaPlan)),
                ("ideal", DynIdealBound), ("step_ms", f64), ("iteration_ms", f64), ("efficiency", f64)]


_MIRRORS = {"dyn_error": DynError, "dyn_sample": DynSample, "dyn_model_config": DynModelConfig,
            "dyn_machine": DynMachine, "dyn_mb_shape": DynMbShape,
            "dyn_plan_options": DynPlanOptions, "dyn_plan_microbatch": DynPlanMicrobatch,
            "dyn_batch_plan": DynBatchPlan, "dyn_dataset": DynDataset, "dyn_instr": DynInstr,
            "dyn_rank_plan": DynRankPlan, "dyn_exec_plan": DynExecPlan, "dyn_stage_costs": DynStageCosts,
            "dyn_pipeline_options": DynPipelineOptions, "dyn_replica_plan": DynReplicaPlan,
            "dyn_ideal_bound": DynIdealBound,
            "dyn_pipeline_result": DynPipelineResult}

# ---- prototypes -----------------------------------------------------------------

_P = ctypes.c_void_p
_ERR = ctypes.POINTER(DynError)
_STATUS = ctypes.c_int
_PROTOTYPES = {
    "dyn_version": (ctypes.c_char_p, []),
    "dyn_abi_sizeof": (ctypes.c_size_t, [ctypes.c_char_p]),
    "dyn_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "dyn_model_config_preset": (_STATUS, [ctypes.c_char_p, ctypes.POINTER(DynModelConfig), _ERR]),
    "dyn_model_config_preset_name": (ctypes.c_char_p, [i32]),
    "dyn_model_config_parse": (_STATUS, [ctypes.c_char_p, ctypes.c_char_p,
                                         ctypes.POINTER(DynModelConfig), _ERR]),
    "dyn_model_config_validate": (_STATUS, [ctypes.POINTER(DynModelConfig), _ERR]),
    "dyn_machine_resolve": (_STATUS, [ctypes.c_char_p, ctypes.POINTER(DynMachine), _ERR]),
    "dyn_machine_parse": (_STATUS, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(DynMachine), _ERR]),
    "dyn_cost_model_create_analytic": (_P, [ctypes.POINTER(DynModelConfig), ctypes.POINTER(DynMachine), _ERR]),
    "dyn_cost_model_load_table": (_P, [ctypes.c_char_p, _ERR]),
    "dyn_cost_model_free": (None, [_P]),
    "dyn_cost_model_config": (ctypes.POINTER(DynModelConfig), [_P]),
    "dyn_cost_model_machine": (ctypes.POINTER(DynMachine), [_P]),
    "dyn_plan_options_default": (None, [ctypes.POINTER(DynPlanOptions)]),
    "dyn_planner_create": (_P, [_P, ctypes.POINTER(DynPlanOptions), _ERR]),
    "dyn_planner_plan": (_STATUS, [_P, ctypes.POINTER(DynSample), i32, ctypes.POINTER(DynBatchPlan), _ERR]),
    "dyn_planner_free": (None, [_P]),
    "dyn_planner_options": (ctypes.POINTER(DynPlanOptions), [_P]),
    "dyn_planner_states_mb": (f64, [_P]),
    "dyn_batch_plan_free": (None, [ctypes.POINTER(DynBatchPlan)]),
    "dyn_batching_parse": (_STATUS, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), _ERR]),
    "dyn_batching_name": (ctypes.c_char_p, [ctypes.c_int]),
    "dyn_recompute_parse": (_STATUS, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), _ERR]),
    "dyn_recompute_name": (ctypes.c_char_p, [ctypes.c_int]),
    "dyn_model_kind_name": (ctypes.c_char_p, [ctypes.c_int]),
    "dyn_lengths_fit": (ctypes.c_int, [ctypes.c_int, i32, i32, i32]),
    "dyn_sampler_create": (_P, [ctypes.POINTER(DynDataset), i64, _ERR]),
    "dyn_sampler_next": (_STATUS, [_P, ctypes.POINTER(ctypes.POINTER(DynSample)), ctypes.POINTER(i32), _ERR]),
    "dyn_sampler_free": (None, [_P]),
    "dyn_pipeline_options_default": (None, [ctypes.POINTER(DynPipelineOptions)]),
    "dyn_pipeline_create": (_P, [_P, ctypes.POINTER(DynPipelineOptions), _ERR]),
    "dyn_pipeline_free": (None, [_P]),
    "dyn_pipeline_plan": (_STATUS, [_P, ctypes.POINTER(DynSample), i32, ctypes.POINTER(DynPipelineResult), _ERR]),
    "dyn_pipeline_result_free": (None, [ctypes.POINTER(DynPipelineResult)]),
    "dyn_exec_plan_serialize": (_STATUS, [ctypes.POINTER(DynExecPlan), ctypes.POINTER(ctypes.POINTER(ctypes.c_uint8)),
                                          ctypes.POINTER(ctypes.c_size_t), _ERR]),
    "dyn_schedule_name": (ctypes.c_char_p, [ctypes.c_int]),
    "dyn_op_name": (ctypes.c_char_p, [ctypes.c_int]),
}

# ---- finding the library -----------------------------------------------------------


def _source_build_candidates():
    """build/libdynapipe.so of the checkout this package sits in, if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    if os.path.isfile(os.path.join(repo, "CMakeLists.txt")) and \
            os.path.isfile(os.path.join(repo, "include", "dynapipe", "plan.h")):
        return [os.path.join(repo, "build", _LIBNAME)]
    return []


def _prefix_dirs(prefix):
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    dirs = [os.path.join(prefix, "lib"), os.path.join(prefix, "lib64")]
    if multiarch:
        dirs.append(os.path.join(prefix, "lib", multiarch))
    return dirs


def _pkg_config_libdir():
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "dynapipe"], capture_output=True,
                             text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    libdir = out.stdout.strip()
    return libdir if out.returncode == 0 and libdir else None


def _installed_candidates():
    dirs = []
    if os.environ.get("DYNAPIPE_PREFIX"):
        dirs += _prefix_dirs(os.environ["DYNAPIPE_PREFIX"])
    libdir = _pkg_config_libdir()
    if libdir:
        dirs.append(libdir)
    for prefix in (sys.prefix, "/usr/local", "/usr"):
        dirs += _prefix_dirs(prefix)
    return [os.path.join(d, _LIBNAME) for d in dirs]


def find_library():
    """Return (path, how) of the library this package would load, where how
    says which rule found it. Raises Error listing every place looked at."""
    env = os.environ.get("DYNAPIPE_LIB")
    if env:
        path = os.path.join(env, _LIBNAME) if os.path.isdir(env) else env
        if not os.path.isfile(path):
            raise Error(f"DYNAPIPE_LIB={env}: no such file {path}", "i/o error")
        return path, "DYNAPIPE_LIB"
    tried = []
    for how, paths in (("build tree", _source_build_candidates()), ("installed", _installed_candidates())):
        for path in paths:
            if os.path.isfile(path):
                return path, how
            tried.append(path)
    found = ctypes.util.find_library("dynapipe")
    if found:
        return found, "loader search path"
    raise Error("libdynapipe.so not found; set DYNAPIPE_LIB to its path, or DYNAPIPE_PREFIX to the "
                "prefix it was installed into (looked in: " + ", ".join(tried) + ")", "i/o error")


_lib = None


def load():
    """The loaded library (ctypes.CDLL with prototypes set), loading it on
    first use."""
    global _lib
    if _lib is not None:
        return _lib
    path, how = find_library()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise Error(f"{path} (found by {how}) could not be loaded: {e}", "i/o error") from None
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise Error(f"{path} (found by {how}) has no function {name}: a library older than "
                        f"this package ({VERSION})", "i/o error") from None
        fn.restype = restype
        fn.argtypes = argtypes
    version = lib.dyn_version().decode()
    if version != VERSION:
        raise Error(f"{path} (found by {how}) is dynapipe {version}; this package is {VERSION}",
                    "i/o error")
    for cname, mirror in _MIRRORS.items():
        size = lib.dyn_abi_sizeof(cname.encode())
        if size != ctypes.sizeof(mirror):
            raise Error(f"{path}: struct {cname} is {size} bytes in the library, "
                        f"{ctypes.sizeof(mirror)} in this package", "internal error")
    libc = ctypes.CDLL(None)
    libc.free.restype, libc.free.argtypes = None, [ctypes.c_void_p]
    lib.dynapipe_free = libc.free  # for buffers the library malloc()s for the caller
    lib.dynapipe_path = path
    lib.dynapipe_found_by = how
    _lib = lib
    return lib


def check(status, err):
    """Raise the exception for a non-zero C status, with the C message."""
    if status == 0:
        return
    raise_error(err, status)


def raise_error(err, status=None):
    code = err.code if status is None else status
    lib = load()
    name = lib.dyn_status_name(code).decode()
    message = err.msg.decode(errors="replace") or name
    cls = _STATUS_ERRORS.get(code, Error)
    if cls is MemoryError:
        raise MemoryError(message)
    raise cls(message, name)
