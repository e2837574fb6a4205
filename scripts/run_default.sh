#!/usr/bin/env bash
# The main job on the embedded default: install (dependencies, build, `tune` into ${PREFIX:-~/.local}/bin),
# generate the letters task and its tokenizer, measure exact-match accuracy of the untrained model, train recipes/sft-tiny.yaml, measure again, and show one answer
# with its gradient attribution. Everything lands in runs/sft-tiny (delete it to start over).
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${PREFIX:-$HOME/.local}
bash scripts/install.sh "$prefix"   # builds, then puts `tune` in $prefix/bin
bash scripts/prepare_letters.sh data/letters
tune=$prefix/bin/tune
run=runs/sft-tiny
if [ -n "$(ls -A "$run/checkpoints" 2>/dev/null)" ]; then
  echo "== $run already holds checkpoints: continuing it (--resume); delete $run to train from scratch"
  "$tune" train recipes/sft-tiny.yaml --resume
else
  echo "== accuracy before training (random initialisation)"
  .venv/bin/python scripts/eval_letters_accuracy.py recipes/sft-tiny.yaml --out "$run-accuracy-before.json"
  "$tune" train recipes/sft-tiny.yaml
fi
echo "== accuracy after training"
.venv/bin/python scripts/eval_letters_accuracy.py "$run" --out "$run-accuracy-after.json"
echo "== one held-out prompt, with per-token gradient attribution (tune infer --grad)"
"$tune" infer "$run" --prompt "Reverse: q w e r t" --grad
