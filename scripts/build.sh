#!/usr/bin/env bash
# Configure and build into BUILD_DIR (default build/). Extra arguments go to
# cmake, e.g. scripts/build.sh -DDYN_SANITIZE=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "$@" >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
