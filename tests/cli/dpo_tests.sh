#!/usr/bin/env bash
# End-to-end tests of `recipe: dpo` as users call it: LoRA and full fine-tuning with each reference, every loss,
# TRL's metric names, exact resume, export and inference of the result, and the config and data errors.
# Usage: dpo_tests.sh CASE (environment as cli_tests.sh, whose helpers it uses). The model, tokenizer and rows are
# tests/fixtures/dpo's (scripts/make_dpo_fixture.py: a tiny Llama with a byte-level BPE tokenizer and chat template).
set -uo pipefail
CLI_TESTS_AS_LIBRARY=1 source "$(dirname "$0")/cli_tests.sh"
FIXTURE="$TUNE_SOURCE/tests/fixtures/dpo"

# write_dpo_recipe FILE OUTPUT_DIR [extra yaml lines...]: LoRA DPO on the fixture's conversational rows, fp32.
write_dpo_recipe() {
  local file=$1 out=$2; shift 2
  cat > "$file" <<YAML
recipe: dpo
output_dir: $out
seed: 3
threads: 2
mixed_precision: "no"
model:
  path: $FIXTURE/model
data:
  train: $WORK/dpo-rows.jsonl
  eval: $FIXTURE/rows_conversational.jsonl
training:
  batch_size: 2
  max_steps: 6
optimizer:
  lr: 0.01
logging:
  every: 1
checkpoint:
  every: 3
YAML
  printf '%s\n' "$@" >> "$file"
}

# Twelve conversational pairs (the fixture's three, repeated with varied wording) and a standard-form file.
make_rows() {
  "$PYTHON" - "$FIXTURE/rows_conversational.jsonl" "$WORK/dpo-rows.jsonl" <<'PY' || fail "rows"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
with open(sys.argv[2], "w") as f:
    for k in range(4):
        for r in rows:
            r = json.loads(json.dumps(r))
            r["chosen"][0]["content"] += " " * k + "."
            f.write(json.dumps(r) + "\n")
PY
}

case_dpo_lora_train_resume_export() {
  make_rows
  local run="$WORK/runs/dpo-lora" yaml="$WORK/dpo-lora.yaml"
  rm -rf "$run" "$WORK/runs/dpo-lora-resume" "$WORK/runs/dpo-adapter" "$WORK/runs/dpo-lora-padded"
  write_dpo_recipe "$yaml" "$run" "lora:" "  rank: 4" "  alpha: 8" "  target_modules: [all-linear]"
  expect_exit 0 "$TUNE" train "$yaml"
  contains "$ERR" "reference: the base model with the LoRA adapters off"
  contains "$ERR" "reward acc"
  contains "$ERR" "12 pairs read"
  # loss.svg draws the reward margin (train and eval) on its own axis beside the loss.
  grep -q 'class="secondary"' "$run/loss.svg" && grep -q 'class="secondary-eval"' "$run/loss.svg" \
    && grep -q "reward margin (right)" "$run/loss.svg" || fail "loss.svg lacks the reward margin"
  # TRL's names in metrics.jsonl, train and eval; the first step's policy is the reference (LoRA B starts at 0).
  "$PYTHON" - "$run/metrics.jsonl" <<'PY' || fail "metrics.jsonl"
import json, math, sys
records = [json.loads(l) for l in open(sys.argv[1])]
names = ["rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected"]
for r in records:
    assert all(n in r and math.isfinite(r[n]) for n in names), r
assert abs(records[0]["loss"] - math.log(2)) < 1e-6 and records[0]["rewards/margins"] == 0, records[0]
assert records[-1]["rewards/margins"] > 0, records[-1]
assert all("eval_" + n in records[-1] for n in names) and "eval_loss" in records[-1], records[-1]
PY
  # data.packing (the default) packs a batch's sequences without padding: the same training as one padded row per
  # sequence (TRL's layout), to fp32 summation order. 1e-4 relative: CI once saw the padded run's first reference
  # pass differ from its first policy pass (a first loss of ln 2 + 3.9e-5, later losses within 1.4e-5; not
  # reproduced here, see close_losses); a sequence attending to the one packed before it moves the losses by 3.3e-3
  # at step 2 and 10% by step 5 (measured by making the packed rows one segment).
  contains "$ERR" "packed without padding"
  expect_exit 0 "$TUNE" train "$yaml" --output-dir "$WORK/runs/dpo-lora-padded" data.packing=false
  close_losses "$run/metrics.jsonl" "$WORK/runs/dpo-lora-padded/metrics.jsonl" 1e-4
  # Resume from step 3: the same losses and adapter as the uninterrupted run.
  local resumed="$WORK/runs/dpo-lora-resume"
  cp -r "$run" "$resumed"; rm -rf "$resumed/checkpoints/step-6"
  sed -i "s|output_dir: .*|output_dir: $resumed|" "$resumed/config.yaml"
  expect_exit 0 "$TUNE" train "$resumed/config.yaml" --resume
  [ "$(losses "$run/metrics.jsonl")" = "$(losses "$resumed/metrics.jsonl")" ] || fail "resumed DPO losses differ"
  cmp -s "$run/checkpoints/step-6/adapter_model.safetensors" "$resumed/checkpoints/step-6/adapter_model.safetensors" \
    || fail "resumed DPO adapter differs"
  # The result exports as a PEFT adapter and answers through tune infer, as an SFT run's would.
  expect_exit 0 "$TUNE" export "$run" --out "$WORK/runs/dpo-adapter"
  [ -s "$WORK/runs/dpo-adapter/adapter_model.safetensors" ] || fail "export wrote no adapter"
  expect_exit 0 "$TUNE" infer "$run" --prompt "What color is the sky?" --json --no-grad --max-new-tokens 3
  contains "$OUT" '"output_ids"'
}

