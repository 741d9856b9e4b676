#!/usr/bin/env python3
"""hf_init_check.py — `dynapipe train --init DIR` against Hugging Face model
folders written here, independently of dynapipe (Python standard library
only: json and struct write safetensors).

1. Exact values. A GPT-2 folder (sharded, with an index; one shard's names
   carry save_pretrained's "transformer." prefix; the attention-mask buffers
   older files carry) and a T5 v1.1 folder (one model.safetensors), each
   tensor F32, F16 or BF16 in turn. `train --init --lr 0 --weight-decay 0
   --steps 1 --save OUT.safetensors` over 2 stages leaves the weights as
   loaded; every value of OUT must be the exact fp32 of what was written
   (bf16: the bits shifted 16 left; fp16: struct's 'e' format).
2. Round trip. `train --save CK`, then `train --init CK` (GPT: the root,
   which follows `latest`) or `CK/step-K` (T5) on a JSONL
   of two samples that make the whole first batch: its step-0 loss, and
   --eval-every's evaluation of the same file before the first step
   (eval_loss_before), equal `dynapipe eval --checkpoint CK` on the same
   file, and differ from a run from random weights.
3. A large vocabulary: GPT-2's 50,257 tokens on token-id JSONL data.
4. The Llama family (LlamaForCausalLM sharded with llama3 scaling and 2
   key/value heads for 4, Qwen2ForCausalLM with q/k/v biases and a tied
   head, MistralForCausalLM): exact values over 2 stages, and the
   checkpoint's config.json names the architecture and the folder's token
   ids. Bad Llama folders as in 5.
5. Bad folders. Each refused with one stderr line naming the file (and the
   tensor), non-zero exit, no metrics file (nothing trained; the launcher's
   check, before mpirun).

Usage: hf_init_check.py DYNAPIPE_BINARY
"""
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", ASAN_OPTIONS="detect_leaks=0")
V, C, NH, L, P = 300, 32, 2, 2, 64  # GPT-2 shape
TV, TC, TH, TKV, TF, TL, TDL = 290, 32, 2, 16, 48, 2, 1  # T5 shape: vocab, d_model, heads, d_kv, d_ff, layers
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


# ---- values: random bit patterns of each dtype and their exact fp32


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def value(dtype, rng, center, scale):
    """(bytes, exact fp32 value) of one random element."""
    x = center + rng.gauss(0.0, scale)
    if dtype == "F64":
        b = struct.pack("<d", x)
        return b, x
    if dtype == "F32":
        b = struct.pack("<f", x)
        return b, struct.unpack("<f", b)[0]
    if dtype == "BF16":
        hi = f32_bits(x) >> 16  # truncation: any pattern is a bf16
        return struct.pack("<H", hi), struct.unpack("<f", struct.pack("<I", hi << 16))[0]
    b = struct.pack("<e", x)  # F16
    return b, struct.unpack("<e", b)[0]


def tensor(dtype, shape, rng, center=0.0, scale=0.02):
    n = 1
    for d in shape:
        n *= d
    raw, vals = [], []
    for _ in range(n):
        b, v = value(dtype, rng, center, scale)
        raw.append(b)
        vals.append(v)
    return {"dtype": dtype, "shape": list(shape), "raw": b"".join(raw), "vals": vals}


