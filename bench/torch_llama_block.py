#!/usr/bin/python3
"""torch_llama_block.py -- the same Llama block as dynapipe's Llama layer
benchmark (dyn_layer_bench_llama_dims: hidden 512, 8 query heads over 2
key/value heads of 64, SwiGLU intermediate 1408, RMSNorm eps 1e-5, rotary
theta 10000, causal; fp32 on the CPU), forward + backward in PyTorch, written
the way transformers' LlamaDecoderLayer computes it (rotate_half rotary,
key/value heads repeated for their query heads, no biases), so that
bench/torch_compare.py --model llama can time the two side by side.

Prints one line: "torch <version> ms <median> min <min> gflops <rate>", with
the FLOPs credited exactly as dynapipe credits them (dyn_llama_block_flops:
3 x (2 N C QKV + 2 N I C + 6 N C F + 4 B T^2 I), N = B T, I = heads x head
dim, QKV = (heads + 2 kv heads) x head dim), so the two rates compare time
for time. Attention is written out (matmul, mask, softmax, matmul): Debian's
PyTorch has no fused scaled_dot_product_attention on this CPU path.

usage: torch_llama_block.py --batch B --seq S [--hidden 512] [--heads 8]
                            [--threads 1] [--repeat 5]
Exits 3 with a message when torch is not installed.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_block_timing as timing  # the shared harness (bench/torch_block_timing.py)

torch = timing.import_torch("torch_llama_block")
import torch.nn.functional as F  # noqa: E402 (after the guarded import)


class RMSNorm(torch.nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Block(torch.nn.Module):
    def __init__(self, C, NH, KVH, FF):
        super().__init__()
        self.NH, self.KVH, self.HD = NH, KVH, C // NH
        self.ln1, self.ln2 = RMSNorm(C, 1e-5), RMSNorm(C, 1e-5)
        self.q = torch.nn.Linear(C, NH * self.HD, bias=False)
        self.k = torch.nn.Linear(C, KVH * self.HD, bias=False)
        self.v = torch.nn.Linear(C, KVH * self.HD, bias=False)
        self.o = torch.nn.Linear(NH * self.HD, C, bias=False)
        self.gate = torch.nn.Linear(C, FF, bias=False)
        self.up = torch.nn.Linear(C, FF, bias=False)
        self.down = torch.nn.Linear(FF, C, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        NH, KVH, HD = self.NH, self.KVH, self.HD
        h = self.ln1(x)
        q = self.q(h).view(B, T, NH, HD).transpose(1, 2)
        k = self.k(h).view(B, T, KVH, HD).transpose(1, 2)
        v = self.v(h).view(B, T, KVH, HD).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(NH // KVH, dim=1)
        v = v.repeat_interleave(NH // KVH, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / HD ** 0.5)
        att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, NH * HD)
        x = x + self.o(y)
        m = self.ln2(x)
        return x + self.down(F.silu(self.gate(m)) * self.up(m))


def main():
    a = timing.parse_args(__doc__)
    torch.manual_seed(0)
    B, T, C, NH = a.batch, a.seq, a.hidden, a.heads
    KVH = NH // 4 if NH % 4 == 0 else NH  # as dyn_layer_bench_llama_dims
    FF = (8 * C // 3 + 63) // 64 * 64
    HD = C // NH
    blk = Block(C, NH, KVH, FF)
    inv = 1.0 / (10000.0 ** (torch.arange(0, HD, 2, dtype=torch.int64).float() / HD))
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x = torch.randn(B, T, C, requires_grad=True)
    dout = torch.randn(B, T, C)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)

    def zero_grad():
        blk.zero_grad(set_to_none=False)
        x.grad = None

    I, QKV = NH * HD, (NH + 2 * KVH) * HD
    N = B * T
    gflop = 3.0 * (2.0 * N * C * QKV + 2.0 * N * I * C + 6.0 * N * C * FF + 4.0 * B * T * T * I) / 1e9
    timing.run(torch, a, zero_grad, lambda: blk(x, cos, sin, mask).backward(dout), gflop)


if __name__ == "__main__":
    main()
