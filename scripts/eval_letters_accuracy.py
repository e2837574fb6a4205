#!/usr/bin/env python3
"""Exact-match accuracy of `tune infer` on the held-out letters test set.

    scripts/eval_letters_accuracy.py TARGET [--test data/letters/test.jsonl] [--limit 300] [--out result.json]

TARGET is what `tune infer` accepts (a recipe, a run directory or a model directory). Single-turn test rows
without a system message are used; the prompt is the user text exactly as the data loader builds it
(instruction, plus "\\n\\n" + input when present), the answer must equal the reference after stripping spaces
at both ends. Greedy decoding, one `tune infer --prompts-file` call for all prompts.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def single_turn(row):
    """(prompt, answer) of a single-turn row without system message, else None."""
    if "messages" in row:
        messages = row["messages"]
        if [m["role"] for m in messages] != ["user", "assistant"]:
            return None
        return messages[0]["content"], messages[1]["content"]
    if row.get("system"):
        return None
    prompt = row["instruction"] + ("\n\n" + row["input"] if row.get("input") else "")
    return prompt, row["output"]


def read_single_turn(path, limit):
    """The first `limit` single-turn rows of a letters JSONL file, as (prompt, answer)."""
    pairs = []
    with open(path) as f:
        for line in f:
            if line.strip() and (pair := single_turn(json.loads(line))):
                pairs.append(pair)
    return pairs[:limit]


def greedy_outputs(tune, target, prompts):
    """`tune infer TARGET` on every prompt in one --prompts-file call (greedy, no gradients): its JSON outputs."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as listing:
        for prompt in prompts:
            listing.write(json.dumps(prompt) + "\n")
    command = [tune, "infer", target, "--prompts-file", listing.name, "--json", "--no-grad", "--temperature", "0"]
    completed = subprocess.run(command, capture_output=True, text=True)
    os.unlink(listing.name)
    if completed.returncode != 0:
        sys.stderr.write(completed.stderr)
        sys.exit(completed.returncode)
    outputs = [json.loads(line) for line in completed.stdout.splitlines() if line.startswith("{")]
    if len(outputs) != len(prompts):
        sys.exit(f"expected {len(prompts)} answers from tune infer, got {len(outputs)}")
    return outputs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("target")
    parser.add_argument("--test", default=os.path.join(ROOT, "data/letters/test.jsonl"))
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--tune", default=os.path.join(ROOT, "build/apps/tune/tune"))
    parser.add_argument("--out", help="write the result (accuracy, counts, examples) as JSON here")
    args = parser.parse_args()

    pairs = read_single_turn(args.test, args.limit)
    outputs = greedy_outputs(args.tune, args.target, [prompt for prompt, _ in pairs])
    correct = sum(o["text"].strip() == answer.strip() for o, (_, answer) in zip(outputs, pairs))
    accuracy = correct / len(pairs)
    examples = [{"prompt": p, "expected": a, "got": o["text"]} for o, (p, a) in list(zip(outputs, pairs))[:5]]
    failures = [{"prompt": p, "expected": a, "got": o["text"]} for o, (p, a) in zip(outputs, pairs)
                if o["text"].strip() != a.strip()]
    print(f"exact-match accuracy on {len(pairs)} held-out prompts: {accuracy:.1%} ({correct}/{len(pairs)})")
    for example in examples[:3]:
        print(f"  {example['prompt']!r} -> {example['got']!r} (expected {example['expected']!r})")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({"target": args.target, "accuracy": accuracy, "correct": correct, "total": len(pairs),
                       "examples": examples, "failures": failures[:50]}, f, indent=2)


if __name__ == "__main__":
    main()
