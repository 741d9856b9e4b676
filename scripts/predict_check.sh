#!/usr/bin/env bash
# Predicted vs measured iteration time (and peak memory per rank) of
# `dynapipe train` for each batching method and schedule, with the cost model
# given as the first argument (analytic: on --machine auto, this machine
# measured, unless a --machine follows; or a profile table); the figures of
# docs/performance.md, "Profile and online calibration". Short runs: STEPS
# iterations each (default 12), the first 2 (cold) left out of the errors;
# mem_err% compares what each rank allocated with its prediction, plan_ms is
# the slowest batch's planning and wait_ms the longest wait for a plan. The
# last line compares each run's time (its iterations from the third on
# added up) predicted and measured: median and worst error over the runs.
# Extra arguments go to every `dynapipe train` (e.g. --calibrate, which train
# does by default but this script turns off unless given); KEEP=DIR
# keeps each run's metrics as DIR/METHOD-SCHEDULE.jsonl; MODEL=t5 trains T5
# (default gpt; the profile must be of the shape trained: train's default
# preset is gpt-mini / t5-mini, or pass --model-config).
#   scripts/predict_check.sh analytic
#   scripts/predict_check.sh /path/profile.table --calibrate
#   MODEL=t5 scripts/predict_check.sh /path/t5-mini.table
set -euo pipefail
cd "$(dirname "$0")/.."
COST=${1:?usage: scripts/predict_check.sh analytic|TABLE [train flags]}
shift
BIN=${BIN:-build/dynapipe}
STEPS=${STEPS:-12}
MODEL=${MODEL:-gpt}
METHODS=${METHODS:-"dynapipe padding packing token"}
SCHEDULES=${SCHEDULES:-"1f1b cyclic zb"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-9s %-7s %8s %8s %10s %10s %9s %8s %9s\n' method schedule pred_ms meas_ms median_err% worst_err% mem_err% \
  plan_ms wait_ms
for m in $METHODS; do
  for s in $SCHEDULES; do
    timeout "${RUN_TIMEOUT:-900}" "$BIN" train --model "$MODEL" --steps "$STEPS" --method "$m" --schedule "$s" --cost-model "$COST" \
      --metrics "$tmp/m.jsonl" --quiet --no-calibrate "$@" > "$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
    if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$tmp/m.jsonl" "$KEEP/$m-$s.jsonl"; fi
    python3 - "$tmp/m.jsonl" "$m" "$s" "$tmp/runs" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]
err = [abs(r["predicted_ms"] - r["iteration_ms"]) / r["iteration_ms"] for r in rows]
mem = max(abs(p - a) / a for r in rows for p, a in zip(r["predicted_peak_mem_mb"], r["peak_mem_mb"]))
# planning: the slowest batch's plan_ms, and the longest a rank waited for a plan
print("%-9s %-7s %8.1f %8.1f %10.1f %10.1f %9.1f %8.2f %9.2f" % (sys.argv[2], sys.argv[3],
      statistics.median(r["predicted_ms"] for r in rows), statistics.median(r["iteration_ms"] for r in rows),
      100 * statistics.median(err), 100 * max(err), 100 * mem,
      max(r["plan_ms"] for r in rows), max(r["plan_wait_ms"] for r in rows)))
pred, meas = sum(r["predicted_ms"] for r in rows), sum(r["iteration_ms"] for r in rows)
open(sys.argv[4], "a").write("%r\n" % (abs(pred - meas) / meas))
PY
  done
done
python3 - "$tmp/runs" <<'PY'
import statistics, sys
e = [float(l) for l in open(sys.argv[1])]
print("each run's time, predicted vs measured: median error %.1f%%, worst %.1f%% over %d runs" %
      (100 * statistics.median(e), 100 * max(e), len(e)))
PY
