#!/usr/bin/env bash
# Fine-tuning continues pretraining (docs/guide-finetune.md): a small
# Llama-shaped model pretrained by `dynapipe train` on the whole built-in
# mixture and saved, then fine-tuned with `--init` on one task of it, starts
# at the pretrained model's held-out loss on that task, not at the loss of
# random weights, and improves it. A run from random weights with the same
# flags and seed is the control.
#
#   1. pretrain  train --model llama --model-config CONFIG --data builtin
#                --steps PRE_STEPS --eval-every --save OUT/pre
#   2. measure   eval --checkpoint OUT/pre/step-K --data builtin:1:TASK: the
#                pretrained model's loss on the task's held-out records
#   3. fine-tune train --init OUT/pre/step-K --data builtin:1:TASK
#                --steps FT_STEPS --eval-every (its first evaluation is
#                before the first step: the metrics' eval_loss_before)
#   4. control   the same from random weights (--model-config CONFIG)
#
# Step counts, not wall time, end every run, and the plans are made for the
# built-in `cpu` machine without calibration, so the losses are the same on
# every run of the script with the same build and thread count.
#
# The script prints a table and asserts what it shows, exiting 1 otherwise:
# the fine-tune is a new run (metrics from step 0, the control's learning
# rates); its first held-out loss equals eval's loss of the pretrained
# checkpoint on the same records (to 2e-4: eval prints 4 decimals); it is
# below the control's first loss by more than MARGIN nats; the control's
# first loss is ln(vocabulary) within 5 %; each run's last held-out loss is
# below its first. Whether the fine-tune ends below the control is printed,
# not asserted: it depends on the task (docs/guide-finetune.md). It also checks that
# the held-out records are of TASK alone and counts how many of them are
# equal to a record the fine-tune trained on (the built-in held-out stream
# is drawn apart from the training stream; equal records are coincidences
# of a small task's space, reported, not asserted).
#
#   scripts/finetune_demo.sh [OUT_DIR]      default out/finetune-demo
#   env: CONFIG=llama-tiny TASK=classify PRE_STEPS=600 FT_STEPS=150 EVAL_EVERY=50
#        EVAL_SAMPLES=128 MAXLEN=256 GBT=4096 SAMPLES=50000 STAGES=2
#        LR=3e-3 MARGIN=1.0 THREADS=1 (per rank) TRAIN_FLAGS= (more train flags)
#        DYN_CLI=path/to/dynapipe (default: build/dynapipe, built first)
#        RUN_TIMEOUT=900 (seconds any one command may run)
#        SMOKE=1: a quick check that everything runs and the assertions
#        hold (40 + 12 steps of 2048 tokens, 16 evaluation records).
# llama-mini (4 layers of 256) trained at about 3.5 s a step of 4096 tokens
# on the 2 loaded cores this was written on, so a few minutes of it is too
# few steps; llama-tiny (2 layers of 64, 0.1 s a step) is the default.
set -euo pipefail
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
cd "$(dirname "$0")/.."
OUT=${1:-out/finetune-demo}
if [ "${SMOKE:-0}" = 1 ]; then
    PRE_STEPS=${PRE_STEPS:-40} FT_STEPS=${FT_STEPS:-12} EVAL_EVERY=${EVAL_EVERY:-6}
    EVAL_SAMPLES=${EVAL_SAMPLES:-16} MAXLEN=${MAXLEN:-128} GBT=${GBT:-2048} SAMPLES=${SAMPLES:-2000}
    MARGIN=${MARGIN:-0.5}
fi
CONFIG=${CONFIG:-llama-tiny}
TASK=${TASK:-classify}
PRE_STEPS=${PRE_STEPS:-600}
FT_STEPS=${FT_STEPS:-150}
EVAL_EVERY=${EVAL_EVERY:-50}
EVAL_SAMPLES=${EVAL_SAMPLES:-128}
MAXLEN=${MAXLEN:-256}
GBT=${GBT:-4096}
SAMPLES=${SAMPLES:-50000}
STAGES=${STAGES:-2}
LR=${LR:-3e-3}
MARGIN=${MARGIN:-1.0}
THREADS=${THREADS:-1}
if [ -z "${DYN_CLI:-}" ]; then
    scripts/build.sh >/dev/null
    DYN_CLI=build/dynapipe
