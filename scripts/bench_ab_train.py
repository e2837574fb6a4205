#!/usr/bin/env python3
"""Side by side: `tune train` on one recipe under two or more variants (binaries or environment settings), alternating.

    .venv/bin/python scripts/bench_ab_train.py RECIPE.yaml [--rounds 5] VARIANT VARIANT ...

A VARIANT is `name` or `name:KEY=VALUE,KEY=VALUE`, where KEY is an environment variable for that run, or BIN for the
tune binary to run (default build/apps/tune/tune). Example, this build against an older binary and against this
build with one kernel off:

    .venv/bin/python scripts/bench_ab_train.py latte_full.yaml --rounds 7 old:BIN=/tmp/tune.old new \\
        frame-off:TUNE_CPU_FRAME_ATTENTION=off

Each round runs every variant once, in order, each in a fresh process with its own output_dir, so the variants share
a shared machine's slow and fast minutes. Per run: its fastest step (the recipe's first step is the warm-up: set
max_steps to 1 + the steps to time, logging every step), the tracked tensor peak (metrics.jsonl's peak_mem_bytes)
and the process's peak RSS. Per variant: the median over rounds of the fastest step, and in how many rounds it was
the fastest variant; the rounds themselves are printed as they finish.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_variant(text):
    name, _, settings = text.partition(":")
    env = {}
    for pair in filter(None, settings.split(",")):
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"bench_ab_train: variant {text!r}: expected KEY=VALUE, got {pair!r}")
        env[key] = value
    return name, env


def run_once(recipe_text, env_settings, work):
    out = os.path.join(work, "run")
    shutil.rmtree(out, ignore_errors=True)
    recipe = os.path.join(work, "recipe.yaml")
    with open(recipe, "w") as f:
        text, replaced = re.subn(r"(?m)^output_dir:.*$", f"output_dir: {out}", recipe_text)
        f.write(text if replaced else f"{text.rstrip()}\noutput_dir: {out}\n")
    env = dict(os.environ)
    binary = env_settings.get("BIN", os.path.join(ROOT, "build/apps/tune/tune"))
    env.update({k: v for k, v in env_settings.items() if k != "BIN"})
    log_path = os.path.join(work, "stderr.txt")
    with open(log_path, "w") as log:
        process = subprocess.Popen([binary, "train", recipe], env=env, stdout=subprocess.DEVNULL, stderr=log)
        _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bench_ab_train: {binary} exited {os.waitstatus_to_exitcode(status)}:\n"
                         f"{open(log_path).read()[-2000:]}")
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if '"elapsed_s"' in line]
    elapsed = [row["elapsed_s"] for row in rows]
    steps = [b - a for a, b in zip(elapsed, elapsed[1:])]
    if not steps:
        raise SystemExit("bench_ab_train: the recipe must log at least two steps (logging.every: 1, max_steps >= 2)")
    return min(steps), max(row.get("peak_mem_bytes", 0) for row in rows) / 2**20, usage.ru_maxrss / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe")
    parser.add_argument("variants", nargs="+")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if len(args.variants) < 2:
        raise SystemExit("bench_ab_train: give at least two variants")
    variants = [parse_variant(v) for v in args.variants]
    recipe_text = open(args.recipe).read()
    results = {name: [] for name, _ in variants}
    wins = {name: 0 for name, _ in variants}
    with tempfile.TemporaryDirectory(prefix="tune-ab-") as work:
        for round_index in range(args.rounds):
            fastest = {}
            for name, settings in variants:
                step, peak, rss = run_once(recipe_text, settings, work)
                results[name].append((step, peak, rss))
                fastest[name] = step
                print(f"round {round_index + 1} {name}: fastest step {step:.3f} s, tensor peak {peak:.0f} MiB, "
                      f"RSS {rss:.0f} MiB", flush=True)
            wins[min(fastest, key=fastest.get)] += 1
    print(f"\n{args.recipe}, {args.rounds} rounds:")
    for name, _ in variants:
        steps = [r[0] for r in results[name]]
        peaks = [r[1] for r in results[name]]
        rss = [r[2] for r in results[name]]
        print(f"  {name}: median of fastest steps {statistics.median(steps):.3f} s (min {min(steps):.3f}), "
              f"tensor peak {statistics.median(peaks):.0f} MiB, RSS {statistics.median(rss):.0f} MiB, fastest in "
              f"{wins[name]} of {args.rounds} rounds")


if __name__ == "__main__":
    sys.exit(main())
