#!/usr/bin/env bash
# Real training, side by side: every batching method trains the same model on
# the same built-in data for the same number of global batches on the same
# MPI ranks, in alternation (method order rotates every repeat), and
# bench/train_report.py prints medians of the repeats (tokens/s, iteration
# time, bubble, peak memory per rank, efficiency against the ideal bound and
# at the run's measured rates) and draws the loss curves against step
# and against wall-clock time.
#
#   scripts/bench-train.sh [OUT_DIR]        default out/bench-train
#   env: MODELS="gpt t5" METHODS="dynapipe packing packing-docmask padding token"
#        REPS=2 STEPS=6 STAGES=2 GBT=8192 MAXLEN=2048 SVG=docs/img/train-loss.svg
#        GPT_SHAPE / T5_SHAPE: model flags (defaults below)
# dynapipe runs with --schedule auto --dp-packing; the baselines' size knobs
# are tuned (the default of `dynapipe train`; the chosen values are in the
# logs and the report). Extra dynapipe train flags: TRAIN_FLAGS.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/bench-train}
MODELS=${MODELS:-"gpt t5"}
METHODS=${METHODS:-"dynapipe packing packing-docmask padding token"}
REPS=${REPS:-2}
STEPS=${STEPS:-6}
STAGES=${STAGES:-2}
GBT=${GBT:-8192}
MAXLEN=${MAXLEN:-2048}
SVG=${SVG:-}
RUN_TIMEOUT=${RUN_TIMEOUT:-1800} # seconds each train may run: a hung run ends the benchmark
GPT_SHAPE=${GPT_SHAPE:-"--model-config gpt-tiny --layers 4 --hidden 128 --heads 4 --head-dim 32 --ffn 512"}
T5_SHAPE=${T5_SHAPE:-"--model-config t5-tiny --layers 2 --dec-layers 2 --hidden 128 --heads 4 --head-dim 32 --ffn 512"}
scripts/build.sh >/dev/null
mkdir -p "$OUT"
read -r -a methods <<<"$METHODS"
n=${#methods[@]}
for model in $MODELS; do
    shape=$GPT_SHAPE
    [ "$model" = t5 ] && shape=$T5_SHAPE
    for rep in $(seq 1 "$REPS"); do
        for k in $(seq 0 $((n - 1))); do
            m=${methods[$(((k + rep - 1) % n))]}
            extra=""
            [ "$m" = dynapipe ] && extra="--dp-packing"
            tag="$model-$m-r$rep"
            echo "== $tag" >&2
            # shellcheck disable=SC2086
            timeout "$RUN_TIMEOUT" build/dynapipe train --model "$model" $shape --data builtin --max-seqlen "$MAXLEN" \
                --global-batch-tokens "$GBT" --stages "$STAGES" --steps "$STEPS" --warmup 1 \
                --method "$m" $extra --schedule auto --metrics "$OUT/$tag.jsonl" \
                ${TRAIN_FLAGS:-} >"$OUT/$tag.log" 2>&1 || { echo "failed: $tag (see $OUT/$tag.log)" >&2; exit 1; }
        done
    done
done
args=("$OUT")
[ -n "$SVG" ] && args+=(--svg "$SVG")
python3 bench/train_report.py "${args[@]}"
