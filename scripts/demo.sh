#!/usr/bin/env bash
# Set up, build, and run the main job: train a small GPT (4 layers, hidden
# 128) for a few global batches of the built-in multi-task dataset (max
# length 2048, 8,192 tokens per global batch) on a 2-stage MPI pipeline,
# first with dynapipe (dynamic micro-batches, document-masked packing where
# cheaper, schedule auto), then with packing tuned by simulation; print the
# loss falling and both throughputs side by side. About a minute or two on
# a 2-core machine. Metrics go to out/demo/. The simulated comparison is
# scripts/demo-sim.sh. Extra arguments are passed to both `dynapipe train`s.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
OUT=out/demo
rm -rf "$OUT"
mkdir -p "$OUT"
STEPS=${STEPS:-8}
RUN_TIMEOUT=${RUN_TIMEOUT:-900} # seconds each train may run: a hung run ends with an error
shape=(--model gpt --model-config gpt-tiny --layers 4 --hidden 128 --heads 4 --head-dim 32 --ffn 512
       --data builtin --max-seqlen 2048 --global-batch-tokens 8192 --stages 2 --steps "$STEPS" --warmup 1
       --schedule auto)
echo "== dynapipe"
timeout "$RUN_TIMEOUT" build/dynapipe train "${shape[@]}" --method dynapipe --dp-packing --metrics "$OUT/gpt-dynapipe-r1.jsonl" "$@" \
    | tee "$OUT/gpt-dynapipe-r1.log"
echo "== packing (tuned)"
timeout "$RUN_TIMEOUT" build/dynapipe train "${shape[@]}" --method packing --metrics "$OUT/gpt-packing-r1.jsonl" "$@" 2>&1 \
    | tee "$OUT/gpt-packing-r1.log"
python3 bench/train_report.py "$OUT"
