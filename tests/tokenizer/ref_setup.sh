#!/usr/bin/env bash
# ref_setup.sh OUT_DIR — make the byte-level BPE reference data of
# tests/test_tokenizer_ref.c in OUT_DIR (see make_ref.mjs): installs the two
# pinned npm packages into OUT_DIR/node_modules (a build folder, never the
# source tree) when they are not there yet, then runs make_ref.mjs unless its
# outputs are newer than it. Exits 77 (ctest: skipped) with one line saying
# why when node, npm or the packages cannot be had.
set -euo pipefail
out=$1
here=$(cd "$(dirname "$0")" && pwd)
pkgs=(gpt-tokenizer@4.0.0 @huggingface/tokenizers@0.2.0)
skip() { echo "test_tokenizer_ref: skipped: $*" >&2; exit 77; }
command -v node >/dev/null || skip "node is not installed (Debian: nodejs)"
mkdir -p "$out"
if [ ! -f "$out/node_modules/gpt-tokenizer/package.json" ] ||
   [ ! -f "$out/node_modules/@huggingface/tokenizers/package.json" ]; then
  command -v npm >/dev/null || skip "npm is not installed, needed once to fetch ${pkgs[*]}"
  [ -f "$out/package.json" ] || echo '{"private": true}' >"$out/package.json"
  (cd "$out" && timeout 300 npm install --no-audit --no-fund --no-save --silent "${pkgs[@]}") >&2 ||
    skip "npm install ${pkgs[*]} failed (no registry?)"
fi
if [ ! -f "$out/l3.ref" ] || [ "$here/make_ref.mjs" -nt "$out/l3.ref" ]; then
  (cd "$out" && node "$here/make_ref.mjs" "$out") >&2
fi