def write_safetensors(path, tensors, pad_align=True):
    header, off, blobs = {}, 0, []
    for name, t in tensors.items():
        header[name] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [off, off + len(t["raw"])]}
        off += len(t["raw"])
        blobs.append(t["raw"])
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    if pad_align:
        h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_f32_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = list(struct.unpack("<%df" % ((end - b) // 4), raw[8 + n + b:8 + n + end]))
    return out


# ---- the two architectures, by Hugging Face's names and layouts


def gpt2_tensors(rng, dtypes):
    """Hugging Face GPT-2 names and shapes (Conv1D weights are (in, out))."""
    spec = [("wte.weight", (V, C), 0.0), ("wpe.weight", (P, C), 0.0)]
    for i in range(L):
        p = "h.%d." % i
        spec += [(p + "ln_1.weight", (C,), 1.0), (p + "ln_1.bias", (C,), 0.0),
                 (p + "attn.c_attn.weight", (C, 3 * C), 0.0), (p + "attn.c_attn.bias", (3 * C,), 0.0),
                 (p + "attn.c_proj.weight", (C, C), 0.0), (p + "attn.c_proj.bias", (C,), 0.0),
                 (p + "ln_2.weight", (C,), 1.0), (p + "ln_2.bias", (C,), 0.0),
                 (p + "mlp.c_fc.weight", (C, 4 * C), 0.0), (p + "mlp.c_fc.bias", (4 * C,), 0.0),
                 (p + "mlp.c_proj.weight", (4 * C, C), 0.0), (p + "mlp.c_proj.bias", (C,), 0.0)]
    spec += [("ln_f.weight", (C,), 1.0), ("ln_f.bias", (C,), 0.0)]
    return {n: tensor(dtypes[i % len(dtypes)], s, rng, c) for i, (n, s, c) in enumerate(spec)}


def gpt2_config(**over):
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_positions": P,
           "n_embd": C, "n_layer": L, "n_head": NH, "n_inner": None, "activation_function": "gelu_new",
           "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "resid_pdrop": 0.1}
    cfg.update(over)
    return cfg


def t5_tensors(rng, dtypes):
    spec = [("shared.weight", (TV, TC), 0.0, 1.0)]
    inner = TH * TKV
    for stack, n, ff_layer in (("encoder", TL, 1), ("decoder", TDL, 2)):
        for i in range(n):
            p = "%s.block.%d.layer." % (stack, i)
            spec += [(p + "0.layer_norm.weight", (TC,), 1.0, 0.02)]
            spec += [(p + "0.SelfAttention.%s.weight" % k, (inner, TC), 0.0, 0.05) for k in "qkv"]
            spec += [(p + "0.SelfAttention.o.weight", (TC, inner), 0.0, 0.05)]
            if i == 0:
                spec += [(p + "0.SelfAttention.relative_attention_bias.weight", (32, TH), 0.0, 0.1)]
            if stack == "decoder":
                spec += [(p + "1.layer_norm.weight", (TC,), 1.0, 0.02)]
                spec += [(p + "1.EncDecAttention.%s.weight" % k, (inner, TC), 0.0, 0.05) for k in "qkv"]
                spec += [(p + "1.EncDecAttention.o.weight", (TC, inner), 0.0, 0.05)]
            q = p + "%d." % ff_layer
            spec += [(q + "layer_norm.weight", (TC,), 1.0, 0.02),
                     (q + "DenseReluDense.wi_0.weight", (TF, TC), 0.0, 0.05),
                     (q + "DenseReluDense.wi_1.weight", (TF, TC), 0.0, 0.05),
                     (q + "DenseReluDense.wo.weight", (TC, TF), 0.0, 0.05)]
        spec += [("%s.final_layer_norm.weight" % stack, (TC,), 1.0, 0.02)]
    spec += [("lm_head.weight", (TV, TC), 0.0, 0.05)]
    return {n: tensor(dtypes[i % len(dtypes)], s, rng, c, sc) for i, (n, s, c, sc) in enumerate(spec)}


def t5_config(**over):
    cfg = {"architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "vocab_size": TV, "d_model": TC,
           "d_kv": TKV, "d_ff": TF, "num_layers": TL, "num_decoder_layers": TDL, "num_heads": TH,
           "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
           "feed_forward_proj": "gated-gelu", "layer_norm_epsilon": 1e-6, "tie_word_embeddings": False}
    cfg.update(over)
    return cfg


def write_config(d, cfg):
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)


def write_gpt2_folder(d, tensors, cfg=None):
    """Two shards and an index; shard 2 uses save_pretrained's prefix."""
    os.makedirs(d, exist_ok=True)
    write_config(d, cfg or gpt2_config())
    names = list(tensors)
    half = len(names) // 2
    s1 = {n: tensors[n] for n in names[:half]}
    s1["h.0.attn.bias"] = tensor("F32", (1, 1, 4, 4), random.Random(0))  # an old mask buffer
    s2 = {"transformer." + n: tensors[n] for n in names[half:]}
    write_safetensors(os.path.join(d, "model-00001-of-00002.safetensors"), s1)
    write_safetensors(os.path.join(d, "model-00002-of-00002.safetensors"), s2)
    wm = {n: "model-00001-of-00002.safetensors" for n in s1}
    wm.update({n: "model-00002-of-00002.safetensors" for n in s2})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f)


def write_t5_folder(d, tensors, cfg=None):
    os.makedirs(d, exist_ok=True)
    write_config(d, cfg or t5_config())
    write_safetensors(os.path.join(d, "model.safetensors"), tensors)


def run(cli, args):
    # coreutils timeout ends the process group: `train` starts mpirun, which
    # a killed dynapipe would leave running with the pipes open
    p = subprocess.run(["timeout", "300", cli] + args, capture_output=True, text=True, env=ENV, timeout=330)
    return p.returncode, p.stdout, p.stderr


TRAIN = ["--stages", "2", "--threads", "1", "--quiet", "--global-batch-tokens", "2048"]


def exact_values(cli, tmp):
    rng = random.Random(7)
    for kind, tensors, write in (("gpt2", gpt2_tensors(rng, ["BF16", "F16", "F32"]), write_gpt2_folder),
                                 ("t5", t5_tensors(rng, ["BF16", "F32", "F16"]), write_t5_folder)):
        d = os.path.join(tmp, kind)
        write(d, tensors)
        out = os.path.join(tmp, kind + "-out.safetensors")
        rc, _, err = run(cli, ["train", "--init", d, "--steps", "1", "--lr", "0", "--min-lr", "0", "--weight-decay", "0",
                               "--data", "builtin", "--samples", "200", "--max-seqlen", str(P), "--save", out] + TRAIN)
        check(rc == 0, "%s: --init of an independent folder exits %d: %s" % (kind, rc, err.strip()))
        if rc != 0:
            continue
        got = read_f32_safetensors(out)
        bad = [n for n, t in tensors.items() if [f32_bits(x) for x in got.get(n, [])] != [f32_bits(x) for x in t["vals"]]]
        check(not bad, "%s: tensors not loaded as the exact fp32 of what was written: %s" % (kind, bad[:4]))
        print("%s: %d tensors (F32, F16, BF16) arrive as their exact fp32 values" % (kind, len(tensors) - len(bad)))


def first_loss(path):
    """(step, training loss, eval_loss_before) of a metrics file's first record."""
    with open(path) as f:
        rec = json.loads(f.readline())
    return rec["step"], rec["loss"], rec.get("eval_loss_before")


def round_trip(cli, tmp):
    data = os.path.join(tmp, "s.jsonl")
    with open(data, "w") as f:  # 32 tokens (sep, eos): the whole first batch
        f.write('{"input": "sort dcba", "target": "abcd"}\n{"input": "copy hello", "target": "hello"}\n')
    for kind, model in (("gpt", ["--model-config", "gpt-tiny", "--layers", "2"]),
                        ("t5", ["--model-config", "t5-tiny", "--layers", "2", "--dec-layers", "2"])):
        ck = os.path.join(tmp, "ck-" + kind)
        rc, _, err = run(cli, ["train", "--model", kind] + model + ["--steps", "3", "--samples", "300", "--max-seqlen",
                                                                    "128", "--save", ck] + TRAIN)
        check(rc == 0, "%s: train --save: %s" % (kind, err.strip()))
        rc, out, err = run(cli, ["eval", "--checkpoint", ck, "--data", data, "--split", "train", "--samples", "2",
                                 "--no-accuracy"])
        check(rc == 0, "%s: eval: %s" % (kind, err.strip()))
        if rc != 0:
            continue
        want = float(out.split("loss ")[1].split()[0])
        losses = {}
        # GPT: the checkpoint root (its latest); T5: the step folder.
        src = ck if kind == "gpt" else os.path.join(ck, "step-00000003")
        for how, extra in (("init", ["--init", src]),
                           ("random", ["--model", kind] + model)):
            m = os.path.join(tmp, "m-%s-%s.jsonl" % (kind, how))
            rc, _, err = run(cli, ["train"] + extra + ["--data", data, "--steps", "1", "--metrics", m,
                                                       "--max-seqlen", "128", "--eval-every", "1", "--eval-data",
                                                       data, "--eval-samples", "2"] + TRAIN)
            check(rc == 0, "%s: train %s: %s" % (kind, how, err.strip()))
            if rc == 0:
                losses[how] = first_loss(m)
        if len(losses) < 2:
            continue
        step, got, before = losses["init"]
        print("%s: saved model's eval loss %.4f; --init's first step: step %d, loss %.6f, eval before it %s; "
              "from random weights %.6f" % (kind, want, step, got, before, losses["random"][1]))
        check(step == 0, "%s: --init starts at step %d, not 0" % (kind, step))
        check(abs(got - want) <= 1e-4 + 1e-5 * abs(want), "%s: --init loss %.6f != eval %.4f" % (kind, got, want))
        check(abs(losses["random"][1] - want) > 1e-3, "%s: random weights give the saved loss too" % kind)
        # --eval-every's evaluation before the first step: the loaded weights' (eval's) loss, not random's
        check(before is not None and abs(before - want) <= 1e-4 + 1e-5 * abs(want),
              "%s: --init's eval_loss_before %s != eval %.4f" % (kind, before, want))
        rb = losses["random"][2]
        check(rb is not None and abs(rb - losses["random"][1]) <= 1e-4 * abs(rb) and abs(rb - want) > 1e-3,
              "%s: random weights' eval_loss_before %s is not their first loss %.6f" % (kind, rb, losses["random"][1]))
        if kind == "gpt":
            fresh_optimizer(cli, tmp, os.path.join(ck, "step-00000003"), data)


def fresh_optimizer(cli, tmp, step_dir, data):
    """AdamW's first step from zero moments moves every parameter with a
    non-zero gradient by lr * g / (|g| + eps), i.e. by lr: the saved
    optimizer state (--resume's) would give other sizes."""
    before = {}
    for fn in os.listdir(step_dir):
        if fn.startswith("model-") and fn.endswith(".safetensors"):
            before.update(read_f32_safetensors(os.path.join(step_dir, fn)))
    out, m = os.path.join(tmp, "fresh.safetensors"), os.path.join(tmp, "m-fresh.jsonl")
    rc, _, err = run(cli, ["train", "--init", step_dir, "--data", data, "--steps", "1", "--lr", "1e-3", "--warmup", "0",
                           "--weight-decay", "0", "--clip", "0", "--max-seqlen", "128", "--metrics", m, "--save", out]
                     + TRAIN)
    check(rc == 0, "fresh optimizer: %s" % err.strip())
    if rc != 0:
        return
    with open(m) as f:
        lr = json.loads(f.readline())["lr"]
    after = read_f32_safetensors(out)
    moved = [abs(a - b) for n in before for a, b in zip(after[n], before[n]) if a != b]
    near = sum(abs(d - lr) <= 0.01 * lr for d in moved)
    over = sum(d > 1.001 * lr for d in moved)
    print("fresh optimizer: %d parameters moved, %d of them by lr %.0e (within 1%%), %d by more"
          % (len(moved), near, lr, over))
    check(len(moved) > 1000 and near >= 0.9 * len(moved) and over == 0,
          "fresh optimizer: the first step's sizes are not lr (%d of %d near, %d over)" % (near, len(moved), over))


def large_vocab(cli, tmp):
    """GPT-2's 50,257-token vocabulary over 2 stages on token-id data
    (ids up to 50,256): model, cost model, memory model and stage split take
    it; the first loss is near ln(50257), as for small random weights."""
    rng = random.Random(5)
    BV, BC = 50257, 16

    def bulk(shape, center):  # bf16 patterns in one pack (the per-element writer is slow at this size)
        n = 1
        for d in shape:
            n *= d
        hi = [f32_bits(center + rng.gauss(0.0, 0.02)) >> 16 for _ in range(n)]
        return {"dtype": "BF16", "shape": list(shape), "raw": struct.pack("<%dH" % n, *hi)}
    t = {"wte.weight": bulk((BV, BC), 0.0), "wpe.weight": bulk((P, BC), 0.0),
         "ln_f.weight": bulk((BC,), 1.0), "ln_f.bias": bulk((BC,), 0.0)}
    for i in range(2):
        for name, shape, center in (("ln_1.weight", (BC,), 1.0), ("ln_1.bias", (BC,), 0.0),
                                    ("attn.c_attn.weight", (BC, 3 * BC), 0.0), ("attn.c_attn.bias", (3 * BC,), 0.0),
                                    ("attn.c_proj.weight", (BC, BC), 0.0), ("attn.c_proj.bias", (BC,), 0.0),
                                    ("ln_2.weight", (BC,), 1.0), ("ln_2.bias", (BC,), 0.0),
                                    ("mlp.c_fc.weight", (BC, 4 * BC), 0.0), ("mlp.c_fc.bias", (4 * BC,), 0.0),
                                    ("mlp.c_proj.weight", (4 * BC, BC), 0.0), ("mlp.c_proj.bias", (BC,), 0.0)):
            t["h.%d.%s" % (i, name)] = bulk(shape, center)
    d = os.path.join(tmp, "gpt2-vocab")
    os.makedirs(d)
    write_config(d, gpt2_config(vocab_size=BV, n_embd=BC))
    write_safetensors(os.path.join(d, "model.safetensors"), t)
    data = os.path.join(tmp, "ids.jsonl")
    with open(data, "w") as f:
        for _ in range(100):
            f.write(json.dumps({"input_ids": [rng.randrange(BV) for _ in range(rng.randrange(3, 30))],
                                "target_ids": [rng.randrange(BV) for _ in range(rng.randrange(2, 20))]}) + "\n")
    m = os.path.join(tmp, "m-vocab.jsonl")
    rc, _, err = run(cli, ["train", "--init", d, "--data", data, "--steps", "1", "--metrics", m] + TRAIN)
    check(rc == 0, "vocab %d: exit %d: %s" % (BV, rc, err.strip()))
    if rc == 0:
        step, loss, _ = first_loss(m)
        print("vocab %d over 2 stages: step %d loss %.4f (ln V = %.4f)" % (BV, step, loss, math.log(BV)))
        check(abs(loss - math.log(BV)) < 0.1, "vocab %d: first loss %.4f, not near ln V" % (BV, loss))


def bad_folders(cli, tmp):
    rng = random.Random(3)
    good = gpt2_tensors(rng, ["F32", "BF16"])
    shard2 = "model-00002-of-00002.safetensors"
    cases = []

    def case(name, mutate, expect, flags=()):
        cases.append((name, mutate, expect, list(flags)))

    def truncate(d):
        p = os.path.join(d, shard2)
        size = os.path.getsize(p)
        with open(p, "r+b") as f:
            f.truncate(size - 10)
    case("truncated shard", truncate, [shard2, "truncated"])
    case("config of another shape", lambda d: write_config(d, gpt2_config(n_layer=3)), ["h.2.", "missing"])
    case("config of another width", lambda d: write_config(d, gpt2_config(n_embd=64)), ["wte.weight", "shape"])
    case("unknown architecture", lambda d: write_config(d, dict(gpt2_config(), architectures=["BertModel"])),
         ["config.json", "BertModel", "GPT2LMHeadModel"])
    case("another layer-norm epsilon", lambda d: write_config(d, gpt2_config(layer_norm_epsilon=1e-6)),
         ["config.json", "layer_norm_epsilon"])
    case("another activation", lambda d: write_config(d, gpt2_config(activation_function="relu")),
         ["config.json", "activation_function"])
    case("shape flag contradicting the file", lambda d: None, ["--layers 3", "config.json", "n_layer 2"],
         ["--layers", "3"])

    def with_tensors(edit):
        def mutate(d):
            t = dict(good)
            edit(t)
            for f in os.listdir(d):
                if f != "config.json":
                    os.remove(os.path.join(d, f))
            write_gpt2_folder(d, t)
        return mutate
    case("unsupported dtype", with_tensors(lambda t: t.update({"wpe.weight": tensor("F64", (P, C), rng)})),
         ["model-0000", "wpe.weight", "F64"])
    case("missing tensor", with_tensors(lambda t: t.pop("h.1.mlp.c_fc.bias")),
         ["model.safetensors.index.json", "h.1.mlp.c_fc.bias", "missing"])
    case("extra tensor", with_tensors(lambda t: t.update({"h.0.attn.rotary.weight": tensor("F32", (4,), rng)})),
         ["model-0000", "h.0.attn.rotary.weight"])
    case("wrong-shape tensor", with_tensors(lambda t: t.update({"h.1.attn.c_attn.weight": tensor("F32", (3 * C, C), rng)})),
         ["model-0000", "h.1.attn.c_attn.weight", "shape"])
    t5good = t5_tensors(rng, ["F32"])
    cases.append(("T5 v1.0 (not gated)", None, ["config.json", "feed_forward_proj", "v1.0"], []))
    for name, mutate, expect, flags in cases:
        d = os.path.join(tmp, "bad-" + name.replace(" ", "-"))
        if mutate is None:
            write_t5_folder(d, t5good, t5_config(feed_forward_proj="relu"))
        else:
            write_gpt2_folder(d, good)
            mutate(d)
        m = os.path.join(tmp, "bad-metrics.jsonl")
        rc, _, err = run(cli, ["train", "--init", d, "--steps", "1", "--data", "builtin", "--samples", "100",
                               "--metrics", m] + flags + TRAIN)
        lines = err.strip().splitlines()
        ok = (rc != 0 and len(lines) == 1 and lines[0].startswith("dynapipe train: ")
              and all(e in lines[0] for e in expect) and not os.path.exists(m))
        check(ok, "%s: exit %d, stderr %r, expected one line naming %s, no metrics" % (name, rc, err, expect))
        if ok:
            print("%s: %s" % (name, lines[0]))



# ---- the Llama family: LlamaForCausalLM (GQA 4 over 2, llama3 scaling, 2
# shards), Qwen2ForCausalLM (q/k/v biases, tied head), MistralForCausalLM

LV, LC, LH, LKV, LHD, LF, LL = 300, 32, 4, 2, 8, 48, 2


def llama_config(arch="LlamaForCausalLM", **over):
    cfg = {"architectures": [arch], "model_type": arch[:-len("ForCausalLM")].lower(), "vocab_size": LV,
           "hidden_size": LC, "intermediate_size": LF, "num_hidden_layers": LL, "num_attention_heads": LH,
           "num_key_value_heads": LKV, "head_dim": LHD, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": arch == "Qwen2ForCausalLM",
           "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": None}
    if arch == "LlamaForCausalLM":
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 64}
    if arch == "MistralForCausalLM":
        cfg["sliding_window"] = 4096
    cfg.update(over)
    return cfg


