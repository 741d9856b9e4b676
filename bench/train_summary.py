#!/usr/bin/env python3
"""train_summary.py — summarise `dynapipe train --metrics FILE.jsonl` runs.

usage: bench/train_summary.py [--skip K] RUN.jsonl [RUN.jsonl ...]
       bench/train_summary.py --trace TRACE.json


One row per file: loss at the first and last step, medians (over the steps
after the first K, default 1: the first iteration allocates) of the measured
iteration time, the simulator's prediction for the same plans and their
ratio, real tokens/s, the measured bubble fraction, planning time per
iteration, the longest wait of any rank for its plan, the time all ranks
spent blocked waiting for a peer (dependency waits plus transfers not
hidden), MB sent per iteration, and allocated vs predicted peak memory per
rank.

With --trace (a `dynapipe train --trace` file of ranks on one host, whose
clocks agree): every blocked receive (RECV_*_FINISH) split into the time
before the peer started sending (waiting for the pipeline: the peer was
still computing) and after (waiting for bytes in flight: communication not
hidden), summed over all ranks and iterations. Standard library only."""
import json
import statistics
import sys


def med(rows, key):
    return statistics.median(r[key] for r in rows)


def trace_split(path):
    d = json.load(open(path))
    ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    stages = d["otherData"]["stages"]
    # send starts by (replica, kind, microbatch, stage sent from), in order of occurrence
    sends = {}
    for e in ev:
        a = e["args"]
        if a["op"] in ("send act", "send grad"):
            key = (e["tid"] // stages, a["op"], a["microbatch"], a["stage"])
            sends.setdefault(key, []).append(e["ts"])
    used = {}
    dep = comm = 0.0
    n = 0
    for e in sorted(ev, key=lambda e: e["ts"]):
        a = e["args"]
        if a["op"] not in ("wait recv act", "wait recv grad"):
            continue
        act = a["op"] == "wait recv act"
        src_stage = a["stage"] - 1 if act else a["stage"] + 1
        key = (e["tid"] // stages, "send act" if act else "send grad", a["microbatch"], src_stage)
        k = used.get(key, 0)
        used[key] = k + 1
        if key not in sends or k >= len(sends[key]):
            continue
        t0, t1, ts = e["ts"], e["ts"] + e["dur"], sends[key][k]
        dep += max(0.0, min(t1, ts) - t0)
        comm += max(0.0, t1 - max(t0, ts))
        n += 1
    print(f"{path}: {n} blocked receives; waiting for the peer to compute {dep / 1e3:.1f} ms, "
          f"for bytes in flight {comm / 1e3:.1f} ms (all ranks, all iterations)")
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "--trace":
        return trace_split(argv[2])
    skip = 1
    if len(argv) > 2 and argv[1] == "--skip":
        skip = int(argv[2])
        argv = argv[2:]
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    print("| run | loss first → last | iteration ms (predicted, measured/predicted) | tokens/s | bubble | "
          "plan ms | plan wait ms | peer wait ms (all ranks) | MB sent | peak MB per rank (predicted) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for path in argv[1:]:
        rows = [json.loads(line) for line in open(path)]
        if len(rows) <= skip:
            print(f"{path}: only {len(rows)} steps", file=sys.stderr)
            return 1
        tail = rows[skip:]
        it, pred = med(tail, "iteration_ms"), med(tail, "predicted_ms")
        peaks = ", ".join(f"{a:.0f} ({b:.0f})" for a, b in zip(rows[-1]["peak_mem_mb"], rows[-1]["predicted_peak_mem_mb"]))
        print(f"| {path} | {rows[0]['loss']:.3f} → {rows[-1]['loss']:.3f} | {it:.0f} ({pred:.0f}, {it / pred:.2f}x) | "
              f"{med(tail, 'tokens_per_s'):.0f} | {med(tail, 'bubble_fraction'):.2f} | {med(tail, 'plan_ms'):.2f} | "
              f"{max(r['plan_wait_ms'] for r in tail):.2f} | {med(tail, 'comm_wait_ms'):.0f} | "
              f"{med(tail, 'comm_mb'):.1f} | {peaks} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