fi
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
rm -rf "$OUT" && mkdir -p "$OUT"
pre_dir=$OUT/pre/step-$(printf %08d "$PRE_STEPS")

# Every run's flags but the model and the data: the same length limit,
# batch, samples, learning rate, seed and evaluation.
# shellcheck disable=SC2206
common=(--max-seqlen "$MAXLEN" --global-batch-tokens "$GBT" --samples "$SAMPLES" --stages "$STAGES"
        --threads "$THREADS" --lr "$LR" --seed 1 --machine cpu --no-calibrate
        --eval-samples "$EVAL_SAMPLES" ${TRAIN_FLAGS:-})
train() { # LOG ARGS...: one dynapipe train, its stderr in LOG
    local log=$1
    shift
    echo "+ dynapipe train $*" >"$log"
    if ! timeout "$RUN_TIMEOUT" "$DYN_CLI" train "$@" 2>>"$log"; then
        echo "finetune-demo: dynapipe train failed (log $log):" >&2
        tail -5 "$log" >&2
        exit 1
    fi
}

echo "finetune-demo: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "finetune-demo: $CONFIG, task $TASK, pretrain $PRE_STEPS steps, fine-tune $FT_STEPS steps, into $OUT"
t0=$(date +%s)
train "$OUT/pre.log" --model llama --model-config "$CONFIG" --data builtin --steps "$PRE_STEPS" \
    --eval-every "$EVAL_EVERY" --save "$OUT/pre" --metrics "$OUT/pre.jsonl" "${common[@]}"
t1=$(date +%s)
timeout "$RUN_TIMEOUT" "$DYN_CLI" eval --checkpoint "$pre_dir" --data "builtin:1:$TASK" \
    --samples "$EVAL_SAMPLES" --no-accuracy >"$OUT/pre-eval.txt"
train "$OUT/ft.log" --init "$pre_dir" --data "builtin:1:$TASK" --steps "$FT_STEPS" \
    --eval-every "$EVAL_EVERY" --save "$OUT/ft" --metrics "$OUT/ft.jsonl" "${common[@]}"
t2=$(date +%s)
train "$OUT/rand.log" --model llama --model-config "$CONFIG" --data "builtin:1:$TASK" --steps "$FT_STEPS" \
    --eval-every "$EVAL_EVERY" --metrics "$OUT/rand.jsonl" "${common[@]}"
t3=$(date +%s)
echo "finetune-demo: wall time: pretrain $((t1 - t0)) s, fine-tune $((t2 - t1)) s, control $((t3 - t2)) s"

# The records: those the fine-tune trained on (train's global batches, as
# `data batches` writes them) and the held-out ones it evaluated.
timeout "$RUN_TIMEOUT" "$DYN_CLI" data batches "builtin:1:$TASK" --max-seqlen "$MAXLEN" --global-batch-tokens "$GBT" \
    --samples "$SAMPLES" --count "$FT_STEPS" --out "$OUT/ft-batches.jsonl"
timeout "$RUN_TIMEOUT" "$DYN_CLI" data batches "builtin:1:$TASK" --split heldout --max-seqlen "$MAXLEN" \
    --global-batch-tokens $((EVAL_SAMPLES * MAXLEN)) --samples "$EVAL_SAMPLES" --count 1 \
    --out "$OUT/heldout.jsonl"

python3 - "$OUT" "$CONFIG" "$TASK" "$PRE_STEPS" "$FT_STEPS" "$EVAL_SAMPLES" "$MARGIN" "$DYN_CLI" <<'PY'
import json, math, re, subprocess, sys
out, config, task, pre_steps, ft_steps, n_eval, margin, cli = sys.argv[1:9]
pre_steps, ft_steps, n_eval, margin = int(pre_steps), int(ft_steps), int(n_eval), float(margin)
fails = []

def check(cond, what):
    if not cond:
        fails.append(what)

def records(name):
    with open("%s/%s.jsonl" % (out, name)) as f:
        return [json.loads(line) for line in f]

def curve(recs):
    """(step, eval loss) points: before the first step, then every --eval-every."""
    pts = [(0, recs[0]["eval_loss_before"])] if "eval_loss_before" in recs[0] else []
    return pts + [(r["step"] + 1, r["eval_loss"]) for r in recs if "eval_loss" in r]

