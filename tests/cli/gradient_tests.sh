#!/usr/bin/env bash
# End-to-end tests of training.compact_gradients (train/compact_gradients.h): gradients held as exact bf16 copies
# give the run of fp32 gradients bit for bit (losses, weights, EMA, optimizer moments), with a lower measured peak,
# and the log says how many were held; the key's errors name it. Latte trains on random latents (no FFmpeg).
# Usage: gradient_tests.sh CASE (environment as cli_tests.sh, whose helpers it uses).
set -uo pipefail
CLI_TESTS_AS_LIBRARY=1 source "$(dirname "$0")/cli_tests.sh"
COMPARE="$TUNE_SOURCE/tests/cli/compare_runs.py"

latte_latents_recipe() {  # latte_latents_recipe FILE OUTPUT_DIR LATENTS
  cat > "$1" <<YAML
recipe: latte
output_dir: $2
seed: 4
threads: 2
mixed_precision: bf16
gradient_checkpointing: true
model:
  variant: Latte-S/2
  hidden_size: 64
  depth: 4
  num_heads: 4
  patch_size: 2
  vae: $TUNE_SOURCE/tests/fixtures/vae
data:
  path: $3
  latents: $3
  num_frames: 4
  frame_interval: 1
  image_size: 32
  flip: false
training:
  batch_size: 2
  max_steps: 3
  clip_grad_norm: 0.05
logging:
  every: 1
checkpoint:
  every: 3
  keep_last: 0
YAML
}

peak_bytes() { "$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))['peak_bytes'])" "$1/memory.json"; }

case_compact_gradients_latte_same_run_less_memory() {
  local dir="$WORK/compact-latte"
  rm -rf "$dir" && mkdir -p "$dir"
  "$PYTHON" "$TUNE_SOURCE/scripts/make_random_latents.py" --out "$dir/latents" --vae "$TUNE_SOURCE/tests/fixtures/vae" \
    --image-size 32 --num-frames 4 --videos-per-class 2 >/dev/null || fail "latents"
  latte_latents_recipe "$dir/latte.yaml" "$dir/run" "$dir/latents"
  # auto (the default) holds them here: one process on the CPU, bf16 autocast, checkpointing on.
  expect_exit 0 "$TUNE" train "$dir/latte.yaml" output_dir="$dir/auto"
  contains "$ERR" "tensors held as exact bf16 copies (training.compact_gradients)"
  expect_exit 0 "$TUNE" train "$dir/latte.yaml" output_dir="$dir/fp32" training.compact_gradients=false
  ! grep -q "held as exact" <<<"$ERR" || fail "compact_gradients=false still held gradients: $ERR"
  # Clipping applies at every step (clip_grad_norm 0.05): the held gradients are scaled as the fp32 ones.
  "$PYTHON" "$COMPARE" "$dir/auto" "$dir/fp32" --step 3 --tol 0 \
    --files model.safetensors ema.safetensors optimizer.safetensors || fail "compact gradients changed the run"
  # auto with gradient accumulation: off (the second micro-batch makes every gradient fp32 again).
  expect_exit 0 "$TUNE" train "$dir/latte.yaml" output_dir="$dir/accumulating" training.gradient_accumulation_steps=2 \
    training.batch_size=1 training.max_steps=1 checkpoint.every=0
  ! grep -q "held as exact" <<<"$ERR" || fail "auto held gradients under gradient accumulation: $ERR"
  # metrics.jsonl records the held copies' measured bytes each step: nearly every Latte gradient fits, so about half
  # of the trained weights' fp32 bytes (AdamW keeps 8 a weight), never more; none without the store.
  "$PYTHON" - "$dir/auto" "$dir/fp32" <<'PY' || fail "gradients_held_bytes in metrics.jsonl"
import json, sys
auto, fp32 = ([json.loads(l) for l in open(f"{run}/metrics.jsonl") if l.strip()] for run in sys.argv[1:3])
weights = json.load(open(f"{sys.argv[1]}/memory.json"))["optimizer_state_bytes"] // 2
held = [r["gradients_held_bytes"] for r in auto if "loss" in r]
assert held and all(0.95 * weights / 2 <= h <= weights / 2 for h in held), (held, weights)
assert not any("gradients_held_bytes" in r for r in fp32)
PY
  local compact plain
  compact=$(peak_bytes "$dir/auto"); plain=$(peak_bytes "$dir/fp32")
  echo "measured peak: compact gradients $compact bytes, fp32 gradients $plain bytes"
  [ "$compact" -lt "$plain" ] || fail "compact gradients did not lower the measured peak ($compact >= $plain)"
}

# SFT (full fine-tuning, bf16, checkpointing): the same losses and weights bit for bit; the embedding's gradient (a
# sum of contributions taken in fp32) stays fp32, so not every tensor is held.
case_compact_gradients_sft_same_run() {
  rm -rf "$WORK/runs/compact-sft-"{on,off}
  local mode
  for mode in on off; do
    write_recipe "$WORK/compact-sft.yaml" "$WORK/runs/compact-sft-$mode"
    expect_exit 0 "$TUNE" train "$WORK/compact-sft.yaml" mixed_precision=bf16 training.max_steps=4 checkpoint.every=4 \
      training.clip_grad_norm=0.1 data.eval_fraction=0.0 training.compact_gradients=$([ $mode = on ] && echo true || echo false)
  done
  "$PYTHON" "$COMPARE" "$WORK/runs/compact-sft-on" "$WORK/runs/compact-sft-off" --step 4 --tol 0 \
    || fail "compact gradients changed the SFT run"
}

case_compact_gradients_config_errors() {
  write_recipe "$WORK/compact-errors.yaml" "$WORK/runs/compact-errors"
  expect_exit 2 "$TUNE" validate "$WORK/compact-errors.yaml" training.compact_gradients=maybe
  contains "$ERR" "training.compact_gradients"
  # true where it cannot apply: named, with the reason, before anything is written.
  expect_exit 2 "$TUNE" train "$WORK/compact-errors.yaml" training.compact_gradients=true mixed_precision=no
  contains "$ERR" "training.compact_gradients"; contains "$ERR" "only bf16 autocast"
  [ ! -e "$WORK/runs/compact-errors/checkpoints" ] || fail "a refused run wrote checkpoints"
}

case="${1:?case name}"
mkdir -p "$WORK"
"case_$case"
echo "PASS: $case"
