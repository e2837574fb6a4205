#!/usr/bin/env bash
# Generates the letters dataset and trains its tokenizer (skipped when already there).
#   scripts/prepare_letters.sh [OUT_DIR]   (default data/letters)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-data/letters}
[ -f "$out/train.jsonl" ] || .venv/bin/python scripts/make_letters_data.py --out "$out"
[ -f "$out/tokenizer.model" ] || bash scripts/train_tokenizer.sh "$out/tokenizer.model" "$out/train.jsonl"
