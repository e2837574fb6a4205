#!/usr/bin/env bash
# End-to-end tests of text-to-video Latte (recipe latte_t2v) as a Latte-1 user calls it: `tune infer PIPELINE_DIR
# --prompt ...` on a tiny Latte-1-shaped diffusers pipeline, compared with diffusers' own LattePipeline samples
# (scripts/make_latte_t2v_pipeline_fixture.py, run by CTest into $TUNE_BUILD/latte_t2v_fixture); gradient-enabled
# sampling with checkpointing on and off (measured peaks); and the errors of bad input.
# Usage: latte_t2v_tests.sh CASE (environment as cli_tests.sh, whose helpers it uses).
set -uo pipefail
CLI_TESTS_AS_LIBRARY=1 source "$(dirname "$0")/cli_tests.sh"
FIXTURE="$TUNE_BUILD/latte_t2v_fixture"
PIPELINE="$FIXTURE/pipeline"
EXPECTED="$FIXTURE/expected"

skip_without_fixture() {
  if [ -f "$FIXTURE/SKIPPED" ]; then echo "SKIP: $(cat "$FIXTURE/SKIPPED")"; exit 77; fi
  [ -d "$PIPELINE" ] || fail "no fixture pipeline at $PIPELINE"
}

setting() { "$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$EXPECTED/settings.json" "$1"; }

# compare_latents OURS.safetensors EXPECTED.safetensors TOLERANCE: tune's final latents (diffusers' layout) against
# diffusers' within TOLERANCE relative to the largest magnitude; prints the measured difference.
compare_latents() {
  "$PYTHON" - "$@" "$TUNE_SOURCE/scripts" <<'PY' || fail "latents of $1 differ from $2"
import sys
sys.path.insert(0, sys.argv[4])
import safetensors_io
ours = safetensors_io.load(sys.argv[1])["latents"].double()
theirs = safetensors_io.load(sys.argv[2])["latents"].double()
assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
diff = ((ours - theirs).abs().max() / theirs.abs().max()).item()
print(f"latents: max relative difference {diff:.2e}")
assert diff <= float(sys.argv[3]), diff
PY
}

# The sampling settings of the fixture as tune infer flags, fp32 on two threads; $1 replaces the guidance scale.
sample_args() {
  echo --steps "$(setting steps)" --cfg-scale "${1:-$(setting cfg_scale)}" --frames "$(setting frames)" \
    --height "$(setting height)" --width "$(setting width)" mixed_precision=no threads=2
}

case_latte_t2v_pipeline_matches_diffusers() {
  skip_without_fixture
  local out="$WORK/t2v-parity"; rm -rf "$out"; mkdir -p "$out"
  local prompt; prompt=$(setting prompt)
  # One prompt with classifier-free guidance from diffusers' noise: latents and decoded frames.
  expect_exit 0 "$TUNE" infer "$PIPELINE" --prompt "$prompt" $(sample_args) --noise "$EXPECTED/noise.safetensors" \
    --out "$out/one.safetensors" --no-grad --json
  contains "$OUT" '"peak_mem_bytes"'
  contains "$ERR" "freed before denoising"
  compare_latents "$out/one.safetensors" "$EXPECTED/one_prompt.safetensors" 1e-4
  "$PYTHON" - "$out/one.safetensors" "$EXPECTED/one_prompt.safetensors" "$TUNE_SOURCE/scripts" <<'PY' || fail "decoded frames"
import sys
sys.path.insert(0, sys.argv[3])
import safetensors_io
ours = safetensors_io.load(sys.argv[1])["video"].double()          # [F, 3, H, W] in [-1, 1]
theirs = safetensors_io.load(sys.argv[2])["video"].double()        # diffusers' [F, 3, H, W] in [0, 1]
diff = ((ours / 2 + 0.5).clamp(0, 1) - theirs).abs().max().item()
print(f"frames: max difference {diff:.2e}")
assert ours.shape == theirs.shape and diff <= 1e-4, (ours.shape, theirs.shape, diff)
PY
  # --seed draws the noise as torch.randn with a torch.Generator seeded alike, in diffusers' layout.
  expect_exit 0 "$TUNE" infer "$PIPELINE" --prompt "$prompt" $(sample_args) --seed "$(setting seed)" \
    --out "$out/seeded.safetensors" --no-grad
  compare_latents "$out/seeded.safetensors" "$EXPECTED/seeded.safetensors" 1e-4
  # Two prompts (padded embedding rows zeroed) and no guidance.
  "$PYTHON" -c "import json,sys; [print(json.dumps(p)) for p in json.load(open(sys.argv[1]))['prompts2']]" \
    "$EXPECTED/settings.json" > "$out/prompts.txt"
  expect_exit 0 "$TUNE" infer "$PIPELINE" --prompts-file "$out/prompts.txt" $(sample_args) \
    --noise "$EXPECTED/noise2.safetensors" --out "$out/two.safetensors" --no-grad
  "$PYTHON" - "$out" "$EXPECTED/two_prompts.safetensors" "$TUNE_SOURCE/scripts" <<'PY' || fail "two prompts differ"
import sys, torch
sys.path.insert(0, sys.argv[3])
import safetensors_io
ours = torch.cat([safetensors_io.load(f"{sys.argv[1]}/two-{i}.safetensors")["latents"] for i in (0, 1)]).double()
theirs = safetensors_io.load(sys.argv[2])["latents"].double()
diff = ((ours - theirs).abs().max() / theirs.abs().max()).item()
print(f"two prompts: max relative difference {diff:.2e}")
assert ours.shape == theirs.shape and diff <= 1e-4, (ours.shape, theirs.shape, diff)
PY
  expect_exit 0 "$TUNE" infer "$PIPELINE" --prompt "$prompt" $(sample_args 1) \
    --noise "$EXPECTED/noise.safetensors" --out "$out/no_cfg.safetensors" --no-grad
  compare_latents "$out/no_cfg.safetensors" "$EXPECTED/no_cfg.safetensors" 1e-4
}

