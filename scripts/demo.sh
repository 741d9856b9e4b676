#!/usr/bin/env bash
# Set up, build, and run the main job on the built-in FLAN-like workload.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
exec build/dynapipe plan --model gpt --synthetic flan:1 --global-batch-tokens 65536 \
     --max-seqlen 2048 --stages 4 "$@"
