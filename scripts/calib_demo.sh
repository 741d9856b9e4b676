#!/usr/bin/env bash
# Online calibration when the machine's speed changes partway: `dynapipe
# train` for STEPS iterations (default 40) with and without --calibrate; when
# iteration SWITCH (default 12) is done, BUSY processes (default 2) start
# spinning on the cores until the run ends. Prints the median and worst
# relative error of predicted vs measured iteration time before and after
# the switch (the first 2 cold iterations left out). docs/performance.md,
# "Profile and online calibration".
#   scripts/calib_demo.sh analytic|TABLE [train flags]
set -euo pipefail
cd "$(dirname "$0")/.."
COST=${1:?usage: scripts/calib_demo.sh analytic|TABLE [train flags]}
shift
BIN=${BIN:-build/dynapipe}
STEPS=${STEPS:-40}
SWITCH=${SWITCH:-12}
BUSY=${BUSY:-2}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
printf '%-12s %14s %14s %14s %14s\n' run before_med% before_worst% after_med% after_worst%
for mode in plain calibrate; do
  extra=(--no-calibrate)
  [ "$mode" = calibrate ] && extra=(--calibrate)
  timeout "${RUN_TIMEOUT:-900}" "$BIN" train --model gpt --steps "$STEPS" --cost-model "$COST" --metrics "$tmp/m.jsonl" \
    "${extra[@]}" "$@" > "$tmp/log" 2>&1 &
  run=$!
  while kill -0 "$run" 2>/dev/null && ! grep -q "^step $SWITCH/" "$tmp/log"; do sleep 0.05; done
  pids=()
  for _ in $(seq "$BUSY"); do (while :; do :; done) & pids+=($!); done
  wait "$run" || { cat "$tmp/log" >&2; exit 1; }
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  pids=()
  python3 - "$tmp/m.jsonl" "$mode" "$SWITCH" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sw = int(sys.argv[3])
err = lambda rs: [abs(r["predicted_ms"] - r["iteration_ms"]) / r["iteration_ms"] for r in rs]
b, a = err(rows[2:sw]), err(rows[sw + 2:])  # after: once the load has settled for 2 iterations
print("%-12s %14.1f %14.1f %14.1f %14.1f" % (sys.argv[2], 100 * statistics.median(b), 100 * max(b),
      100 * statistics.median(a), 100 * max(a)))
PY
done
