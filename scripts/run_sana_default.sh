#!/usr/bin/env bash
# The Sana default end to end: build, generate the captioned shape images and the from-scratch pipeline, tune prepare
# (Gemma 2 embeddings, DC-AE latents), train recipes/sana-tiny.yaml (or continue it), then measure how often sampled
# images show their prompt's colour, shape and position, on the trained and on the held-out combinations.
# Everything lands in data/sana-shapes, runs/sana-tiny and runs/sana-tiny-prompts.json.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
tune=build/apps/tune/tune
[ -d data/sana-shapes/pipeline ] || .venv/bin/python scripts/make_sana_shapes.py --out data/sana-shapes
"$tune" prepare recipes/sana-tiny.yaml
run=runs/sana-tiny
if [ -n "$(ls -A "$run/checkpoints" 2>/dev/null)" ]; then
  echo "== $run already holds checkpoints: continuing it (--resume); delete $run to train from scratch"
  "$tune" train recipes/sana-tiny.yaml --resume "$@"
else
  "$tune" train recipes/sana-tiny.yaml "$@"
fi
echo "== do sampled images follow their prompt? (48 prompts x 4 seeds, DPM-Solver++ 20 steps, guidance 4.5)"
.venv/bin/python scripts/eval_sana_shapes.py --run "$run" --data data/sana-shapes --out "$run-prompts.json"
"$tune" infer "$run" --prompt "a red circle at the bottom right" --out "$run/samples/red-circle-bottom-right.png" --no-grad
echo "== a held-out combination, 'a red circle at the bottom right': $run/samples/red-circle-bottom-right.png"
