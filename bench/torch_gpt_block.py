#!/usr/bin/python3
"""torch_gpt_block.py -- the same GPT-2 block as `dynapipe bench layer --model
gpt` (pre-LayerNorm, causal multi-head self-attention with biases, tanh-GELU
MLP of 4H, two residuals; fp32 on the CPU; the block of bench/torch_gpt.py),
forward + backward in PyTorch, so that bench/torch_compare.py can time the
two side by side.

Prints one line: "torch <version> ms <median> min <min> gflops <rate>", with
the FLOPs credited exactly as dynapipe credits them (3 x (24 B S H^2 +
4 B S^2 H)), so the two rates compare time for time.

PyTorch's best setting here: Debian's python3-torch does its fp32 matrix
products through the system BLAS (libblas.so.3, i.e. OpenBLAS), so run it
with the same kernel dynapipe selects (OPENBLAS_CORETYPE=SkylakeX on the
Xeon); the driver does.

usage: torch_gpt_block.py --batch B --seq S [--hidden 512] [--heads 8]
                          [--threads 1] [--repeat 5]
Exits 3 with a message when torch is not installed.
"""
import argparse
import statistics
import sys
import time

try:
    import torch
except ImportError:
    print("torch_gpt_block: PyTorch is not installed (apt-get install python3-torch); skipped")
    sys.exit(3)
from torch_gpt import Block, causal_mask  # the shared PyTorch GPT-2 (bench/torch_gpt.py)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    B, T, C = a.batch, a.seq, a.hidden
    blk = Block(C, a.heads)
    x = torch.randn(B, T, C, requires_grad=True)
    dout = torch.randn(B, T, C)
    mask = causal_mask(T)
    times = []
    for r in range(a.repeat + 1):  # one untimed warm-up
        blk.zero_grad(set_to_none=False)
        x.grad = None
        t0 = time.perf_counter()
        blk(x, mask=mask).backward(dout)
        dt = (time.perf_counter() - t0) * 1e3
        if r > 0:
            times.append(dt)
    gflop = 3.0 * (24.0 * B * T * C * C + 4.0 * B * T * T * C) / 1e9
    med = statistics.median(times)
    print("torch %s ms %.3f min %.3f gflops %.1f" % (torch.__version__, med, min(times),
                                                     gflop / (med * 1e-3)))


if __name__ == "__main__":
    main()
