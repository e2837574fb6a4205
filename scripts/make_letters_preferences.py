#!/usr/bin/env python3
"""Preference pairs for the DPO default (recipes/dpo-tiny.yaml): the SFT default's own mistakes on training prompts.

    scripts/make_letters_preferences.py MODEL [--train data/letters/train.jsonl] [--out data/letters-dpo]
        [--limit 4000] [--eval-fraction 0.1] [--tune build/apps/tune/tune] [--keep-empty]

MODEL is what `tune infer` accepts (the SFT default's run or its export). Every single-turn training prompt (as
scripts/eval_letters_accuracy.py builds it) is answered greedily by MODEL in one `tune infer --prompts-file` call;
where the answer differs from the data's, the row becomes a pair: chosen the data's answer, rejected the model's
(its typical mistake: on the Alpaca split-form prompts, the wrong first letter). Pairs are written in the
conversational form ({"prompt": [user], "chosen": [assistant], "rejected": [assistant]}) to OUT/train.jsonl, and a
seeded eval_fraction of them to OUT/eval.jsonl (held out: their reward accuracy is the run's eval figure). The
test split is never read, so the exact match that scripts/eval_letters_accuracy.py measures stays held out.
"""
import argparse
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from eval_letters_accuracy import greedy_outputs, read_single_turn  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("--train", default=os.path.join(ROOT, "data/letters/train.jsonl"))
    parser.add_argument("--out", default=os.path.join(ROOT, "data/letters-dpo"))
    parser.add_argument("--limit", type=int, default=4000, help="training prompts to answer")
    parser.add_argument("--eval-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tune", default=os.path.join(ROOT, "build/apps/tune/tune"))
    parser.add_argument("--keep-empty", action="store_true",
                        help="also make pairs of empty answers (an undertrained model's); by default they are skipped")
    args = parser.parse_args()

    prompts = read_single_turn(args.train, args.limit)
    answers = [output["text"] for output in greedy_outputs(args.tune, args.model, [p for p, _ in prompts])]

    pairs = []
    for (prompt, reference), answer in zip(prompts, answers):
        if answer.strip() != reference.strip() and (answer.strip() or args.keep_empty):
            pairs.append({"prompt": [{"role": "user", "content": prompt}],
                          "chosen": [{"role": "assistant", "content": reference}],
                          "rejected": [{"role": "assistant", "content": answer.strip()}]})
    if len(pairs) < 2:
        sys.exit(f"only {len(pairs)} of {len(prompts)} answers were wrong: too few pairs (raise --limit)")
    random.Random(args.seed).shuffle(pairs)
    held_out = max(1, int(round(args.eval_fraction * len(pairs))))
    os.makedirs(args.out, exist_ok=True)
    for name, rows in (("eval.jsonl", pairs[:held_out]), ("train.jsonl", pairs[held_out:])):
        with open(os.path.join(args.out, name), "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    split_form = sum("\n\n" in p["prompt"][0]["content"] for p in pairs)
    print(f"{len(prompts)} training prompts answered, {len(pairs)} wrong ({split_form} of them split-form "
          f"prompts): {len(pairs) - held_out} training and {held_out} held-out pairs in {args.out}")


if __name__ == "__main__":
    main()
