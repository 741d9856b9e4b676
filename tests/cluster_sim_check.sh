#!/usr/bin/env bash
# cluster_sim_check.sh — docs/cluster-scale.md must stay reproducible: run
# scripts/cluster_sim.sh on one small configuration (GPT 6.7B, 8 stages x 1,
# max length 512, 16,384-token batches, one global batch) and check that
# every column of its table row is a number: dynapipe, each tuned baseline
# and the ratio. A renamed row label in `dynapipe simulate` once turned every
# baseline into "-" without anyone noticing.
# Usage: tests/cluster_sim_check.sh BUILD_DIR  (ctest passes it)
set -euo pipefail
build=${1:?usage: cluster_sim_check.sh BUILD_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
out=$(CLUSTER_MODELS=gpt:gpt-6.7b CLUSTER_LENGTHS=512 CLUSTER_SIZES=8:16384 CLUSTER_BATCHES=1 \
      "$here/scripts/cluster_sim.sh" "$build")
printf '%s\n' "$out"
row=$(grep -E '^\| gpt-6.7b \|' <<<"$out" || true)
[ "$(grep -c . <<<"$row")" = 1 ] || { echo "FAIL: expected one gpt-6.7b row" >&2; exit 1; }
# columns 6..11: dynapipe, padding, packing, packing-docmask, token, ratio
bad=$(awk -F'|' '{ for (i = 6; i <= 11; i++) { v = $i; gsub(/ /, "", v); if (v !~ /^[0-9]+(\.[0-9]+)?x?$/) print i ": \"" v "\"" } }' <<<"$row")
[ -z "$bad" ] || { echo "FAIL: columns without a number: $bad" >&2; exit 1; }
grep -qE '^Median of dynapipe / best baseline over the rows: [0-9.]+x$' <<<"$out" ||
    { echo "FAIL: no median line" >&2; exit 1; }
echo "ok"
