#!/usr/bin/env bash
# Install the Debian packages dynapipe builds against, when any is missing.
# Needs root (or sudo) the first time; a no-op once everything is present.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-openmp-dev libcmocka-dev libcjson-dev
      libopenmpi-dev openmpi-bin python3 python3-pip iproute2
      libpcre2-dev libsentencepiece-dev sentencepiece python3-sentencepiece)
# (build-essential brings g++, which the header test compiles the public
# headers with; python3-pip is what the Python package's install test runs;
# iproute2's ip makes the network-namespace hosts of tests/test_netns.c, with
# unshare from util-linux, which Debian always has. PCRE2 and
# libsentencepiece are the tokenizers' (src/data); spm_train and
# python3-sentencepiece are test_tokenizer_spm's reference.)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Optional: clang and its libFuzzer runtime for the fuzz harnesses
# (scripts/fuzz.sh, run briefly by scripts/test.sh); about 60 MB of packages
# on Debian 12. Installed when possible, never a failure: without them the
# fuzz step says it is skipped. DYN_NO_FUZZ_DEPS=1 leaves them out.
optional=(clang-14 libclang-rt-14-dev)
# Optional too: npm (with Debian's nodejs), which test_tokenizer_ref uses once
# to fetch its JavaScript references; only when no npm is on the PATH (a
# Node.js installed otherwise brings its own). Without it that test is skipped.
if ! command -v npm >/dev/null 2>&1; then
  optional+=(npm)
  dpkg-query -W -f='${Status}' npm 2>/dev/null | grep -q "install ok installed" || missing+=(npm)
fi
if [ "${DYN_NO_FUZZ_DEPS:-0}" != 1 ]; then
  for p in "${optional[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
fi
# Optional too: python3-torch (Debian's PyTorch, about 270 s to install),
# the independent reference of test_hf_torch (Hugging Face folders written
# and read by PyTorch implementations of the HF classes) and of the PyTorch
# benchmarks in bench/. Without it those are skipped, saying so.
optional+=(python3-torch)
dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "install ok installed" || missing+=(python3-torch)
# Optional too: python3-jinja2, the independent reference of test_jinja and
# test_chat (chat templates rendered by Python's jinja2); skipped without it.
optional+=(python3-jinja2)
dpkg-query -W -f='${Status}' python3-jinja2 2>/dev/null | grep -q "install ok installed" || missing+=(python3-jinja2)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
  # Retry without the optional ones: they must not stop a build.
  required=()
  for p in "${missing[@]}"; do [[ " ${optional[*]} " == *" $p "* ]] || required+=("$p"); done
  echo "install-deps: installing without the optional packages (fuzzing, npm, PyTorch, jinja2)" >&2
  [ ${#required[@]} -eq 0 ] ||
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${required[@]}" >/dev/null
fi