pre, ft, rand = records("pre"), records("ft"), records("rand")
text = open(out + "/pre-eval.txt").read()
m = re.search(r"samples: held-out loss ([0-9.]+) nats", text)
check(m is not None, "eval of the pretrained checkpoint printed no held-out loss: %s" % text)
pre_eval = float(m.group(1)) if m else float("nan")
tasks = [l.split()[0] for l in text.split("\n\n", 1)[-1].splitlines()[1:] if l.strip()]
check(tasks == [task], "the held-out records are of tasks %s, not %s alone" % (tasks, task))
cfg = json.load(open("%s/pre/step-%08d/config.json" % (out, pre_steps)))
vocab = cfg["vocab_size"]
pc, fc, rc = curve(pre), curve(ft), curve(rand)
check(ft[0]["step"] == 0 and len(ft) == ft_steps, "the fine-tune ran steps %d.. (%d), not 0.. (%d)"
      % (ft[0]["step"], len(ft), ft_steps))
check(fc and fc[0][0] == 0 and rc and rc[0][0] == 0, "no evaluation before the first step (eval_loss_before)")
# a new run: the learning-rate schedule from its step 0, as the control's (a resume would continue pretraining's)
check([r["lr"] for r in ft] == [r["lr"] for r in rand], "the fine-tune's learning rates are not a new run's")
if fails:
    sys.exit("finetune-demo: FAIL: " + "; ".join(fails))

# the held-out records against those the fine-tune trained on
def recs_of(path):
    """{sample id: (input ids, target ids)} of a `data batches` file."""
    with open(path) as f:
        return {s["id"]: (tuple(s["input_ids"]), tuple(s["target_ids"])) for b in f for s in json.loads(b)["samples"]}
held = [r for i, r in sorted(recs_of(out + "/heldout.jsonl").items()) if i < n_eval]
trained = set(recs_of(out + "/ft-batches.jsonl").values())
check(len(held) == n_eval, "%d held-out records exported, not %d" % (len(held), n_eval))
same = sum(r in trained for r in held)

print("\npretrained %s on the built-in mixture, %d steps: held-out loss %s"
      % (config, pre_steps, " ".join("%.3f@%d" % (l, s) for s, l in pc)))
print("\n| held-out loss on %s (%d records), nats/token | fine-tune from the checkpoint | control, random init |"
      % (task, n_eval))
print("| --- | ---: | ---: |")
print("| `dynapipe eval` of the pretrained checkpoint | %.4f | |" % pre_eval)
print("| first evaluation, before step 1 | %.4f | %.4f (ln %d = %.4f) |" % (fc[0][1], rc[0][1], vocab, math.log(vocab)))
for (s, a), (s2, b) in zip(fc[1:], rc[1:]):
    print("| after step %d | %.4f | %.4f |" % (s, a, b))
print("\nheld-out records: %d, all %s; %d of them equal to one of the %d the fine-tune trained on"
      % (len(held), task, same, len(trained)))

first, rfirst, last, rlast = fc[0][1], rc[0][1], fc[-1][1], rc[-1][1]
check(abs(first - pre_eval) <= 2e-4, "the fine-tune's first loss %.6f is not eval's %.4f" % (first, pre_eval))
check(first < rfirst - margin, "the fine-tune's first loss %.4f is not %.2f below random init's %.4f"
      % (first, margin, rfirst))
check(abs(rfirst - math.log(vocab)) <= 0.05 * math.log(vocab), "random init's first loss %.4f is not ln %d = %.4f"
      % (rfirst, vocab, math.log(vocab)))
check(last < first, "the fine-tune did not improve: %.4f after %.4f" % (last, first))
check(rlast < rfirst, "the control did not learn: %.4f after %.4f" % (rlast, rfirst))
if fails:
    sys.exit("finetune-demo: FAIL: " + "; ".join(fails))
print("finetune-demo: ok: fine-tune starts at the pretrained loss (%.4f = eval %.4f), %.2f below random init, "
      "and ends at %.4f (control %.4f: the fine-tune is %s)" % (first, pre_eval, rfirst - first, last, rlast,
                                                                 "ahead" if last < rlast else "behind"))
PY
