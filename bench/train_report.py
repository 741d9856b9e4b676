#!/usr/bin/env python3
"""train_report.py -- summary and loss curves of scripts/bench-train.sh.

Reads OUT_DIR/<model>-<method>-r<rep>.jsonl (`dynapipe train --metrics`) and
the matching .log (for the tuned size knob), prints one markdown table per
model: median over repeats of real tokens/s (every step but the first, which
includes start-up), median iteration time, mean bubble fraction, peak memory
per rank, the efficiency against the ideal bound (sum of the batches'
ideal_ms over the sum of their iteration_ms; "rated": the bound at the run's
measured rates, ideal_rated_ms; "-" for metrics written before the bound
was recorded), and the speed-up over tuned packing and tuned
document-masked packing, then dynapipe's speed-up per repeat (each repeat's
methods ran one after another, so the ratio is taken within a repeat):
median, min and max, and "tie" when the spread contains 1. With --svg FILE it draws the loss of every method against step and
against wall-clock time (repeat 1), one row of two panels per model.

    python3 bench/train_report.py out/bench-train [--svg docs/img/train-loss.svg]
"""
import glob
import json
import os
import re
import statistics
import sys

COLORS = {"dynapipe": "#d62728", "packing": "#1f77b4", "packing-docmask": "#2ca02c",
          "padding": "#9467bd", "token": "#ff7f0e"}
ORDER = ["dynapipe", "packing", "packing-docmask", "padding", "token"]


def load(out):
    runs = {}
    for path in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
        m = re.match(r"(gpt|t5)-(.+)-r(\d+)\.jsonl$", os.path.basename(path))
        if not m:
            continue
        model, method, rep = m.group(1), m.group(2), int(m.group(3))
        with open(path) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        if not recs:
            raise SystemExit(f"{path}: no records")
        knob = "-"
        log = path[:-len(".jsonl")] + ".log"
        if os.path.exists(log):
            with open(log) as f:
                for line in f:
                    k = re.search(r"tuned (--[a-z-]+ \d+)", line)
                    if k:
                        knob = k.group(1)
        runs.setdefault(model, {}).setdefault(method, []).append((rep, recs, knob))
    return runs


def summary(recs):
    body = recs[1:] if len(recs) > 1 else recs
    tokens = sum(r["tokens"] for r in body)
    ms = sum(r["iteration_ms"] for r in body)
    peaks = [max(r["peak_mem_mb"][q] for r in recs) for q in range(len(recs[0]["peak_mem_mb"]))]
    eff = rated = None
    if all("ideal_ms" in r for r in body):
        eff = sum(r["ideal_ms"] for r in body) / ms
        rated = sum(r["ideal_rated_ms"] for r in body) / ms
    return {"eff": eff, "rated": rated, "tps": tokens / (ms / 1e3), "iter_ms": statistics.median(r["iteration_ms"] for r in body),
            "bubble": statistics.mean(r["bubble_fraction"] for r in body), "peaks": peaks,
            "pred_ms": statistics.median(r["predicted_ms"] for r in body),
            "n_mb": statistics.median(r["n_microbatches"] for r in body)}


def med_or_none(vals):
    return None if any(v is None for v in vals) else statistics.median(vals)


def pct(v):
    return "-" if v is None else f"{100 * v:.0f}%"


