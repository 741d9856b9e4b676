#!/usr/bin/python3
"""torch_train_gpt.py -- train dynapipe's GPT with PyTorch on dynapipe's own
global batches, micro-batched the ways a PyTorch user would, and report real
(non-pad) tokens per second: the PyTorch side of
scripts/bench-torch-train.sh.

Inputs, both written by dynapipe so that nothing is re-derived here:
  --options FILE.json   `dynapipe train ... --print-options`: the model's
                        shape (layers, hidden, heads, ffn, vocab, positions =
                        max_seqlen), the learning-rate schedule (peak, floor,
                        warm-up, total steps: linear warm-up then cosine, as
                        dynapipe's dyn_lr_at), AdamW's betas, eps and
                        decoupled weight decay (on the blocks' matrices only,
                        as dynapipe), the gradient-norm clip and --steps;
  --batches FILE.jsonl  `dynapipe data batches` with the same data flags:
                        the global batches train consumes, in order.
The model is bench/torch_gpt.py's GPT (fp32, CPU). The loss of a global
batch is the sum of its target-token losses over the batch's target tokens,
whatever the micro-batching (dynapipe's normalisation); gradients accumulate
over the micro-batches, then clip, then one AdamW step.

Micro-batching strategies (--strategy NAME, or --sweep over several):
  padded:K    samples sorted by length (longest first), K per micro-batch,
              each row padded to the micro-batch's longest sample;
  packed:R    samples packed first-fit-decreasing into rows of R tokens, one
              row per micro-batch, causal attention across the whole row
              (documents see each other; position ids restart per document);
  docmask:R   the same rows, attention causal within each document through a
              block-diagonal (R, R) attention mask (the masked pairs are
              still computed: PyTorch 1.13 has no variable-length kernel);
  varlen:R    the same rows, attention run per document on its own slice
              (no work across documents): the cheapest correct attention.
R must hold the longest sample (>= max_seqlen). Building a step's
micro-batch tensors counts in its time (dynapipe's iteration time includes
its own). tokens/s = real input + target tokens of steps 2.. over their
wall time (the first step warms up; dynapipe's reports skip it too).

Output lines (stable, for the driver):
  sweep STRATEGY tokens_per_s X losses L1,L2,..
                                          one per strategy tried (--sweep), all
                                          from the same initial weights: every
                                          strategy but packed computes the same
                                          losses, up to rounding
  best STRATEGY tokens_per_s X            the sweep's fastest
  result STRATEGY tokens_per_s X steps N loss_first A loss_last B
With --metrics FILE.jsonl, one record per trained step (step, loss, tokens,
target_tokens, iteration_ms, tokens_per_s), like dynapipe train's. With
--save-init DIR, the trained run's initial weights as a Hugging Face GPT-2
folder: `dynapipe train --init DIR` on the same batches then starts from the
same weights, so the two trainers' losses can be compared step by step
(tests/bench_torch_train_check.sh does).

usage: torch_train_gpt.py --options O.json --batches B.jsonl
                          [--strategy NAME | --sweep [LIST]] [--sweep-steps 3]
                          [--steps N] [--threads T] [--seed S] [--metrics F]
                          [--save-init DIR]
--steps 0 with --sweep: sweep only. Threads default to every core
(os.cpu_count()). Exits 3 with a message when torch is not installed.
"""
import argparse
import json
import math
import os
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch_train_gpt: PyTorch is not installed (apt-get install python3-torch); skipped")
    sys.exit(3)
from torch_gpt import GPT, causal_mask, save_hf  # the shared PyTorch GPT-2 (bench/torch_gpt.py)


def die(msg):
    print("torch_train_gpt: " + msg, file=sys.stderr)
    sys.exit(1)


def load_batches(path):
    """[[(input_ids, target_ids), ...] per global batch] from `data batches`."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                b = json.loads(line)
                out.append([(s["input_ids"], s["target_ids"]) for s in b["samples"]])
            except (ValueError, KeyError, TypeError) as e:
                die("%s:%d: not a `dynapipe data batches` record (%s)" % (path, n, e))
    if not out:
        die("%s: no batches" % path)
    return out


def lr_at(o, step):
    """dynapipe's dyn_lr_at: linear warm-up, cosine decay to min_lr."""
    mx, mn, wu, total = o["lr"], o["min_lr"], o["warmup_steps"], o["total_steps"]
    if step < wu:
        return mx * (step + 1) / wu
    decay = total - 1 - wu
    if step >= total - 1 or decay <= 0:
        return mn
    return mn + 0.5 * (1.0 + math.cos(math.pi * (step - wu) / decay)) * (mx - mn)


# ---- micro-batches ----------------------------------------------------------


