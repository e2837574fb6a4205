#!/usr/bin/env bash
# The test command: installs dependencies, builds, and runs every unit and CLI test through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
ctest --test-dir build --output-on-failure -j"$jobs"
