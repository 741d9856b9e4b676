#!/usr/bin/env python3
"""trace_lost_check.py -- bench/trace_report.py's split of lost time
(lost_split) on a schedule worked out by hand, and on a real simulator
trace (the four parts add up to each rank's lost time).

The hand-worked schedule: 2 stages, 3 micro-batches, 1F1B. Stage 0's
forward takes 1 ms and backward 2 ms, stage 1's 2 and 4; a message takes
0.5 ms from its send to its arrival; micro-batch 0 is all real tokens, 1
has 25% padding, 2 has 50% (their "useful" fractions 1, 0.75, 0.5).

  rank 0: F0 [0,1] send a0@1, F1 [1,2] send a1@2, wait g0 [2,8], B0 [8,10],
          F2 [10,11] send a2@11, wait g1 [11,14], B1 [14,16],
          wait g2 [16,20], B2 [20,22]
  rank 1: wait a0 [0,1.5], F0 [1.5,3.5], B0 [3.5,7.5] send g0@7.5,
          F1 [7.5,9.5], B1 [9.5,13.5] send g1@13.5, F2 [13.5,15.5],
          B2 [15.5,19.5] send g2@19.5
Window 0..22 ms. By hand:
  rank 0: compute 9, useful 9 - (3 x 0.25 + 3 x 0.5) = 6.75, lost 15.25;
          fill/drain 0 (computes at 0 and until 22); waits on g0, g1, g2:
          until the peer's send 5.5 + 2.5 + 3.5 = 11.5 stage wait, then
          0.5 each = 1.5 communication; padding 2.25.
  rank 1: compute 18, useful 18 - (6 x 0.25 + 6 x 0.5) = 13.5, lost 8.5;
          fill/drain 1.5 before F0 + 2.5 after B2 = 4; no gaps between
          passes: stage wait 0, communication 0; padding 4.5.
The same iteration again, 30 ms later (instruction indices start again),
must give the same parts. Usage: trace_lost_check.py [DYNAPIPE]"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import trace_report  # noqa: E402

CAT = {"F": "forward", "B": "backward"}
USEFUL = {0: 1.0, 1: 0.75, 2: 0.5}
RANK0 = [("F", 0, 0, 1), ("send act", 0, 1, 1), ("F", 1, 1, 2), ("send act", 1, 2, 2),
         ("wait recv grad", 0, 2, 8), ("B", 0, 8, 10), ("F", 2, 10, 11), ("send act", 2, 11, 11),
         ("wait recv grad", 1, 11, 14), ("B", 1, 14, 16), ("wait recv grad", 2, 16, 20), ("B", 2, 20, 22)]
RANK1 = [("wait recv act", 0, 0, 1.5), ("F", 0, 1.5, 3.5), ("B", 0, 3.5, 7.5), ("send grad", 0, 7.5, 7.5),
         ("wait recv act", 1, 7.5, 7.5), ("F", 1, 7.5, 9.5), ("B", 1, 9.5, 13.5), ("send grad", 1, 13.5, 13.5),
         ("wait recv act", 2, 13.5, 13.5), ("F", 2, 13.5, 15.5), ("B", 2, 15.5, 19.5),
         ("send grad", 2, 19.5, 19.5)]
EXPECT = {0: {"fill_drain": 0.0, "stage_wait": 11.5, "comm": 1.5, "padding": 2.25, "lost": 15.25},
          1: {"fill_drain": 4.0, "stage_wait": 0.0, "comm": 0.0, "padding": 4.5, "lost": 8.5}}


def events(rank, stage, prog, shift):
    out = []
    for i, (op, mb, a, b) in enumerate(prog):
        args = {"op": op, "instr": i, "microbatch": mb, "stage": stage}
        if op in CAT:
            args["useful"] = USEFUL[mb]
        out.append({"name": f"{op}{mb}", "cat": CAT.get(op, "communication"), "ph": "X", "pid": 0, "tid": rank,
                    "ts": (a + shift) * 1e3, "dur": (b - a) * 1e3, "args": args})
    return out


def check_hand():
    ev = []
    for shift in (0, 30):
        ev += events(0, 0, RANK0, shift) + events(1, 1, RANK1, shift)
    its = trace_report.lost_split({"otherData": {"stages": 2}, "traceEvents": ev})
    assert len(its) == 2, f"{len(its)} iterations, expected 2"
    for k, parts in enumerate(its):
        for r, want in EXPECT.items():
            for name, v in want.items():
                got = parts[r][name]
                assert abs(got - v) < 1e-9, f"iteration {k} rank {r} {name}: {got}, by hand {v}"


def check_simulated(cli):
    """A simulator trace: the parts are >= 0 and add up to the lost time."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        subprocess.run([cli, "simulate", "--model", "gpt", "--model-config", "gpt-tiny", "--stages", "2",
                        "--synthetic", "flan:1", "--global-batch-tokens", "4096", "--max-seqlen", "256", "--batches", "1",
                        "--methods", "dynapipe", "--trace", path],
                       check=True, stdout=subprocess.DEVNULL)
        with open(path) as f:
            its = trace_report.lost_split(json.load(f))
    assert its, "no iteration in the simulator's trace"
    for parts in its:
        for r, p in parts.items():
            total = p["fill_drain"] + p["stage_wait"] + p["comm"] + p["padding"]
            assert abs(total - p["lost"]) < 1e-4, f"rank {r}: parts {total} != lost {p['lost']}"
            assert min(p.values()) > -1e-4  # trace times are rounded to 1 ns, f"rank {r}: a negative part {p}"


if __name__ == "__main__":
    check_hand()
    if len(sys.argv) > 1:
        check_simulated(os.path.join(sys.argv[1], "dynapipe"))
    print("trace_lost_check: ok")
