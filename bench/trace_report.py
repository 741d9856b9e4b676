#!/usr/bin/env python3
"""trace_report.py -- where an iteration's time goes, from `dynapipe train --trace`.

For each trace given: per rank, the compute time (forward, backward and
weight-gradient passes), the number of compute passes and their mean length,
the time spent in communication instructions (sends, and receives that wait
for the peer: the measured bubble), per iteration (totals / --steps).

    python3 bench/trace_report.py --steps N TRACE.json [TRACE.json ...]
    python3 bench/trace_report.py --lost TRACE.json [TRACE.json ...]

--lost splits each rank's lost time per iteration into four parts (works on
`dynapipe train --trace` and `dynapipe simulate --trace` files alike; see
lost_split). Standard library only.
"""
import collections
import json
import sys


def report(path, steps):
    with open(path) as f:
        t = json.load(f)
    ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
    ms = collections.Counter()
    n = collections.Counter()
    for e in ev:
        ms[(e["tid"], e["cat"])] += e["dur"] / 1e3  # trace times are µs
        n[(e["tid"], e["cat"])] += 1
    ranks = sorted({e["tid"] for e in ev})
    print(f"{path}: per iteration (mean of {steps})")
    print(f"{'rank':>4} {'compute_ms':>11} {'passes':>7} {'ms/pass':>8} {'comm_ms':>8} {'other_ms':>9}")
    for r in ranks:
        comp = sum(ms[(r, c)] for c in ("forward", "backward", "weight"))
        passes = sum(n[(r, c)] for c in ("forward", "backward", "weight"))
        comm = ms[(r, "communication")]
        other = sum(v for (q, c), v in ms.items() if q == r) - comp - comm
        print(f"{r:>4} {comp / steps:>11.1f} {passes / steps:>7.1f} {comp / max(passes, 1):>8.2f} "
              f"{comm / steps:>8.1f} {other / steps:>9.1f}")


COMPUTE = ("forward", "backward", "weight")


def _iterations(ev):
    """Each rank's events cut into iterations: a rank's instruction index
    ("instr") starts again at 0 with every plan it runs. Returns
    {iteration: {rank: [events in time order]}}."""
    by_rank = {}
    for e in ev:
        by_rank.setdefault(e["tid"], []).append(e)
    its = {}
    for r, es in by_rank.items():
        es.sort(key=lambda e: (e["ts"], e["args"].get("instr", 0)))
        k, last = -1, None
        for e in es:
            i = e["args"].get("instr")
            if k < 0 or (i is not None and last is not None and i <= last):
                k += 1
            last = i
            its.setdefault(k, {}).setdefault(r, []).append(e)
    return its


