#!/usr/bin/env bash
# setup.sh BUILD_DIR PREFIX — the install_setup fixture: `cmake --install`
# BUILD_DIR into a fresh PREFIX, which test_install and the Python tests use.
set -euo pipefail
build=$1 prefix=$2
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
echo "installed into $prefix"
