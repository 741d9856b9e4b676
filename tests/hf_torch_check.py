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

The Llama family (LlamaForCausalLM with llama3 rope scaling and 2 key/value
heads for 4 query heads, in 3 shards; Qwen2ForCausalLM with q/k/v biases
and a tied head; MistralForCausalLM with a sliding window longer than the
run): folders written here from an implementation of those classes written
in this file (float64), loaded by hf_grads (tests/hf_grads.c: --init's
loader, one forward and backward); the loss and every parameter's gradient
on a padded and on a document-masked packed micro-batch agree to 1e-5
relative (per tensor, in norm). Through the command: a `train --save`
Llama checkpoint loads into those classes at `dynapipe eval`'s loss, and a
folder written here starts `train --init` at the classes' loss.

Usage: hf_torch_check.py DYNAPIPE_BINARY [HF_GRADS_BINARY]. Exit 77 (ctest: skipped) when
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
    # coreutils timeout ends the process group: `train` starts mpirun, which
    # a killed dynapipe would leave running with the pipes open
    p = subprocess.run(["timeout", "300"] + cmd, capture_output=True, text=True, env=env, timeout=330)
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



# ---- the Llama family (LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM),
# written here from the Llama definition, in float64: RMSNorm, rotary
# embeddings (rotate_half pairing, rope_theta, llama3 scaling), grouped-query
# attention with every key/value head repeated for its query heads, SwiGLU,
# Qwen2's q/k/v biases, tied or untied head. A padded row and a row packed
# with document masks are, by their definition, each sample computed alone
# from position 0 (HF's flattening collator restarts position ids per
# document), so the reference runs each sample on its own.

LL = dict(V=300, C=32, L=2, H=4, KVH=2, HD=16, F=48, P=64)


def llama_config(arch, **over):
    c = {"architectures": [arch], "model_type": {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                                                 "MistralForCausalLM": "mistral"}[arch],
         "vocab_size": LL["V"], "hidden_size": LL["C"], "intermediate_size": LL["F"],
         "num_hidden_layers": LL["L"], "num_attention_heads": LL["H"], "num_key_value_heads": LL["KVH"],
         "head_dim": LL["HD"], "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
         "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
         "torch_dtype": "bfloat16"}
    if arch == "LlamaForCausalLM":  # llama3 scaling with every band in use at head_dim 16
        c["rope_scaling"] = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 32}
        c["attention_bias"] = False
    if arch == "Qwen2ForCausalLM":
        c.update(tie_word_embeddings=True, use_sliding_window=False, sliding_window=32, rope_theta=1000000.0,
                 rms_norm_eps=1e-6)
    if arch == "MistralForCausalLM":
        c["sliding_window"] = 4096  # covers every sequence of the run: the plain computation
    c.update(over)
    return c


def llama_tensor_shapes(cfg):
    C, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    H, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    HD = cfg.get("head_dim", C // H)
    qwen = cfg["architectures"] == ["Qwen2ForCausalLM"]
    s = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        s.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                  p + "self_attn.q_proj.weight": (H * HD, C), p + "self_attn.k_proj.weight": (KVH * HD, C),
                  p + "self_attn.v_proj.weight": (KVH * HD, C), p + "self_attn.o_proj.weight": (C, H * HD),
                  p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                  p + "mlp.down_proj.weight": (C, F)})
        if qwen:
            s.update({p + "self_attn.q_proj.bias": (H * HD,), p + "self_attn.k_proj.bias": (KVH * HD,),
                      p + "self_attn.v_proj.bias": (KVH * HD,)})
    if not cfg["tie_word_embeddings"]:
        s["lm_head.weight"] = (V, C)
    return s


