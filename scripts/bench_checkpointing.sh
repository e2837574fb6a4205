#!/usr/bin/env bash
# Activation checkpointing benchmark: builds tune-bench if needed, runs every policy of every configuration in a
# fresh process (policies interleaved per configuration, so they share the machine's noise), runs the PyTorch
# reference (scripts/bench_pytorch_llama.py) beside tune for off and full, then prints Markdown tables and writes
# every result as JSON to --out.
#
#   scripts/bench_checkpointing.sh [--quick] [--out FILE.json] [--steps N] [--warmup W] [--repeat R]
#                                  [--threads T] [--policies "off full ..."] [--no-pytorch] [--build-dir DIR]
#                                  [--configs "LAYERS:SEQ ..."] [--compare LAYERS:SEQ] [--pytorch-compile]
#
# Default sweep (hidden 256, heads 4, intermediate 688, vocab 256, batch 1, bf16): depth 4/8/16/32 layers at seq
# 1024 and seq 256/512/1024/2048 at 8 layers; tune vs PyTorch at 8 layers, seq 1024. --quick: a small subset.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR="$ROOT/build-bench"
OUT=""
QUICK=0
STEPS=2
WARMUP=1
REPEAT=1
THREADS=2
POLICIES="off full every_k sqrt selective"
PYTORCH=1
PYTORCH_ARGS=()
CONFIGS=""
COMPARE=""
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}  # scripts/setup.sh: torch 2.13, the peer

usage() { sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --out) OUT="$2"; shift ;;
    --steps) STEPS="$2"; shift ;;
    --warmup) WARMUP="$2"; shift ;;
    --repeat) REPEAT="$2"; shift ;;
    --threads) THREADS="$2"; shift ;;
    --policies) POLICIES="$2"; shift ;;
    --no-pytorch) PYTORCH=0 ;;
    --pytorch-compile) PYTORCH_ARGS=(--compile) ;;  # the peer under torch.compile (inductor) instead of eager
    --build-dir) BUILD_DIR="$2"; shift ;;
    --configs) CONFIGS="$2"; shift ;;
    --compare) COMPARE="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_checkpointing.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ -n "$OUT" ]] || OUT="$ROOT/build-bench/bench_checkpointing$([[ $QUICK == 1 ]] && echo -quick || true).json"

# Building is a no-op when tune-bench is up to date.
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  # Against the LibTorch of the torch wheel in .venv, as scripts/build.sh configures build/.
  torch_prefix=$("$ROOT/.venv/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" >/dev/null
fi
cmake --build "$BUILD_DIR" --target tune-bench -j2 >&2
BENCH="$BUILD_DIR/apps/bench/tune-bench"

MODEL_ARGS=(--hidden 256 --heads 4 --kv-heads 4 --intermediate 688 --vocab 256 --batch 1 --dtype bf16
            --threads "$THREADS" --k 2)
if [[ $QUICK == 1 ]]; then
  DEFAULT_CONFIGS="2:256 4:256 8:256 4:512"   # layers:seq
  DEFAULT_COMPARE="4:256"
else
  DEFAULT_CONFIGS="4:1024 8:1024 16:1024 32:1024 8:256 8:512 8:2048"
  DEFAULT_COMPARE="8:1024"
fi
CONFIGS=${CONFIGS:-$DEFAULT_CONFIGS}
COMPARE=${COMPARE:-$DEFAULT_COMPARE}

RAW=$(mktemp "${TMPDIR:-/tmp}/bench_checkpointing.XXXXXX.jsonl")
trap 'rm -f "$RAW"' EXIT

# run_one TOOL POLICY LAYERS SEQ: one fresh process, its JSON line appended to $RAW (or an error line).
run_one() {
  local tool=$1 policy=$2 layers=$3 seq=$4 line rc=0
  local args=("${MODEL_ARGS[@]}" --policy "$policy" --layers "$layers" --seq "$seq" --steps "$STEPS" --warmup "$WARMUP")
  if [[ $tool == tune ]]; then
    line=$("$BENCH" "${args[@]}" 2>/dev/null | tail -n 1) || rc=$?
  else
    line=$("$PYTHON" "$ROOT/scripts/bench_pytorch_llama.py" "${args[@]}" "${PYTORCH_ARGS[@]}" 2>/dev/null | tail -n 1) || rc=$?
  fi
  if [[ -z "$line" || "${line:0:1}" != "{" ]]; then
    line="{\"tool\": \"$tool\", \"policy\": \"$policy\", \"layers\": $layers, \"seq\": $seq, \"error\": \"exit code $rc, no JSON\"}"
  fi
  echo "$line" >>"$RAW"
  echo "  $tool $policy L=$layers T=$seq: $(echo "$line" | "$PYTHON" -c 'import json,sys; r=json.load(sys.stdin); print(r.get("error") or "step min %.2fs act %s rss %.0f MiB" % (r.get("step_s_min", r["step_s"]), "%.1f MiB" % (r["activation_bytes"]/2**20) if r.get("activation_bytes") is not None else "-", r["rss_delta_bytes"]/2**20))')" >&2
}

START=$(date +%s)
for ((round = 0; round < REPEAT; round++)); do
  for config in $CONFIGS; do
    layers=${config%%:*}; seq=${config##*:}
    echo "round $((round + 1))/$REPEAT: $layers layers, seq $seq" >&2
    for policy in $POLICIES; do
      run_one tune "$policy" "$layers" "$seq"
      # The PyTorch reference runs right after tune's same policy: adjacent processes see the same load.
      if [[ $PYTORCH == 1 && $config == "$COMPARE" && ( $policy == off || $policy == full ) ]]; then
        run_one pytorch "$policy" "$layers" "$seq"
      fi
    done
  done
done
echo "sweep took $(( $(date +%s) - START )) s" >&2

mkdir -p "$(dirname "$OUT")"
"$PYTHON" "$ROOT/scripts/bench_checkpointing_report.py" "$RAW" --out "$OUT" --compare "$COMPARE"
echo "results: $OUT" >&2
