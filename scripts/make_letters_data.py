#!/usr/bin/env python3
"""Generates the "letters" SFT task for the default recipe: reverse a sequence of letters, or name its first and
last letter. Plain stdlib, seeded; writes <out>/train.jsonl and <out>/test.jsonl (test items never occur in train).

    python3 scripts/make_letters_data.py [--out data/letters] [--seed 0] [--train 20000] [--test 500]

Why a small Llama learns it in ~2000 CPU steps: with letters separated by spaces, every letter is one token
("▁k"), so "Reverse: k d m q" -> "q m d k" is pure copying from a position the model can find with attention
(the mirror of the output position inside a 3-6 token span); "First and last: k d m q" -> "k q" is two copies.
Exception: a letter right after a newline (the reply's first letter, and the data's first letter in Alpaca's split
form "Reverse:\n\nk d m q") is the piece "k", not "▁k", since conversations are encoded as one text as transformers
does; the tiny default model learns the first but not to copy the second (docs/BENCHMARKS.md: the split-form
prompts are the default job's misses). The answers are short, the vocabulary tiny and there is no ambiguity, so loss falls fast and exact-match
accuracy on test.jsonl is a clear pass/fail signal. Rows come in both JSONL forms the loader reads:
half instruction rows (some with a separate "input"), half chat rows (some with a system message, some two turns).
"""
import argparse
import json
import os
import random
import string

SYSTEM_PROMPT = "You are a careful assistant."


def make_item(rng):
    """One (operation, letters) pair; the key used to keep test items out of train."""
    letters = tuple(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 6)))
    operation = "Reverse" if rng.random() < 2 / 3 else "First and last"
    return operation, letters


def answer(item):
    operation, letters = item
    chosen = letters[::-1] if operation == "Reverse" else (letters[0], letters[-1])
    return " ".join(chosen)


def question(item):
    operation, letters = item
    return f"{operation}: {' '.join(letters)}"


def make_row(rng, draw_item):
    """A JSONL row in instruction or chat form, using one or two fresh items from draw_item()."""
    if rng.random() < 0.5:
        item = draw_item()
        if rng.random() < 0.2:  # Alpaca's split form: the task in "instruction", the data in "input"
            return {"instruction": f"{item[0]}:", "input": " ".join(item[1]), "output": answer(item)}
        return {"instruction": question(item), "output": answer(item)}
    messages = []
    if rng.random() < 0.2:
        messages.append({"role": "system", "content": SYSTEM_PROMPT})
    for _ in range(2 if rng.random() < 0.25 else 1):
        item = draw_item()
        messages.append({"role": "user", "content": question(item)})
        messages.append({"role": "assistant", "content": answer(item)})
    return {"messages": messages}


def generate(count, rng, forbidden):
    """count rows whose items are all outside `forbidden`; returns the rows and the items they used."""
    used = set()

    def draw_item():
        while True:
            item = make_item(rng)
            if item not in forbidden:
                used.add(item)
                return item

    return [make_row(rng, draw_item) for _ in range(count)], used


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data/letters", help="output directory (default data/letters)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=20000, help="train rows")
    parser.add_argument("--test", type=int, default=500, help="test rows")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    test_rows, test_items = generate(args.test, rng, forbidden=set())
    train_rows, _ = generate(args.train, rng, forbidden=test_items)
    os.makedirs(args.out, exist_ok=True)
    write_jsonl(os.path.join(args.out, "train.jsonl"), train_rows)
    write_jsonl(os.path.join(args.out, "test.jsonl"), test_rows)
    print(f"wrote {len(train_rows)} train and {len(test_rows)} test rows to {args.out}")


if __name__ == "__main__":
    main()
