#!/usr/bin/python3
"""torch_compare.py -- dynapipe's GPT-2 or Llama block against PyTorch's, side by side.

For each thread count and each shape (batch, seq) of hidden 512 / 8 heads,
every round runs `dynapipe bench layer --model gpt|llama` and then
bench/torch_gpt_block.py (or torch_llama_block.py: the same Llama block, 2
key/value heads, SwiGLU 1408) at the same shape and thread count, so both
see the same machine load; it prints the medians over rounds of each one's
median milliseconds, the median, min and max of the per-round ratios torch
ms / dynapipe ms, and dynapipe's block / sgemm rate.

PyTorch gets its best setting: Debian's python3-torch multiplies through the
system OpenBLAS, whose generic fall-back kernel would handicap it, so the
torch runs get OPENBLAS_CORETYPE=<--torch-coretype> (default: the kernel
dynapipe reports it selected). dynapipe runs in a clean environment for its
own selection (OPENBLAS_CORETYPE unset). Both run with idle OpenMP workers
sleeping (OMP_WAIT_POLICY=PASSIVE, --torch-wait to change torch's): dynapipe
sets it for itself, and torch's libgomp, left spinning, ran 2 threads 3-5x
slower than 1 on this shared machine.

usage: bench/torch_compare.py [--model gpt|llama] [--cli build/dynapipe] [--rounds 3] [--repeat 5]
                              [--threads 1,2] [--shapes 16x128,4x512,1x2048,8x256]
                              [--torch-coretype NAME] [--torch-wait POLICY]
Skips (exit 0, with a message) when PyTorch is not installed.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, env):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def ours(cli, model, b, s, t, repeat):
    env = dict(os.environ)
    for k in ("OPENBLAS_CORETYPE", "DYN_BLAS_SELECTED", "DYN_BLAS_REJECT"):
        env.pop(k, None)
    rc, out = run([cli, "bench", "layer", "--model", model, "--hidden", "512", "--heads", "8",
                   "--batch", str(b), "--seq", str(s), "--threads", str(t), "--repeat", str(repeat)],
                  env)
    if rc != 0:
        sys.exit("torch_compare: dynapipe failed:\n" + out)
    ms = float(re.search(r"forward\+backward\s+([\d.]+) ms median", out).group(1))
    ratio = float(re.search(r"block / sgemm\s+([\d.]+)", out).group(1))
    kernel = re.search(r"kernel (\S+?),", out).group(1)
    return ms, ratio, kernel


def theirs(model, b, s, t, repeat, coretype, wait):
    env = dict(os.environ, OPENBLAS_CORETYPE=coretype, OMP_WAIT_POLICY=wait)
    env.pop("DYN_BLAS_SELECTED", None)
    script = "torch_llama_block.py" if model == "llama" else "torch_gpt_block.py"
    rc, out = run(["/usr/bin/python3", os.path.join(HERE, script), "--batch", str(b),
                   "--seq", str(s), "--threads", str(t), "--repeat", str(repeat)], env)
    if rc == 3:
        print(out.strip())
        sys.exit(0)
    if rc != 0:
        sys.exit("torch_compare: %s failed:\n%s" % (script, out))
    m = re.search(r"torch (\S+) ms ([\d.]+)", out)
    return float(m.group(2)), m.group(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt", choices=("gpt", "llama"))
    ap.add_argument("--cli", default="build/dynapipe")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--shapes", default="16x128,4x512,1x2048,8x256")
    ap.add_argument("--torch-coretype", default=None)
    ap.add_argument("--torch-wait", default="PASSIVE")
    a = ap.parse_args()
    rc, out = run(["/usr/bin/python3", "-c", "import torch"], dict(os.environ))
    if rc != 0:
        print("torch_compare: PyTorch is not installed for /usr/bin/python3 "
              "(apt-get install python3-torch); skipped")
        return 0
    shapes = [tuple(int(x) for x in sh.split("x")) for sh in a.shapes.split(",")]
    threads = [int(t) for t in a.threads.split(",")]
    what = "Llama block hidden 512 heads 8 (2 kv heads, SwiGLU 1408)" if a.model == "llama" else \
        "GPT-2 block hidden 512 heads 8"
    print("torch_compare: %s, fp32 forward+backward; medians of "
          "%d rounds, each %d repeats, dynapipe and torch alternating" % (what, a.rounds, a.repeat))
    with open("/proc/loadavg") as f:
        print("load before: " + f.read().strip())
    print("%3s %5s %5s %10s %10s %11s %13s %9s  %s" % ("T", "batch", "seq", "dyn ms", "torch ms",
                                                      "torch/dyn", "(min-max)", "dyn/sgemm", "kernels"))
    for t in threads:
        for b, s in shapes:
            d_ms, t_ms, ratios, sg = [], [], [], []
            for _ in range(a.rounds):
                ms, r, kernel = ours(a.cli, a.model, b, s, t, a.repeat)
                core = a.torch_coretype or kernel
                tms, ver = theirs(a.model, b, s, t, a.repeat, core, a.torch_wait)
                d_ms.append(ms)
                t_ms.append(tms)
                ratios.append(tms / ms)
                sg.append(r)
            print("%3d %5d %5d %10.1f %10.1f %11.2f %13s %9.2f  dynapipe %s, torch %s with "
                  "OPENBLAS_CORETYPE=%s OMP_WAIT_POLICY=%s" % (
                      t, b, s, statistics.median(d_ms), statistics.median(t_ms),
                      statistics.median(ratios), "(%.2f-%.2f)" % (min(ratios), max(ratios)),
                      statistics.median(sg), kernel, ver, core, a.torch_wait))
            sys.stdout.flush()
    with open("/proc/loadavg") as f:
        print("load after: " + f.read().strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
