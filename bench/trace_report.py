#!/usr/bin/env python3
"""trace_report.py -- where an iteration's time goes, from `dynapipe train --trace`.

For each trace given: per rank, the compute time (forward, backward and
weight-gradient passes), the number of compute passes and their mean length,
the time spent in communication instructions (sends, and receives that wait
for the peer: the measured bubble), per iteration (totals / --steps).

    python3 bench/trace_report.py --steps N TRACE.json [TRACE.json ...]
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


def main(argv):
    if len(argv) < 4 or argv[1] != "--steps":
        raise SystemExit("usage: trace_report.py --steps N TRACE.json [...]")
    steps = int(argv[2])
    for path in argv[3:]:
        report(path, steps)


if __name__ == "__main__":
    main(sys.argv)
