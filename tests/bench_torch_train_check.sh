#!/usr/bin/env bash
# bench_torch_train_check.sh — scripts/bench-torch-train.sh (dynapipe
# against PyTorch on the same global batches) keeps working: its smoke mode
# (one repeat of two steps, gpt-tiny, the whole PyTorch sweep) must run to
# the end and print the ratio line; its premise holds (from the same
# initial weights, dynapipe and PyTorch compute the same losses: the
# script's check line); and every exact micro-batching strategy of the
# PyTorch side computes the same losses. No speed is asserted: figures
# belong in the docs, measured on a quiet machine. Exits 77 (ctest:
# skipped) when PyTorch does not import.
# Usage: tests/bench_torch_train_check.sh BUILD_DIR  (ctest passes it)
set -euo pipefail
build=${1:?usage: bench_torch_train_check.sh BUILD_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-/usr/bin/python3}
if ! "$py" -c "import torch" 2>/dev/null; then
    echo "PyTorch does not import in $py (apt-get install python3-torch): skipped"
    exit 77
fi
out=$(mktemp -d /tmp/dyn_bench_torch_XXXXXX)
trap 'rm -rf "$out"' EXIT
# mpirun under the sanitizer build: leak detection off, as every MPI run of the suite
rc=0
text=$(ASAN_OPTIONS=detect_leaks=0 SMOKE=1 DYN_CLI="$build/dynapipe" PYTHON="$py" \
       "$here/scripts/bench-torch-train.sh" "$out" 2>&1) || rc=$?
printf '%s\n' "$text"
[ "$rc" = 0 ] || { echo "FAIL: bench-torch-train.sh exited $rc" >&2; exit 1; }
grep -qE '^check, same initial weights: dynapipe losses [0-9. ]+, PyTorch [0-9. ]+: agree$' <<<"$text" ||
    { echo "FAIL: no agreeing same-weights check line" >&2; exit 1; }
grep -qE '^PyTorch.s best: (padded|packed|docmask|varlen):[0-9]+$' <<<"$text" ||
    { echo "FAIL: no best PyTorch strategy line" >&2; exit 1; }
grep -qE '^dynapipe / PyTorch real tokens/s: [0-9]+\.[0-9]+x median of 1 \(min [0-9.]+x, max [0-9.]+x\)$' <<<"$text" ||
    { echo "FAIL: no ratio line" >&2; exit 1; }
# Same weights, same batches: every strategy but packed (which attends
# across documents) computes the same loss at every swept step.
"$py" - "$out/sweep.log" <<'EOF' || { echo "FAIL: the micro-batching strategies disagree on the loss" >&2; exit 1; }
import sys
ref = None
for line in open(sys.argv[1]):
    if not line.startswith("sweep ") or line.split()[1].startswith("packed:"):
        continue
    name, losses = line.split()[1], [float(x) for x in line.split()[5].split(",")]
    ref = ref or (name, losses)
    if len(losses) != len(ref[1]) or any(abs(a - b) > 1e-4 * abs(b) for a, b in zip(losses, ref[1])):
        sys.exit("%s: losses %s, but %s: %s" % (name, losses, ref[0], ref[1]))
if ref is None:
    sys.exit("no strategy swept")
print("every exact strategy: losses %s" % ref[1])
EOF
echo "ok"
