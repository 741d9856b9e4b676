"""torch_block_timing.py -- the timing harness that bench/torch_gpt_block.py
and bench/torch_llama_block.py share, so that both PyTorch blocks are timed
the same way: the same arguments, the same PyTorch import (exit 3 with a
message when it is missing, which bench/torch_compare.py reads as a skip),
one untimed warm-up forward + backward and then --repeat timed ones, and
the same one-line report that bench/torch_compare.py parses:

    torch <version> ms <median> min <min> gflops <rate>

with the rate over the FLOPs each script credits exactly as dynapipe does.
"""
import argparse
import statistics
import sys
import time


def import_torch(prog):
    """PyTorch, or exit 3 with a message naming prog."""
    try:
        import torch
    except ImportError:
        print("%s: PyTorch is not installed (apt-get install python3-torch); skipped" % prog)
        sys.exit(3)
    return torch


def parse_args(doc):
    """--batch B --seq S [--hidden 512] [--heads 8] [--threads 1] [--repeat 5]."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    return ap.parse_args()


def run(torch, a, zero_grad, step, gflop):
    """Time step() (one forward + backward) a.repeat times after one untimed
    warm-up on a.threads threads, zero_grad() before each, and print the
    report line. gflop: the FLOPs credited to one step, in 1e9."""
    torch.set_num_threads(a.threads)
    times = []
    for r in range(a.repeat + 1):  # one untimed warm-up
        zero_grad()
        t0 = time.perf_counter()
        step()
        dt = (time.perf_counter() - t0) * 1e3
        if r > 0:
            times.append(dt)
    med = statistics.median(times)
    print("torch %s ms %.3f min %.3f gflops %.1f" % (torch.__version__, med, min(times),
                                                     gflop / (med * 1e-3)))
