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
# Every mpirun a test starts runs under coreutils `timeout` (tests/cli_testlib.h,
# the Python checks); --timeout is the backstop for a test that hangs
# elsewhere (a test without its own TIMEOUT property: at most 15 minutes; the
# longest, test_runtime under ASan, takes about 3).
ctest --output-on-failure --timeout 900 -j "$(nproc)"
# A short run of the fuzz harnesses (tests/fuzz, scripts/fuzz.sh) when clang
# with libFuzzer is available; it says "skipped" otherwise. Once per CI run:
# the harnesses carry their own sanitizers, so the sanitizer pass skips them.
# DYN_FUZZ_SECONDS sets the time per harness (0: none).
cd ..
fuzz_secs=${DYN_FUZZ_SECONDS:-3}
case " $* " in
  *DYN_SANITIZE=ON*) echo "fuzz: not run in the sanitizer pass (the harnesses have their own)";;
  *) [ "$fuzz_secs" != 0 ] && scripts/fuzz.sh "$fuzz_secs";;
esac
