#!/usr/bin/env bash
# End-to-end tests of the dataset layouts and formats: ShareGPT rows, Alpaca JSON arrays, several files mixed by
# weight, raw text (continued pre-training on .txt files), bad rows named by file:line or file:index, skip mode.
# Usage: dataset_tests.sh CASE (environment as cli_tests.sh, whose helpers it uses).
set -uo pipefail
CLI_TESTS_AS_LIBRARY=1 source "$(dirname "$0")/cli_tests.sh"
DS="$WORK/datasets"

# The letters data in other shapes: chat rows as ShareGPT JSONL, instruction rows as an Alpaca JSON array
# (pretty-printed, as alpaca_data.json ships), and its text as .txt documents (one of them longer than a row).
make_datasets() {
  mkdir -p "$DS"
  "$PYTHON" - "$DATA/train.jsonl" "$DS" <<'PY' || fail "dataset conversion"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
out = sys.argv[2]
names = {"user": "human", "assistant": "gpt", "system": "system"}
chats = [r for r in rows if "messages" in r][:200]
with open(f"{out}/sharegpt.jsonl", "w") as f:
    for r in chats:
        f.write(json.dumps({"conversations": [{"from": names[m["role"]], "value": m["content"]} for m in r["messages"]]}) + "\n")
alpaca = [{"instruction": r["instruction"], "input": r.get("input", ""), "output": r["output"]}
          for r in rows if "instruction" in r][:120]
json.dump(alpaca, open(f"{out}/alpaca_data.json", "w"), indent=4)
for k in range(3):
    lines = [f"{r['instruction']} {r.get('input', '')} -> {r['output']}" for r in rows if "instruction" in r]
    # Document 0 is long (many rows of max_length 64), the others short.
    count = 60 if k == 0 else 3
    open(f"{out}/doc{k}.txt", "w").write("\n".join(lines[k * 60:k * 60 + count]) + "\n")
PY
}

# set_train FILE VALUE: replaces the recipe's data.train value (write_recipe's `  train:` line) with VALUE.
set_train() { sed -i "s|^  train: .*|  train: $2|" "$1"; }

case_mixed_sharegpt_and_alpaca_array() {
  make_datasets
  local run="$WORK/runs/mixed" yaml="$WORK/mixed.yaml"
  rm -rf "$run"
  write_recipe "$yaml" "$run"
  set_train "$yaml" "[$DS/sharegpt.jsonl, {path: $DS/alpaca_data.json, weight: 0.5}]"
  expect_exit 0 "$TUNE" validate "$yaml"
  contains "$OUT" "train: [$DS/sharegpt.jsonl, {path: $DS/alpaca_data.json, weight: 0.5}]"
  expect_exit 0 "$TUNE" train "$yaml" training.max_steps=4 checkpoint.every=0
  contains "$ERR" "data: $DS/sharegpt.jsonl: 200 rows read"
  contains "$ERR" "data: $DS/alpaca_data.json: 120 rows read"
  # The epoch holds every ShareGPT example once and round(0.5 x N) of the Alpaca ones (N after the eval split).
  "$PYTHON" - "$ERR" <<'PY' || fail "mixture proportions: $ERR"
import re, sys
found = dict((m[0].rsplit("/", 1)[1], (float(m[2]), int(m[3]), int(m[1])))
             for m in re.findall(r"data: mixture: (\S+): (\d+) training examples x weight (\S+) -> (\d+) per epoch",
                                 sys.argv[1]))
assert set(found) == {"sharegpt.jsonl", "alpaca_data.json"}, found
for name, (weight, per_epoch, count) in found.items():
    assert per_epoch == max(1, round(weight * count + 1e-9)), (name, weight, per_epoch, count)
assert found["sharegpt.jsonl"][0] == 1.0 and found["alpaca_data.json"][0] == 0.5
assert 300 * 0.9 < found["sharegpt.jsonl"][2] + found["alpaca_data.json"][2] <= 320
PY
  [ "$(grep -c '"loss"' "$run/metrics.jsonl")" = 4 ] || fail "expected 4 logged steps: $(cat "$run/metrics.jsonl")"
  # The run's resolved config (what --resume and infer read) loads again.
  expect_exit 0 "$TUNE" validate "$run/config.yaml"
}

