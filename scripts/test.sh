#!/usr/bin/env bash
# Set up, build with warnings as errors, and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build} scripts/build.sh -DDYN_WERROR=ON "$@"
cd "${BUILD_DIR:-build}"
# Besides the C tests, ctest runs the install test (a C program built against
# an installed copy with pkg-config and find_package), the header test (C11
# and C++), and the Python package's unittest suite (test_python:
# python/tests/run.py, which fails when no test runs or one is skipped).
# Refuse to go on if any of them is not registered, so they cannot drop out
# of the suite silently.
ctest -N -R '^(install_setup|test_install|test_headers|test_python)$' | grep -q '^Total Tests: 4$' ||
  { echo "test.sh: the install, header or Python tests are not registered with ctest" >&2; exit 1; }
ctest --output-on-failure -j "$(nproc)"
