#!/usr/bin/env bash
# Install the Debian packages dynapipe builds against, when any is missing.
# Needs root (or sudo) the first time; a no-op once everything is present.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-openmp-dev libcmocka-dev libcjson-dev
      libopenmpi-dev openmpi-bin python3 python3-pip iproute2)
# (build-essential brings g++, which the header test compiles the public
# headers with; python3-pip is what the Python package's install test runs;
# iproute2's ip makes the network-namespace hosts of tests/test_netns.c, with
# unshare from util-linux, which Debian always has.)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
