#!/usr/bin/env bash
# End-to-end tests of Latte's sampling from official checkpoints: conversion of an official-format .pt with
# scripts/convert_latte_checkpoint.py, sampling from it, the official timestep spacing, and the sampling progress
# line. No video decoding: the model samples in its own space (no VAE) and writes .safetensors, so these run on
# builds without FFmpeg too.
# Usage: latte_tests.sh CASE (environment as cli_tests.sh, whose helpers it uses).
set -uo pipefail
CLI_TESTS_AS_LIBRARY=1 source "$(dirname "$0")/cli_tests.sh"
CONVERT="$TUNE_SOURCE/scripts/convert_latte_checkpoint.py"

# official_checkpoint PT: a tiny random class-conditional Latte (make_latte_fixture.py's config and official
# parameter names: input 8, patch 2, 4 channels, hidden 32, depth 4, 4 heads, 4 frames, 3 classes, learn_sigma)
# saved as the official train.py does: the EMA state dict under "ema" with a DDP "module." prefix on every key,
# plus a different "model" state and the script's argparse Namespace under "args".
official_checkpoint() {
  "$PYTHON" - "$1" "$TUNE_SOURCE/scripts" <<'PY' || fail "making the official-format checkpoint"
import argparse, sys
import torch
sys.path.insert(0, sys.argv[2])
import make_latte_fixture as fixture
weights = fixture.make_weights(fixture.CONFIG, torch.Generator().manual_seed(13))
ema = {"module." + k: v.to(torch.float32) for k, v in weights.items()}
model = {k: v + 1.0 for k, v in ema.items()}
torch.save({"ema": ema, "model": model, "args": argparse.Namespace(model="Latte-S/2", num_frames=4)}, sys.argv[1])
PY
}

# convert_tiny PT OUT_DIR: the converter with the tiny size given as overrides of a preset.
convert_tiny() {
  expect_exit 0 "$PYTHON" "$CONVERT" "$1" "$2" --variant Latte-S/2 --hidden-size 32 --depth 4 --num-heads 4 \
    --input-size 8 --num-frames 4 --num-classes 3 --extras 2
}

# sampling_recipe FILE MODEL_DIR OUTPUT_DIR: sampling settings for the converted weights (no VAE: pixel-free
# sampling in the model's 4-channel space). data.path is required by the schema but never read by tune infer.
sampling_recipe() {
  cat > "$1" <<YAML
recipe: latte
output_dir: $3
seed: 5
threads: 2
mixed_precision: "no"
model:
  path: $2
data:
  path: $WORK/no-videos
  num_frames: 4
  image_size: 8
sampling:
  sampler: ddim
  steps: 7
YAML
}

# check_sample FILE LABEL: a [4 frames, 4 channels, 8, 8] float video in [-1, 1] with its label
check_sample() {
  "$PYTHON" - "$1" "$2" "$TUNE_SOURCE/scripts" <<'PY' || fail "sample $1"
import sys
sys.path.insert(0, sys.argv[3])
import safetensors_io
d = safetensors_io.load(sys.argv[1])
v = d["video"]
assert list(v.shape) == [4, 4, 8, 8], v.shape
assert bool(v.isfinite().all()) and float(v.abs().max()) <= 1.0, v
assert int(d["label"][0]) == int(sys.argv[2]), d["label"]
assert float(v.std()) > 0, "constant sample"
PY
}

