#!/usr/bin/env bash
# Installs everything tune needs to build and test on Debian 12, from Debian's own packages.
# Idempotent: re-running only installs what is missing. Runs as root (or via sudo when present).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev                       # LibTorch 1.13 (CPU)
  libgloo-dev                        # c10d Gloo backend headers
  libyaml-cpp-dev libfmt-dev libcli11-dev nlohmann-json3-dev catch2
  libsentencepiece-dev sentencepiece # tokenizer library + spm_train for the tiny tokenizer
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev  # video I/O (Latte)
  ffmpeg                             # ffmpeg/ffprobe CLI: test videos made by an independent tool
  python3 python3-numpy              # fixture and data generation scripts
  python3-torch                      # tests read safetensors samples; eval, benchmark and fixture scripts
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO=sudo
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
