#!/usr/bin/env bash
# The text-to-video default end to end: build, generate the captioned moving shapes and the from-scratch pipeline,
# tune prepare (T5 embeddings, VAE latents), train recipes/latte-t2v-tiny.yaml (or continue it), then measure how
# often sampled videos follow their caption's colour and direction, on the trained and on the held-out pairs.
# Everything lands in data/t2v-shapes, runs/latte-t2v-tiny and runs/latte-t2v-tiny-captions.json.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
tune=build/apps/tune/tune
[ -d data/t2v-shapes/pipeline ] || .venv/bin/python scripts/make_t2v_shapes.py --out data/t2v-shapes
"$tune" prepare recipes/latte-t2v-tiny.yaml
run=runs/latte-t2v-tiny
if [ -n "$(ls -A "$run/checkpoints" 2>/dev/null)" ]; then
  echo "== $run already holds checkpoints: continuing it (--resume); delete $run to train from scratch"
  "$tune" train recipes/latte-t2v-tiny.yaml --resume "$@"
else
  "$tune" train recipes/latte-t2v-tiny.yaml "$@"
fi
echo "== do sampled videos follow their caption? (16 captions x 8 samples, DDIM 50 steps, the recipe's cfg 7.5 with caption masks)"
.venv/bin/python scripts/eval_t2v_captions.py "$run" --data data/t2v-shapes --out "$run-captions.json"
"$tune" infer "$run" --prompt "a red square moving up" --out "$run/samples/red-up.gif" --no-grad
echo "== a held-out pair, 'a red square moving up': $run/samples/red-up.gif"
