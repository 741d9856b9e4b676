#!/usr/bin/env python3
"""hf_torch_check.py — a dynapipe checkpoint loads into a PyTorch
re-implementation of the Hugging Face classes it names.

For GPT-2 and T5 v1.1: `dynapipe train --steps 2 --save DIR`, then this file
reads DIR's config.json the way transformers would (GPT2LMHeadModel: n_embd,
n_layer, n_head, n_positions, layer_norm_epsilon, tie_word_embeddings; T5:
d_model, d_kv, d_ff, num_layers, num_decoder_layers, num_heads,
relative_attention_*, feed_forward_proj, decoder_start_token_id), loads the
weights through model.safetensors.index.json by their Hugging Face names
and layouts (GPT-2's Conv1D matrices are (in, out)), and computes the mean
target-token loss of two samples written as JSONL. `dynapipe eval` on the
same file must print the same loss (relative difference <= 1e-4): every
name, shape, transpose and config field has to be what HF means by it.

The other direction (`dynapipe train --init`): the same two architectures
written from the PyTorch side as Hugging Face folders with fresh random
weights (bf16, fp16 and fp32 tensors; GPT-2 sharded with an index and
save_pretrained's "transformer." prefix), loaded with --init: the first
training step's loss on the two samples (they make the whole batch) must
equal the PyTorch re-implementation's loss on those weights.

Usage: hf_torch_check.py DYNAPIPE_BINARY. Exit 77 (ctest: skipped) when
torch is not installed.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch not installed: skipped")
    sys.exit(77)

SAMPLES = [("sort dcba", "abcd"), ("copy hello", "hello")]
SEP, EOS = 259, 258  # the byte vocabulary's: a JSONL input ends with sep, a target with eos


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", name
        b, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[b:end]), dtype=torch.float32)
        out[name] = t.reshape(e["shape"]) if e["shape"] else t
    return out


def load_checkpoint(step_dir):
    with open(os.path.join(step_dir, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(step_dir, "model.safetensors.index.json")) as f:
        index = json.load(f)
    w = {}
    for shard in sorted(set(index["weight_map"].values())):
        w.update(read_safetensors(os.path.join(step_dir, shard)))
    assert set(w) == set(index["weight_map"]), "index and shards disagree"
    return cfg, w


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gpt2_loss(cfg, w, inp, tgt):
    assert cfg["architectures"] == ["GPT2LMHeadModel"] and cfg["tie_word_embeddings"]
    C, NH, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    ids = torch.tensor(inp + tgt)
    T = len(ids)
    x = w["wte.weight"][ids] + w["wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(cfg["n_layer"]):
        p = "h.%d." % i
        a = F.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: (in, out)
        q, k, v = (t.reshape(T, NH, C // NH).transpose(0, 1) for t in qkv.split(C, dim=1))
        s = (q @ k.transpose(1, 2)) / math.sqrt(C // NH)
        s = s.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (s @ v).transpose(0, 1).reshape(T, C)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = F.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        h = gelu_new(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), w["ln_f.weight"], w["ln_f.bias"], eps)
    logits = x @ w["wte.weight"].T
    n = len(inp)
    return F.cross_entropy(logits[n - 1:T - 1], ids[n:], reduction="sum").item(), len(tgt)


def t5_bucket(rel, bidirectional, num_buckets, max_distance):
    ret = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        ret += (rel > 0).long() * num_buckets
        rel = rel.abs()
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    max_exact = num_buckets // 2
    is_small = rel < max_exact
    large = max_exact + (torch.log(rel.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).long()
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return ret + torch.where(is_small, rel, large)


def t5_rms(x, wt, eps):
    return wt * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def t5_attn(cfg, w, p, xq, xkv, bias):
    NH, D = cfg["num_heads"], cfg["d_kv"]
    q = (xq @ w[p + "q.weight"].T).reshape(-1, NH, D).transpose(0, 1)
    k = (xkv @ w[p + "k.weight"].T).reshape(-1, NH, D).transpose(0, 1)
    v = (xkv @ w[p + "v.weight"].T).reshape(-1, NH, D).transpose(0, 1)
    s = q @ k.transpose(1, 2)  # T5: no 1/sqrt(d) scaling
    if bias is not None:
        s = s + bias
    y = (s.softmax(-1) @ v).transpose(0, 1).reshape(xq.shape[0], NH * D)
    return y @ w[p + "o.weight"].T


def t5_bias(cfg, table, Tq, Tk, bidirectional, causal):
    ctx = torch.arange(Tq)[:, None]
    mem = torch.arange(Tk)[None, :]
    b = t5_bucket(mem - ctx, bidirectional, cfg["relative_attention_num_buckets"],
                  cfg["relative_attention_max_distance"])
    bias = table[b].permute(2, 0, 1)  # Embedding (num_buckets, heads) -> (heads, Tq, Tk)
    if causal:
        bias = bias.masked_fill(~torch.tril(torch.ones(Tq, Tk, dtype=torch.bool)), float("-inf"))
    return bias


def t5_ff(cfg, w, p, x):
    assert cfg["feed_forward_proj"] == "gated-gelu"
    h = gelu_new(x @ w[p + "wi_0.weight"].T) * (x @ w[p + "wi_1.weight"].T)
    return h @ w[p + "wo.weight"].T


def t5_loss(cfg, w, inp, tgt):
    assert cfg["architectures"] == ["T5ForConditionalGeneration"] and not cfg["tie_word_embeddings"]
    eps = cfg["layer_norm_epsilon"]
    x = w["shared.weight"][torch.tensor(inp)]
    eb = t5_bias(cfg, w["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"], len(inp), len(inp),
                 True, False)
    for i in range(cfg["num_layers"]):
        p = "encoder.block.%d." % i
        x = x + t5_attn(cfg, w, p + "layer.0.SelfAttention.", t5_rms(x, w[p + "layer.0.layer_norm.weight"], eps),
                        t5_rms(x, w[p + "layer.0.layer_norm.weight"], eps), eb)
        x = x + t5_ff(cfg, w, p + "layer.1.DenseReluDense.", t5_rms(x, w[p + "layer.1.layer_norm.weight"], eps))
    enc = t5_rms(x, w["encoder.final_layer_norm.weight"], eps)
    dec_ids = torch.tensor([cfg["decoder_start_token_id"]] + tgt[:-1])
    y = w["shared.weight"][dec_ids]
    db = t5_bias(cfg, w["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"], len(tgt), len(tgt),
                 False, True)
    for i in range(cfg["num_decoder_layers"]):
        p = "decoder.block.%d." % i
        n0 = t5_rms(y, w[p + "layer.0.layer_norm.weight"], eps)
        y = y + t5_attn(cfg, w, p + "layer.0.SelfAttention.", n0, n0, db)
        y = y + t5_attn(cfg, w, p + "layer.1.EncDecAttention.", t5_rms(y, w[p + "layer.1.layer_norm.weight"], eps),
                        enc, None)
        y = y + t5_ff(cfg, w, p + "layer.2.DenseReluDense.", t5_rms(y, w[p + "layer.2.layer_norm.weight"], eps))
    y = t5_rms(y, w["decoder.final_layer_norm.weight"], eps)
    logits = y @ w["lm_head.weight"].T
    return F.cross_entropy(logits, torch.tensor(tgt), reduction="sum").item(), len(tgt)


def run(cmd):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               ASAN_OPTIONS="detect_leaks=0")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if p.returncode != 0:
        sys.exit("%s: exit %d: %s" % (" ".join(cmd), p.returncode, p.stderr))
    return p.stdout


def torch_bytes(t):
    """Raw little-endian bytes and safetensors dtype of a tensor."""
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().tobytes(), "BF16"
    return t.contiguous().numpy().tobytes(), {torch.float16: "F16", torch.float32: "F32"}[t.dtype]


def write_st(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        raw, dt = torch_bytes(t)
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


GPT2_KEYS = ["architectures", "vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "layer_norm_epsilon",
             "tie_word_embeddings", "activation_function"]
T5_KEYS = ["architectures", "vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads",
           "relative_attention_num_buckets", "relative_attention_max_distance", "feed_forward_proj",
           "layer_norm_epsilon", "tie_word_embeddings", "decoder_start_token_id"]


def write_torch_folder(d, kind, cfg, names_shapes):
    """Fresh random weights for every tensor the HF class has, stored in
    bf16 / fp16 / fp32 in turn; returns (config, the fp32 weights)."""
    os.makedirs(d)
    g = torch.Generator().manual_seed(11)
    w, stored = {}, {}
    for i, (name, shape) in enumerate(sorted(names_shapes.items())):
        norm = "ln_" in name or "layer_norm" in name
        t = torch.randn(shape, generator=g) * (0.02 if norm else 0.1) + (1.0 if norm and name.endswith("weight") else 0.0)
        t = t.to((torch.bfloat16, torch.float16, torch.float32)[i % 3])
        stored[name] = t
        w[name] = t.float()
    c = {k: cfg[k] for k in (GPT2_KEYS if kind == "gpt" else T5_KEYS) if k in cfg}
    c["torch_dtype"] = "bfloat16"
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f)
    if kind == "t5":
        write_st(os.path.join(d, "model.safetensors"), stored)
        return c, w
    names = sorted(stored)
    shards = [{n: stored[n] for n in names[:len(names) // 2]},
              {"transformer." + n: stored[n] for n in names[len(names) // 2:]}]
    wm = {}
    for k, sh in enumerate(shards):
        fn = "model-%05d-of-%05d.safetensors" % (k + 1, len(shards))
        write_st(os.path.join(d, fn), sh)
        wm.update({n: fn for n in sh})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f)
    return c, w


def main():
    cli = sys.argv[1]
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "s.jsonl")
        with open(data, "w") as f:
            for i, t in SAMPLES:
                f.write(json.dumps({"input": i, "target": t}) + "\n")
        for kind, model, loss_fn in (("gpt", ["--model-config", "gpt-tiny", "--layers", "2"], gpt2_loss),
                                     ("t5", ["--model-config", "t5-tiny", "--layers", "2", "--dec-layers", "2"], t5_loss)):
            ck = os.path.join(tmp, kind)
            run([cli, "train", "--model", kind] + model + ["--stages", "2", "--steps", "2", "--threads", "1",
                "--samples", "500", "--global-batch-tokens", "2048", "--max-seqlen", "128", "--quiet",
                "--save", ck])
            out = run([cli, "eval", "--checkpoint", ck, "--data", data, "--split", "train", "--samples", "2",
                       "--no-accuracy"])
            printed = float(out.split("loss ")[1].split()[0])
            with open(os.path.join(ck, "latest")) as f:
                cfg, w = load_checkpoint(os.path.join(ck, f.read().strip()))
            for key, want in (("pad_token_id", 256), ("eos_token_id", 258)):
                assert cfg[key] == want, (kind, key, cfg[key])
            total, tokens = 0.0, 0
            with torch.no_grad():
                for i, t in SAMPLES:
                    l, n = loss_fn(cfg, w, list(i.encode()) + [SEP], list(t.encode()) + [EOS])
                    total += l
                    tokens += n
            mine = total / tokens
            rel = abs(mine - printed) / abs(printed)
            print("%s: dynapipe eval loss %.4f, PyTorch re-implementation %.6f (relative difference %.1e)"
                  % (kind, printed, mine, rel))
            bad += rel > 1e-4
            # The other direction: a folder written here loads with --init.
            hf = os.path.join(tmp, kind + "-torch")
            c, w2 = write_torch_folder(hf, kind, cfg, {n: tuple(t.shape) for n, t in w.items()})
            m = os.path.join(tmp, kind + "-metrics.jsonl")
            run([cli, "train", "--init", hf, "--data", data, "--stages", "2", "--steps", "1", "--threads", "1",
                 "--global-batch-tokens", "2048", "--max-seqlen", "128", "--quiet", "--metrics", m])
            with open(m) as f:
                rec = json.loads(f.readline())
            total, tokens = 0.0, 0
            with torch.no_grad():
                for i, t in SAMPLES:
                    l, n = loss_fn(c, w2, list(i.encode()) + [SEP], list(t.encode()) + [EOS])
                    total += l
                    tokens += n
            mine = total / tokens
            rel = abs(mine - rec["loss"]) / abs(mine)
            print("%s: PyTorch-written folder (bf16/fp16/fp32): --init step %d loss %.6f, PyTorch %.6f (relative "
                  "difference %.1e)" % (kind, rec["step"], rec["loss"], mine, rel))
            bad += rel > 1e-5 or rec["step"] != 0
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