def llama_tensors(rng, dtypes, cfg):
    spec = [("model.embed_tokens.weight", (LV, LC), 0.0), ("model.norm.weight", (LC,), 1.0)]
    for i in range(LL):
        p = "model.layers.%d." % i
        spec += [(p + "input_layernorm.weight", (LC,), 1.0), (p + "post_attention_layernorm.weight", (LC,), 1.0),
                 (p + "self_attn.q_proj.weight", (LH * LHD, LC), 0.0),
                 (p + "self_attn.k_proj.weight", (LKV * LHD, LC), 0.0),
                 (p + "self_attn.v_proj.weight", (LKV * LHD, LC), 0.0),
                 (p + "self_attn.o_proj.weight", (LC, LH * LHD), 0.0),
                 (p + "mlp.gate_proj.weight", (LF, LC), 0.0), (p + "mlp.up_proj.weight", (LF, LC), 0.0),
                 (p + "mlp.down_proj.weight", (LC, LF), 0.0)]
        if cfg["architectures"] == ["Qwen2ForCausalLM"]:
            spec += [(p + "self_attn.%s_proj.bias" % k, ((LH if k == "q" else LKV) * LHD,), 0.0) for k in "qkv"]
    if not cfg["tie_word_embeddings"]:
        spec += [("lm_head.weight", (LV, LC), 0.0)]
    return {n: tensor(dtypes[i % len(dtypes)], s, rng, c) for i, (n, s, c) in enumerate(spec)}