case_dpo_full_reference_and_losses() {
  make_rows
  local yaml="$WORK/dpo-full.yaml"
  # Full fine-tuning against a separate frozen reference (fp32 and bf16 storage), then each loss once.
  write_dpo_recipe "$yaml" "$WORK/runs/dpo-full" "dpo:" "  reference_model: $FIXTURE/ref_model" \
    "  reference_dtype: fp32"
  rm -rf "$WORK/runs/dpo-full"
  expect_exit 0 "$TUNE" train "$yaml" training.max_steps=2
  contains "$ERR" "reference: a frozen copy of $FIXTURE/ref_model in fp32"
  for loss in hinge ipo robust simpo orpo; do
    rm -rf "$WORK/runs/dpo-full"
    local extra=()
    [ "$loss" = robust ] && extra=(dpo.label_smoothing=0.1)
    [ "$loss" = simpo ] || [ "$loss" = orpo ] && extra=(dpo.reference_model=null)
    expect_exit 0 "$TUNE" train "$yaml" training.max_steps=2 dpo.loss=$loss dpo.reference_dtype=bf16 "${extra[@]}"
    contains "$ERR" "dpo: loss $loss"
    grep -q '"rewards/accuracies"' "$WORK/runs/dpo-full/metrics.jsonl" || fail "$loss: no reward metrics"
  done
  grep -q '"nll_loss"' "$WORK/runs/dpo-full/metrics.jsonl" || fail "orpo logs no nll_loss"
}

# close_losses A B TOL: two metrics.jsonl files' losses agree step by step within TOL (relative).
close_losses() {
  "$PYTHON" - "$1" "$2" "$3" <<'PY' || fail "losses of $1 and $2 differ"
import json, sys
runs = [[json.loads(l) for l in open(f) if l.strip()] for f in sys.argv[1:3]]
a, b = ([r["loss"] for r in records] for records in runs)
keys = ["loss", "logps/chosen", "logps/rejected", "rewards/chosen", "rewards/rejected", "rewards/margins"]
# On a mismatch, each run's first step in full: its policy log-probs and its rewards (the policy's against the
# reference's) tell a packing difference from a reference pass that differs from the first policy pass.
first_steps = [{k: records[0].get(k) for k in keys} for records in runs if records]
assert len(a) == len(b) and len(a) > 0, (a, b, first_steps)
for x, y in zip(a, b):
    assert abs(x - y) <= float(sys.argv[3]) * max(1.0, abs(y)), (a, b, first_steps)
PY
}

