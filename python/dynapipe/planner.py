"""planner.py — planning one global batch from Python: the Planner handle
(a cost model and a C dyn_planner), its options checked before they reach
C, and the results as plain Python objects.

Units as in the C library: lengths in tokens, times in milliseconds,
memory in MiB ("MB").
"""
import ctypes
import functools
import json
import math
import os
from collections import namedtuple
from dataclasses import dataclass, field
from typing import List, Optional

from . import _args, _lib

__all__ = ["Planner", "BatchPlan", "MicroBatch", "ReplicaPlan", "Instruction", "plan_batch", "METHODS",
           "RECOMPUTE", "SCHEDULES", "MODEL_PRESETS"]

METHODS = ("dynapipe", "padding", "packing", "packing-docmask", "token")
# Pipeline schedules (include/dynapipe/sched.h), in dyn_schedule order, then
# "auto": the best schedule x micro-batch order x recompute by simulation.
SCHEDULES = ("1f1b", "cyclic", "wait-free-cyclic", "interleaved", "zb", "auto")
RECOMPUTE = ("none", "selective", "full")
MODEL_PRESETS = ("gpt-tiny", "gpt-mini", "gpt2-124m", "gpt-6.7b", "t5-tiny", "t5-mini", "t5-base", "t5-11b",
                 "llama-tiny", "llama-mini", "smollm2-135m", "llama3.2-1b", "llama3-8b")
# `--model gpt|t5|llama` alone means these presets in the command line; so here.
_KIND_DEFAULT_PRESET = {"gpt": "gpt2-124m", "t5": "t5-base", "llama": "smollm2-135m"}
_INT32_MAX = 2**31 - 1


# ---- argument checks (before anything reaches C): _args.py ---------------------------

_int = _args.check_int
_opt_int = _args.check_opt_int
_choice = _args.check_choice
_path_or_name = _args.check_path_or_name


def _lengths(name, values):
    """A list of ints in [1, 2^31 - 1] from a sequence (not a dict, set or
    str); TypeError/ValueError naming the first bad element."""
    return _args.check_ints(name, values, 1, _INT32_MAX)


# Which method each baseline knob applies to: given with another method it
# would be ignored, so it is refused.
_KNOB_METHODS = {"mb_samples": ("padding",), "pack_rows": ("packing", "packing-docmask"), "mb_tokens": ("token",)}


# ---- results ---------------------------------------------------------------------------