# data.train naming a folder (its .jsonl, .json and .txt files) or a glob pattern: the files found are listed in
# the run's saved config (what --resume reads), each with the entry's weight; one that finds nothing is named.
case_train_files_from_folder_and_glob() {
  make_datasets
  local docs="$WORK/docs" run="$WORK/runs/folder" yaml="$WORK/folder.yaml"
  rm -rf "$docs" "$run"; mkdir -p "$docs/more"
  cp "$DS/doc0.txt" "$DS/doc1.txt" "$docs/"; cp "$DS/doc2.txt" "$docs/more/"; echo "notes" > "$docs/README.md"
  write_recipe "$yaml" "$run"
  sed -i "s|^  max_length: 64|  max_length: 64\n  format: text\n  eval_fraction: 0.0|; /^  eval_fraction: 0.05/d" "$yaml"
  set_train "$yaml" "$docs"
  expect_exit 0 "$TUNE" train "$yaml" training.max_steps=2 checkpoint.every=0
  contains "$ERR" "data: $docs/doc0.txt: 1 documents"; contains "$ERR" "data: $docs/more/doc2.txt: 1 documents"
  lacks "$ERR" "README.md"
  expect_exit 0 "$TUNE" validate "$run/config.yaml"
  contains "$OUT" "train: [$docs/doc0.txt, $docs/doc1.txt, $docs/more/doc2.txt]"
  expect_exit 0 "$TUNE" validate "$yaml" "data.train=[{path: '$DS/doc[01].txt', weight: 2}]"
  contains "$OUT" "train: [{path: $DS/doc0.txt, weight: 2.0}, {path: $DS/doc1.txt, weight: 2.0}]"
  expect_exit 2 "$TUNE" validate "$yaml" "data.train=$DS/*.parquet"
  contains "$ERR" "data.train: '$DS/*.parquet' matches no file"
}

case_text_pretraining_on_txt_files() {
  make_datasets
  local run="$WORK/runs/text" yaml="$WORK/text.yaml"
  rm -rf "$run"
  write_recipe "$yaml" "$run"
  set_train "$yaml" "[$DS/doc0.txt, $DS/doc1.txt, {path: $DS/doc2.txt, weight: 2}]"
  sed -i "s|^  max_length: 64|  max_length: 64\n  format: text\n  eval_fraction: 0.0|; /^  eval_fraction: 0.05/d" "$yaml"
  expect_exit 0 "$TUNE" train "$yaml" training.max_steps=3 checkpoint.every=0
  contains "$ERR" "data: $DS/doc0.txt: 1 documents (0 skipped as bad)"
  contains "$ERR" "1 longer than 64 tokens split"
  contains "$ERR" "(raw text, packing on)"
  [ "$(grep -c '"loss"' "$run/metrics.jsonl")" = 3 ] || fail "expected 3 logged steps"
  expect_exit 0 "$TUNE" validate "$run/config.yaml"; contains "$OUT" "format: text"
  # Held out by document (never chunks of one document on both sides): one of the three files.
  rm -rf "$WORK/runs/text-eval"
  expect_exit 0 "$TUNE" train "$yaml" data.eval_fraction=0.34 training.max_steps=1 checkpoint.every=0 \
    --output-dir "$WORK/runs/text-eval"
  contains "$ERR" "data: 1 document held out for evaluation"
  # A chat template with raw text would be ignored, so it is refused, as is a .txt file read as rows.
  expect_exit 2 "$TUNE" train "$yaml" data.template=plain --output-dir "$WORK/runs/text-refused"
  contains "$ERR" "data.template is not used with data.format: text"
  expect_exit 2 "$TUNE" train "$yaml" data.train_on_prompt=true --output-dir "$WORK/runs/text-refused"
  contains "$ERR" "data.train_on_prompt"
  expect_exit 1 "$TUNE" train "$yaml" data.format=auto --output-dir "$WORK/runs/text-refused"
  contains "$ERR" "doc0.txt' is plain text"; contains "$ERR" "data.format: text"
  [ ! -d "$WORK/runs/text-refused/checkpoints" ] || fail "a refused run must not train"
}

