#!/usr/bin/env bash
# Installs the dependencies (idempotent) and builds tune in build/ (Release) against the LibTorch inside the torch
# wheel of .venv.
#   scripts/build.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc 2>/dev/null || echo 2)
torch_prefix=$(.venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)')
source scripts/compiler.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" \
  -DCMAKE_CXX_COMPILER="$(tune_cxx_compiler build)" "$@" >/dev/null
cmake --build build -j"$jobs"
