#!/usr/bin/env bash
# The test command: installs dependencies, builds, and runs every unit and CLI test through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
# CTest runs tests in parallel and each uses all cores: OpenMP threads that spin while waiting then steal the CPU
# from the other tests. Passive waiting makes the suite ~30% faster on 2 cores (100 s -> 72 s measured); it is
# set for the test run only, never for training.
export OMP_WAIT_POLICY=passive
ctest --test-dir build --output-on-failure -j"$jobs"