def lost_split(trace):
    """The four parts of each rank's lost time, per iteration.

    An iteration's window runs from the first event of any rank to the last
    event's end on any rank (W ms). A rank's useful time is its compute
    (forward, backward and weight passes) times the micro-batch's useful
    fraction (the event's "useful" argument: the share of the pass spent on
    real tokens and unmasked attention, which `dynapipe train --trace`
    writes; 1 when the trace does not say, as `simulate --trace`'s).
    Lost = W - useful, and it splits exactly into:

      fill_drain  the window before the rank's first compute pass and after
                  its last (the pipeline filling and draining, including
                  the transfers that start it);
      stage_wait  time between the first and last pass not computing and
                  not moving bytes: a blocked receive (wait recv act/grad)
                  until the peer started its send, i.e. waiting for a
                  slower stage to finish its pass, plus gaps between
                  instructions;
      comm        time between the first and last pass in communication
                  instructions after the peer's send started (bytes in
                  flight, not hidden), and in the rank's own sends;
      padding     compute spent on padding or masked work: each pass's
                  duration x (1 - useful).

    A blocked receive is matched to the peer's send of the same kind and
    micro-batch from the neighbouring stage (previous for activations, next
    for gradients) in the same replica, in order of occurrence; an
    unmatched one counts as stage_wait. Ranks of one replica are tids
    replica * stages .. + stages - 1 (otherData.stages; 1 replica without
    it). Times in ms. Returns [{rank: {part: ms}}] per iteration."""
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    ranks = trace.get("otherData", {}).get("stages") or (max(e["tid"] for e in ev) + 1 if ev else 1)
    out = []
    its = _iterations(ev)
    for k in sorted(its):
        per_rank = its[k]
        allev = [e for es in per_rank.values() for e in es]
        t0 = min(e["ts"] for e in allev) / 1e3
        t1 = max(e["ts"] + e["dur"] for e in allev) / 1e3
        sends = {}
        for e in sorted(allev, key=lambda e: e["ts"]):
            a = e["args"]
            if a["op"] in ("send act", "send grad"):
                key = (e["tid"] // ranks, a["op"], a["microbatch"], a["stage"])
                sends.setdefault(key, []).append(e["ts"] / 1e3)
        used = {}
        parts = {}
        for r in sorted(per_rank):
            es = per_rank[r]
            comp = [e for e in es if e.get("cat") in COMPUTE]
            p = {"fill_drain": 0.0, "stage_wait": 0.0, "comm": 0.0, "padding": 0.0, "lost": 0.0}
            busy = sum(e["dur"] for e in comp) / 1e3
            useful = sum(e["dur"] * e["args"].get("useful", 1.0) for e in comp) / 1e3
            p["padding"] = busy - useful
            p["lost"] = (t1 - t0) - useful
            if not comp:
                p["fill_drain"] = t1 - t0
                parts[r] = p
                continue
            first = min(e["ts"] for e in comp) / 1e3
            last = max(e["ts"] + e["dur"] for e in comp) / 1e3
            p["fill_drain"] = (first - t0) + (t1 - last)
            interior = (last - first) - busy
            comm = 0.0
            for e in es:
                if e.get("cat") != "communication":
                    continue
                a = e["args"]
                # the part of the instruction inside [first, last]
                b0 = max(e["ts"] / 1e3, first)
                b1 = min((e["ts"] + e["dur"]) / 1e3, last)
                if b1 <= b0:
                    continue
                if a["op"] in ("wait recv act", "wait recv grad"):
                    act = a["op"] == "wait recv act"
                    key = (r // ranks, "send act" if act else "send grad", a["microbatch"],
                           a["stage"] - 1 if act else a["stage"] + 1)
                    n = used.get(key, 0)
                    used[key] = n + 1
                    if key not in sends or n >= len(sends[key]):
                        continue  # unmatched: waiting, counted as stage_wait
                    comm += max(0.0, b1 - max(b0, sends[key][n]))
                else:
                    comm += b1 - b0
            p["comm"] = comm
            p["stage_wait"] = interior - comm
            parts[r] = p
        out.append(parts)
    return out


def report_lost(path):
    with open(path) as f:
        t = json.load(f)
    its = lost_split(t)
    if not its:
        print(f"{path}: no instructions")
        return
    names = ("fill_drain", "stage_wait", "comm", "padding", "lost")
    print(f"{path}: lost time per rank, mean over {len(its)} iteration(s), ms")
    print(f"{'rank':>4} " + " ".join(f"{n:>11}" for n in names))
    ranks = sorted({r for it in its for r in it})
    for r in ranks:
        vals = [sum(it.get(r, {}).get(n, 0.0) for it in its) / len(its) for n in names]
        print(f"{r:>4} " + " ".join(f"{v:>11.2f}" for v in vals))


def main(argv):
    if len(argv) >= 3 and argv[1] == "--lost":
        for path in argv[2:]:
            report_lost(path)
        return
    if len(argv) < 4 or argv[1] != "--steps":
        raise SystemExit("usage: trace_report.py --steps N TRACE.json [...] | --lost TRACE.json [...]")
    steps = int(argv[2])
    for path in argv[3:]:
        report(path, steps)


if __name__ == "__main__":
    main(sys.argv)
