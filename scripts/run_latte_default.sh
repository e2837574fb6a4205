#!/usr/bin/env bash
# The Latte default end to end: build, generate the moving-shapes videos, train recipes/latte-tiny.yaml (or continue
# it), then measure whether sampled videos follow the requested class (direction of motion, and colour).
# Everything lands in runs/latte-tiny and runs/latte-tiny-motion.json (delete runs/latte-tiny to start over).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
tune=build/apps/tune/tune
[ -d data/shapes ] || .venv/bin/python scripts/make_moving_shapes.py --out data/shapes --videos-per-class 128 \
  --num-frames 4 --size 16 --shape-size 4 --colours class
run=runs/latte-tiny
if [ -n "$(ls -A "$run/checkpoints" 2>/dev/null)" ]; then
  echo "== $run already holds checkpoints: continuing it (--resume); delete $run to train from scratch"
  "$tune" train recipes/latte-tiny.yaml --resume
else
  "$tune" train recipes/latte-tiny.yaml "$@"
fi
echo "== do sampled videos follow the class? (32 videos, DDIM 50 steps, cfg 4)"
.venv/bin/python scripts/eval_latte_motion.py "$run" --cfg-scale 4 --colours-by-class --out "$run-motion.json"
"$tune" infer "$run" --class 0 --out "$run/samples/right.gif" --no-grad
echo "== a sample of class 0 (right): $run/samples/right.gif"
