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
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_block_timing as timing  # the shared harness (bench/torch_block_timing.py)

torch = timing.import_torch("torch_gpt_block")
from torch_gpt import Block, causal_mask  # the shared PyTorch GPT-2 (bench/torch_gpt.py)


def main():
    a = timing.parse_args(__doc__)
    torch.manual_seed(0)
    B, T, C = a.batch, a.seq, a.hidden
    blk = Block(C, a.heads)
    x = torch.randn(B, T, C, requires_grad=True)
    dout = torch.randn(B, T, C)
    mask = causal_mask(T)

    def zero_grad():
        blk.zero_grad(set_to_none=False)
        x.grad = None

    gflop = 3.0 * (24.0 * B * T * C * C + 4.0 * B * T * T * C) / 1e9
    timing.run(torch, a, zero_grad, lambda: blk(x, mask=mask).backward(dout), gflop)


if __name__ == "__main__":
    main()
