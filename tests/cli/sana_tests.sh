#!/usr/bin/env bash
# End-to-end tests of Sana (recipe sana) as a Sana user calls it: `tune infer PIPELINE_DIR --prompt ...` on a tiny
# random diffusers SanaPipeline, compared with SanaPipeline's own samples (scripts/make_sana_pipeline_fixture.py,
# run by CTest into $TUNE_BUILD/sana_fixture); gradient-enabled sampling with checkpointing on and off (measured
# peaks, the memory plan); training on captioned images (tune prepare against diffusers' own encode_prompt and
# AutoencoderDC, resume, sampling from the run, export, LoRA files that diffusers and PEFT load); and the errors of
# bad input.
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
  contains "$ERR" "no aspect-ratio table for a transformer of sample_size 8"
  compare_case "$out/euler" euler
  # Resolution binning, SanaPipeline's default: with sample_size 16 (the 512 table) 560 x 200 is generated at the
  # bin 832 x 288, decoded, then scaled and cropped back; equal to SanaPipeline(use_resolution_binning=True) within
  # 5e-4 (below).
  local binned=(--prompt "a red circle at the top left" --steps 2 --height 200 --width 560 --no-grad --json
                mixed_precision=no threads=2 model.transformer="$FIXTURE/binned_transformer")
  expect_exit 0 "$TUNE" infer "$PIPELINE" "${binned[@]}" --noise "$FIXTURE/binned_noise.safetensors" \
    --out "$out/binned.safetensors"
  contains "$ERR" "resolution binning: 560x200 is generated at 832x288 (aspect-ratio bin 0.35"
  contains "$ERR" "sampled 1 image(s) at 560x200 (generated at 832x288)"
  contains "$OUT" '"generated_height":288'
  "$PYTHON" - "$out/binned.safetensors" "$FIXTURE/expected.safetensors" "$TUNE_SOURCE/scripts" <<'PY' || fail "binned sample"
import sys
sys.path.insert(0, sys.argv[3])
import safetensors_io
ours = safetensors_io.load(sys.argv[1])
image = (ours["image"].double() / 2 + 0.5).clamp(0, 1)      # tune's [-1, 1] -> the pipeline's [0, 1]
theirs = safetensors_io.load(sys.argv[2])["binned.image"][0].double()
assert image.shape == theirs.shape == (3, 200, 560), (image.shape, theirs.shape)
assert tuple(ours["latents"].shape) == (1, 8, 72, 208), ours["latents"].shape
diff = (image - theirs).abs().max().item()
print(f"binned: image max difference {diff:.2e}")
# 5e-4, not the 64 x 64 cases' 1e-4: every bin of the 512 table is ~262k pixels, 16k latent tokens here, whose
# fp32 linear-attention sums differ from PyTorch's in summation order by ~1e-4 relative after two steps (measured
# 1.2e-4 in the latents, 1.5e-4 at one pixel of 336,000, mean 1.3e-6)
assert diff <= 5e-4, diff
PY
  # Off: generated at the size asked (the noise's size then differs from the bin's: refused, naming the file).
  expect_exit 0 "$TUNE" infer "$PIPELINE" "${binned[@]}" --seed 3 --out "$out/unbinned.safetensors" \
    sampling.resolution_binning=false
  contains "$OUT" '"generated_height":200'
  expect_exit 1 "$TUNE" infer "$PIPELINE" "${binned[@]}" --noise "$FIXTURE/binned_noise.safetensors" \
    --out "$out/refused.safetensors" sampling.resolution_binning=false
  contains "$ERR" "binned_noise.safetensors"
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

# ---- training --------------------------------------------------------------------------------------------------

