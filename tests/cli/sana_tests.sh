#!/usr/bin/env bash
# End-to-end tests of Sana (recipe sana) as a Sana user calls it: `tune infer PIPELINE_DIR --prompt ...` on a tiny
# random diffusers SanaPipeline, compared with SanaPipeline's own samples (scripts/make_sana_pipeline_fixture.py,
# run by CTest into $TUNE_BUILD/sana_fixture); gradient-enabled sampling with checkpointing on and off (measured
# peaks, the memory plan); and the errors of bad input.
# Usage: sana_tests.sh CASE (environment as cli_tests.sh, whose helpers it uses).
set -uo pipefail
CLI_TESTS_AS_LIBRARY=1 source "$(dirname "$0")/cli_tests.sh"
FIXTURE="$TUNE_BUILD/sana_fixture"
PIPELINE="$FIXTURE/pipeline"

skip_without_fixture() {
  if [ -f "$FIXTURE/SKIPPED" ]; then echo "SKIP: $(cat "$FIXTURE/SKIPPED")"; exit 77; fi
  [ -d "$PIPELINE" ] || fail "no fixture pipeline at $PIPELINE"
}

# compare_case OUT_PREFIX CASE: tune's two samples (OUT_PREFIX-0/1.safetensors) against SanaPipeline's final latents
# (relative to their largest magnitude) and decoded images (clamped to [-1, 1], as tune writes them), within 1e-4.
compare_case() {
  "$PYTHON" - "$1" "$FIXTURE/expected.safetensors" "$2" "$TUNE_SOURCE/scripts" <<'PY' || fail "samples of case $2 differ"
import sys, torch
sys.path.insert(0, sys.argv[4])
import safetensors_io
expected = safetensors_io.load(sys.argv[2])
ours = [safetensors_io.load(f"{sys.argv[1]}-{i}.safetensors") for i in (0, 1)]
latents = torch.cat([o["latents"] for o in ours]).double()
theirs = expected[f"{sys.argv[3]}.latents"].double()
assert latents.shape == theirs.shape, (latents.shape, theirs.shape)
diff = ((latents - theirs).abs().max() / theirs.abs().max()).item()
image = torch.stack([o["image"] for o in ours]).double()
image_diff = (image - expected[f"{sys.argv[3]}.image"].double().clamp(-1, 1)).abs().max().item()
print(f"case {sys.argv[3]}: latents max relative difference {diff:.2e}, images max difference {image_diff:.2e}")
assert diff <= 1e-4 and image_diff <= 1e-4, (diff, image_diff)
PY
}

case_sana_pipeline_matches_diffusers() {
  skip_without_fixture
  local out="$WORK/sana-parity"; rm -rf "$out"; mkdir -p "$out"
  printf '%s\n' "a red circle at the top left" "A Blue Square, bottom right  " > "$out/prompts.txt"
  # SanaPipeline's defaults: its DPM-Solver++ scheduler, the complex human instruction, guidance 4.5.
  expect_exit 0 "$TUNE" infer "$PIPELINE" --prompts-file "$out/prompts.txt" --steps 6 --height 64 --width 64 \
    --noise "$FIXTURE/noise.safetensors" --out "$out/dpm.safetensors" --no-grad --json mixed_precision=no threads=2
  contains "$OUT" '"peak_mem_bytes"'
  contains "$ERR" "with the complex human instruction"
  contains "$ERR" "DPM-Solver++ 6 steps, cfg scale 4.5"
  compare_case "$out/dpm" dpm
  # FlowMatchEuler from another scheduler directory, a negative prompt, no instruction.
  expect_exit 0 "$TUNE" infer "$PIPELINE" --prompts-file "$out/prompts.txt" --steps 5 --cfg-scale 3 --height 64 \
    --width 64 --negative-prompt "blurry" --noise "$FIXTURE/noise.safetensors" --out "$out/euler.safetensors" \
    --no-grad mixed_precision=no threads=2 model.scheduler="$FIXTURE/euler_scheduler" \
    sampling.complex_human_instruction=false
  contains "$ERR" "flow-matching Euler 5 steps"
  compare_case "$out/euler" euler
}

# peak_of JSON_LINE: the measured peak bytes of a --json summary.
peak_of() { "$PYTHON" -c "import json,sys; print(json.loads(sys.argv[1].strip().splitlines()[-1])['peak_mem_bytes'])" "$1"; }