def table(model, methods):
    rows = {}
    for method, reps in methods.items():
        sums = [summary(recs) for _, recs, _ in reps]
        rows[method] = {"tps": statistics.median(s["tps"] for s in sums),
                        "iter_ms": statistics.median(s["iter_ms"] for s in sums),
                        "pred_ms": statistics.median(s["pred_ms"] for s in sums),
                        "bubble": statistics.median(s["bubble"] for s in sums),
                        "n_mb": statistics.median(s["n_mb"] for s in sums),
                        "peaks": [max(s["peaks"][q] for s in sums) for q in range(len(sums[0]["peaks"]))],
                        "eff": med_or_none([s["eff"] for s in sums]),
                        "rated": med_or_none([s["rated"] for s in sums]),
                        "knob": reps[0][2], "reps": len(reps)}
    print(f"\n{model}: median of {max(r['reps'] for r in rows.values())} repeats (steps after the first)\n")
    print("| method | size (tuned) | tokens/s | iteration ms | predicted ms | micro-batches | bubble "
          "| peak MB per rank | efficiency (rated) | vs packing | vs packing-docmask |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for method in [m for m in ORDER if m in rows] + [m for m in rows if m not in ORDER]:
        r = rows[method]
        vs = []
        for base in ("packing", "packing-docmask"):
            vs.append(f"{r['tps'] / rows[base]['tps']:.2f}x" if base in rows else "-")
        print(f"| {method} | {r['knob']} | {r['tps']:.0f} | {r['iter_ms']:.0f} | {r['pred_ms']:.0f} | "
              f"{r['n_mb']:.0f} | {r['bubble']:.3f} | {' / '.join(f'{p:.0f}' for p in r['peaks'])} | "
              f"{pct(r['eff'])} ({pct(r['rated'])}) | {vs[0]} | {vs[1]} |")
    paired(methods)


def paired(methods):
    """dynapipe over each baseline, repeat by repeat."""
    if "dynapipe" not in methods:
        return
    dyn = {rep: summary(recs)["tps"] for rep, recs, _ in methods["dynapipe"]}
    print()
    for base in [m for m in ORDER if m in methods and m != "dynapipe"]:
        ratios = [dyn[rep] / summary(recs)["tps"] for rep, recs, _ in methods[base] if rep in dyn]
        if not ratios:
            continue
        lo, hi = min(ratios), max(ratios)
        call = "tie" if lo <= 1.0 <= hi else ("ahead" if lo > 1.0 else "behind")
        print(f"dynapipe / {base}, per repeat ({len(ratios)}): median {statistics.median(ratios):.2f}x, "
              f"min {lo:.2f}x, max {hi:.2f}x ({call})")


def panel(x0, y0, w, h, series, xlabel, title):
    """series: [(method, [(x, y)])] -> SVG elements of one panel."""
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    xmin, xmax = min(xs), max(xs)
    ymin, ymax = min(ys), max(ys)
    if xmax == xmin:
        xmax = xmin + 1
    pad = (ymax - ymin) * 0.05 or 0.1
    ymin, ymax = ymin - pad, ymax + pad
    def px(x): return x0 + 50 + (x - xmin) / (xmax - xmin) * (w - 60)
    def py(y): return y0 + h - 30 - (y - ymin) / (ymax - ymin) * (h - 55)
    out = [f'<rect x="{x0 + 50}" y="{y0 + 25}" width="{w - 60}" height="{h - 55}" fill="none" stroke="#999"/>',
           f'<text x="{x0 + w / 2}" y="{y0 + 16}" text-anchor="middle" font-size="13">{title}</text>',
           f'<text x="{x0 + w / 2}" y="{y0 + h - 4}" text-anchor="middle" font-size="11">{xlabel}</text>',
           f'<text x="{x0 + 12}" y="{y0 + h / 2}" font-size="11" transform="rotate(-90 {x0 + 12} {y0 + h / 2})" '
           f'text-anchor="middle">loss</text>']
    for k in range(5):
        yv = ymin + (ymax - ymin) * k / 4
        xv = xmin + (xmax - xmin) * k / 4
        out.append(f'<text x="{x0 + 46}" y="{py(yv) + 4:.1f}" text-anchor="end" font-size="10">{yv:.2f}</text>')
        out.append(f'<text x="{px(xv):.1f}" y="{y0 + h - 17}" text-anchor="middle" font-size="10">'
                   f'{xv:.0f}</text>')
    for method, pts in series:
        c = COLORS.get(method, "#333")
        d = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{d}" fill="none" stroke="{c}" stroke-width="1.6" opacity="0.85"/>')
        for x, y in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.2" fill="{c}"/>')
    return out


def draw(runs, path):
    W, H = 440, 260
    models = [m for m in ("gpt", "t5") if m in runs]
    els = []
    for i, model in enumerate(models):
        by_step, by_time = [], []
        for method in [m for m in ORDER if m in runs[model]]:
            recs = sorted(runs[model][method])[0][1]
            by_step.append((method, [(r["step"] + 1, r["loss"]) for r in recs]))
            t, pts = 0.0, []
            for r in recs:
                t += r["iteration_ms"] / 1e3
                pts.append((t, r["loss"]))
            by_time.append((method, pts))
        els += panel(0, i * H, W, H, by_step, "step (global batch)", f"{model}: loss against step")
        els += panel(W, i * H, W, H, by_time, "wall-clock seconds (sum of iteration times)",
                     f"{model}: loss against time")
    legend_y = len(models) * H + 8
    for k, method in enumerate(ORDER):
        x = 60 + k * 160
        els.append(f'<rect x="{x}" y="{legend_y}" width="14" height="4" fill="{COLORS[method]}"/>')
        els.append(f'<text x="{x + 20}" y="{legend_y + 6}" font-size="11">{method}</text>')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{legend_y + 20}" '
           f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>\n' + "\n".join(els) + "\n</svg>\n")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(svg)
    os.replace(tmp, path)
    print(f"\nwrote {path}")


def main(argv):
    if len(argv) < 2:
        raise SystemExit("usage: train_report.py OUT_DIR [--svg FILE.svg]")
    runs = load(argv[1])
    if not runs:
        raise SystemExit(f"{argv[1]}: no <model>-<method>-r<rep>.jsonl files")
    for model in ("gpt", "t5"):
        if model in runs:
            table(model, runs[model])
    if "--svg" in argv:
        draw(runs, argv[argv.index("--svg") + 1])


if __name__ == "__main__":
    main(sys.argv)