case_bad_rows_named_by_line_and_index() {
  make_datasets
  local yaml="$WORK/badrows.yaml"
  write_recipe "$yaml" "$WORK/runs/badrows"
  head -n 3 "$DS/sharegpt.jsonl" > "$DS/bad.jsonl"
  echo '{"conversations": [{"from": "human", "value": "Reverse: a b"}, {"from": "bot", "value": "b a"}]}' >> "$DS/bad.jsonl"
  expect_exit 1 "$TUNE" train "$yaml" data.train="$DS/bad.jsonl"
  contains "$ERR" "bad.jsonl:4: conversations[1].from 'bot' is not one of human, gpt, system"
  "$PYTHON" -c "
import json, sys
rows = json.load(open(sys.argv[1]))[:5]
del rows[3]['output']
json.dump(rows, open(sys.argv[2], 'w'), indent=2)" "$DS/alpaca_data.json" "$DS/bad.json" || fail "bad.json"
  # The bad file is second in the list: every file is validated before training.
  expect_exit 1 "$TUNE" train "$yaml" data.train="[$DS/sharegpt.jsonl, $DS/bad.json]"
  contains "$ERR" "bad.json:index 3 (0-based; line"; contains "$ERR" "missing field 'output'"
  [ ! -d "$WORK/runs/badrows/checkpoints" ] || fail "a run with bad data must not train"
  # A bad weight is a config error at the element's line and column.
  set_train "$yaml" "[$DS/sharegpt.jsonl, {path: $DS/alpaca_data.json, weight: 0}]"
  local line; line=$(grep -n '^  train:' "$yaml" | cut -d: -f1)
  expect_exit 2 "$TUNE" validate "$yaml"
  contains "$ERR" "$yaml:$line:"; contains "$ERR" "data.train[1].weight: expected a number > 0, got '0'"
}

case_on_bad_line_skip_summary() {
  make_datasets
  local yaml="$WORK/skip.yaml" run="$WORK/runs/skip"
  rm -rf "$run"
  write_recipe "$yaml" "$run"
  "$PYTHON" -c "
import json, sys
rows = json.load(open(sys.argv[1]))[:40]
for i in (5, 6, 30): rows[i] = {'instruction': 'no output'}
json.dump(rows, open(sys.argv[2], 'w'), indent=2)" "$DS/alpaca_data.json" "$DS/some_bad.json" || fail "some_bad.json"
  { head -n 30 "$DS/sharegpt.jsonl"; echo 'not json'; } > "$DS/some_bad.jsonl"
  expect_exit 0 "$TUNE" train "$yaml" data.on_bad_line=skip data.train="[$DS/some_bad.json, $DS/some_bad.jsonl]" \
    training.max_steps=2 checkpoint.every=0
  contains "$ERR" "skipped 3 of 40 rows in $DS/some_bad.json (first: $DS/some_bad.json:index 5 (0-based; line"
  contains "$ERR" "skipped 1 of 31 rows in $DS/some_bad.jsonl (first: $DS/some_bad.jsonl:31: malformed JSON"
  [ "$(grep -c 'skipped .* rows in' <<<"$ERR")" = 2 ] || fail "expected one summary per file: $ERR"
  # Skipping everything still fails.
  printf 'x\ny\n' > "$DS/all_bad.jsonl"
  expect_exit 1 "$TUNE" train "$yaml" data.on_bad_line=skip data.train="$DS/all_bad.jsonl" --output-dir "$WORK/runs/skip-all"
  contains "$ERR" "has no usable rows: all 2 were skipped"
}

case="${1:?case name}"
mkdir -p "$WORK"
"case_$case"
echo "PASS: $case"
