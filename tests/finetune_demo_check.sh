#!/usr/bin/env bash
# finetune_demo_check.sh — scripts/finetune_demo.sh (pretrain a Llama on the
# built-in mixture, fine-tune it with --init on one task against a control
# from random weights; docs/guide-finetune.md) keeps working: its smoke mode
# (llama-tiny, a few dozen steps) must run to the end, print its table and
# pass its own assertions (the fine-tune's first held-out loss equals
# `dynapipe eval` of the pretrained checkpoint on the same records, lies
# below random init's by a margin, and falls; the control starts at
# ln(vocabulary)). No speed is asserted.
# Usage: tests/finetune_demo_check.sh BUILD_DIR  (ctest passes it)
set -euo pipefail
build=${1:?usage: finetune_demo_check.sh BUILD_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d /tmp/dyn_finetune_demo_XXXXXX)
trap 'rm -rf "$out"' EXIT
# mpirun under the sanitizer build: leak detection off, as every MPI run of the suite
rc=0
text=$(ASAN_OPTIONS=detect_leaks=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 SMOKE=1 RUN_TIMEOUT=300 \
       DYN_CLI="$build/dynapipe" "$here/scripts/finetune_demo.sh" "$out/demo" 2>&1) || rc=$?
printf '%s\n' "$text"
[ "$rc" = 0 ] || { echo "FAIL: finetune_demo.sh exited $rc" >&2; exit 1; }
grep -qE '^\| first evaluation, before step 1 \| [0-9.]+ \| [0-9.]+ \(ln [0-9]+ = [0-9.]+\) \|$' <<<"$text" ||
    { echo "FAIL: no first-evaluation row" >&2; exit 1; }
grep -qE '^finetune-demo: ok: fine-tune starts at the pretrained loss' <<<"$text" ||
    { echo "FAIL: no ok line" >&2; exit 1; }
echo "ok"