# dpo.precompute_reference: the reference's log-probs computed once before training and stored in the run directory
# give the losses of the run that computes them at every step (fp32, same batches), with no reference held; a
# resume reads the stored figures back instead of loading the reference; other pairs make them be computed again.
case_dpo_precompute_reference_and_mixture() {
  make_rows
  local yaml="$WORK/dpo-pre.yaml" live="$WORK/runs/dpo-pre-live" pre="$WORK/runs/dpo-pre"
  rm -rf "$live" "$pre" "$WORK/runs/dpo-pre-resume"
  # LoRA (reference: the base with the adapters off).
  write_dpo_recipe "$yaml" "$pre" "lora:" "  rank: 4" "  alpha: 8" "  target_modules: [all-linear]"
  expect_exit 0 "$TUNE" train "$yaml" --output-dir "$live"
  expect_exit 0 "$TUNE" train "$yaml" dpo.precompute_reference=true
  contains "$ERR" "dpo: precomputing the reference's log-probs of 12 training and 3 evaluation pairs"
  contains "$ERR" "reference: log-probs precomputed before training (none held now)"
  [ -s "$pre/reference_logps.safetensors" ] || fail "no reference_logps.safetensors"
  close_losses "$live/metrics.jsonl" "$pre/metrics.jsonl" 1e-5
  "$PYTHON" - "$live/metrics.jsonl" "$pre/metrics.jsonl" <<'PY' || fail "eval metrics differ"
import json, sys
a, b = ([json.loads(l) for l in open(f)][-1] for f in sys.argv[1:])
for key in ["eval_loss", "eval_rewards/margins", "eval_logps/chosen"]:
    assert abs(a[key] - b[key]) <= 1e-5 * max(1.0, abs(a[key])), (key, a[key], b[key])
PY
  # Resumed from step 3 in another directory: the stored figures of the run it continues are read, not recomputed.
  local resumed="$WORK/runs/dpo-pre-resume"
  mkdir -p "$resumed"
  expect_exit 0 "$TUNE" train "$yaml" dpo.precompute_reference=true --output-dir "$resumed" \
    --resume "$pre/checkpoints/step-3"
  contains "$ERR" "reference log-probs of 12 + 3 pairs read from $pre/reference_logps.safetensors"
  grep -q "precomputing" <<<"$ERR" && fail "the resumed run computed the reference log-probs again"
  [ "$(losses "$pre/metrics.jsonl" | cut -d' ' -f4-)" = "$(losses "$resumed/metrics.jsonl")" ] \
    || fail "the resumed run's losses differ"
  # An unfinished pass (here: the stored figures cut back to 6 of the 12 training pairs, as a pass killed after
  # its save there leaves them) goes on from where it stopped, to the same figures.
  cp "$pre/reference_logps.safetensors" "$WORK/reference_logps.complete"
  "$PYTHON" - "$WORK/reference_logps.complete" "$pre/reference_logps.safetensors.partial" <<'PY' || fail "partial file"
import sys
from safetensors import safe_open
from safetensors.torch import save_file
with safe_open(sys.argv[1], "pt") as f:
    tensors = {k: f.get_tensor(k) for k in f.keys()}
    metadata = f.metadata()
tensors["train"][6:] = 0
tensors["eval"][:] = 0
save_file(tensors, sys.argv[2], metadata=dict(metadata, done_train="6", done_eval="0"))
PY
  rm "$pre/reference_logps.safetensors"; rm -rf "$pre/checkpoints"
  expect_exit 0 "$TUNE" train "$yaml" dpo.precompute_reference=true training.max_steps=1
  contains "$ERR" "resuming the reference pass saved in $pre/reference_logps.safetensors.partial: 6 of 12 training and 0 of 3 evaluation pairs done"
  [ ! -e "$pre/reference_logps.safetensors.partial" ] || fail "the finished pass left its .partial file"
  "$PYTHON" - "$WORK/reference_logps.complete" "$pre/reference_logps.safetensors" <<'PY' || fail "resumed pass differs"
import sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
for k in ("train", "eval"):
    assert (a[k] - b[k]).abs().max().item() <= 1e-5 * max(1.0, a[k].abs().max().item()), k
PY
  # Other pairs (a shorter max_length truncates some): the stored file is not reused.
  rm -rf "$pre/checkpoints"
  expect_exit 0 "$TUNE" train "$yaml" dpo.precompute_reference=true data.max_length=40 training.max_steps=1
  contains "$ERR" "holds reference log-probs of other pairs or another reference; computing them again"
  # Full fine-tuning against a separate fp32 reference: loaded for the pass only.
  rm -rf "$live" "$pre"
  local full=("dpo.reference_model=$FIXTURE/ref_model" dpo.reference_dtype=fp32 training.max_steps=3)
  expect_exit 0 "$TUNE" train "$yaml" lora.rank=0 "${full[@]}" --output-dir "$live"
  expect_exit 0 "$TUNE" train "$yaml" lora.rank=0 "${full[@]}" dpo.precompute_reference=true
  contains "$ERR" "reference: log-probs precomputed before training (none held now)"
  close_losses "$live/metrics.jsonl" "$pre/metrics.jsonl" 1e-5
  "$PYTHON" -c "import json,sys; m=json.load(open(sys.argv[1])); assert m['reference_bytes'] == 0, m" \
    "$pre/memory.json" || fail "memory.json counts a reference copy"
  # Weighted data.train files mix as SFT's do: 12 pairs x 0.5 + 3 pairs x 2 = 12 pairs an epoch, 6 batches of 2.
  rm -rf "$pre"
  expect_exit 0 "$TUNE" train "$yaml" training.max_steps=2 \
    "data.train=[{path: $WORK/dpo-rows.jsonl, weight: 0.5}, {path: $FIXTURE/rows_conversational.jsonl, weight: 2}]"
  contains "$ERR" "data: mixture: $WORK/dpo-rows.jsonl: 12 pairs x weight 0.5 -> 6 per epoch (50.0% of the epoch)"
  contains "$ERR" "(6 batches per epoch)"
  # A reference-free loss has nothing to precompute.
  expect_exit 2 "$TUNE" train "$yaml" dpo.loss=simpo dpo.precompute_reference=true
  contains "$ERR" "dpo.precompute_reference"
}

