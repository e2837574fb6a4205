#!/usr/bin/env bash
# End-to-end SFT on a Gemma 2 model directory (issue 24): a tiny random Gemma2ForCausalLM saved by transformers
# (scripts/make_tiny_gemma2_model.py, around the letters tokenizer) trains fully and with LoRA, answers with tune
# infer, and exports directories transformers loads as gemma2 and continues exactly as tune does.
# Usage: gemma2_tests.sh CASE (environment as cli_tests.sh, whose helpers it uses). Without transformers or
# sentencepiece in $PYTHON the case exits 77 (reported skipped).
set -uo pipefail
CLI_TESTS_AS_LIBRARY=1 source "$(dirname "$0")/cli_tests.sh"

need_transformers() {
  "$PYTHON" -c "import transformers, sentencepiece" 2>/dev/null ||
    { echo "SKIP: transformers or sentencepiece not installed for $PYTHON"; exit 77; }
}

# transformers loads the exported directory DIR as Gemma 2 (its fields kept); its greedy continuation of tune
# infer's prompt ids (the --json answer ANSWER, with attribution) is tune's output, and its log-probability of that
# output is tune's attribution.log_prob (a number every soft cap and norm enters, unlike the degenerate ids of a
# model trained 8 steps).
check_export_answers() {
  local export=$1 answer=$2
  "$PYTHON" - "$export" "$answer" <<'PY' || fail "$export: transformers does not load it or answers otherwise"
import json, sys
import torch
from transformers import AutoModelForCausalLM
export, answer = sys.argv[1], json.loads(sys.argv[2])
config = json.load(open(f"{export}/config.json"))
assert config["model_type"] == "gemma2" and config["architectures"] == ["Gemma2ForCausalLM"], config
for key, value in {"query_pre_attn_scalar": 12, "attn_logit_softcapping": 20.0, "final_logit_softcapping": 10.0,
                   "sliding_window": 8, "head_dim": 16, "layer_types": ["sliding_attention", "full_attention"]}.items():
    assert config[key] == value, (key, config[key], value)
model = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32, attn_implementation="eager").eval()
assert type(model).__name__ == "Gemma2ForCausalLM", type(model)
prompt = answer["prompt_ids"]
n = len(answer["output_ids"])
out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, eos_token_id=None,
                     pad_token_id=0)[0, len(prompt):].tolist()
assert out == answer["output_ids"], (out, answer["output_ids"])
with torch.no_grad():
    logits = model(torch.tensor([prompt + out])).logits[0, len(prompt) - 1:-1].double()
log_prob = logits.log_softmax(-1).gather(-1, torch.tensor(out).unsqueeze(-1)).sum().item()
difference = abs(log_prob - answer["attribution"]["log_prob"])
assert difference < 1e-4, (log_prob, answer["attribution"]["log_prob"])
print(f"{export}: Gemma2ForCausalLM, transformers' greedy continuation = tune's ({n} tokens), "
      f"|log p(output) difference| {difference:.1e}")
PY
}

case_gemma2_model_dir_train_infer_export() {
  need_transformers
  local model="$WORK/models/gemma2" full="$WORK/runs/gemma2-full" lora="$WORK/runs/gemma2-lora"
  rm -rf "$model" "$full" "$lora" "$full-export" "$lora-merged"
  "$PYTHON" "$TUNE_SOURCE/scripts/make_tiny_gemma2_model.py" --tokenizer "$DATA/tokenizer.model" --out "$model" \
    >/dev/null 2>&1 || fail "making the Gemma 2 model directory"

  # Full fine-tuning under selective checkpointing (the attention recompute goes through the soft cap) with the
  # chunked loss (which caps the logits itself): the loss falls.
  write_recipe "$WORK/gemma2-full.yaml" "$full"
  use_base_model "$WORK/gemma2-full.yaml" "$model"
  expect_exit 0 "$TUNE" train "$WORK/gemma2-full.yaml" training.max_steps=8 checkpoint.every=8 \
    checkpointing.policy=selective training.chunked_loss=true
  "$PYTHON" - "$full/metrics.jsonl" <<'PY' || fail "gemma2 full fine-tuning: the loss does not fall"
import json, math, sys
losses = [json.loads(line)["loss"] for line in open(sys.argv[1]) if line.strip()]
assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0], losses
PY
  expect_exit 0 "$TUNE" infer "$full" --prompt "Reverse: a b c" --json --no-grad  # with the run's template
  expect_exit 0 "$TUNE" infer "$full" --prompt "h g f e d c b a" --raw --max-new-tokens 4 --json
  local answer=$OUT
  expect_exit 0 "$TUNE" export "$full" --out "$full-export"
  check_export_answers "$full-export" "$answer"

  # LoRA on the attention and MLP projections; the merged export answers as base + adapter.
  write_recipe "$WORK/gemma2-lora.yaml" "$lora" "lora:" "  rank: 4" "  target_modules: [q_proj, v_proj, gate_proj]"
  use_base_model "$WORK/gemma2-lora.yaml" "$model"
  expect_exit 0 "$TUNE" train "$WORK/gemma2-lora.yaml" training.max_steps=4 checkpoint.every=4 optimizer.lr=0.05
  [ -s "$lora/checkpoints/step-4/adapter_model.safetensors" ] || fail "gemma2 LoRA: no PEFT adapter"
  expect_exit 0 "$TUNE" infer "$lora" --prompt "h g f e d c b a" --raw --max-new-tokens 4 --json
  answer=$OUT
  expect_exit 0 "$TUNE" export "$lora" --out "$lora-merged" --merge-lora
  check_export_answers "$lora-merged" "$answer"
}

case="${1:?case name}"
mkdir -p "$WORK"
"case_$case"
echo "PASS: $case"