# make_captioned_images DIR: 6 PNG images of 32 x 32 pixels (a coloured square left or right on grey), each with its
# caption in NAME.txt beside it, and the same list as DIR/captions.jsonl.
make_captioned_images() {
  mkdir -p "$1"
  "$PYTHON" - "$1" <<'PY' || fail "image generation"
import json, os, sys
from PIL import Image, ImageDraw
out = sys.argv[1]
rows = []
for name, rgb in {"red": (220, 30, 30), "blue": (30, 60, 220), "green": (30, 180, 60)}.items():
    for side in ("left", "right"):
        image = Image.new("RGB", (32, 32), (200, 200, 200))
        x = 3 if side == "left" else 17
        ImageDraw.Draw(image).rectangle([x, 10, x + 11, 21], fill=rgb)
        image.save(os.path.join(out, f"{name}_{side}.png"))
        caption = f"A {name} square on the {side}"
        open(os.path.join(out, f"{name}_{side}.txt"), "w").write(caption + "\n")
        rows.append({"image": f"{name}_{side}.png", "caption": caption})
rows.sort(key=lambda row: row["image"])  # the folder layout's order (sorted paths): both number the images alike
with open(os.path.join(out, "captions.jsonl"), "w") as f:
    f.writelines(json.dumps(row) + "\n" for row in rows)
PY
}