class MicroBatch:
    """Model inputs of some samples in B rows of T: tokens, position ids,
    the positions whose next token counts (where) and those targets, and the
    attention (mask, or docs per row)."""

    def __init__(self, rows, T, attention):
        """rows: per row, a list of (input_ids, target_ids) placed back to back."""
        B = len(rows)
        tok = torch.zeros(B, T, dtype=torch.long)
        pos = torch.zeros(B, T, dtype=torch.long)
        where = torch.zeros(B, T, dtype=torch.bool)
        seg = torch.full((B, T), -1, dtype=torch.long)
        targets, docs = [], []
        for b, row in enumerate(rows):
            at, spans = 0, []
            for d, (inp, tgt) in enumerate(row):
                n, L = len(inp), len(inp) + len(tgt)
                tok[b, at:at + L] = torch.tensor(inp + tgt)
                pos[b, at:at + L] = torch.arange(L)
                where[b, at + n - 1:at + L - 1] = True  # position p predicts token p + 1
                seg[b, at:at + L] = d
                targets.append(torch.tensor(tgt))
                spans.append((at, L))
                at += L
            docs.append(spans)
        self.tok, self.pos, self.where = tok, pos, where
        self.targets = torch.cat(targets)  # row-major order of where, as GPT.forward returns
        self.mask = self.docs = None
        if attention == "varlen":
            self.docs = docs
        elif attention == "docmask":  # causal and within one document
            self.mask = (causal_mask(T)[None] | (seg[:, :, None] != seg[:, None, :]))[:, None]
        else:
            self.mask = causal_mask(T)


def rows_ffd(samples, R):
    """Samples first-fit-decreasing into rows of at most R tokens."""
    rows, room = [], []
    for s in sorted(samples, key=lambda s: -(len(s[0]) + len(s[1]))):
        L = len(s[0]) + len(s[1])
        if L > R:
            die("a sample of %d tokens does not fit rows of %d" % (L, R))
        for i, r in enumerate(room):
            if L <= r:
                rows[i].append(s)
                room[i] -= L
                break
        else:
            rows.append([s])
            room.append(R - L)
    return rows


def micro_batches(strategy, samples):
    """The micro-batches of one global batch under strategy NAME:ARG."""
    kind, arg = strategy.split(":")
    arg = int(arg)
    if kind == "padded":
        order = sorted(samples, key=lambda s: -(len(s[0]) + len(s[1])))
        out = []
        for i in range(0, len(order), arg):
            chunk = order[i:i + arg]
            out.append(MicroBatch([[s] for s in chunk], len(chunk[0][0]) + len(chunk[0][1]), "causal"))
        return out
    attention = {"packed": "causal", "docmask": "docmask", "varlen": "varlen"}[kind]
    return [MicroBatch([row], sum(len(s[0]) + len(s[1]) for s in row), attention) for row in rows_ffd(samples, arg)]


def check_strategy(name, max_seqlen):
    try:
        kind, arg = name.split(":")
        arg = int(arg)
    except ValueError:
        die("strategy '%s': expected padded:K, packed:R, docmask:R or varlen:R" % name)
    if kind not in ("padded", "packed", "docmask", "varlen") or arg < 1:
        die("strategy '%s': expected padded:K, packed:R, docmask:R or varlen:R (K, R >= 1)" % name)
    if kind != "padded" and arg < max_seqlen:
        die("strategy '%s': rows of %d tokens cannot hold a sample of max_seqlen %d" % (name, arg, max_seqlen))


def default_sweep(o):
    """Several K and R for the run's max length L and batch budget G."""
    L, G = o["model"]["max_seqlen"], o["global_batch_tokens"]
    rs = [r for r in (L, 2 * L, 4 * L, 8 * L) if r <= max(G, L)]
    # (R, R) attention (packed, docmask) costs memory traffic growing with
    # R^2, and padded rows slowed down with K at gpt-mini, max length 2048
    # (K = 1, 2, 4, 8: 680, 560, 349, 181 tokens/s, on a loaded machine): the
    # larger sizes are left out of the default; name them in --sweep to try
    out = ["padded:%d" % k for k in (1, 2, 4, 8)]
    out += ["packed:%d" % L, "docmask:%d" % L]
    out += ["varlen:%d" % r for r in sorted({rs[0], rs[min(1, len(rs) - 1)], rs[-1]})]
    return out


# ---- training ---------------------------------------------------------------


def build(o, seed):
    m = o["model"]
    if m["kind"] != "gpt":
        die("--options: model kind '%s'; this trains GPT only" % m["kind"])
    if m["head_dim"] * m["heads"] != m["hidden"]:
        die("--options: head_dim x heads != hidden: not a GPT-2 shape")
    torch.manual_seed(seed)
    model = GPT(m["n_layers"], m["hidden"], m["heads"], m["ffn"], m["vocab"], m["max_seqlen"])
    opt = torch.optim.AdamW(model.param_groups(o["weight_decay"]), lr=o["lr"], betas=(o["beta1"], o["beta2"]),
                            eps=o["adam_eps"])
    return model, opt


