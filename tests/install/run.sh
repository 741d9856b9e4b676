#!/usr/bin/env bash
# run.sh PREFIX WORK_DIR [CFLAGS] — test an installed dynapipe (the
# install_setup fixture put it in PREFIX):
#   1. the installed files are where docs/guide-c.md says;
#   2. the C guide's example, cut out of docs/guide-c.md, builds against the
#      prefix with pkg-config (dynapipe.pc, dynapipe-static.pc) and with
#      find_package (dynapipe::dynapipe, dynapipe::dynapipe_static); the
#      static builds must not need libdynapipe.so;
#   3. each build, run on docs/examples/lengths.tsv, prints the same output,
#      and that output agrees with the installed `dynapipe plan --json` on the
#      same file and options (tests/install/compare_plan.py) and with the
#      output the guide shows (python/tests/guidecheck.py);
#   4. the guide's second example (execution plans) agrees with
#      `dynapipe plan --schedule auto --json` and with the guide;
#   5. a C++ program including every header links against the library.
set -euo pipefail
prefix=$1 work=$2 flags=${3:-}
src=${DYN_SOURCE_DIR:?DYN_SOURCE_DIR must name the source tree}
cc=${CC:-cc}
fail() { echo "test_install: $*" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work"

# 1. files
libdir=$(dirname "$(find "$prefix" -name libdynapipe.a -print -quit)")
[ -d "$libdir" ] || fail "no libdynapipe.a under $prefix"
for f in "$libdir/libdynapipe.so" "$libdir/libdynapipe.so.0" "$libdir/pkgconfig/dynapipe.pc" \
         "$libdir/pkgconfig/dynapipe-static.pc" "$libdir/cmake/dynapipe/dynapipeConfig.cmake" \
         "$libdir/cmake/dynapipe/dynapipeConfigVersion.cmake" "$prefix/bin/dynapipe"; do
  [ -e "$f" ] || fail "missing $f"
done
for h in "$src"/include/dynapipe/*.h; do
  cmp -s "$h" "$prefix/include/dynapipe/$(basename "$h")" || fail "header $(basename "$h") not installed"
done

# 2. build the guide's example four ways
example=$work/plan_lengths.c
sed -n '/<!-- example: plan_lengths.c -->/,/^```$/p' "$src/docs/guide-c.md" | sed '1,2d;$d' >"$example"
[ -s "$example" ] || fail "no example block in docs/guide-c.md"
export PKG_CONFIG_PATH=$libdir/pkgconfig
# shellcheck disable=SC2046,SC2086
"$cc" -std=c11 -Wall -Wextra -Werror $flags "$example" $(pkg-config --cflags --libs dynapipe) \
  -Wl,-rpath,"$libdir" -o "$work/pc_shared" || fail "pkg-config dynapipe build failed"
# shellcheck disable=SC2046,SC2086
"$cc" -std=c11 -Wall -Wextra -Werror $flags "$example" $(pkg-config --cflags --libs dynapipe-static) \
  -o "$work/pc_static" || fail "pkg-config dynapipe-static build failed"
cmake -S "$src/tests/install/consumer" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  -DEXAMPLE="$example" -DCMAKE_C_FLAGS="$flags" -DCMAKE_BUILD_TYPE=Release >/dev/null ||
  fail "find_package(dynapipe) configure failed"
cmake --build "$work/cmake" >/dev/null || fail "find_package(dynapipe) build failed"
for b in "$work/pc_static" "$work/cmake/example_static"; do
  if readelf -d "$b" | grep -q 'NEEDED.*libdynapipe'; then fail "$b needs libdynapipe.so"; fi
done
readelf -d "$work/pc_shared" | grep -q 'NEEDED.*libdynapipe.so.0' || fail "pc_shared does not use libdynapipe.so.0"

# 3. run and compare
lengths=$src/docs/examples/lengths.tsv
"$work/pc_shared" "$lengths" >"$work/out.txt" || fail "pc_shared failed"
for b in pc_static cmake/example_shared cmake/example_static; do
  "$work/$b" "$lengths" >"$work/out.$(basename "$b").txt" || fail "$b failed"
  cmp -s "$work/out.txt" "$work/out.$(basename "$b").txt" || fail "$b prints different output"
done
"$prefix/bin/dynapipe" plan --model gpt --model-config gpt2-124m --lengths "$lengths" --max-seqlen 1024 \
  --stages 4 --machine a100 --global-batch-tokens 8192 --quiet --json "$work/cli.json" >/dev/null ||
  fail "installed dynapipe plan failed"
python3 "$src/tests/install/compare_plan.py" "$work/out.txt" "$work/cli.json" || fail "output differs from dynapipe plan"
python3 "$src/python/tests/guidecheck.py" output "$src/docs/guide-c.md" "$work/out.txt" || fail "output differs from docs/guide-c.md"

# 4. the guide's execution-plan example (pkg-config, shared)
example2=$work/plan_pipeline.c
sed -n '/<!-- example: plan_pipeline.c -->/,/^```$/p' "$src/docs/guide-c.md" | sed '1,2d;$d' >"$example2"
[ -s "$example2" ] || fail "no plan_pipeline.c block in docs/guide-c.md"
# shellcheck disable=SC2046,SC2086
"$cc" -std=c11 -Wall -Wextra -Werror $flags "$example2" $(pkg-config --cflags --libs dynapipe) \
  -Wl,-rpath,"$libdir" -o "$work/pipeline" || fail "plan_pipeline.c build failed"
"$work/pipeline" "$lengths" >"$work/pipeline.txt" || fail "plan_pipeline failed"
"$prefix/bin/dynapipe" plan --model gpt --model-config gpt2-124m --lengths "$lengths" --max-seqlen 1024 \
  --stages 4 --machine a100 --global-batch-tokens 8192 --quiet --schedule auto --json "$work/cli-auto.json" \
  >/dev/null || fail "installed dynapipe plan --schedule auto failed"
python3 "$src/tests/install/compare_plan.py" --pipeline "$work/pipeline.txt" "$work/cli-auto.json" ||
  fail "plan_pipeline output differs from dynapipe plan --schedule auto"
python3 "$src/python/tests/guidecheck.py" output "$src/docs/guide-c.md" "$work/pipeline.txt" 1 ||
  fail "plan_pipeline output differs from docs/guide-c.md"

# 5. C++: every installed header is included by the program
for h in "$prefix"/include/dynapipe/*.h; do
  grep -q "#include <dynapipe/$(basename "$h")>" "$src/tests/install/consumer/cxx_check.cpp" ||
    fail "tests/install/consumer/cxx_check.cpp does not include dynapipe/$(basename "$h")"
done
g++ -std=c++11 -Wall -Wextra -Werror $flags "$src/tests/install/consumer/cxx_check.cpp" \
  $(pkg-config --cflags --libs dynapipe) -Wl,-rpath,"$libdir" -o "$work/cxx_check" || fail "C++ build failed"
"$work/cxx_check" || fail "C++ program failed"
echo "test_install: ok (pkg-config shared + static, find_package shared + static, the execution-plan example, C++)"