def write_llama_folder(d, tensors, cfg):
    """Two shards and an index (Llama), or one model.safetensors."""
    os.makedirs(d, exist_ok=True)
    write_config(d, cfg)
    if cfg["architectures"] != ["LlamaForCausalLM"]:
        write_safetensors(os.path.join(d, "model.safetensors"), tensors)
        return
    names = sorted(tensors)
    wm = {}
    for k in range(2):
        fn = "model-%05d-of-00002.safetensors" % (k + 1)
        part = {n: tensors[n] for n in names[k::2]}
        write_safetensors(os.path.join(d, fn), part)
        wm.update({n: fn for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f)


def llama_exact_values(cli, tmp):
    """Each architecture over 2 stages: the weights arrive as the exact fp32
    of what was written, and the checkpoint's config.json is the same
    architecture with the folder's token ids (not the byte vocabulary's)."""
    rng = random.Random(17)
    for arch in ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM"):
        cfg = llama_config(arch)
        tensors = llama_tensors(rng, ["BF16", "F16", "F32"], cfg)
        d = os.path.join(tmp, arch)
        write_llama_folder(d, tensors, cfg)
        ck = os.path.join(tmp, arch + "-ck")
        rc, _, err = run(cli, ["train", "--init", d, "--steps", "1", "--lr", "0", "--min-lr", "0", "--weight-decay",
                               "0", "--data", "builtin", "--samples", "200", "--max-seqlen", "128", "--save", ck]
                         + TRAIN)
        check(rc == 0, "%s: --init exits %d: %s" % (arch, rc, err.strip()))
        if rc != 0:
            continue
        step = os.path.join(ck, "step-00000001")
        got = {}
        for fn in os.listdir(step):
            if fn.startswith("model-") and fn.endswith(".safetensors"):
                got.update(read_f32_safetensors(os.path.join(step, fn)))
        bad = [n for n, t in tensors.items() if [f32_bits(x) for x in got.get(n, [])] != [f32_bits(x) for x in t["vals"]]]
        check(not bad and set(got) == set(tensors), "%s: tensors not loaded exactly: %s" % (arch, bad[:4]))
        with open(os.path.join(step, "config.json")) as f:
            saved = json.load(f)
        want_arch = "Qwen2ForCausalLM" if arch == "Qwen2ForCausalLM" else "LlamaForCausalLM"  # Mistral is Llama's computation
        same = all(saved.get(k) == cfg[k] for k in ("vocab_size", "hidden_size", "intermediate_size",
                                                    "num_hidden_layers", "num_attention_heads",
                                                    "num_key_value_heads", "tie_word_embeddings"))
        check(saved["architectures"] == [want_arch] and same and saved.get("rope_scaling") == cfg.get("rope_scaling")
              and saved["bos_token_id"] == 1 and saved["eos_token_id"] == 2 and saved["pad_token_id"] is None,
              "%s: saved config.json %s" % (arch, saved))
        print("%s: %d tensors arrive as their exact fp32 values; saved as %s with bos 1, eos 2"
              % (arch, len(tensors) - len(bad), saved["architectures"][0]))


def llama_bad_folders(cli, tmp):
    rng = random.Random(4)
    good_cfg = llama_config()
    good = llama_tensors(rng, ["F32", "BF16"], good_cfg)
    shard2 = "model-00002-of-00002.safetensors"

    def rewrite(edit):
        def mutate(d):
            t = dict(good)
            edit(t)
            for f in os.listdir(d):
                if f != "config.json":
                    os.remove(os.path.join(d, f))
            write_llama_folder(d, t, good_cfg)
        return mutate

    def truncate(d):
        p = os.path.join(d, shard2)
        with open(p, "r+b") as f:
            f.truncate(os.path.getsize(p) - 10)
    cases = [
        ("Mistral window shorter than the run",
         lambda d: write_config(d, llama_config("MistralForCausalLM", sliding_window=64)),
         ["config.json", "sliding_window = 64", "128"]),
        ("rope_scaling yarn", lambda d: write_config(d, llama_config(rope_scaling={"rope_type": "yarn", "factor": 4.0})),
         ["config.json", "rope_scaling", "yarn"]),
        ("unknown architecture", lambda d: write_config(d, llama_config("GemmaForCausalLM")),
         ["config.json", "GemmaForCausalLM", "LlamaForCausalLM"]),
        ("config of another shape", lambda d: write_config(d, llama_config(num_key_value_heads=4)),
         ["self_attn.k_proj.weight", "shape"]),
        ("truncated shard", truncate, [shard2, "truncated"]),
        ("missing tensor", rewrite(lambda t: t.pop("model.layers.1.mlp.up_proj.weight")),
         ["model.safetensors.index.json", "model.layers.1.mlp.up_proj.weight", "missing"]),
        ("extra tensor", rewrite(lambda t: t.update({"model.layers.0.self_attn.q_norm.weight": tensor("F32", (LHD,), rng)})),
         ["model-0000", "model.layers.0.self_attn.q_norm.weight"]),
        ("unhandled dtype", rewrite(lambda t: t.update({"model.norm.weight": tensor("F64", (LC,), rng, 1.0)})),
         ["model-0000", "model.norm.weight", "F64"]),
    ]
    for name, mutate, expect in cases:
        d = os.path.join(tmp, "llama-bad-" + name.replace(" ", "-"))
        write_llama_folder(d, good, good_cfg)
        mutate(d)
        m = os.path.join(tmp, "bad-metrics.jsonl")
        rc, _, err = run(cli, ["train", "--init", d, "--steps", "1", "--data", "builtin", "--samples", "100",
                               "--max-seqlen", "128", "--metrics", m] + TRAIN)
        lines = err.strip().splitlines()
        ok = (rc != 0 and len(lines) == 1 and lines[0].startswith("dynapipe train: ")
              and all(e in lines[0] for e in expect) and not os.path.exists(m))
        check(ok, "llama %s: exit %d, stderr %r, expected one line naming %s, no metrics" % (name, rc, err, expect))
        if ok:
            print("llama %s: %s" % (name, lines[0]))


def main():
    cli = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="dyn_hf_init_")
    try:
        exact_values(cli, tmp)
        round_trip(cli, tmp)
        large_vocab(cli, tmp)
        bad_folders(cli, tmp)
        llama_exact_values(cli, tmp)
        llama_bad_folders(cli, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failure(s)" % len(FAILS))
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