@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch of a plan. samples: sample ids (the ids given to
    plan(), by default positions 0..n-1); rows x input_len (+ target_len for
    T5; 0 for GPT) is the padded shape the model runs (GPT: input_len is the
    whole input+target sequence); sample_rows / sample_offsets: row and token
    offset of each sample (offset 0 unless packed); time_ms: predicted
    forward + backward time on one pipeline stage; stored_mb / peak_mb:
    activations one stage stores for it, and its predicted peak."""
    samples: List[int]
    rows: int
    input_len: int
    target_len: int
    replica: int
    time_ms: float
    stored_mb: float
    peak_mb: float
    sample_rows: List[int] = field(repr=False)
    sample_offsets: List[int] = field(repr=False)
    sample_dec_offsets: List[int] = field(repr=False)
    tokens: int = 0  # real (unpadded) input + target tokens of its samples

    def to_dict(self):
        """The keys and values of one micro-batch in `dynapipe plan --json`."""
        return {"samples": list(self.samples), "input_len": self.input_len, "target_len": self.target_len,
                "rows": self.rows, "replica": self.replica, "time_ms": self.time_ms,
                "stored_mb": self.stored_mb, "peak_mb": self.peak_mb}


# One instruction of a rank's execution plan (include/dynapipe/sched.h):
# op is its name ("FORWARD", "SEND_ACT_START", ...: dyn_op_name), microbatch the plan's
# micro-batch number (ReplicaPlan.microbatches[microbatch]), stage the
# pipeline stage it serves, peer the other rank of a send/receive (else -1),
# buf_in / buf_out buffer slots (or -1), rows / enc_len / dec_len the padded
# shape, bytes the tensor moved or held, recompute the mode of a compute
# instruction, targets whether a load_input loads the last stage's targets.
Instruction = namedtuple("Instruction", "op microbatch stage peer buf_in buf_out rows enc_len dec_len bytes "
                                        "recompute targets")


@dataclass(frozen=True)
class ReplicaPlan:
    """One data-parallel replica's validated execution plan for a global
    batch, and its simulated figures (the cost model's machine and links).

    microbatches: the replica's micro-batches in the order the schedule
    numbers and runs them (plan micro-batch j is microbatches[j]; the same
    MicroBatch objects as BatchPlan.microbatches, so sample ids are at hand);
    microbatch_index[j]: its index in BatchPlan.microbatches. ranks[r]: rank
    r's instruction list. serialized: the plan's binary form (what
    `dynapipe plan --plan-out` writes, for the runtime). makespan_ms: end of
    the last instruction; rank_busy_ms / rank_peak_mb: compute time and peak
    memory per rank; real_tokens: input + target tokens of its samples. A
    replica with no micro-batch (fewer micro-batches than replicas) has no
    plan: schedule and recompute None, every list empty, makespan 0."""
    replica: int
    schedule: str
    recompute: str
    chunks: int
    makespan_ms: float
    max_peak_mb: float
    rank_busy_ms: List[float]
    rank_peak_mb: List[float]
    microbatch_index: List[int]
    microbatches: List[MicroBatch] = field(repr=False)
    serialized: bytes = field(repr=False)
    real_tokens: int = 0
    # Each rank's dyn_instr array as copied from C; decoded by `ranks` on
    # first use (decoding every instruction costs more than building the
    # plan, and a data loader that only wants the order never needs it).
    raw_ranks: List[bytes] = field(default_factory=list, repr=False, compare=False)

    @functools.cached_property
    def ranks(self):
        """ranks[r]: rank r's instructions, in order (Instruction tuples)."""
        lib = _lib.load()
        op_names = [lib.dyn_op_name(k).decode() for k in range(256)]
        rc_names = [lib.dyn_recompute_name(k).decode() for k in range(256)]
        size = ctypes.sizeof(_lib.DynInstr)
        out = []
        for raw in self.raw_ranks:
            instrs = (_lib.DynInstr * (len(raw) // size)).from_buffer_copy(raw)
            out.append([Instruction(op_names[x.op], x.microbatch, x.stage, x.peer, x.buf_in, x.buf_out,
                                    x.shape.rows, x.shape.enc_len, x.shape.dec_len, x.bytes, rc_names[x.recompute],
                                    bool(x.flags & 1)) for x in instrs])
        return out

    @property
    def bubble_fraction(self):
        """1 - compute time of its ranks / (ranks * makespan)."""
        if not self.microbatches or not self.makespan_ms > 0:
            return 0
        busy = 0.0
        for b in self.rank_busy_ms:
            busy += b
        return 1.0 - busy / (len(self.rank_busy_ms) * self.makespan_ms)

    @property
    def tokens_per_s(self):
        return self.real_tokens / (self.makespan_ms * 1e-3) if self.makespan_ms > 0 else 0

    def to_dict(self):
        """The keys and values of one replica plan in `dynapipe plan --json`."""
        return {"replica": self.replica, "schedule": self.schedule, "recompute": self.recompute,
                "chunks": self.chunks, "makespan_ms": self.makespan_ms, "max_peak_mb": self.max_peak_mb,
                "bubble_fraction": self.bubble_fraction, "microbatches": list(self.microbatch_index)}


@dataclass(frozen=True)
class BatchPlan:
    """A planned global batch. microbatches: in execution order within each
    replica; objective_ms: the predicted iteration time the DP minimised;
    balanced_ms: (S-1)*t_max/v + the slowest replica's sum; peak_mb:
    predicted device peak with S micro-batches in flight; real_tokens /
    padded_tokens: tokens of the samples / tokens the model runs."""
    microbatches: List[MicroBatch]
    n_samples: int
    objective_ms: float
    balanced_ms: float
    plan_time_ms: float
    peak_mb: float
    real_tokens: int
    padded_tokens: int
    replica_plans: Optional[List[ReplicaPlan]] = field(default=None, repr=False)
    method: str = "dynapipe"  # the method whose plan this is: dynapipe's candidates may win
    knob: int = 0  # that baseline's size knob as planned (0: the most that fit, or the DP)
    efficiency: Optional[float] = None  # ideal bound / iteration (None unless planned with a schedule)
    ideal_ms: Optional[float] = None  # the batch's ideal bound, ms (pipeline.h dyn_ideal_bound_of; ditto)

    @property
    def makespan_ms(self):
        """Simulated time of the global batch: its slowest replica's (None
        unless planned with a schedule)."""
        if self.replica_plans is None:
            return None
        return max((r.makespan_ms for r in self.replica_plans if r.microbatches), default=0.0)

    @property
    def bubble_fraction(self):
        """Idle share of all S * d devices over the makespan (an idle
        replica's devices count as idle); None without a schedule."""
        if self.replica_plans is None:
            return None
        makespan, busy, ranks = self.makespan_ms, 0.0, 0
        for r in self.replica_plans:
            if r.microbatches:
                for b in r.rank_busy_ms:
                    busy += b
                ranks = len(r.rank_busy_ms)
        return 1.0 - busy / (ranks * len(self.replica_plans) * makespan) if makespan > 0 else 0

    @property
    def tokens_per_s(self):
        """Real tokens of the batch per second of makespan; None without a
        schedule."""
        if self.replica_plans is None:
            return None
        return self.real_tokens / (self.makespan_ms * 1e-3) if self.makespan_ms > 0 else 0

    def execution_order(self, replica=None):
        """The micro-batches in the order the schedule runs them: replica by
        replica (or only `replica`), each in its plan's order. Needs a plan
        made with a schedule."""
        if self.replica_plans is None:
            raise ValueError("this BatchPlan has no execution plans: plan with schedule=...")
        if replica is not None:
            _int("replica", replica, 0, len(self.replica_plans) - 1)
        return [mb for r in self.replica_plans if replica is None or r.replica == replica
                for mb in r.microbatches]

    @property
    def padding_efficiency(self):
        return self.real_tokens / self.padded_tokens if self.padded_tokens else 0

    def replica(self, r):
        """The micro-batches replica r runs, in its execution order."""
        _int("r", r, 0, 1 << 16)
        return [mb for mb in self.microbatches if mb.replica == r]

    def to_dict(self):
        """The keys and values of one global batch in `dynapipe plan --json`
        (without its "index"); with execution plans, their keys too."""
        d = {"n_samples": self.n_samples, "objective_ms": self.objective_ms,
                "balanced_ms": self.balanced_ms, "plan_time_ms": self.plan_time_ms,
                "peak_mb": self.peak_mb, "real_tokens": self.real_tokens,
                "padded_tokens": self.padded_tokens, "padding_efficiency": self.padding_efficiency,
                "method": self.method, "knob": self.knob,
                "microbatches": [mb.to_dict() for mb in self.microbatches]}
        if self.replica_plans is not None:
            d["replica_plans"] = [r.to_dict() for r in self.replica_plans]
            d.update(ideal_ms=self.ideal_ms, efficiency=self.efficiency)
            d.update(makespan_ms=self.makespan_ms, bubble_fraction=self.bubble_fraction,
                     tokens_per_s=self.tokens_per_s)
        return d


def _batch_plan_from_c(bp, t5, tokens_of=None, replicas=None, res=None):
    """A BatchPlan from the C dyn_batch_plan bp; tokens_of: sample id ->
    real tokens; replicas: (lib, [dyn_replica_plan]) to convert too."""
    ids = bp.sample_ids
    mbs = []
    for m in range(bp.n_microbatches):
        c = bp.mbs[m]
        span = range(c.first, c.first + c.n_samples)
        mbs.append(MicroBatch(samples=[ids[k] for k in span], rows=c.shape.rows, input_len=c.shape.enc_len,
                              target_len=c.shape.dec_len if t5 else 0, replica=c.replica, time_ms=c.time_ms,
                              stored_mb=c.stored_mb, peak_mb=c.peak_mb,
                              sample_rows=[bp.sample_row[k] for k in span],
                              sample_offsets=[bp.sample_offset[k] for k in span],
                              sample_dec_offsets=[bp.sample_dec_offset[k] if bp.sample_dec_offset else 0
                                                  for k in span],
                              tokens=sum(tokens_of[ids[k]] for k in span) if tokens_of else 0))
    rps = None
    if replicas is not None:
        lib, crps = replicas
        rps = [_replica_plan_from_c(lib, c, mbs) for c in crps]
    return BatchPlan(microbatches=mbs, n_samples=bp.n_samples, objective_ms=bp.objective_ms,
                     balanced_ms=bp.balanced_ms, plan_time_ms=bp.plan_time_ms, peak_mb=bp.device_peak_mb,
                     real_tokens=bp.real_tokens, padded_tokens=bp.padded_tokens, replica_plans=rps,
                     method=METHODS[bp.method], knob=bp.knob,
                     efficiency=res.efficiency if res is not None else None,
                     ideal_ms=res.ideal.bound_ms if res is not None else None)


def _replica_plan_from_c(lib, c, mbs):
    m = c.n_microbatches
    if m == 0:  # an idle replica: no plan
        return ReplicaPlan(replica=c.replica, schedule=None, recompute=None, chunks=0, makespan_ms=0.0,
                           max_peak_mb=0.0, rank_busy_ms=[], rank_peak_mb=[], microbatch_index=[],
                           microbatches=[], serialized=b"", real_tokens=0)
    plan = c.plan
    size = ctypes.sizeof(_lib.DynInstr)
    raw_ranks = [ctypes.string_at(plan.ranks[r].instrs, plan.ranks[r].n_instrs * size) for r in range(plan.n_ranks)]
    buf = ctypes.POINTER(ctypes.c_uint8)()
    size = ctypes.c_size_t()
    err = _lib.DynError()
    _lib.check(lib.dyn_exec_plan_serialize(ctypes.byref(plan), ctypes.byref(buf), ctypes.byref(size),
                                           ctypes.byref(err)), err)
    try:
        serialized = ctypes.string_at(buf, size.value)
    finally:
        lib.dynapipe_free(buf)
    index = [c.mb_index[j] for j in range(m)]
    order = [mbs[i] for i in index]
    return ReplicaPlan(replica=c.replica, schedule=lib.dyn_schedule_name(c.schedule).decode(),
                       recompute=lib.dyn_recompute_name(c.recompute).decode(), chunks=c.chunks, makespan_ms=c.makespan_ms,
                       max_peak_mb=c.max_peak_mb, rank_busy_ms=[c.rank_busy_ms[r] for r in range(plan.n_ranks)],
                       rank_peak_mb=[c.rank_peak_mb[r] for r in range(plan.n_ranks)], microbatch_index=index,
                       microbatches=order, raw_ranks=raw_ranks, serialized=serialized,
                       real_tokens=sum(mb.tokens for mb in order))


def _struct_dict(s):
    out = {}
    for name, _ in s._fields_:
        v = getattr(s, name)
        out[name] = v.decode() if isinstance(v, bytes) else v
    return out


# ---- the planner ------------------------------------------------------------------------

class Planner:
    """A cost model and a planner for a stream of global batches (the C
    dyn_planner caches micro-batch costs across calls).

    model: a preset name (see MODEL_PRESETS), "gpt" / "t5" / "llama" (their default
        presets, as `dynapipe plan --model` alone), a model JSON file, or a
        dict in the model JSON format ({"preset": "gpt2-124m", "n_layers": 6}
        or every field); None with a cost table (the table's model).
    max_seqlen: longest sequence, tokens (GPT, Llama: input + target; T5: each side).
    stages: pipeline stages S; dp: data-parallel replicas; chunks: model
        chunks per device v.
    machine: "cpu", "a100", a machine JSON file, or a dict in that format.
    cost_model: "analytic", or a cost-table file (its model and machine).
    memory_limit_mb: per device; None: the machine's memory.
    method: one of METHODS; recompute: one of RECOMPUTE; round_to: pad
        lengths to a multiple of it; mb_samples / pack_rows / mb_tokens: the
        baselines' knobs (None: the most that fit).
    dp_packing: dynapipe only; True (default, as the CLI): never behind its
        candidates -- document-masked packings by DP objective, and with a
        schedule the baselines' plans by simulated time (BatchPlan.method
        and .knob say which won); False: the DP's plan alone.

    Bad types raise TypeError and bad values ValueError before any C call;
    what the library refuses raises a dynapipe.Error subclass with its
    message. Close with close() or use as a context manager. One Planner is
    used by one thread at a time (the C planner caches costs); make one per
    thread or process.
    """

    def __init__(self, *, model=None, max_seqlen, stages, machine="cpu", cost_model="analytic", dp=1,
                 chunks=1, memory_limit_mb=None, method="dynapipe", round_to=8, recompute="none",
                 mb_samples=None, pack_rows=None, mb_tokens=None, dp_packing=True):
        self._cm = self._planner = None
        self._pipelines = {}
        lib = _lib.load()
        opt = _lib.DynPlanOptions()
        lib.dyn_plan_options_default(ctypes.byref(opt))
        opt.max_seqlen = _int("max_seqlen", max_seqlen, 2, 1 << 20)
        opt.stages = _int("stages", stages, 1, 4096)
        opt.dp = _int("dp", dp, 1, 1 << 16)
        opt.chunks = _int("chunks", chunks, 1, 1024)
        opt.round_to = _int("round_to", round_to, 1, 4096)
        opt.mb_samples = _opt_int("mb_samples", mb_samples, 1, 1 << 24)
        opt.pack_rows = _opt_int("pack_rows", pack_rows, 1, 1 << 24)
        opt.mb_tokens = _opt_int("mb_tokens", mb_tokens, 1, 1 << 40)
        opt.method = METHODS.index(_choice("method", method, METHODS))
        for knob, value in (("mb_samples", mb_samples), ("pack_rows", pack_rows), ("mb_tokens", mb_tokens)):
            if value is not None and method not in _KNOB_METHODS[knob]:
                raise ValueError(f"{knob} = {value} applies to method {' or '.join(_KNOB_METHODS[knob])}, "
                                 f"not to method {method!r}")
        opt.recompute = RECOMPUTE.index(_choice("recompute", recompute, RECOMPUTE))
        if not isinstance(dp_packing, bool):
            raise TypeError(f"dp_packing must be True or False, not {type(dp_packing).__name__}")
        opt.enable_packing = int(dp_packing)
        if memory_limit_mb is not None:
            if isinstance(memory_limit_mb, bool) or not isinstance(memory_limit_mb, (int, float)):
                raise TypeError(f"memory_limit_mb must be a number, not {type(memory_limit_mb).__name__}")
            if not (math.isfinite(memory_limit_mb) and memory_limit_mb > 0):
                raise ValueError(f"memory_limit_mb = {memory_limit_mb} must be a positive finite number")
            opt.memory_limit_mb = float(memory_limit_mb)
        cost_model = _path_or_name("cost_model", cost_model)
        if model is not None and not isinstance(model, (str, os.PathLike, dict)):
            raise TypeError(f"model must be a preset name, a path or a dict, not {type(model).__name__}")
        if isinstance(model, dict):
            _args.check_json("model", model)
        elif model is not None:
            model = _path_or_name("model", model)
        if isinstance(machine, dict):
            _args.check_json("machine", machine)
        else:
            machine = _path_or_name("machine", machine)
        if cost_model != "analytic" and not os.path.isfile(cost_model):
            raise ValueError(f"cost_model = {cost_model!r} is neither 'analytic' nor a file")

        err = _lib.DynError()
        if cost_model == "analytic":
            if model is None:
                raise ValueError("model is required with the analytic cost model")
            cfg = self._resolve_model(lib, model, opt.max_seqlen)
            mach = self._resolve_machine(lib, machine)
            self._cm = lib.dyn_cost_model_create_analytic(ctypes.byref(cfg), ctypes.byref(mach),
                                                          ctypes.byref(err))
            if not self._cm:
                _lib.raise_error(err)
        else:
            self._cm = lib.dyn_cost_model_load_table(cost_model.encode(), ctypes.byref(err))
            if not self._cm:
                _lib.raise_error(err)
            if model is not None:
                want = self._resolve_model(lib, model, opt.max_seqlen)
                got = lib.dyn_cost_model_config(self._cm).contents
                if want.kind != got.kind:
                    self.close()
                    raise ValueError(f"model {model!r} does not match the cost table {cost_model} "
                                     f"({lib.dyn_model_kind_name(got.kind).decode()})")
        self._planner = lib.dyn_planner_create(self._cm, ctypes.byref(opt), ctypes.byref(err))
        if not self._planner:
            self.close()
            _lib.raise_error(err)
        self._lib = lib
        cfg = lib.dyn_cost_model_config(self._cm).contents
        self.kind = lib.dyn_model_kind_name(cfg.kind).decode()
        self.model = _struct_dict(cfg)
        self.model["kind"] = self.kind
        self.machine = _struct_dict(lib.dyn_cost_model_machine(self._cm).contents)
        resolved = lib.dyn_planner_options(self._planner).contents
        self.memory_limit_mb = resolved.memory_limit_mb
        self.states_mb = lib.dyn_planner_states_mb(self._planner)
        self.options = {"method": method, "stages": opt.stages, "dp": opt.dp, "chunks": opt.chunks,
                        "max_seqlen": opt.max_seqlen, "round_to": opt.round_to, "recompute": recompute,
                        "memory_limit_mb": resolved.memory_limit_mb, "mb_samples": opt.mb_samples,
                        "pack_rows": opt.pack_rows, "mb_tokens": opt.mb_tokens}

    @staticmethod
    def _resolve_model(lib, model, max_seqlen):
        err = _lib.DynError()
        cfg = _lib.DynModelConfig()
        if isinstance(model, dict):
            spec = dict(model)
            spec.setdefault("max_seqlen", max_seqlen)
            text = json.dumps(spec)
            _lib.check(lib.dyn_model_config_parse(text.encode(), b"model dict", ctypes.byref(cfg),
                                                  ctypes.byref(err)), err)
        else:
            name = _path_or_name("model", model)
            name = _KIND_DEFAULT_PRESET.get(name, name)
            if name in MODEL_PRESETS:
                _lib.check(lib.dyn_model_config_preset(name.encode(), ctypes.byref(cfg), ctypes.byref(err)), err)
            elif os.path.isfile(name):
                with open(name, encoding="utf-8") as f:
                    text = f.read()
                _lib.check(lib.dyn_model_config_parse(text.encode(), name.encode(), ctypes.byref(cfg),
                                                      ctypes.byref(err)), err)
            else:
                raise ValueError(f"model = {model!r} is neither gpt, t5, llama, a preset "
                                 f"({', '.join(MODEL_PRESETS)}) nor a file")
        cfg.max_seqlen = max_seqlen
        _lib.check(lib.dyn_model_config_validate(ctypes.byref(cfg), ctypes.byref(err)), err)
        return cfg

    @staticmethod
    def _resolve_machine(lib, machine):
        err = _lib.DynError()
        m = _lib.DynMachine()
        if isinstance(machine, dict):
            _lib.check(lib.dyn_machine_parse(json.dumps(machine).encode(), b"machine dict", ctypes.byref(m),
                                             ctypes.byref(err)), err)
        else:
            _lib.check(lib.dyn_machine_resolve(machine.encode(), ctypes.byref(m), ctypes.byref(err)), err)
        return m

    # ---- planning

    def _samples(self, input_lengths, target_lengths, sample_ids):
        inputs = _lengths("input_lengths", input_lengths)
        targets = _lengths("target_lengths", target_lengths)
        if len(inputs) != len(targets):
            raise ValueError(f"input_lengths has {len(inputs)} samples, target_lengths {len(targets)}")
        if not inputs:
            raise ValueError("a global batch needs at least one sample")
        if len(inputs) > _INT32_MAX:
            raise ValueError("too many samples")
        if sample_ids is None:
            ids = range(len(inputs))
        else:
            ids = _args.check_ints("sample_ids", sample_ids, 0, _INT32_MAX)
            if len(ids) != len(inputs):
                raise ValueError(f"sample_ids has {len(ids)} entries for {len(inputs)} samples")
            _args.check_unique("sample_ids", ids)  # two micro-batches must not both list a sample
        limit = self.options["max_seqlen"]
        arr = (_lib.DynSample * len(inputs))()
        for k, (i, t, sid) in enumerate(zip(inputs, targets, ids)):
            if self.kind != "t5" and i + t > limit:
                raise ValueError(f"sample {sid}: input {i} + target {t} = {i + t} tokens exceeds "
                                 f"max_seqlen {limit}")
            if self.kind == "t5" and max(i, t) > limit:
                raise ValueError(f"sample {sid}: input {i} / target {t} tokens: a side exceeds "
                                 f"max_seqlen {limit}")
            arr[k].id, arr[k].task, arr[k].input_len, arr[k].target_len = sid, -1, i, t
        return arr

    def plan(self, input_lengths, target_lengths, sample_ids=None, schedule=None):
        """Plan one global batch: input_lengths[k], target_lengths[k] are
        sample k's tokens (GPT: the model sees input followed by target);
        sample_ids[k] (default k) is what the micro-batches list. Returns a
        BatchPlan. With schedule (one of SCHEDULES; "auto" picks schedule,
        micro-batch order and recompute by simulation) it also builds every
        replica's validated execution plan (BatchPlan.replica_plans) and
        simulates it (makespan_ms, bubble_fraction, tokens_per_s)."""
        self._check_open()
        if schedule is not None:
            _choice("schedule", schedule, SCHEDULES)
        arr = self._samples(input_lengths, target_lengths, sample_ids)
        return self._plan_c(arr, len(arr), schedule)

    def _pipeline(self, schedule):
        """The C dyn_pipeline of a schedule, made on first use."""
        p = self._pipelines.get(schedule)
        if p is None:
            lib = self._lib
            opt = _lib.DynPipelineOptions()
            lib.dyn_pipeline_options_default(ctypes.byref(opt))
            opt.schedule = SCHEDULES.index(schedule)  # "auto" is DYN_SCHEDULE_AUTO = DYN_SCHEDULE_COUNT
            err = _lib.DynError()
            p = lib.dyn_pipeline_create(self._planner, ctypes.byref(opt), ctypes.byref(err))
            if not p:
                _lib.raise_error(err)
            self._pipelines[schedule] = p
        return p

    def _plan_c(self, arr, n, schedule=None):
        lib = self._lib
        err = _lib.DynError()
        t5 = self.kind == "t5"
        tokens_of = {arr[k].id: arr[k].input_len + arr[k].target_len for k in range(n)}
        if schedule is None:
            bp = _lib.DynBatchPlan()
            _lib.check(lib.dyn_planner_plan(self._planner, arr, n, ctypes.byref(bp), ctypes.byref(err)), err)
            try:
                return _batch_plan_from_c(bp, t5, tokens_of)
            finally:
                lib.dyn_batch_plan_free(ctypes.byref(bp))
        res = _lib.DynPipelineResult()
        _lib.check(lib.dyn_pipeline_plan(self._pipeline(schedule), arr, n, ctypes.byref(res), ctypes.byref(err)),
                   err)
        try:
            return _batch_plan_from_c(res.batch, t5, tokens_of,
                                      (lib, [res.replicas[r] for r in range(res.n_replicas)]), res)
        finally:
            lib.dyn_pipeline_result_free(ctypes.byref(res))

    # ---- lifetime

    def _check_open(self):
        if not self._planner:
            raise ValueError("this Planner is closed")

    def close(self):
        """Free the C planner and cost model (idempotent)."""
        lib = _lib.load()
        for p in getattr(self, "_pipelines", {}).values():  # they borrow the planner: first
            lib.dyn_pipeline_free(p)
        self._pipelines = {}
        if self._planner:
            lib.dyn_planner_free(self._planner)
        if self._cm:
            lib.dyn_cost_model_free(self._cm)
        self._planner = self._cm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def plan_batch(input_lengths, target_lengths, **options):
    """Plan one global batch with a Planner made from options and closed
    again (for one-off calls; reuse a Planner for a stream of batches)."""
    with Planner(**options) as p:
        return p.plan(input_lengths, target_lengths)
