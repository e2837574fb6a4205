#!/usr/bin/env bash
# Fuzzes tune's parsers of outside input with libFuzzer under AddressSanitizer and UndefinedBehaviorSanitizer.
#   scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]   one target (names: scripts/fuzz.sh list)
#   scripts/fuzz.sh all SECONDS [libFuzzer flags...]      each target in turn, SECONDS each
#   scripts/fuzz.sh list                                  the targets
# Builds only the fuzzers and the libraries they link (fuzz/CMakeLists.txt) in build-fuzz/ with clang; JOBS sets the
# build's parallelism (default: all cores). Seeds are collected afresh each run from the test fixtures, recipes/,
# configs/, generated fixtures in build/ when present, and fuzz/seeds/TARGET/ (hand-written seeds and every input
# that once crashed, so each run replays them first). What a run finds is kept in build-fuzz/corpus/TARGET/ for the
# next. Exits non-zero when a target crashes, leaks, times out or runs out of memory, printing the input's path and
# the command that replays it; prints executions per target (libFuzzer's stats) either way.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

targets=(safetensors weights_index config dataset tokenizer_json jinja llama_config latent_manifest)

usage() {
  echo "usage: scripts/fuzz.sh TARGET|all SECONDS [libFuzzer flags...]; targets: ${targets[*]}" >&2
  exit 2
}
[ "${1:-}" = list ] && { printf '%s\n' "${targets[@]}"; exit 0; }
[ $# -ge 2 ] || usage
which=$1
seconds=$2
shift 2
[[ "$seconds" =~ ^[0-9]+$ ]] || usage
if [ "$which" = all ]; then
  chosen=("${targets[@]}")
else
  [[ " ${targets[*]} " == *" $which "* ]] || usage
  chosen=("$which")
fi

# clang (libFuzzer and the sanitizer runtimes come with Debian's clang and libclang-rt-14-dev): scripts/setup.sh.
bash scripts/setup.sh >/dev/null
command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (scripts/setup.sh installs it)" >&2; exit 1; }

# The libraries get coverage instrumentation without libFuzzer's main (fuzzer-no-link); the fuzzers link it
# (fuzz/CMakeLists.txt). -O1 -g with assertions on; any UB report stops the run (no recover), as a crash does.
build=build-fuzz
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
torch_prefix=$(.venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_PREFIX_PATH="$torch_prefix" \
  -DTUNE_BUILD_TESTS=OFF -DTUNE_BUILD_FUZZERS=ON >/dev/null
cmake --build "$build" -j"$jobs" --target $(printf 'fuzz_%s ' "${chosen[@]}")

# Seed files for one target, from wherever they exist in the tree (nothing is copied into git). Files over 64 KiB
# are left out: libFuzzer would make every input that long, and the executions slow.
seed_sources() {
  local fixtures=tests/fixtures
  case $1 in
    safetensors) find "$fixtures" -name '*.safetensors' ;;
    weights_index | llama_config | latent_manifest) find "$fixtures" -name '*.json' ;;
    config) find recipes configs -name '*.yaml' ;;
    dataset) find "$fixtures" data build/tests -maxdepth 3 \( -name '*.jsonl' -o -name '*.json' -o -name '*.txt' \) \
               2>/dev/null || true ;;
    tokenizer_json) find build -maxdepth 3 -path '*tokenizer_fixtures*' -name 'tokenizer.json' 2>/dev/null || true ;;
    jinja) ;;  # chat templates are extracted from JSON below
  esac
  [ -d "fuzz/seeds/$1" ] && find "fuzz/seeds/$1" -type f
  return 0
}

# The chat templates of the tokenizer_config.json files that the tests download into build/ (when they ran).
extract_chat_templates() {
  local out=$1 file
  for file in $(find build -maxdepth 3 -path '*tokenizer_fixtures*' -name 'tokenizer_config.json' 2>/dev/null); do
    python3 - "$file" "$out" <<'PY' || true
import hashlib, json, sys
template = json.load(open(sys.argv[1])).get("chat_template")
for text in ([template] if isinstance(template, str) else [t.get("template", "") for t in template or []]):
    name = hashlib.sha1(text.encode()).hexdigest()
    open(f"{sys.argv[2]}/{name}", "w").write(text)
PY
  done
}

scratch=$(mktemp -d "${TMPDIR:-/dev/shm}/tune-fuzz.XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export TUNE_FUZZ_SCRATCH=$scratch  # fuzz_support.cpp writes the inputs of path-taking parsers there
# A leak or UB report is a failure like a crash; symbolized stacks name the parser's line.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=()
total=0
for target in "${chosen[@]}"; do
  seeds=$build/corpus/$target/seeds
  found=$build/corpus/$target/found
  artifacts=$build/crashes/$target
  rm -rf "$seeds"
  mkdir -p "$seeds" "$found" "$artifacts"
  while IFS= read -r file; do
    [ -f "$file" ] && [ "$(stat -c %s "$file")" -le 65536 ] && cp "$file" "$seeds/$(echo "$file" | tr / _)"
  done < <(seed_sources "$target")
  [ "$target" = jinja ] && extract_chat_templates "$seeds"
  dict=()
  [ -f "fuzz/dicts/$target.dict" ] && dict=(-dict="fuzz/dicts/$target.dict")
  log=$build/fuzz-$target.log
  echo "fuzz: $target for ${seconds}s ($(ls "$seeds" | wc -l) seeds, $(ls "$found" | wc -l) found before)"
  # New inputs go to the first corpus directory (found/); seeds/ is read only. -timeout: an input that takes 10 s
  # is a hang. -rss_limit_mb: LibTorch alone takes ~250 MB.
  before=$(ls "$artifacts" | wc -l)
  status=0
  "$build/fuzz/fuzz_$target" "$found" "$seeds" "${dict[@]}" -max_total_time="$seconds" -timeout=10 -print_funcs=0 \
    -rss_limit_mb=2560 -artifact_prefix="$artifacts/" -print_final_stats=1 "$@" >"$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  # -fork mode prints no final stats; its last status line "#N: cov: ..." counts the executions.
  [ -n "$runs" ] || runs=$(sed -n 's/^#\([0-9]*\): cov:.*/\1/p' "$log" | tail -1)
  total=$((total + ${runs:-0}))
  # With -fork=1 -ignore_crashes=1 libFuzzer goes on after a crash and may exit 0: new artifacts fail the run too.
  [ "$status" -eq 0 ] && [ "$(ls "$artifacts" | wc -l)" -gt "$before" ] && status=1
  if [ "$status" -ne 0 ]; then
    tail -n 60 "$log"
    input=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    echo "fuzz: $target FAILED (exit $status) after ${runs:-?} executions; input: ${input:-none written}" >&2
    [ -n "$input" ] && echo "fuzz: replay with: $build/fuzz/fuzz_$target $input" >&2
    failed+=("$target")
  else
    echo "fuzz: $target ok: ${runs:-?} executions, $(ls "$found" | wc -l) inputs in the corpus (log: $log)"
  fi
done
echo "fuzz: $total executions in all"
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
