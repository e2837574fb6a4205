#!/usr/bin/env bash
# The test command: installs dependencies, builds, and runs every unit and CLI test through CTest.
#   scripts/test.sh [--fuzz-seconds N] [--sanitize] [ctest args, e.g. -R 'test_io|cli_']
# --fuzz-seconds N: also runs each libFuzzer target for N seconds (scripts/fuzz.sh all N; its own build-fuzz/) before
#   the tests; a crash fails the command after the tests have run.
# --sanitize: builds in build-asan/ with AddressSanitizer and UndefinedBehaviorSanitizer (GCC, -O1 -g1: line tables
#   for the reports' stack traces at a fraction of -g's disk) and runs the tests there; BUILD_TARGETS="test_io tune ..."
#   builds only those targets (a subset, with ctest -R to match).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz_seconds=0
build=build
ctest_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --fuzz-seconds) fuzz_seconds=$2; shift 2 ;;
    --sanitize) build=build-asan; shift ;;
    *) ctest_args+=("$1"); shift ;;
  esac
done
jobs=$(nproc 2>/dev/null || echo 2)
if [ "$build" = build ]; then
  bash scripts/build.sh
else
  bash scripts/setup.sh
  torch_prefix=$(.venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)')
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
    -DCMAKE_PREFIX_PATH="$torch_prefix" >/dev/null
  # shellcheck disable=SC2086  # BUILD_TARGETS is a list
  cmake --build build-asan -j"${JOBS:-$jobs}" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
  # Any report (memory error, leak, undefined behaviour) fails the test that made it. The sentencepiece module's
  # loading under ASan: src/tune/data/sentencepiece_loader.cpp.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi
fuzz_failed=0
if [ "$fuzz_seconds" -gt 0 ]; then
  bash scripts/fuzz.sh all "$fuzz_seconds" || fuzz_failed=1
fi
# CTest runs tests in parallel and each uses all cores: OpenMP threads that spin while waiting then steal the CPU
# from the other tests. Passive waiting makes the suite ~30% faster on 2 cores (100 s -> 72 s measured); it is
# set for the test run only, never for training.
export OMP_WAIT_POLICY=passive
ctest --test-dir "$build" --output-on-failure -j"$jobs" "${ctest_args[@]}"
if [ "$fuzz_failed" -ne 0 ]; then
  echo "test: the tests passed, but fuzzing FAILED (scripts/fuzz.sh output above)" >&2
  exit 1
fi
