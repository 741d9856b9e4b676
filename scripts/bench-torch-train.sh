#!/usr/bin/env bash
# dynapipe against PyTorch, side by side: both train the same GPT (gpt-mini
# by default) on the same global batches of the built-in data on this
# machine, and the script prints dynapipe's real (non-pad) tokens/s over
# PyTorch's.
#
#   dynapipe  `dynapipe train --method dynapipe --schedule auto` on STAGES
#             (2) pipeline ranks, one thread each by default (cores / ranks):
#             scripts/bench-train.sh's dynapipe configuration (its document-
#             masked-row candidates are the default now);
#   PyTorch   bench/torch_train_gpt.py on every core: the shape, learning-rate
#             schedule, AdamW settings and clip from `dynapipe train
#             --print-options`, the batches from `dynapipe data batches`
#             (the ones train consumes), and the fastest of its micro-batching
#             strategies (padded, packed rows with and without document masks,
#             per-document attention) picked by a sweep first. Its BLAS is the
#             system OpenBLAS, run with the kernel dynapipe selects
#             (OPENBLAS_CORETYPE) and sleeping idle workers (OMP_WAIT_POLICY=
#             PASSIVE), as bench/torch_compare.py does.
# Then REPS repeats of STEPS steps each, the two alternating (which goes first
# rotates every repeat). Tokens/s of a run: its real input + target tokens of
# steps 2.. over their time (the first step allocates and warms up), from
# train's --metrics and torch_train_gpt.py's --metrics. The report: each
# side's median with min and max, and the median, min and max of the per-
# repeat ratios dynapipe / PyTorch.
#
#   scripts/bench-torch-train.sh [OUT_DIR]     default out/bench-torch-train
#   env: REPS=5 STEPS=6 STAGES=2 GBT=16384 MAXLEN=2048 DATA=builtin SAMPLES=20000
#        MODEL_FLAGS="--model-config gpt-mini" TRAIN_FLAGS= (more train flags)
#        SWEEP= (comma-separated strategies; default: torch_train_gpt.py's)
#        SWEEP_STEPS=3 TORCH_THREADS=(all cores) KERNEL=(OPENBLAS_CORETYPE
#        for PyTorch; default: the kernel dynapipe selects)
#        DYN_CLI=path/to/dynapipe (default: build/dynapipe, built first)
#        PYTHON=/usr/bin/python3 (the one with Debian's python3-torch)
#        SMOKE=1: a quick check that everything runs (REPS=1 STEPS=2, gpt-tiny,
#        max length 256, 2048-token batches, 2 sweep steps); no figures.
#        CHECK=1 (the default with SMOKE=1): first, the premise: PyTorch writes
#        its initial weights as a Hugging Face folder, `dynapipe train --init`
#        starts from them, and both train CHECK_STEPS (4) steps on the same
#        batches; their losses must agree to 1e-5 (relative) at every step,
#        else the script fails. That holds only with the same model, data,
#        loss normalisation, lr schedule, AdamW betas and clip (seen: PyTorch
#        without the clip is 7e-5 off at step 4, beta2 0.95 2e-4; the weight
#        decay, lr x 0.01 x w per step, is below what 4 steps can show).
# Exits 77 with a message when PyTorch does not import.
set -euo pipefail
RUN_TIMEOUT=${RUN_TIMEOUT:-900} # seconds a dynapipe train (mpirun) may run: a hung rank ends the run
cd "$(dirname "$0")/.."
OUT=${1:-out/bench-torch-train}
if [ "${SMOKE:-0}" = 1 ]; then
    REPS=${REPS:-1} STEPS=${STEPS:-2} MAXLEN=${MAXLEN:-256} GBT=${GBT:-2048} SAMPLES=${SAMPLES:-400}
    MODEL_FLAGS=${MODEL_FLAGS:-"--model-config gpt-tiny"} SWEEP_STEPS=${SWEEP_STEPS:-2}
