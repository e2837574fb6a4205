#!/usr/bin/env bash
# Trains the project's small sentencepiece BPE tokenizer, deterministically, with spm_train.
#   scripts/train_tokenizer.sh OUTPUT.model [INPUT.jsonl|INPUT.txt] [VOCAB_SIZE]
# INPUT defaults to data/letters/train.jsonl (scripts/make_letters_data.py); from JSONL every text field is used.
# PAD_ID=-1 in the environment makes a model without a pad piece (Llama's own tokenizer has none).
# Choices, and why:
#  - identity normalisation, whitespace kept, "\n" a symbol of its own: chat templates round-trip through
#    decode() exactly (the default nmt_nfkc would turn newlines into spaces; without byte fallback "\n" is unk);
#  - <|im_start|>, <|im_end|> user-defined symbols for the chatml template; UNK 0, BOS 1, EOS 2, PAD 3;
#  - letters separated by spaces become one token each ("▁k"); sentencepiece never merges across a space;
#  - one thread, every input sentence in file order (input_sentence_size 0: no sampling, shuffle off), fixed
#    seed, relative paths in the stored trainer flags: the same input gives a byte-identical model.
set -euo pipefail
python=${PYTHON:-"$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python"}  # scripts/setup.sh's venv (or $PYTHON): has the sentencepiece module

if [[ $# -lt 1 || $# -gt 3 ]]; then
  echo "usage: $0 OUTPUT.model [INPUT.jsonl|INPUT.txt] [VOCAB_SIZE]" >&2
  exit 2
fi
output=$1
input=${2:-data/letters/train.jsonl}
vocab_size=${3:-320}
[[ -f "$input" ]] || { echo "error: input '$input' not found; HINT: run scripts/make_letters_data.py first" >&2; exit 2; }
command -v spm_train >/dev/null || { echo "error: spm_train not found; HINT: apt-get install sentencepiece" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The chat templates' fixed words, so they are never unknown whatever the data holds.
{
  echo "### Instruction: ### Response:"
  echo "[INST] <<SYS>> <</SYS>> [/INST]"
  echo "system user assistant"
} > "$work/corpus.txt"
if [[ "$input" == *.jsonl ]]; then
  # The venv's python (stdlib only here): one line per text field, newlines inside a field split into lines.
  "$python" - "$input" >> "$work/corpus.txt" <<'PY'
import json, sys
def texts(row):
    for key in ("system", "instruction", "input", "output"):
        if isinstance(row.get(key), str):
            yield row[key]
    for message in row.get("messages", []):
        yield message.get("content", "")
with open(sys.argv[1], encoding="utf-8") as rows:
    for line in rows:
        if line.strip():
            for text in texts(json.loads(line)):
                for part in text.split("\n"):
                    if part.strip():
                        print(part)
PY
else
  cat "$input" >> "$work/corpus.txt"
fi

output=$(realpath -m "$output")
cd "$work"  # relative names: the model stores its trainer flags, and a temporary path would differ every run
spm_train \
  --input=corpus.txt --model_prefix=tokenizer \
  --model_type=bpe --vocab_size="$vocab_size" --hard_vocab_limit=false \
  --character_coverage=1.0 --byte_fallback=false \
  --normalization_rule_name=identity --remove_extra_whitespaces=false \
  --user_defined_symbols=$'<|im_start|>,<|im_end|>,\n' \
  --unk_id=0 --bos_id=1 --eos_id=2 --pad_id="${PAD_ID:-3}" \
  --input_sentence_size=0 --shuffle_input_sentence=false \
  --num_threads=1 --random_seed=1234 \
  > spm_train.log 2>&1 || { cat spm_train.log >&2; exit 1; }

mkdir -p "$(dirname "$output")"
cp tokenizer.model "$output"
echo "wrote $output ($("$python" -c "import sentencepiece as s; print(s.SentencePieceProcessor(model_file='$output').get_piece_size())") pieces)"