# peak_of JSON_LINE: the measured peak bytes of a --json summary.
peak_of() { "$PYTHON" -c "import json,sys; print(json.loads(sys.argv[1].strip().splitlines()[-1])['peak_mem_bytes'])" "$1"; }

case_latte_t2v_grad_inference_checkpointing() {
  skip_without_fixture
  local out="$WORK/t2v-grad"; rm -rf "$out"; mkdir -p "$out"
  # 8 frames of 32 x 32 pixels (16 x 16 latents, 64 patches a frame): the activations dominate the tiny weights.
  local args=(--prompt "a red square moving left" --steps 2 --frames 8 --height 32 --width 32 mixed_precision=no
              threads=2 --grad --json)
  expect_exit 0 "$TUNE" infer "$PIPELINE" "${args[@]}" --out "$out/full.safetensors" gradient_checkpointing=true
  contains "$ERR" "4/4 blocks (2 spatial, 2 temporal)"
  contains "$OUT" '"grad":true'
  local full; full=$(peak_of "$OUT")
  expect_exit 0 "$TUNE" infer "$PIPELINE" "${args[@]}" --out "$out/off.safetensors" gradient_checkpointing=false
  contains "$ERR" "gradient checkpointing: off"
  local off; off=$(peak_of "$OUT")
  echo "infer --grad peak: checkpointing full $full bytes, off $off bytes"
  "$PYTHON" -c "import sys; f, o = int(sys.argv[1]), int(sys.argv[2]); assert f < 0.8 * o, (f, o)" "$full" "$off" \
    || fail "checkpointing did not lower the measured peak of infer --grad (full $full, off $off)"
}

case_latte_t2v_input_errors() {
  skip_without_fixture
  local out="$WORK/t2v-errors"; rm -rf "$out"; mkdir -p "$out"
  expect_exit 2 "$TUNE" infer "$PIPELINE" --frames 4
  contains "$ERR" "--prompt"
  expect_exit 2 "$TUNE" infer "$PIPELINE" --prompt "a square" --height 18
  contains "$ERR" "--height 18 must be a multiple of 4"
  expect_exit 2 "$TUNE" infer "$PIPELINE" --prompt "a square" --class 1
  contains "$ERR" "--class"
  # A component the recipe overrides with a missing directory; a pipeline whose scheduler tune does not implement.
  expect_exit 1 "$TUNE" infer "$PIPELINE" --prompt "a square" model.vae="$out/nowhere"
  contains "$ERR" "nowhere"
  cp -r "$PIPELINE" "$out/pipeline"
  "$PYTHON" - "$out/pipeline/scheduler/scheduler_config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1])); config["thresholding"] = True; json.dump(config, open(sys.argv[1], "w"))
PY
  expect_exit 1 "$TUNE" infer "$out/pipeline" --prompt "a square" --steps 2 --frames 2 --height 16 --width 16
  contains "$ERR" "scheduler_config.json"
  contains "$ERR" "thresholding"
  # Noise of the wrong shape names the file and the expected shape.
  expect_exit 1 "$TUNE" infer "$PIPELINE" --prompt "a square" --steps 2 --frames 3 --height 16 --width 16 \
    --noise "$EXPECTED/noise.safetensors" --out "$out/x.safetensors"
  contains "$ERR" "noise.safetensors"
  contains "$ERR" "[1, 4, 3, 8, 8]"
  # Text-to-video flags on an LLM recipe.
  write_recipe "$out/sft.yaml" "$out/sft-run"
  expect_exit 2 "$TUNE" infer "$out/sft.yaml" --prompt "hi" --frames 4
  contains "$ERR" "text-to-video"
}

case="${1:?case name}"
mkdir -p "$WORK"
"case_$case"
echo "PASS: $case"