fi
REPS=${REPS:-5}
STEPS=${STEPS:-6}
STAGES=${STAGES:-2}
GBT=${GBT:-16384}
MAXLEN=${MAXLEN:-2048}
DATA=${DATA:-builtin}
SAMPLES=${SAMPLES:-20000}
MODEL_FLAGS=${MODEL_FLAGS:-"--model-config gpt-mini"}
SWEEP_STEPS=${SWEEP_STEPS:-3}
PY=${PYTHON:-/usr/bin/python3}
if [ -z "${DYN_CLI:-}" ]; then
    scripts/build.sh >/dev/null
    DYN_CLI=build/dynapipe
fi
if ! "$PY" -c "import torch" 2>/dev/null; then
    echo "bench-torch-train: PyTorch does not import in $PY (apt-get install python3-torch); skipped"
    exit 77
fi
[ "$STEPS" -ge 2 ] || { echo "bench-torch-train: STEPS must be >= 2 (the first step is not timed)" >&2; exit 2; }
mkdir -p "$OUT"
# shellcheck disable=SC2206
data=(--data "$DATA" --samples "$SAMPLES" --max-seqlen "$MAXLEN" --global-batch-tokens "$GBT")
# shellcheck disable=SC2086
common=(--model gpt $MODEL_FLAGS "${data[@]}" --steps "$STEPS" --stages "$STAGES")

echo "bench-torch-train: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
timeout "$RUN_TIMEOUT" "$DYN_CLI" train "${common[@]}" ${TRAIN_FLAGS:-} --print-options >"$OUT/options.json"
"$DYN_CLI" data batches "$DATA" --model gpt --samples "$SAMPLES" --max-seqlen "$MAXLEN" \
    --global-batch-tokens "$GBT" --count "$STEPS" --out "$OUT/batches.jsonl" >/dev/null

# The kernel dynapipe selects for this CPU (its `bench layer` header).
if [ -z "${KERNEL:-}" ]; then
    KERNEL=$(env -u OPENBLAS_CORETYPE "$DYN_CLI" bench layer --model gpt --hidden 64 --heads 4 --batch 1 --seq 64 \
                 --threads 1 --repeat 1 | sed -n 's/.* kernel \([A-Za-z0-9_]*\),.*/\1/p' | head -n1)
fi
[ -n "$KERNEL" ] || { echo "bench-torch-train: could not read dynapipe's BLAS kernel; set KERNEL" >&2; exit 1; }
torch_env=(env OPENBLAS_CORETYPE="$KERNEL" OMP_WAIT_POLICY=PASSIVE)
torch_args=(bench/torch_train_gpt.py --options "$OUT/options.json" --batches "$OUT/batches.jsonl")
[ -n "${TORCH_THREADS:-}" ] && torch_args+=(--threads "$TORCH_THREADS")

run_dyn() { # rep
    env -u OPENBLAS_CORETYPE timeout "$RUN_TIMEOUT" "$DYN_CLI" train "${common[@]}" --method dynapipe --schedule auto ${TRAIN_FLAGS:-} \
        --metrics "$OUT/dynapipe-r$1.jsonl" >"$OUT/dynapipe-r$1.log" 2>&1 ||
        { echo "bench-torch-train: dynapipe train failed (see $OUT/dynapipe-r$1.log)" >&2; exit 1; }
}
run_torch() { # rep strategy
    "${torch_env[@]}" "$PY" "${torch_args[@]}" --strategy "$2" --metrics "$OUT/torch-r$1.jsonl" \
        >"$OUT/torch-r$1.log" 2>&1 ||
        { echo "bench-torch-train: torch_train_gpt.py failed (see $OUT/torch-r$1.log)" >&2; exit 1; }
}