def llama_inv_freq(cfg):
    HD = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    # As Hugging Face computes it: in float32 (then used in float64 here).
    inv = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, HD, 2, dtype=torch.int64).float() / HD))
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type", rs.get("type")) == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        ctx = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        slowed = torch.where(wavelen > ctx / lo, inv / factor, inv)
        smooth = (ctx / wavelen - lo) / (hi - lo)
        blended = (1 - smooth) * slowed / factor + smooth * slowed
        medium = ~(wavelen < ctx / hi) & ~(wavelen > ctx / lo)
        inv = torch.where(medium, blended, slowed)
    return inv


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def llama_seq_loss(cfg, w, ids, n_in, rope_sign=1.0, repeat_kv=True):
    """Sum of the target-token losses of one sequence (input ++ target) at
    positions 0.. . rope_sign / repeat_kv plant bugs for the self-check."""
    C, H, KVH = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    HD = cfg.get("head_dim", C // H)
    eps = cfg["rms_norm_eps"]
    T = len(ids)
    ids_t = torch.tensor(ids)
    x = w["model.embed_tokens.weight"][ids_t]
    ang = torch.arange(T, dtype=torch.float32)[:, None] * llama_inv_freq(cfg)[None, :]  # float32, as HF
    emb = torch.cat((ang, ang), dim=-1).double()
    cos, sin = emb.cos(), rope_sign * emb.sin()
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        a = rms_norm(x, w[p + "input_layernorm.weight"], eps)

        def proj(name, heads):
            y = a @ w[p + "self_attn.%s_proj.weight" % name].T
            b = w.get(p + "self_attn.%s_proj.bias" % name)
            if b is not None:
                y = y + b
            return y.reshape(T, heads, HD).transpose(0, 1)  # (heads, T, HD)
        q, k, v = proj("q", H), proj("k", KVH), proj("v", KVH)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if repeat_kv:  # key/value head j serves query heads j*H/KVH .. (j+1)*H/KVH-1
            k = k.repeat_interleave(H // KVH, dim=0)
            v = v.repeat_interleave(H // KVH, dim=0)
        else:  # planted: tiled instead of repeated
            k = k.repeat(H // KVH, 1, 1)
            v = v.repeat(H // KVH, 1, 1)
        s = (q @ k.transpose(1, 2)) / math.sqrt(HD)
        s = s.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (s @ v).transpose(0, 1).reshape(T, H * HD)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        m = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = m @ w[p + "mlp.gate_proj.weight"].T
        x = x + (F.silu(g) * (m @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    logits = x @ head.T
    return F.cross_entropy(logits[n_in - 1:T - 1], ids_t[n_in:], reduction="sum")


def llama_loss(cfg, w, samples, **plant):
    """Mean target-token loss of samples [(input ids, target ids)]."""
    total = sum(llama_seq_loss(cfg, w, i + t, len(i), **plant) for i, t in samples)
    return total / sum(len(t) for _, t in samples)


def write_llama_folder(d, cfg, seed, n_shards):
    """Random weights of every tensor the HF class has, stored bf16 / fp16 /
    fp32 in turn, in n_shards files with an index (or one
    model.safetensors); returns the fp32 values stored, as float64."""
    os.makedirs(d)
    g = torch.Generator().manual_seed(seed)
    stored, w = {}, {}
    for i, (name, shape) in enumerate(sorted(llama_tensor_shapes(cfg).items())):
        norm = "norm" in name
        t = torch.randn(shape, generator=g) * (0.1 if norm else 0.2) + (1.0 if norm else 0.0)
        t = t.to((torch.bfloat16, torch.float16, torch.float32)[i % 3])
        stored[name] = t
        w[name] = t.double()
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    if n_shards == 1:
        write_st(os.path.join(d, "model.safetensors"), stored)
        return w
    names = sorted(stored)
    wm = {}
    for k in range(n_shards):
        fn = "model-%05d-of-%05d.safetensors" % (k + 1, n_shards)
        part = {n: stored[n] for n in names[k::n_shards]}
        write_st(os.path.join(d, fn), part)
        wm.update({n: fn for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f)
    return w


def rel_diff(a, b):
    return (a - b).norm().item() / max(b.norm().item(), 1e-30)


def llama_batches():
    """Token-id samples of several lengths, one padded and one packed
    document-masked micro-batch of them (3 rows: 2 + 1 + 2 samples)."""
    g = torch.Generator().manual_seed(5)
    lens = [(5, 3), (9, 6), (2, 4), (12, 7), (3, 2)]
    samples = [(torch.randint(0, LL["V"], (a,), generator=g).tolist(),
                torch.randint(0, LL["V"], (b,), generator=g).tolist()) for a, b in lens]
    body = [{"input": i, "target": t} for i, t in samples]
    return samples, [("padded", {"max_len": LL["P"], "layout": "padded", "samples": body}),
                     ("docmask", {"max_len": LL["P"], "layout": "docmask", "rows": [2, 1, 2], "samples": body})]


def llama_family(grads_tool, tmp):
    """Each architecture written from this side with --init's loader
    (hf_grads) computing loss and every gradient: equal to the reference to
    1e-5 relative, padded and document-masked. Returns failures."""
    bad = 0
    samples, batches = llama_batches()
    for arch, shards in (("LlamaForCausalLM", 3), ("Qwen2ForCausalLM", 2), ("MistralForCausalLM", 1)):
        d = os.path.join(tmp, arch)
        cfg = llama_config(arch)
        w = write_llama_folder(d, cfg, seed=len(arch), n_shards=shards)
        leaves = {n: t.clone().requires_grad_(True) for n, t in w.items()}
        ref = llama_loss(cfg, leaves, samples)
        ref.backward()
        for layout, batch in batches:
            bpath, gpath = os.path.join(tmp, "batch.json"), os.path.join(tmp, "grads-%s-%s.safetensors" % (arch, layout))
            with open(bpath, "w") as f:
                json.dump(batch, f)
            out = run([grads_tool, d, bpath, gpath])
            loss = float(out.split("loss ")[1].split()[0])
            got = read_safetensors(gpath)
            worst, worst_name = 0.0, ""
            if set(got) != set(leaves):
                print("%s: gradient names differ: %s" % (arch, sorted(set(got) ^ set(leaves))[:4]))
                bad += 1
                continue
            for n, t in leaves.items():
                r = rel_diff(got[n].double(), t.grad)
                if r > worst:
                    worst, worst_name = r, n
            rl = abs(loss - ref.item()) / abs(ref.item())
            print("%s (%d shard%s, %s): loss %.7f vs PyTorch %.7f (%.1e); %d gradients, worst %.1e (%s)"
                  % (arch, shards, "s" if shards > 1 else "", layout, loss, ref.item(), rl, len(got), worst,
                     worst_name))
            bad += rl > 1e-5 or worst > 1e-5
        if arch == "LlamaForCausalLM":
            bad += planted_bugs_fail(cfg, w, samples, ref.item())
    return bad


def planted_bugs_fail(cfg, w, samples, loss):
    """The reference itself tells the plants apart: a RoPE pair rotated the
    wrong way, or key/value heads tiled instead of repeated, move the loss
    far beyond the tolerance (so the comparison above can fail)."""
    bad = 0
    with torch.no_grad():
        for what, plant in (("RoPE rotated the wrong way", {"rope_sign": -1.0}),
                            ("key/value heads not repeated", {"repeat_kv": False})):
            other = llama_loss(cfg, w, samples, **plant).item()
            rel = abs(other - loss) / abs(loss)
            print("planted bug '%s': loss %.7f, %.1e from the right one" % (what, other, rel))
            bad += rel < 1e-3
    return bad



def llama_cli(cli, tmp, data):
    """Through the command: a Llama checkpoint of `train --save` loads into
    the classes above at `dynapipe eval`'s loss (its config.json is
    LlamaForCausalLM), and a folder written here starts `train --init` at
    the classes' loss on the two samples (the whole first batch)."""
    bad = 0
    byte_samples = [(list(i.encode()) + [SEP], list(t.encode()) + [EOS]) for i, t in SAMPLES]
    ck = os.path.join(tmp, "llama-ck")
    run([cli, "train", "--model", "llama", "--model-config", "llama-tiny", "--stages", "2", "--steps", "2",
         "--threads", "1", "--samples", "500", "--global-batch-tokens", "2048", "--max-seqlen", "128", "--quiet",
         "--save", ck])
    out = run([cli, "eval", "--checkpoint", ck, "--data", data, "--split", "train", "--samples", "2", "--no-accuracy"])
    printed = float(out.split("loss ")[1].split()[0])
    with open(os.path.join(ck, "latest")) as f:
        cfg, w = load_checkpoint(os.path.join(ck, f.read().strip()))
    ok_cfg = cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    with torch.no_grad():
        mine = llama_loss(cfg, {n: t.double() for n, t in w.items()}, byte_samples).item()
    rel = abs(mine - printed) / abs(printed)
    print("llama: dynapipe eval loss %.4f, PyTorch classes on the saved checkpoint %.6f (relative difference %.1e); "
          "config.json %s" % (printed, mine, rel, cfg["architectures"][0]))
    bad += rel > 1e-4 or not ok_cfg
    d = os.path.join(tmp, "llama-init")
    cfg2 = llama_config("LlamaForCausalLM")
    w2 = write_llama_folder(d, cfg2, seed=3, n_shards=2)
    m = os.path.join(tmp, "llama-metrics.jsonl")
    run([cli, "train", "--init", d, "--data", data, "--stages", "2", "--steps", "1", "--threads", "1",
         "--global-batch-tokens", "2048", "--max-seqlen", "128", "--quiet", "--metrics", m])
    with open(m) as f:
        rec = json.loads(f.readline())
    with torch.no_grad():
        mine = llama_loss(cfg2, w2, byte_samples).item()
    rel = abs(mine - rec["loss"]) / abs(mine)
    print("llama: PyTorch-written folder: --init step %d loss %.6f, PyTorch %.6f (relative difference %.1e)"
          % (rec["step"], rec["loss"], mine, rel))
    bad += rel > 1e-5 or rec["step"] != 0
    return bad


def main():
    cli = sys.argv[1]
    grads_tool = sys.argv[2] if len(sys.argv) > 2 else None
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
        if grads_tool:
            bad += llama_family(grads_tool, tmp)
        bad += llama_cli(cli, tmp, data)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