case_sana_grad_inference_checkpointing() {
  skip_without_fixture
  local out="$WORK/sana-grad"; rm -rf "$out"; mkdir -p "$out"
  # 256 x 256 pixels: 64 x 64 latents, 4096 tokens a sample (8192 with guidance), so the activations dominate.
  local args=(--prompt "a red circle" --steps 2 --height 256 --width 256 mixed_precision=no threads=2 --grad --json)
  expect_exit 0 "$TUNE" infer "$PIPELINE" "${args[@]}" --out "$out/full.safetensors" gradient_checkpointing=true
  contains "$ERR" "2/2 blocks"
  contains "$OUT" '"grad":true'
  local full; full=$(peak_of "$OUT")
  expect_exit 0 "$TUNE" infer "$PIPELINE" "${args[@]}" --out "$out/off.safetensors" gradient_checkpointing=false
  contains "$ERR" "gradient checkpointing: off"
  local off; off=$(peak_of "$OUT")
  echo "infer --grad peak: checkpointing full $full bytes, off $off bytes"
  local policy precision
  for policy in true false; do
    for precision in no bf16; do
      expect_exit 0 "$TUNE" infer "$PIPELINE" "${args[@]/mixed_precision=no/mixed_precision=$precision}" \
        --out "$out/plan.safetensors" gradient_checkpointing=$policy
      contains "$ERR" "memory plan while denoising"
      "$PYTHON" -c "
import json, sys
d = json.loads(sys.argv[1]); plan = d['weights_bytes'] + d['activations_estimate_bytes']; ratio = plan / d['peak_mem_bytes']
print(f'plan vs measured (checkpointing $policy, mixed_precision $precision): {plan} / {d[\"peak_mem_bytes\"]} = {ratio:.3f}')
assert 0.9 <= ratio <= 1.1, ratio" "$OUT" || fail "the memory plan of infer --grad is more than 10% off the measured peak"
    done
  done
  "$PYTHON" -c "import sys; f, o = int(sys.argv[1]), int(sys.argv[2]); assert f < 0.8 * o, (f, o)" "$full" "$off" \
    || fail "checkpointing did not lower the measured peak of infer --grad (full $full, off $off)"
  # A PNG sample, then guidance toward it as the reference image (DC-AE-encoded into the objective).
  expect_exit 0 "$TUNE" infer "$PIPELINE" --prompt "a red circle" --steps 2 --height 64 --width 64 --no-grad \
    --out "$out/ref.png" threads=2
  "$PYTHON" -c "import sys; assert open(sys.argv[1], 'rb').read(8) == b'\x89PNG\r\n\x1a\n'" "$out/ref.png" \
    || fail "--out ref.png did not write a PNG file"
  expect_exit 0 "$TUNE" infer "$PIPELINE" --prompt "a red circle" --steps 2 --height 64 --width 64 --grad \
    --out "$out/guided.png" threads=2 guidance.reference="$out/ref.png" guidance.reference_weight=2
  contains "$ERR" "reference image (weight 2), spatial smoothness (weight 0.1)"
}

case_sana_input_errors() {
  skip_without_fixture
  local out="$WORK/sana-errors"; rm -rf "$out"; mkdir -p "$out"
  expect_exit 2 "$TUNE" infer "$PIPELINE" --height 64
  contains "$ERR" "--prompt"
  expect_exit 2 "$TUNE" infer "$PIPELINE" --prompt "a circle" --frames 4
  contains "$ERR" "--frames applies to video recipes"
  expect_exit 2 "$TUNE" infer "$PIPELINE" --prompt "a circle" --height 66
  contains "$ERR" "--height 66 must be a multiple of 4"
  expect_exit 1 "$TUNE" infer "$PIPELINE" --prompt "a circle" model.vae="$out/nowhere"
  contains "$ERR" "nowhere"
  # A scheduler that is not a flow-matching one; a pipeline class tune does not implement.
  cp -r "$PIPELINE" "$out/pipeline"
  "$PYTHON" - "$out/pipeline/scheduler/scheduler_config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1])); config.update(use_flow_sigmas=False, prediction_type="epsilon")
json.dump(config, open(sys.argv[1], "w"))
PY
  expect_exit 1 "$TUNE" infer "$out/pipeline" --prompt "a circle" --height 64 --width 64 --no-grad
  contains "$ERR" "scheduler_config.json"
  contains "$ERR" "flow"
  "$PYTHON" - "$out/pipeline/model_index.json" <<'PY'
import json, sys
index = json.load(open(sys.argv[1])); index["_class_name"] = "SanaSprintPipeline"; json.dump(index, open(sys.argv[1], "w"))
PY
  expect_exit 1 "$TUNE" infer "$out/pipeline" --prompt "a circle"
  contains "$ERR" "SanaSprintPipeline"
  contains "$ERR" "SanaPipeline"
}

case="${1:?case name}"
mkdir -p "$WORK"
"case_$case"
echo "PASS: $case"
