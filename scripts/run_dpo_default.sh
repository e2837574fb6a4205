#!/usr/bin/env bash
# Preference tuning on the embedded default: after scripts/run_default.sh (which trains runs/sft-tiny), export the
# SFT model, answer training prompts with it, make a pair of every wrong answer (chosen: the data's answer; rejected:
# the model's own), train recipes/dpo-tiny.yaml on them, and measure exact match on the same 300 held-out prompts
# before and after. Everything lands in runs/ and data/letters-dpo (delete them to start over).
set -euo pipefail
cd "$(dirname "$0")/.."
tune=${TUNE:-build/apps/tune/tune}
[ -d runs/sft-tiny/checkpoints ] || { echo "run scripts/run_default.sh first (it trains runs/sft-tiny)" >&2; exit 2; }
[ -d runs/sft-tiny-hf ] || "$tune" export runs/sft-tiny --out runs/sft-tiny-hf
[ -s data/letters-dpo/train.jsonl ] ||
  .venv/bin/python scripts/make_letters_preferences.py runs/sft-tiny-hf --out data/letters-dpo --limit 12000
echo "== exact match before preference tuning (the SFT default)"
.venv/bin/python scripts/eval_letters_accuracy.py runs/sft-tiny-hf --out runs/dpo-tiny-accuracy-before.json
rm -rf runs/dpo-tiny
"$tune" train recipes/dpo-tiny.yaml
echo "== exact match after"
.venv/bin/python scripts/eval_letters_accuracy.py runs/dpo-tiny --out runs/dpo-tiny-accuracy-after.json
echo "== reward accuracy on the held-out pairs (the last evaluation in runs/dpo-tiny/metrics.jsonl)"
.venv/bin/python -c "
import json
last = [json.loads(l) for l in open('runs/dpo-tiny/metrics.jsonl') if 'eval_rewards/accuracies' in l][-1]
print(f\"eval reward accuracy {last['eval_rewards/accuracies']:.1%}, margin {last['eval_rewards/margins']:.3f}\")"