if [ "${CHECK:-${SMOKE:-0}}" = 1 ]; then
    # its own CHECK_STEPS: the lr schedule's length is the run's --steps
    cs=${CHECK_STEPS:-4}
    # shellcheck disable=SC2086
    timeout "$RUN_TIMEOUT" "$DYN_CLI" train --model gpt $MODEL_FLAGS "${data[@]}" --steps "$cs" --stages "$STAGES" ${TRAIN_FLAGS:-} \
        --print-options >"$OUT/check-options.json"
    "$DYN_CLI" data batches "$DATA" --model gpt --samples "$SAMPLES" --max-seqlen "$MAXLEN" \
        --global-batch-tokens "$GBT" --count "$cs" --out "$OUT/check-batches.jsonl" >/dev/null
    "${torch_env[@]}" "$PY" bench/torch_train_gpt.py --options "$OUT/check-options.json" \
        --batches "$OUT/check-batches.jsonl" --strategy padded:1 --metrics "$OUT/check-torch.jsonl" \
        --save-init "$OUT/check-init" >"$OUT/check-torch.log" 2>&1 ||
        { cat "$OUT/check-torch.log" >&2; echo "bench-torch-train: check: torch_train_gpt.py failed" >&2; exit 1; }
    env -u OPENBLAS_CORETYPE timeout "$RUN_TIMEOUT" "$DYN_CLI" train --init "$OUT/check-init" "${data[@]}" --steps "$cs" \
        --stages "$STAGES" ${TRAIN_FLAGS:-} --metrics "$OUT/check-dynapipe.jsonl" >"$OUT/check-dynapipe.log" 2>&1 ||
        { echo "bench-torch-train: check: dynapipe train --init failed (see $OUT/check-dynapipe.log)" >&2; exit 1; }
    "$PY" - "$OUT/check-dynapipe.jsonl" "$OUT/check-torch.jsonl" <<'EOF'
import json, sys
d, t = ([json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3])
dl, tl = [r["loss"] for r in d], [r["loss"] for r in t]
ok = len(dl) == len(tl) and all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(dl, tl)) and \
    [r["tokens"] for r in d] == [r["tokens"] for r in t]
print("check, same initial weights: dynapipe losses %s, PyTorch %s: %s" % (
    " ".join("%.6f" % x for x in dl), " ".join("%.6f" % x for x in tl), "agree" if ok else "DISAGREE"))
sys.exit(0 if ok else 1)
EOF
fi

sweep=(--sweep)
[ -n "${SWEEP:-}" ] && sweep=(--sweep "$SWEEP")
"${torch_env[@]}" "$PY" "${torch_args[@]}" "${sweep[@]}" --sweep-steps "$SWEEP_STEPS" --steps 0 \
    >"$OUT/sweep.log" 2>&1 || { cat "$OUT/sweep.log" >&2; echo "bench-torch-train: sweep failed" >&2; exit 1; }
best=$(sed -n 's/^best \([^ ]*\) .*/\1/p' "$OUT/sweep.log")
[ -n "$best" ] || { echo "bench-torch-train: the sweep named no best strategy ($OUT/sweep.log)" >&2; exit 1; }
echo "PyTorch sweep ($SWEEP_STEPS steps each, OPENBLAS_CORETYPE=$KERNEL):"
sed -n 's/^sweep /  /p' "$OUT/sweep.log"
echo "PyTorch's best: $best"

for rep in $(seq 1 "$REPS"); do
    if [ $((rep % 2)) = 1 ]; then run_dyn "$rep"; run_torch "$rep" "$best"
    else run_torch "$rep" "$best"; run_dyn "$rep"; fi
    echo "repeat $rep/$REPS done; load $(cut -d' ' -f1-3 /proc/loadavg)"
done

"$PY" - "$OUT" "$REPS" "$best" <<'EOF'
import json, os, statistics, sys
out, reps, best = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def tps(path):
    with open(path) as f:
        recs = [json.loads(l) for l in f if l.strip()]
    body = recs[1:] if len(recs) > 1 else recs
    return sum(r["tokens"] for r in body) / (sum(r["iteration_ms"] for r in body) / 1e3)

dyn = [tps(os.path.join(out, "dynapipe-r%d.jsonl" % r)) for r in range(1, reps + 1)]
tor = [tps(os.path.join(out, "torch-r%d.jsonl" % r)) for r in range(1, reps + 1)]
ratio = [d / t for d, t in zip(dyn, tor)]
def line(name, v, unit):
    return "%-28s median %9.1f%s  min %9.1f%s  max %9.1f%s" % (name, statistics.median(v), unit, min(v), unit,
                                                             max(v), unit)
print("real tokens/s over %d alternating repeats (steps 2.. of each run):" % reps)
print(line("dynapipe", dyn, ""))
print(line("PyTorch " + best, tor, ""))
print("dynapipe / PyTorch real tokens/s: %.2fx median of %d (min %.2fx, max %.2fx)" % (
    statistics.median(ratio), reps, min(ratio), max(ratio)))
EOF
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
