#!/usr/bin/env python3
"""DPO step time with the pairs packed without padding (data.packing, the default) against one right-padded row per
sequence (data.packing=false, TRL's layout), side by side in one run.

    .venv/bin/python scripts/bench_dpo_packing.py [--recipe recipes/dpo-tiny.yaml] [--steps 60] [--repeat 3]
        [--tune build/apps/tune/tune] [--varied-from data/letters-dpo/train.jsonl] [OVERRIDE ...]

Each repeat trains the recipe for --steps steps twice in fresh processes, packing on then off (the order alternates
between repeats), without evaluation or checkpoints; the step time is the median difference of metrics.jsonl's
elapsed_s over the logged steps after the first. Reported: the median over repeats of each, and off / on. The
default recipe needs the SFT default's export and its pairs (scripts/run_dpo_default.sh makes both). How much
packing saves depends on how much the lengths in a batch differ: nothing when every sequence is as long as the
batch's longest, up to half the rows when most are at most half as long. --varied-from FILE trains instead on its
first 400 conversational pairs with each completion repeated 1, 2, 4 or 8 times (seeded: 1 with probability 1/2),
lengths that differ as real preference data's do.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile


def step_time(tune, recipe, steps, packing, overrides):
    with tempfile.TemporaryDirectory(prefix="tune-bench-dpo-") as out:
        command = [tune, "train", recipe, "--output-dir", out, f"training.max_steps={steps}", "eval.every=0",
                   "data.eval=null", "checkpoint.every=0", "logging.every=1", f"data.packing={packing}"] + overrides
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(out, "metrics.jsonl")) as f:
            elapsed = [json.loads(line)["elapsed_s"] for line in f if line.strip()]
    return statistics.median(b - a for a, b in zip(elapsed[1:], elapsed[2:]))


def write_varied(source, out):
    random.seed(0)
    rows = [json.loads(line) for line in open(source) if line.strip()][:400]
    with open(out, "w") as f:
        for row in rows:
            for key in ("chosen", "rejected"):
                times = random.choice([1, 1, 1, 2, 4, 8])
                if isinstance(row[key], list):
                    row[key][-1]["content"] = " ".join([row[key][-1]["content"]] * times)
                else:
                    row[key] = " ".join([row[key]] * times)
            f.write(json.dumps(row) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="recipes/dpo-tiny.yaml")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tune", default="build/apps/tune/tune")
    parser.add_argument("--varied-from", help="a pairs file whose completions to repeat 1-8 times (see above)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.varied_from:
        varied = os.path.join(tempfile.mkdtemp(prefix="tune-bench-dpo-data-"), "varied.jsonl")
        write_varied(args.varied_from, varied)
        args.overrides = [f"data.train={varied}"] + args.overrides
    times = {"true": [], "false": []}
    for r in range(args.repeat):
        for packing in (["true", "false"] if r % 2 == 0 else ["false", "true"]):
            times[packing].append(step_time(args.tune, args.recipe, args.steps, packing, args.overrides))
            print(f"repeat {r + 1}, packing {packing}: {times[packing][-1] * 1000:.1f} ms/step", file=sys.stderr)
    on, off = statistics.median(times["true"]), statistics.median(times["false"])
    print(json.dumps({"recipe": args.recipe, "overrides": args.overrides, "steps": args.steps,
                      "packed_ms": on * 1000, "padded_ms": off * 1000, "padded_over_packed": off / on}, indent=2))


if __name__ == "__main__":
    main()
