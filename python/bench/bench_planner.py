"""bench_planner.py — what the Python binding costs on top of the C library:
per global batch, the wall time of Planner.plan (argument checks, the
ctypes call, the Python result objects) against the same C call made
directly through ctypes (dyn_planner_plan, or dyn_pipeline_plan with
schedule "auto": planning plus every replica's schedule search, validation
and simulation), median of the repeats.

    python3 python/bench/bench_planner.py [--quick]

Lengths are drawn once from random.Random(1) (a long-tailed mix: 70 %
short inputs 8..256 tokens with 1..32 target tokens, 30 % long inputs
256..1792 with 16..256), cut into 65,536-token global batches; GPT-2 (124M)
on 4 stages of the a100 machine, max_seqlen 2048. Numbers depend on the
machine and its load; docs/performance.md has the figures and the command."""
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import ctypes  # noqa: E402

import dynapipe  # noqa: E402
from dynapipe import _lib  # noqa: E402


def c_call_ms(planner, ins, tgs, schedule):
    """Wall time of the bare C call (samples already in a ctypes array)."""
    arr = planner._samples(ins, tgs, None)
    lib, err = planner._lib, _lib.DynError()
    if schedule is None:
        out = _lib.DynBatchPlan()
        t0 = time.perf_counter()
        st = lib.dyn_planner_plan(planner._planner, arr, len(arr), ctypes.byref(out), ctypes.byref(err))
        t = time.perf_counter() - t0
        lib.dyn_batch_plan_free(ctypes.byref(out))
    else:
        pipe = planner._pipeline(schedule)
        out = _lib.DynPipelineResult()
        t0 = time.perf_counter()
        st = lib.dyn_pipeline_plan(pipe, arr, len(arr), ctypes.byref(out), ctypes.byref(err))
        t = time.perf_counter() - t0
        lib.dyn_pipeline_result_free(ctypes.byref(out))
    _lib.check(st, err)
    return t * 1e3


def lengths(n):
    r = random.Random(1)
    inputs, targets = [], []
    for _ in range(n):
        if r.random() < 0.7:
            inputs.append(r.randint(8, 256))
            targets.append(r.randint(1, 32))
        else:
            inputs.append(r.randint(256, 1792))
            targets.append(r.randint(16, 256))
    return inputs, targets


def main():
    quick = "--quick" in sys.argv
    repeats = 3 if quick else 10
    inputs, targets = lengths(2000)
    sampler = dynapipe.DynaPipeBatchSampler(inputs, targets, 65536, model="gpt2-124m", max_seqlen=2048,
                                            stages=4, machine="a100")
    batches = list(sampler.global_batches())[:2 if quick else 4]
    print(f"{len(batches)} global batches of {[len(b) for b in batches]} samples, {repeats} repeats")
    with dynapipe.Planner(model="gpt2-124m", max_seqlen=2048, stages=4, machine="a100") as p:
        for schedule in (None, "auto"):
            walls, inner = [], []
            for b in batches:
                ins, tgs = [inputs[i] for i in b], [targets[i] for i in b]
                p.plan(ins, tgs, schedule=schedule)  # warm the cost cache
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    p.plan(ins, tgs, schedule=schedule)
                    walls.append((time.perf_counter() - t0) * 1e3)
                    inner.append(c_call_ms(p, ins, tgs, schedule))
            w, c = statistics.median(walls), statistics.median(inner)
            print(f"schedule {schedule or '-':5}: Planner.plan {w:8.3f} ms, the C call alone {c:8.3f} ms, "
                  f"binding overhead {w - c:7.3f} ms per global batch (medians)")
    sampler.close()


if __name__ == "__main__":
    main()
