#!/usr/bin/env bash
# Build the libFuzzer harnesses (tests/fuzz/fuzz_*.c) with clang, AddressSanitizer
# and UndefinedBehaviorSanitizer, and run each for SECONDS seconds:
#   scripts/fuzz.sh SECONDS [NAME...]     (NAME: plan, tsv, cost_table, safetensors, config,
#                                          tokenizer, jinja)
# Each run starts from a small seed corpus written here (valid inputs the
# project's own writers produce or the docs show) and keeps what it finds in
# build-fuzz/corpus/NAME; a crash leaves build-fuzz/crash-* and fails the run.
# Without a clang that has -fsanitize=fuzzer (Debian: clang-14 and
# libclang-rt-14-dev) it says so and exits 0, so CI skips the step clearly.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:?usage: scripts/fuzz.sh SECONDS [NAME...]}
shift
names=("$@")
[ ${#names[@]} -eq 0 ] && names=(plan tsv cost_table safetensors config tokenizer jinja)
CC=${FUZZ_CC:-}
if [ -z "$CC" ]; then
  for c in clang clang-14 clang-15 clang-16; do command -v "$c" >/dev/null && { CC=$c; break; }; done
fi
out=${FUZZ_DIR:-build-fuzz}
mkdir -p "$out"
if [ -z "$CC" ] || ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n){(void)d;(void)n;return 0;}' |
     "$CC" -x c -fsanitize=fuzzer -o "$out/probe" - 2>/dev/null; then
  echo "fuzz: skipped: no clang with -fsanitize=fuzzer (install clang-14 and libclang-rt-14-dev)"
  exit 0
fi
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
flags="-std=c11 -O1 -g -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc $(pkg-config --cflags libcjson)"
libs="$(pkg-config --libs libcjson libpcre2-8) -lm"
# The readers under test and what they call: everything but the model's
# numerics (which need OpenBLAS and OpenMP), plus the safetensors reader.
srcs=(src/util/*.c src/data/*.c src/cost/*.c src/plan/*.c src/sched/*.c src/sim/*.c src/pipeline/*.c
      src/model/safetensors.c)
lib="$out/libdyn_fuzz.a"
if [ ! -f "$lib" ] || [ -n "$(find src include -newer "$lib" -name '*.[ch]' | head -1)" ]; then
  echo "fuzz: building the library with $CC"
  rm -f "$lib" "$out"/*.o
  for s in "${srcs[@]}"; do
    o="$out/$(echo "$s" | tr / _).o"
    "$CC" $flags $san -fsanitize=fuzzer-no-link -c "$s" -o "$o" &
    while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
  done
  wait
  ar rcs "$lib" "$out"/*.o
fi
seed_corpus() {
  local name=$1 dir=$2
  mkdir -p "$dir"
  [ -n "$(ls -A "$dir")" ] && return 0
  case $name in
    tsv) printf 'input_len\ttarget_len\n12\t4\n100\t0\n# comment\n7\t3\r\n' >"$dir/seed.tsv";
         cp docs/examples/lengths.tsv "$dir/" 2>/dev/null || true ;;
    cost_table) cp docs/examples/*cost*.tsv "$dir/" 2>/dev/null || printf 'x\n' >"$dir/seed" ;;
    config) printf '{"kind": "gpt", "n_layers": 2, "hidden": 64, "heads": 2, "ffn": 256, "vocab": 260, "max_seqlen": 128}' >"$dir/model.json";
            cp docs/examples/a100-80gb.json "$dir/" ;;
    safetensors) printf '\x40\x00\x00\x00\x00\x00\x00\x00{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}            \x00\x00\x80\x3f\x00\x00\x00\x40' >"$dir/seed.safetensors" ;;
    plan) printf 'DYNPLAN\0' >"$dir/magic" ;;
    jinja) cp tests/chat/*.jinja "$dir/" ;;
    tokenizer) python3 - "$dir/tokenizer.json" <<'PY' ;;
import json, sys
bs = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
extra = [b for b in range(256) if b not in bs]
u = {b: chr(b) for b in bs} | {b: chr(256 + i) for i, b in enumerate(extra)}
vocab = {u[b]: b for b in range(256)} | {"ab": 256, "abc": 257, u[32] + "a": 258}
json.dump({"added_tokens": [{"id": 259, "content": "<|x|>", "special": True}], "normalizer": {"type": "NFC"},
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": "\\p{L}+|\\s+"}, "behavior": "Isolated", "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
           "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|x|>"}},
               {"Sequence": {"id": "A"}}], "special_tokens": {"<|x|>": {"ids": [259]}}},
           "model": {"type": "BPE", "vocab": vocab, "merges": ["a b", ["ab", "c"], u[32] + " a"]}},
          open(sys.argv[1], "w"))
PY
  esac
}
fail=0
for name in "${names[@]}"; do
  src=tests/fuzz/fuzz_$name.c
  [ -f "$src" ] || { echo "fuzz: no harness $src" >&2; exit 2; }
  "$CC" $flags $san -fsanitize=fuzzer "$src" "$lib" $libs -o "$out/fuzz_$name"
  seed_corpus "$name" "$out/corpus/$name"
  echo "fuzz: $name for ${secs}s"
  if ! (cd "$out" && ASAN_OPTIONS=detect_leaks=1 "./fuzz_$name" -max_total_time="$secs" -max_len=65536 \
          -print_final_stats=1 "corpus/$name" 2>"fuzz_$name.log"); then
    echo "fuzz: $name FAILED (see $out/fuzz_$name.log and $out/crash-*)" >&2
    tail -30 "$out/fuzz_$name.log" >&2
    fail=1
  else
    grep -E '^stat::number_of_executed_units|^Done' "$out/fuzz_$name.log" | tr '\n' ' '; echo
  fi
done
exit $fail
