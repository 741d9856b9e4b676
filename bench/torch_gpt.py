"""torch_gpt.py -- an independent PyTorch GPT-2 of dynapipe's GPT shape, for
the side-by-side benchmarks: bench/torch_gpt_block.py times one block,
bench/torch_train_gpt.py trains the whole model.

The architecture is GPT-2's, as dynapipe's src/model/gpt.c builds it: token
and learned position embeddings; pre-LayerNorm blocks (eps 1e-5) of causal
multi-head self-attention with biases and a tanh-GELU MLP, two residuals;
a final LayerNorm and an LM head tied to the token embedding. fp32 on the
CPU. Initialisation as dynapipe's: N(0, 0.02), the two residual output
projections N(0, 0.02 / sqrt(2 n_layers)), biases 0, LayerNorm weights 1.

Attention is written out (matmul, mask, softmax, matmul): PyTorch 1.13,
Debian's python3-torch, has no fused scaled_dot_product_attention. Three
ways to say what a position attends to (Block.forward):
  mask   a boolean tensor broadcastable to (B, NH, T, T), True = not
         attended (causal, or causal within each document of a packed row);
  docs   per row, the (start, length) of each document: attention runs per
         document on its own (causal) slice, so no work is spent on pairs
         across documents or on pad positions (variable-length attention,
         as flash-attention's varlen kernels do on a GPU).
Nothing here imports dynapipe: it is the independent side of a comparison.
"""
import json
import math
import os
import struct

import torch
import torch.nn.functional as F


def causal_mask(T):
    """(T, T) boolean, True above the diagonal (the future: not attended)."""
    return torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)


class Block(torch.nn.Module):
    """One GPT-2 block of hidden C, NH heads, MLP width ffn (default 4C)."""

    def __init__(self, C, NH, ffn=None):
        super().__init__()
        ffn = ffn or 4 * C
        self.NH = NH
        self.ln1 = torch.nn.LayerNorm(C, eps=1e-5)
        self.qkv = torch.nn.Linear(C, 3 * C)
        self.proj = torch.nn.Linear(C, C)
        self.ln2 = torch.nn.LayerNorm(C, eps=1e-5)
        self.fc = torch.nn.Linear(C, ffn)
        self.fcproj = torch.nn.Linear(ffn, C)

    def attend(self, q, k, v, mask):
        """q, k, v (B, NH, T, HD); mask broadcastable to (B, NH, T, T)."""
        # scale q rather than the (T, T) scores, and mask the scores in place
        # (the product's backward does not need them): one (T, T) tensor
        # fewer per step through memory, which bounds attention on a CPU
        att = (q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-2, -1)
        return att.masked_fill_(mask, float("-inf")).softmax(dim=-1) @ v

    def forward(self, x, mask=None, docs=None):
        """x (B, T, C) -> (B, T, C). Give mask, or docs (see the file's
        comment); docs leaves positions outside every document at 0."""
        B, T, C = x.shape
        NH, HD = self.NH, C // self.NH
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, NH, HD).transpose(1, 2)
        k = k.view(B, T, NH, HD).transpose(1, 2)
        v = v.view(B, T, NH, HD).transpose(1, 2)
        if docs is None:
            y = self.attend(q, k, v, mask)
        else:
            y = torch.zeros_like(q)
            for b, row in enumerate(docs):
                for s, n in row:
                    y[b, :, s:s + n] = self.attend(q[b:b + 1, :, s:s + n], k[b:b + 1, :, s:s + n],
                                                   v[b:b + 1, :, s:s + n], causal_mask(n))[0]
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    """GPT-2 of n_layers blocks; vocab V, P positions."""

    def __init__(self, n_layers, C, NH, ffn, V, P):
        super().__init__()
        self.wte = torch.nn.Embedding(V, C)
        self.wpe = torch.nn.Embedding(P, C)
        self.blocks = torch.nn.ModuleList([Block(C, NH, ffn) for _ in range(n_layers)])
        self.ln_f = torch.nn.LayerNorm(C, eps=1e-5)
        std, res_std = 0.02, 0.02 / math.sqrt(2.0 * n_layers)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                torch.nn.init.zeros_(p)
            elif "ln" in name:
                torch.nn.init.ones_(p)
            else:
                torch.nn.init.normal_(p, 0.0, res_std if name.endswith(("proj.weight", "fcproj.weight")) and
                                      "blocks" in name else std)

    def param_groups(self, weight_decay):
        """AdamW groups as dynapipe decays: the blocks' matrices only
        (not the embeddings, biases or LayerNorms)."""
        decay, rest = [], []
        for name, p in self.named_parameters():
            (decay if p.dim() == 2 and "blocks" in name else rest).append(p)
        return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]

    def forward(self, tokens, pos, where, mask=None, docs=None):
        """tokens, pos (B, T) ids and position ids; where: a (B, T) boolean of
        the positions whose next-token logits are wanted. Returns those
        logits (N, V), in row-major order of where."""
        x = self.wte(tokens) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x, mask=mask, docs=docs)
        return self.ln_f(x[where]) @ self.wte.weight.t()


def save_hf(model, folder, max_positions):
    """Write model's weights as a Hugging Face GPT2LMHeadModel folder
    (config.json + model.safetensors, fp32), the form `dynapipe train --init`
    reads: HF names, Conv1D matrices stored (in, out), tied head."""
    blocks = model.blocks
    C = model.wte.weight.shape[1]
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": model.wte.weight.shape[0],
           "n_positions": max_positions, "n_embd": C, "n_layer": len(blocks), "n_head": blocks[0].NH,
           "n_inner": blocks[0].fc.weight.shape[0], "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True,
           "activation_function": "gelu_new"}
    t = {"wte.weight": model.wte.weight, "wpe.weight": model.wpe.weight,
         "ln_f.weight": model.ln_f.weight, "ln_f.bias": model.ln_f.bias}
    for i, b in enumerate(blocks):
        p = "h.%d." % i
        t.update({p + "ln_1.weight": b.ln1.weight, p + "ln_1.bias": b.ln1.bias,
                  p + "attn.c_attn.weight": b.qkv.weight.t(), p + "attn.c_attn.bias": b.qkv.bias,
                  p + "attn.c_proj.weight": b.proj.weight.t(), p + "attn.c_proj.bias": b.proj.bias,
                  p + "ln_2.weight": b.ln2.weight, p + "ln_2.bias": b.ln2.bias,
                  p + "mlp.c_fc.weight": b.fc.weight.t(), p + "mlp.c_fc.bias": b.fc.bias,
                  p + "mlp.c_proj.weight": b.fcproj.weight.t(), p + "mlp.c_proj.bias": b.fcproj.bias})
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    header, blobs, off = {}, [], 0
    for name in sorted(t):
        raw = t[name].detach().contiguous().float().numpy().tobytes()  # little-endian on x86 and arm64
        header[name] = {"dtype": "F32", "shape": list(t[name].shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