# write_sana_recipe FILE OUT DATA LATENTS [extra lines...]: fp32 on two threads, 16 caption tokens, 4 steps of batch
# 2 with checkpoints at 2 and 4.
write_sana_recipe() {
  local file=$1 out=$2 data=$3 latents=$4; shift 4
  cat > "$file" <<YAML
recipe: sana
output_dir: $out
seed: 3
threads: 2
mixed_precision: "no"
model:
  path: $PIPELINE
data:
  path: $data
  latents: $latents
  image_size: 32
  caption_dropout: 0.25
training:
  batch_size: 2
  max_steps: 4
optimizer:
  lr: 1.0e-3
logging:
  every: 1
checkpoint:
  every: 2
sampling:
  max_text_tokens: 16
  steps: 3
  height: 32
  width: 32
YAML
  [ $# -eq 0 ] || printf '%s\n' "$@" >> "$file"
}

start_sana_training_case() {
  skip_without_fixture
  need_video  # images are decoded by FFmpeg
  export TUNE_CPU_ATTENTION=plain TUNE_CPU_GEMM=fp32
}

case_sana_prepare_train_resume_export() {
  start_sana_training_case
  local dir="$WORK/sana-train"
  local images="$dir/images" latents="$dir/latents" run="$dir/run" resumed="$dir/run-resumed"
  rm -rf "$dir"; mkdir -p "$dir"
  make_captioned_images "$images"
  write_sana_recipe "$dir/sana.yaml" "$run" "$images/captions.jsonl" "$latents" "ema:" "  decay: 0.5"
  # ---- prepare: Gemma 2 embeddings of every caption (with the complex human instruction) and of the empty prompt
  # (without), then DC-AE latents; against diffusers' own SanaPipeline.encode_prompt and AutoencoderDC.encode.
  expect_exit 0 "$TUNE" prepare "$dir/sana.yaml"
  contains "$ERR" "captions: 6 encoded (0 kept from before)"; contains "$ERR" "with the complex human instruction"
  contains "$ERR" "6 latent files written, 0 kept from before"
  "$PYTHON" - "$latents" "$images" "$PIPELINE" "$TUNE_SOURCE/scripts" <<'PY' || fail "prepared files against diffusers"
import inspect, json, os, sys
import numpy as np, torch
from PIL import Image
sys.path.insert(0, sys.argv[4])
import safetensors_io
from diffusers import SanaPipeline
latents, images, pipeline = sys.argv[1:4]
m = json.load(open(os.path.join(latents, "latents.json")))
assert m["complete"] and m["videos"] == 6 and m["num_frames"] == 1 and m["image_size"] == 32, m
assert (m["latent_channels"], m["latent_size"], m["text"]["max_tokens"], m["text"]["channels"]) == (8, 8, 16, 48), m
pipe = SanaPipeline.from_pretrained(pipeline, torch_dtype=torch.float32)
chi = inspect.signature(SanaPipeline.__call__).parameters["complex_human_instruction"].default
rows = [json.loads(line) for line in open(os.path.join(images, "captions.jsonl"))]
rel = lambda a, b: ((a.double() - b.double()).norm() / b.double().norm()).item()
worst_text = worst_latent = 0.0
for index in range(6):
    ours = safetensors_io.load(os.path.join(latents, "captions", f"{index:06d}.safetensors"))
    with torch.no_grad():
        text, mask, _, _ = pipe.encode_prompt(rows[index]["caption"], do_classifier_free_guidance=False, device="cpu",
                                              max_sequence_length=16, complex_human_instruction=chi)
    assert torch.equal(ours["text_mask"], mask[0].long()), (ours["text_mask"], mask[0])
    # The real tokens' rows: the padded ones are masked out of the cross-attention (a -10000 bias), so their values
    # never reach the model (tune's padding rows are not Gemma's).
    real = mask[0].bool()
    worst_text = max(worst_text, rel(ours["text"][real], text[0][real]))
    clip = safetensors_io.load(os.path.join(latents, "clips", f"{index:06d}.safetensors"))
    assert clip["label"].tolist() == [index] and list(clip["latent"].shape) == [1, 8, 8, 8], clip["latent"].shape
    pixels = torch.from_numpy(np.asarray(Image.open(os.path.join(images, rows[index]["image"])).convert("RGB")))
    x = (pixels.permute(2, 0, 1).float() / 255 - 0.5) / 0.5
    with torch.no_grad():
        reference = pipe.vae.encode(x.unsqueeze(0)).latent * pipe.vae.config.scaling_factor
    worst_latent = max(worst_latent, rel(clip["latent"], reference))
null = safetensors_io.load(os.path.join(latents, "null_caption.safetensors"))
with torch.no_grad():
    text, mask, _, _ = pipe.encode_prompt("", do_classifier_free_guidance=False, device="cpu", max_sequence_length=16,
                                          complex_human_instruction=None)
assert torch.equal(null["text_mask"], mask[0].long())
worst_text = max(worst_text, rel(null["text"][mask[0].bool()], text[0][mask[0].bool()]))
print(f"prepared against diffusers: caption embeddings {worst_text:.2e}, latents {worst_latent:.2e} (relative)")
assert worst_text < 1e-5 and worst_latent < 1e-5, (worst_text, worst_latent)
PY
  # ---- a second prepare keeps every file; the folder layout (NAME.txt beside each image) gives the same files
  local before; before=$(prepared_files "$latents")
  expect_exit 0 "$TUNE" prepare "$dir/sana.yaml"
  contains "$ERR" "captions: 0 encoded (6 kept from before)"; contains "$ERR" "0 latent files written, 6 kept from before"
  [ "$(prepared_files "$latents")" = "$before" ] || fail "a second tune prepare rewrote files"
  expect_exit 0 "$TUNE" prepare "$dir/sana.yaml" data.path="$images" --out "$dir/latents-folder"
  local f
  for f in null_caption.safetensors captions/000000.safetensors captions/000005.safetensors clips/000000.safetensors \
           clips/000005.safetensors; do
    cmp -s "$latents/$f" "$dir/latents-folder/$f" || fail "$f differs between the JSONL and the folder of .txt captions"
  done
  # ---- train 4 steps (checkpoints at 2 and 4) from the latents alone: flow matching, the loss falls
  expect_exit 0 "$TUNE" train "$dir/sana.yaml" training.max_steps=4
  contains "$ERR" "6 prepared images from $latents (caption dropout 0.25)"; contains "$ERR" "neither Gemma 2 nor DC-AE"
  contains "$ERR" "flow matching"; contains "$ERR" "shifted by 3"; contains "$ERR" "2/2 blocks"
  for f in model.safetensors ema.safetensors config.json optimizer.safetensors rng_state.safetensors trainer_state.json; do
    [ -s "$run/checkpoints/step-2/$f" ] && [ -s "$run/checkpoints/step-4/$f" ] || fail "missing $f"
  done
  cmp -s "$run/checkpoints/step-4/config.json" "$PIPELINE/transformer/config.json" || fail "checkpoint config.json"
  # ---- a run stopped after its step-2 checkpoint, resumed: steps 3-4 and the final weights bit for bit
  resume_from_step2 "$run" "$resumed"
  [ "$(losses "$run/metrics.jsonl")" = "$(losses "$resumed/metrics.jsonl")" ] || fail "resumed losses differ"
  for f in model.safetensors ema.safetensors; do
    cmp -s "$run/checkpoints/step-4/$f" "$resumed/checkpoints/step-4/$f" || fail "resumed $f differs"
  done
  # ---- sampling from the run (its EMA transformer) and the export diffusers loads
  expect_exit 0 "$TUNE" infer "$run" --prompt "a red square on the left" --out "$dir/sample.png" --no-grad
  contains "$ERR" "the run's newest checkpoint"; [ -s "$dir/sample.png" ] || fail "no sample written"
  expect_exit 0 "$TUNE" export "$run" --out "$dir/export"
  contains "$ERR" "SanaPipeline directory"
  "$PYTHON" - "$dir/export" "$run/checkpoints/step-4/ema.safetensors" "$TUNE_SOURCE/scripts" <<'PY' || fail "export"
import sys, torch
sys.path.insert(0, sys.argv[3])
import safetensors_io
from diffusers import SanaPipeline
pipe = SanaPipeline.from_pretrained(sys.argv[1], torch_dtype=torch.float32)
ema = safetensors_io.load(sys.argv[2])
state = pipe.transformer.state_dict()
assert set(state) == set(ema), sorted(set(state) ^ set(ema))[:5]
assert all(torch.equal(state[k], ema[k]) for k in ema)
print(f"SanaPipeline.from_pretrained(export): {len(ema)} transformer tensors equal the checkpoint's EMA weights")
PY
}

# make_mixed_aspect_images DIR: 10 captioned PNGs in DIR/captions.jsonl: 4 wide (64 x 32, ratio 0.5), 4 tall
# (32 x 64, 2.0), 2 nearly square (40 x 36, 0.9: the '0.88' key), each a different ellipse.
make_mixed_aspect_images() {
  mkdir -p "$1"
  "$PYTHON" - "$1" <<'PY' || fail "image generation"
import json, os, sys
from PIL import Image, ImageDraw
out, rows = sys.argv[1], []
shapes = [(64, 32)] * 4 + [(32, 64)] * 4 + [(40, 36)] * 2  # (width, height)
for index, (width, height) in enumerate(shapes):
    image = Image.new("RGB", (width, height), (200, 200, 200))
    box = [width // 4, height // 4, width // 4 + 9 + index, height // 4 + 7]
    ImageDraw.Draw(image).ellipse(box, fill=(30 * index, 90, 200))
    name = f"image{index}.png"
    image.save(os.path.join(out, name))
    rows.append({"image": name, "caption": f"a shape number {index}"})
with open(os.path.join(out, "captions.jsonl"), "w") as f:
    f.writelines(json.dumps(row) + "\n" for row in rows)
PY
}

# Multi-scale training (data.aspect_ratio_buckets): images of three shapes, each prepared at the official bucket
# nearest its aspect ratio (PixArt-Sigma's ASPECT_RATIO_2048_BIN keys from diffusers, sizes scaled to data.image_size
# and floored to the VAE factor x patch size), latents against the official transform (Pillow bicubic, CenterCrop)
# through diffusers' AutoencoderDC; training stacks one bucket a batch and resumes bit for bit.
case_sana_aspect_ratio_buckets() {
  start_sana_training_case
  local dir="$WORK/sana-buckets"
  local images="$dir/images" latents="$dir/latents" run="$dir/run" resumed="$dir/run-resumed"
  rm -rf "$dir"; mkdir -p "$dir"
  make_mixed_aspect_images "$images"
  write_sana_recipe "$dir/sana.yaml" "$run" "$images/captions.jsonl" "$latents" "ema:" "  decay: 0.5"
  sed -i 's|^  image_size: 32|  image_size: 32\n  aspect_ratio_buckets: true|' "$dir/sana.yaml"
  expect_exit 0 "$TUNE" prepare "$dir/sana.yaml"
  contains "$ERR" "each at the nearest of 40 aspect-ratio buckets of 32"; contains "$ERR" "10 latent files written"
  "$PYTHON" - "$latents" "$images" "$PIPELINE" <<'PY' || fail "bucketed latents against the official transform"
import json, os, sys
import numpy as np, torch
from PIL import Image
from safetensors.torch import load_file
from diffusers import AutoencoderDC
from diffusers.pipelines.pixart_alpha.pipeline_pixart_sigma import ASPECT_RATIO_2048_BIN
latents, images, pipeline = sys.argv[1:4]
m = json.load(open(os.path.join(latents, "latents.json")))
assert m["complete"] and m["aspect_ratio_buckets"] is True and m["videos"] == 10, m
vae = AutoencoderDC.from_pretrained(os.path.join(pipeline, "vae")).eval()
unit = 4  # the fixture's DC-AE factor 4 x patch size 1
rows = [json.loads(line) for line in open(os.path.join(images, "captions.jsonl"))]
worst, shapes = 0.0, []
for index, row in enumerate(rows):
    image = Image.open(os.path.join(images, row["image"])).convert("RGB")
    ori_w, ori_h = image.size
    key = min(ASPECT_RATIO_2048_BIN, key=lambda k: abs(float(k) - ori_h / ori_w))  # get_closest_ratio
    h, w = (max(1, int(side) * 32 // (2048 * unit)) * unit for side in ASPECT_RATIO_2048_BIN[key])
    if h / ori_h > w / ori_w:
        resize = (h, int(ori_w * h / ori_h))
    else:
        resize = (int(ori_h * w / ori_w), w)
    resized = image.resize((resize[1], resize[0]), Image.BICUBIC)
    top, left = int(round((resize[0] - h) / 2.0)), int(round((resize[1] - w) / 2.0))
    pixels = torch.from_numpy(np.asarray(resized.crop((left, top, left + w, top + h)))).permute(2, 0, 1).float()
    with torch.no_grad():
        reference = vae.encode(((pixels / 255 - 0.5) / 0.5).unsqueeze(0)).latent * vae.config.scaling_factor
    ours = load_file(os.path.join(latents, "clips", f"{index:06d}.safetensors"))["latent"]
    assert list(ours.shape) == [1, 8, h // 4, w // 4], (row, key, ours.shape, h, w)
    shapes.append((h, w))
    worst = max(worst, ((ours - reference).norm() / reference.norm()).item())
print(f"bucketed latents: shapes {sorted(set(shapes))}, against Pillow's transform + AutoencoderDC {worst:.2e} "
      "(relative)")
# Both resample in two 8-bit passes (measured 2.9e-7: the same pixels but for fixed-point rounding).
assert worst < 1e-4, worst
assert len(set(shapes)) == 3, shapes
PY
  # ---- train from them: one bucket a batch (4 + 2 + 4 images: 2 + 1 + 2 batches of 2 an epoch), 6 steps (into the
  # second epoch), then resume from step 2
  expect_exit 0 "$TUNE" train "$dir/sana.yaml" training.max_steps=6 checkpoint.keep_last=0
  contains "$ERR" "at aspect-ratio buckets (44x20: 4, 32x28: 2, 20x44: 4)"
  resume_from_step2 "$run" "$resumed"
  [ "$(losses "$run/metrics.jsonl")" = "$(losses "$resumed/metrics.jsonl")" ] || fail "resumed losses differ"
  cmp -s "$run/checkpoints/step-6/model.safetensors" "$resumed/checkpoints/step-6/model.safetensors" ||
    fail "resumed weights differ"
  # ---- the recipe and the latents must agree; a batch no bucket fills is named
  expect_exit 2 "$TUNE" train "$dir/sana.yaml" data.aspect_ratio_buckets=false output_dir="$dir/run-square"
  contains "$ERR" "data.aspect_ratio_buckets"; contains "$ERR" "prepared at aspect-ratio buckets"
  expect_exit 1 "$TUNE" train "$dir/sana.yaml" training.batch_size=5 output_dir="$dir/run-big"
  contains "$ERR" "no aspect-ratio bucket"; contains "$ERR" "at most 4 clips"; contains "$ERR" "training.batch_size"
  # ---- tune plan sizes the step at the largest bucket
  expect_exit 0 "$TUNE" plan "$dir/sana.yaml" --memory 64GiB
  contains "$OUT$ERR" "(the table's largest aspect-ratio bucket) -> 16x4 latents"
}

case_sana_lora_diffusers_load() {
  start_sana_training_case
  local dir="$WORK/sana-lora" run="$WORK/sana-lora/run"
  rm -rf "$dir"; mkdir -p "$dir"
  make_captioned_images "$dir/images"
  write_sana_recipe "$dir/sana.yaml" "$run" "$dir/images" "$dir/latents" "lora:" "  rank: 4" "  alpha: 8" \
    "  target_modules: [to_q, to_k, to_v, to_out.0]" "ema:" "  decay: 0.5"
  expect_exit 0 "$TUNE" prepare "$dir/sana.yaml"
  expect_exit 0 "$TUNE" train "$dir/sana.yaml" training.max_steps=4
  contains "$ERR" "LoRA: rank 4, alpha 8"
  local checkpoint="$run/checkpoints/step-4"
  for f in adapter_config.json adapter_model.safetensors pytorch_lora_weights.safetensors; do
    [ -s "$checkpoint/$f" ] || fail "missing $f"
  done
  expect_exit 0 "$TUNE" export "$run" --out "$dir/export"
  contains "$ERR" "LoRA merged"
  # diffusers' SanaPipeline.load_lora_weights(CHECKPOINT) and PEFT's PeftModel.from_pretrained(transformer,
  # CHECKPOINT) give the transformer tune merged into the export (alpha/r = 2 from the file's metadata), and the
  # adapters change the output.
  "$PYTHON" - "$PIPELINE" "$checkpoint" "$dir/export" <<'PY' || fail "the LoRA files in diffusers and PEFT"
import sys, torch
from diffusers import SanaPipeline, SanaTransformer2DModel
from peft import PeftModel
pipeline, checkpoint, exported = sys.argv[1:4]
pipe = SanaPipeline.from_pretrained(pipeline, torch_dtype=torch.float32)
pipe.load_lora_weights(checkpoint)
merged = SanaTransformer2DModel.from_pretrained(f"{exported}/transformer")
base = SanaTransformer2DModel.from_pretrained(f"{pipeline}/transformer")
with torch.no_grad():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, merged.config.in_channels, 8, 8, generator=generator)
    text = torch.randn(2, 12, merged.config.caption_channels, generator=generator)
    mask = torch.ones(2, 12, dtype=torch.long); mask[1, 7:] = 0
    run = lambda model: model(x, encoder_hidden_states=text, encoder_attention_mask=mask,
                              timestep=torch.tensor([300, 800]), return_dict=False)[0]
    plain = run(base)
    peft = run(PeftModel.from_pretrained(base, checkpoint))
    a, b = run(pipe.transformer), run(merged)
rel = lambda u, v: ((u - v).norm() / v.norm()).item()
print(f"load_lora_weights vs tune's merged export {rel(a, b):.2e}; PEFT {rel(peft, b):.2e}; adapters move the "
      f"output by {rel(b, plain):.2e}")
assert rel(a, b) < 1e-5 and rel(peft, b) < 1e-5 and rel(b, plain) > 1e-4
PY
  check_diffusion_lora_bf16_base "$dir/sana.yaml" "$dir"
}

# Training memory with checkpointing on and off, fp32: the measured peak falls, and the plan (state + the activation
# estimate) is within 10% of it.
case_sana_train_checkpointing_memory() {
  start_sana_training_case
  local dir="$WORK/sana-memory"
  rm -rf "$dir"; mkdir -p "$dir"
  make_captioned_images "$dir/images"
  write_sana_recipe "$dir/sana.yaml" "$dir/unused" "$dir/images" "$dir/latents"
  expect_exit 0 "$TUNE" prepare "$dir/sana.yaml"
  local policy
  for policy in true false; do
    expect_exit 0 "$TUNE" train "$dir/sana.yaml" --output-dir "$dir/run-$policy" training.max_steps=2 \
      checkpoint.every=0 gradient_checkpointing=$policy training.batch_size=6
  done
  contains "$ERR" "gradient checkpointing: off"
  "$PYTHON" - "$dir/run-true" "$dir/run-false" <<'PY' || fail "training memory"
import json, sys
def measured(run):
    memory = json.load(open(f"{run}/memory.json"))
    plan = memory.get("plan", memory)
    state = sum(plan.get(k, 0) for k in ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "ema_bytes"))
    return memory["peak_bytes"], state + plan.get("activations_estimate_bytes", 0)
(full, full_plan), (off, off_plan) = measured(sys.argv[1]), measured(sys.argv[2])
print(f"training peak: checkpointing full {full} bytes (plan {full_plan / full:.3f}), off {off} (plan {off_plan / off:.3f})")
assert full < 0.9 * off, (full, off)
for plan, peak in ((full_plan, full), (off_plan, off)):
    assert 0.9 <= plan / peak <= 1.1, (plan, peak)
PY
  # ema.decay 0 keeps no EMA copy (the average is the weights): the plan drops it, the peak falls by about the
  # trained weights' fp32 bytes, and the checkpoint's ema.safetensors holds the trained weights.
  expect_exit 0 "$TUNE" train "$dir/sana.yaml" --output-dir "$dir/run-no-ema" training.max_steps=2 \
    checkpoint.every=0 gradient_checkpointing=true training.batch_size=6 ema.decay=0
  contains "$ERR" "EMA none (ema.decay 0"
  "$PYTHON" - "$dir/run-true" "$dir/run-no-ema" <<'PY' || fail "ema.decay 0"
import json, sys
from safetensors.torch import load_file
ema, none = (json.load(open(f"{run}/memory.json")) for run in sys.argv[1:3])
plan_ema, plan_none = (m.get("plan", m) for m in (ema, none))
weights = plan_ema["optimizer_state_bytes"] // 2  # the trained weights' fp32 bytes (AdamW keeps two moments)
assert plan_none["ema_bytes"] == 0 and plan_ema["ema_bytes"] == weights, (plan_none, plan_ema)
saving = ema["peak_bytes"] - none["peak_bytes"]
print(f"ema.decay 0: peak {ema['peak_bytes']} -> {none['peak_bytes']} bytes (-{saving}; the EMA copy {weights})")
assert 0.9 * weights <= saving <= 1.1 * weights, (saving, weights)
step = f"{sys.argv[2]}/checkpoints/step-2"
model, average = load_file(f"{step}/model.safetensors"), load_file(f"{step}/ema.safetensors")
assert model.keys() == average.keys() and all(model[k].equal(average[k]) for k in model)
PY
}

case_sana_train_input_errors() {
  start_sana_training_case
  local dir="$WORK/sana-train-errors"
  rm -rf "$dir"; mkdir -p "$dir"
  make_captioned_images "$dir/images"
  write_sana_recipe "$dir/sana.yaml" "$dir/run" "$dir/images" "$dir/latents"
  expect_exit 2 "$TUNE" train "$dir/sana.yaml"
  contains "$ERR" "data.latents"; contains "$ERR" "tune prepare"
  expect_exit 2 "$TUNE" prepare "$dir/sana.yaml" data.image_size=30
  contains "$ERR" "data.image_size"; contains "$ERR" "multiple of 4"
  expect_exit 2 "$TUNE" prepare "$dir/sana.yaml" --clips-per-video 2
  contains "$ERR" "--clips-per-video"
  expect_exit 2 "$TUNE" prepare "$dir/sana.yaml" data.path="$dir/nowhere"
  contains "$ERR" "data.path"
  expect_exit 2 "$TUNE" train "$dir/sana.yaml" 'lora.target_modules=[to_q, ff.net.2]' lora.rank=4
  contains "$ERR" "lora.target_modules"; contains "$ERR" "ff.net.2"
  expect_exit 2 "$TUNE" train "$dir/sana.yaml" flow.weighting=cosmap
  contains "$ERR" "flow.weighting"
  expect_exit 2 "$TUNE" train "$dir/sana.yaml" 'distributed.shard_blocks=[LatteSpatialBlock]'
  contains "$ERR" "distributed.shard_blocks"; contains "$ERR" "SanaMSBlock"
  # An unreadable image: named, and skipped with data.on_bad_image: skip.
  printf 'not a png' > "$dir/images/broken.png"; echo "a broken image" > "$dir/images/broken.txt"
  expect_exit 1 "$TUNE" prepare "$dir/sana.yaml" data.path="$dir/images" --out "$dir/latents-bad"
  contains "$ERR" "broken.png"; contains "$ERR" "data.on_bad_image"
  expect_exit 0 "$TUNE" prepare "$dir/sana.yaml" data.path="$dir/images" --out "$dir/latents-skip" data.on_bad_image=skip
  contains "$ERR" "1 images skipped"
  [ ! -e "$dir/run" ] || fail "a refused run wrote its directory"
}

[ "${SANA_TESTS_AS_LIBRARY:-0}" = 1 ] && return 0
case="${1:?case name}"
mkdir -p "$WORK"
"case_$case"
echo "PASS: $case"