def train_step(model, opt, o, step, strategy, samples):
    """One global batch; returns (loss, real tokens, target tokens, ms)."""
    t0 = time.perf_counter()
    mbs = micro_batches(strategy, samples)
    n_tgt = sum(len(t) for _, t in samples)
    opt.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for mb in mbs:
        logits = model(mb.tok, mb.pos, mb.where, mask=mb.mask, docs=mb.docs)
        loss = F.cross_entropy(logits, mb.targets, reduction="sum") / n_tgt
        loss.backward()
        loss_sum += loss.item()
    if o["clip"] > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), o["clip"])
    lr = lr_at(o, step)
    for g in opt.param_groups:
        g["lr"] = lr
    opt.step()
    ms = (time.perf_counter() - t0) * 1e3
    return loss_sum, sum(len(i) + len(t) for i, t in samples), n_tgt, ms


def run(o, batches, strategy, steps, seed, metrics=None, save_init=None):
    """Train `steps` steps from a fresh model (its weights first written to
    save_init as a Hugging Face folder, when given); returns (tokens/s over
    steps 2.., records)."""
    model, opt = build(o, seed)
    if save_init:
        save_hf(model, save_init, o["model"]["max_seqlen"])
    recs = []
    for k in range(steps):
        loss, tokens, tgt, ms = train_step(model, opt, o, k, strategy, batches[k % len(batches)])
        recs.append({"step": k, "loss": round(loss, 6), "tokens": tokens, "target_tokens": tgt,
                     "iteration_ms": round(ms, 3), "tokens_per_s": round(tokens / (ms / 1e3), 1),
                     "strategy": strategy})
        if not math.isfinite(loss):
            die("%s: step %d's loss is not finite" % (strategy, k))
    body = recs[1:] if len(recs) > 1 else recs
    tps = sum(r["tokens"] for r in body) / (sum(r["iteration_ms"] for r in body) / 1e3)
    if metrics:
        tmp = metrics + ".tmp"
        with open(tmp, "w") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")
        os.replace(tmp, metrics)
    return tps, recs


def main():
    ap = argparse.ArgumentParser(description="PyTorch side of scripts/bench-torch-train.sh")
    ap.add_argument("--options", required=True, help="dynapipe train --print-options output")
    ap.add_argument("--batches", required=True, help="dynapipe data batches output")
    ap.add_argument("--strategy", help="padded:K, packed:R, docmask:R or varlen:R")
    ap.add_argument("--sweep", nargs="?", const="default", help="comma-separated strategies (default: several)")
    ap.add_argument("--sweep-steps", type=int, default=3, help="steps per swept strategy (the first untimed)")
    ap.add_argument("--steps", type=int, help="steps to train (default: the options' steps)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--metrics", help="FILE.jsonl: one record per trained step")
    ap.add_argument("--save-init", metavar="DIR", help="write the initial weights of the --steps run as a "
                    "Hugging Face GPT-2 folder (for dynapipe train --init)")
    a = ap.parse_args()
    if (a.strategy is None) == (a.sweep is None):
        die("give one of --strategy NAME and --sweep [LIST]")
    try:
        with open(a.options) as f:
            o = json.load(f)
        L = o["model"]["max_seqlen"]
    except (OSError, ValueError, KeyError) as e:
        die("--options %s: not `dynapipe train --print-options` output (%s)" % (a.options, e))
    batches = load_batches(a.batches)
    steps = o["steps"] if a.steps is None else a.steps
    if steps < 0 or a.sweep_steps < 1 or a.threads < 1:
        die("--steps >= 0, --sweep-steps >= 1 and --threads >= 1")
    if steps > len(batches):
        die("%d steps but %s holds %d global batches (data batches --count)" % (steps, a.batches, len(batches)))
    torch.set_num_threads(a.threads)
    print("torch_train_gpt: torch %s, %d threads, %s, %d layers hidden %d heads %d ffn %d vocab %d, "
          "max length %d, %d global batches of <= %d tokens" % (
              torch.__version__, torch.get_num_threads(), os.environ.get("OPENBLAS_CORETYPE", "OpenBLAS default"),
              o["model"]["n_layers"], o["model"]["hidden"], o["model"]["heads"], o["model"]["ffn"],
              o["model"]["vocab"], L, len(batches), o["global_batch_tokens"]))
    sys.stdout.flush()
    strategy = a.strategy
    if a.sweep is not None:
        names = default_sweep(o) if a.sweep == "default" else a.sweep.split(",")
        for n in names:
            check_strategy(n, L)
        best = None
        for n in names:
            tps, recs = run(o, batches, n, min(a.sweep_steps, len(batches)), a.seed)
            print("sweep %s tokens_per_s %.1f losses %s" % (n, tps, ",".join("%.6f" % r["loss"] for r in recs)))
            sys.stdout.flush()
            if best is None or tps > best[1]:
                best = (n, tps)
        print("best %s tokens_per_s %.1f" % best)
        strategy = best[0]
    check_strategy(strategy, L)
    if steps > 0:
        tps, recs = run(o, batches, strategy, steps, a.seed, a.metrics, a.save_init)
        print("result %s tokens_per_s %.1f steps %d loss_first %.4f loss_last %.4f" % (
            strategy, tps, steps, recs[0]["loss"], recs[-1]["loss"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