case_dpo_config_and_data_errors() {
  make_rows
  local yaml="$WORK/dpo-errors.yaml"
  write_dpo_recipe "$yaml" "$WORK/runs/dpo-errors" "lora:" "  rank: 4"
  expect_exit 2 "$TUNE" validate "$yaml" dpo.label_smoothing=0.1; contains "$ERR" "dpo.label_smoothing"
  expect_exit 2 "$TUNE" validate "$yaml" dpo.reference_model="$FIXTURE/ref_model"
  contains "$ERR" "adapters switched off"
  expect_exit 2 "$TUNE" validate "$yaml" data.packing=maybe; contains "$ERR" "data.packing"
  expect_exit 2 "$TUNE" validate "$yaml" data.format=chat; contains "$ERR" "data.format"
  expect_exit 2 "$TUNE" validate "$yaml" dpo.loss=kto; contains "$ERR" "dpo.loss"
  expect_exit 2 "$TUNE" validate "$yaml" dpo.simpo_gamma=1.0; contains "$ERR" "dpo.simpo_gamma"
  # A bad row is named by file:line before anything trains, and nothing is written.
  printf '%s\n' '{"prompt": "a", "chosen": "b", "rejected": "c"}' '{"prompt": "a", "chosen": "b"}' \
    > "$WORK/dpo-bad.jsonl"
  rm -rf "$WORK/runs/dpo-errors"
  expect_exit 1 "$TUNE" train "$yaml" data.train="$WORK/dpo-bad.jsonl"
  contains "$ERR" "dpo-bad.jsonl:2: missing field 'rejected'"
  [ ! -e "$WORK/runs/dpo-errors/checkpoints" ] || fail "a failed run left checkpoints"
}

case_dpo_default_short() {
  # The embedded example's pipeline, short: a letters model trained for a few steps (so most of its answers are
  # wrong) and exported, its wrong answers on training prompts made into pairs by scripts/make_letters_preferences.py,
  # then recipes/dpo-tiny.yaml for a few steps with a held-out evaluation.
  local sft="$WORK/runs/dpo-default-sft" base="$WORK/runs/dpo-default-base" run="$WORK/runs/dpo-default"
  local pairs="$WORK/letters-dpo"
  rm -rf "$sft" "$base" "$run" "$pairs"
  write_recipe "$WORK/dpo-default-sft.yaml" "$sft"
  expect_exit 0 "$TUNE" train "$WORK/dpo-default-sft.yaml" training.max_steps=20 checkpoint.every=0
  expect_exit 0 "$TUNE" export "$sft" --out "$base"
  "$PYTHON" "$TUNE_SOURCE/scripts/make_letters_preferences.py" "$base" --train "$DATA/train.jsonl" --limit 100 \
    --keep-empty --out "$pairs" --tune "$TUNE" > "$WORK/pairs.txt" 2>&1 || fail "make_letters_preferences: $(cat "$WORK/pairs.txt")"
  contains "$(cat "$WORK/pairs.txt")" "held-out pairs"
  expect_exit 0 "$TUNE" train "$TUNE_SOURCE/recipes/dpo-tiny.yaml" --output-dir "$run" model.path="$base" \
    data.train="$pairs/train.jsonl" data.eval="$pairs/eval.jsonl" training.max_steps=6 eval.every=3 \
    checkpoint.every=0 threads=2
  contains "$ERR" "dpo: loss orpo"
  grep -q '"eval_rewards/accuracies"' "$run/metrics.jsonl" || fail "no held-out reward accuracy in metrics.jsonl"
  expect_exit 0 "$TUNE" infer "$run" --prompt "Reverse: a b c" --json --no-grad --max-new-tokens 6
}

case="${1:?case name}"
mkdir -p "$WORK"
"case_$case"
echo "PASS: $case"
