#!/usr/bin/env bash
# Installs everything tune needs to build and test on Debian 12: Debian packages for the toolchain and the C++
# libraries, and a Python virtual environment (.venv) holding torch 2.13, whose wheel carries the LibTorch that tune
# is built against, plus the Hugging Face packages the tests use as references (scripts/requirements.txt).
# Idempotent: re-running only installs what is missing. Runs as root (or via sudo when present).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config
  ccache                             # compiler cache: CI's repeated builds on one machine (CMakeLists.txt)
  libgloo-dev                        # c10d Gloo backend headers (the torch wheel ships none)
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev catch2
  libsentencepiece-dev sentencepiece # tokenizer library + spm_train for the tiny tokenizer
  libpcre2-dev libutf8proc-dev       # tokenizer.json: Unicode regexes (pre-tokenizers), normalization forms
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev  # video I/O (Latte)
  ffmpeg                             # ffmpeg/ffprobe CLI: test videos made by an independent tool
  python3 python3-venv               # the virtual environment below
  clang libclang-rt-14-dev           # scripts/fuzz.sh: libFuzzer and the sanitizer runtimes (clang 14)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} Debian packages already installed"
else
  SUDO=""
  [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO=sudo
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The virtual environment. The stamp holds the requirements it was made from, so an edit reinstalls.
stamp=.venv/.tune-requirements
if [ -x .venv/bin/python ] && cmp -s scripts/requirements.txt "$stamp"; then
  echo "setup: .venv up to date ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
  exit 0
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
echo "setup: installing scripts/requirements.txt into .venv"
.venv/bin/pip install -q -r scripts/requirements.txt
cp scripts/requirements.txt "$stamp"
