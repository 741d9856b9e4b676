#!/usr/bin/env bash
# Set up, build with warnings as errors, and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build} scripts/build.sh -DDYN_WERROR=ON "$@"
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)"
