#!/usr/bin/env bash
# Predicted vs measured iteration time of `dynapipe train` with no cost flag
# (the default, --machine auto: this machine measured, then cached), on a
# cache that starts empty: the issue-25 targets (docs/cost-model.md,
# "--machine auto"). For GPT and T5, --method dynapipe (--dp-packing) and
# packing-docmask, at two shapes: the demo's (scripts/demo.sh: 4 layers,
# hidden 128, max length 2048, 8,192 tokens per batch) and gpt-mini /
# t5-mini at 16,384 tokens per batch, max length 2048; each with online
# calibration (train's default) and without (--no-calibrate). Per run: the
# median and worst |predicted - measured| / measured from the third
# iteration on, and the seconds the first-run measurement took (printed by
# the run that measured; "cached" after). Target: median <= 10 %, first
# measurement <= 30 s.
#   scripts/auto_check.sh                 # everything (about 15 min quiet)
#   MODELS=gpt SHAPES=demo CALIBRATE=on STEPS=8 scripts/auto_check.sh
# CACHE=DIR keeps the measured machines there (default: a fresh temporary
# folder, removed at the end); KEEP=DIR keeps each run's metrics and log.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/dynapipe}
STEPS=${STEPS:-10}
MODELS=${MODELS:-"gpt t5"}
SHAPES=${SHAPES:-"demo mini"}
METHODS=${METHODS:-"dynapipe packing-docmask"}
CALIBRATE=${CALIBRATE:-"on off"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_CACHE_HOME=${CACHE:-$tmp/cache}
echo "# $(date -u '+%F %T UTC'), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores," \
     "load $(cut -d' ' -f1-3 /proc/loadavg); cache $XDG_CACHE_HOME"
printf '%-4s %-5s %-16s %-5s %9s %9s %8s %8s %10s\n' model shape method calib pred_ms meas_ms med_err% \
  worst% measure_s
for model in $MODELS; do
  for shape in $SHAPES; do
    if [ "$shape" = demo ]; then
      args=(--model-config "$model-tiny" --layers 4 --hidden 128 --heads 4 --head-dim 32 --ffn 512
            --max-seqlen 2048 --global-batch-tokens 8192)
      [ "$model" = t5 ] && args+=(--dec-layers 4)
    else
      args=(--model-config "$model-mini" --max-seqlen 2048 --global-batch-tokens 16384)
    fi
    for method in $METHODS; do
      margs=(--method "$method")
      [ "$method" = dynapipe ] && margs+=(--dp-packing)
      for cal in $CALIBRATE; do
        c=()
        [ "$cal" = off ] && c=(--no-calibrate)
        timeout 900 "$BIN" train --model "$model" "${args[@]}" --data builtin --stages 2 --steps "$STEPS" --warmup 1 \
          --schedule auto "${margs[@]}" "${c[@]}" --metrics "$tmp/m.jsonl" > "$tmp/log" 2>&1 ||
          { cat "$tmp/log" >&2; exit 1; }
        if [ -n "${KEEP:-}" ]; then
          mkdir -p "$KEEP" && cp "$tmp/m.jsonl" "$KEEP/$model-$shape-$method-$cal.jsonl" &&
            cp "$tmp/log" "$KEEP/$model-$shape-$method-$cal.log"
        fi
        python3 - "$tmp/m.jsonl" "$tmp/log" "$model" "$shape" "$method" "$cal" <<'PY'
import json, re, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]
err = [abs(r["predicted_ms"] - r["iteration_ms"]) / r["iteration_ms"] for r in rows]
log = open(sys.argv[2]).read()
m = re.search(r"measured now on .* in ([0-9.]+) s", log)
print("%-4s %-5s %-16s %-5s %9.1f %9.1f %8.1f %8.1f %10s" % (sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6],
      statistics.median(r["predicted_ms"] for r in rows), statistics.median(r["iteration_ms"] for r in rows),
      100 * statistics.median(err), 100 * max(err), m.group(1) if m else "cached"))
PY
      done
    done
  done
done
echo "# end $(date -u '+%T UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
