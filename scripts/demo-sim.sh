#!/usr/bin/env bash
# The simulated comparison, on the built-in FLAN-like workload (no training):
# plan four 65,536-token global batches for GPT-2 (124M) on a 4-stage
# pipeline with every batching method, schedule each by simulation (auto:
# best schedule x micro-batch order x recompute), and compare. Writes the
# timeline of the first batch to out/timeline.svg and its trace to
# out/trace.json. Extra arguments are passed to `dynapipe simulate`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
mkdir -p out
exec build/dynapipe simulate --model gpt --synthetic flan:1 --global-batch-tokens 65536 \
     --max-seqlen 2048 --stages 4 --chunks 2 --batches 4 --schedule auto \
     --svg out/timeline.svg --trace out/trace.json "$@"
