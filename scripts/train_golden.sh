#!/usr/bin/env bash
# Fixed-seed `dynapipe train` runs whose outputs a behaviour-preserving
# change of the runtime must leave byte for byte: GPT and T5 with --save DIR,
# --save FILE, --eval-every, a resume of each, dp 2 with --calibrate,
# interleaved with 2 chunks, packing and padding, and `dynapipe eval`.
# Every run plans for the built-in `cpu` machine without calibration (the
# defaults, --machine auto and calibration, follow measured times), except
# the dp run's explicit --calibrate. Every checkpoint file is kept; of the
# metrics, the deterministic fields
# (loss, tokens, lr, grad norm, schedule, micro-batches, eval loss, keys,
# and the predicted times and memory of the runs without --calibrate) go to
# FILE.det files. Timings differ run to run and are not compared.
#
# Usage: scripts/train_golden.sh BUILD_DIR OUT         (run into OUT)
#        scripts/train_golden.sh --compare OUT_A OUT_B (0 when identical)
# Before and after a change: build both, run each into its own OUT, compare.
set -euo pipefail
if [ "${1:-}" = --compare ]; then
    A=$2 B=$3 bad=0 n=0
    while read -r f; do
        r=${f#"$A"/}
        cmp -s "$f" "$B/$r" || { echo "differs: $r"; bad=1; }
        n=$((n + 1))
    done < <(find "$A" -type f ! -name '*.jsonl' ! -name eval.txt)
    sed "s#$A#OUT#" "$A/eval.txt" | cmp -s - <(sed "s#$B#OUT#" "$B/eval.txt") || { echo "differs: eval.txt"; bad=1; }
    echo "compared $n files and eval.txt: $([ $bad = 0 ] && echo identical || echo DIFFERENT)"
    exit $bad
fi
B=$(cd "$1" && pwd) O=$2
rm -rf "$O" && mkdir -p "$O"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
C="--threads 1 --samples 2000 --data builtin:3 --global-batch-tokens 2048 --max-seqlen 128 --quiet --seed 1 --machine cpu --no-calibrate"
G="--model gpt --model-config gpt-tiny --layers 4 --stages 2 --schedule auto"
T="--model t5 --model-config t5-tiny --layers 2 --dec-layers 2 --stages 2 --schedule 1f1b"
# every run under timeout: a hung rank ends the script (RUN_TIMEOUT, default 900 s)
run() { timeout "${RUN_TIMEOUT:-900}" "$B/dynapipe" train $C "$@" 2> >(grep -v '^dynapipe train: note: the checkpoint was trained on' >&2); }
run $G --steps 3 --save "$O/gpt" --metrics "$O/gpt.jsonl" --eval-every 2
run $G --steps 3 --save "$O/gpt.safetensors" --metrics "$O/gpt_file.jsonl"
run $T --steps 3 --save "$O/t5" --metrics "$O/t5.jsonl"
run $G --steps 2 --save "$O/res" --metrics "$O/res1.jsonl"
run $G --steps 4 --save "$O/res" --resume "$O/res" --metrics "$O/res2.jsonl"
run $T --steps 2 --save "$O/t5res"
run $T --steps 4 --save "$O/t5res" --resume "$O/t5res" --metrics "$O/t5res2.jsonl"
run $G --dp 2 --steps 2 --save "$O/dp" --metrics "$O/dp.jsonl" --calibrate
run --model gpt --model-config gpt-tiny --layers 4 --stages 2 --chunks 2 --schedule interleaved --steps 2 \
    --save "$O/il" --metrics "$O/il.jsonl"
run $G --method packing --steps 2 --metrics "$O/pack.jsonl"
run $T --method padding --steps 2 --metrics "$O/pad.jsonl"
run $T --method packing --steps 2 --metrics "$O/t5pack.jsonl"
"$B/dynapipe" eval --checkpoint "$O/gpt" >"$O/eval.txt"
for f in "$O"/*.jsonl; do
    python3 - "$f" <<'PY'
import json, sys
f = sys.argv[1]
calibrated = f.endswith("dp.jsonl")  # --calibrate: predictions follow measured times
with open(f) as src, open(f + ".det", "w") as out:
    for line in src:
        r = json.loads(line)
        keep = [r["step"], r["loss"], r["tokens"], r["target_tokens"], r["lr"], r["grad_norm"], r["schedule"],
                r["n_microbatches"], r.get("eval_loss"), len(r["peak_mem_mb"]), "time_scale" in r, sorted(r)]
        if not calibrated:
            keep += [r["predicted_ms"], r["makespan_ms"], r["predicted_peak_mem_mb"], r["predicted_compute_ms"]]
        print(*keep, file=out)
PY
done