case_latte_official_checkpoint_converts_and_samples() {
  local dir="$WORK/latte-official" conv="$WORK/latte-official/converted"
  rm -rf "$dir" && mkdir -p "$dir"
  official_checkpoint "$dir/official.pt"
  convert_tiny "$dir/official.pt" "$conv"
  contains "$OUT" "latte_config.json"
  [ -s "$conv/model.safetensors" ] && [ -s "$conv/latte_config.json" ] || fail "converter outputs missing"
  [ ! -e "$conv/config.json" ] || fail "the converter wrote config.json (an LLM directory's name)"
  # the EMA weights, without the prefix, bit for bit; the custom size drops the misleading variant name
  "$PYTHON" - "$dir/official.pt" "$conv" "$TUNE_SOURCE/scripts" <<'PY' || fail "converted weights"
import argparse, json, sys
import torch
sys.path.insert(0, sys.argv[3])
import safetensors_io
torch.serialization.add_safe_globals([argparse.Namespace])
ema = torch.load(sys.argv[1], weights_only=True)["ema"]
got = safetensors_io.load(sys.argv[2] + "/model.safetensors")
assert sorted(got) == sorted(k[len("module."):] for k in ema), sorted(got)
for k, v in ema.items():
    assert torch.equal(got[k[len("module."):]], v), k
cfg = json.load(open(sys.argv[2] + "/latte_config.json"))
assert cfg["model_type"] == "latte" and "variant" not in cfg, cfg
assert (cfg["hidden_size"], cfg["depth"], cfg["num_heads"], cfg["patch_size"]) == (32, 4, 4, 2), cfg
PY
  # the converted directory itself is recognised as Latte's (not an LLM's) and points to model.path
  expect_exit 2 "$TUNE" infer "$conv" --class 1
  contains "$ERR" "holds Latte weights"; contains "$ERR" "model.path: $conv"
  # DDIM with 7 steps: not a divisor of 1000, impossible with "ddim7", fine with the official spacing
  sampling_recipe "$dir/sample.yaml" "$conv" "$dir/run"
  expect_exit 0 "$TUNE" infer "$dir/sample.yaml" --class 1 --sampler ddim --steps 7 --out "$dir/ddim.safetensors" --no-grad
  contains "$ERR" "loaded"; contains "$ERR" "$conv/model.safetensors"; contains "$ERR" "with ddim 7 steps"
  check_sample "$dir/ddim.safetensors" 1
  # DDPM, gradient-guided (temporal smoothness), class 2
  expect_exit 0 "$TUNE" infer "$dir/sample.yaml" --class 2 --sampler ddpm --steps 7 --out "$dir/ddpm.safetensors" --grad
  check_sample "$dir/ddpm.safetensors" 2
  # a directory from the older converter (config.json): a clear error naming the fix; converting again repairs it
  mkdir -p "$dir/old" && cp "$conv/model.safetensors" "$dir/old/" && cp "$conv/latte_config.json" "$dir/old/config.json"
  expect_exit 1 "$TUNE" infer "$dir/sample.yaml" --class 1 model.path="$dir/old" --out "$dir/x.safetensors"
  contains "$ERR" "no latte_config.json"; contains "$ERR" "rename it to latte_config.json"
  convert_tiny "$dir/official.pt" "$dir/old"
  [ -s "$dir/old/latte_config.json" ] && [ ! -e "$dir/old/config.json" ] || fail "reconversion left config.json"
  expect_exit 0 "$TUNE" infer "$dir/sample.yaml" --class 1 model.path="$dir/old" --out "$dir/again.safetensors" --no-grad
  cmp -s "$dir/ddim.safetensors" "$dir/again.safetensors" || fail "the same weights and seed sampled differently"
}

# Sampling reports step i/N, the model's timestep, elapsed time and ETA, never a loss. The timesteps are Latte's
# official spacing (space_timesteps(1000, [N])): at 50 steps 999, 979, 958, ... (step 10 at 816), where "ddim50"
# would give 980, 960, ... (step 10 at 800); at 7 steps 999, 832, 666, 500, 333, 166, 0.
case_latte_sampling_progress_shows_steps() {
  local dir="$WORK/latte-progress"
  rm -rf "$dir" && mkdir -p "$dir"
  official_checkpoint "$dir/official.pt"
  convert_tiny "$dir/official.pt" "$dir/converted"
  sampling_recipe "$dir/sample.yaml" "$dir/converted" "$dir/run"
  local sampler
  for sampler in ddim ddpm; do
    expect_exit 0 "$TUNE" infer "$dir/sample.yaml" --class 0 --sampler $sampler --steps 50 --out "$dir/$sampler.safetensors" --no-grad
    ! grep -qiw nan <<<"$ERR" || fail "$sampler sampling printed nan: $ERR"
    ! grep -q "loss" <<<"$ERR" || fail "$sampler sampling printed a loss: $ERR"
    contains "$ERR" "step 10/50 (20.0%) | timestep 816 | elapsed "
    contains "$ERR" "step 50/50 (100.0%) | timestep 0 | elapsed "; contains "$ERR" "| ETA "
  done
  expect_exit 0 "$TUNE" infer "$dir/sample.yaml" --class 0 --out "$dir/seven.safetensors" --no-grad
  local t step=0
  for t in 999 832 666 500 333 166 0; do
    step=$((step + 1))
    contains "$ERR" "step $step/7 ($(awk "BEGIN { printf \"%.1f\", 100 * $step / 7 }")%) | timestep $t |"
  done
}

case="${1:?case name}"
mkdir -p "$WORK"
"case_$case"
echo "PASS: $case"
