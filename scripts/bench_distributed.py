#!/usr/bin/env python3
"""Data-parallel training on this machine: what communication costs, measured side by side in one run.

    .venv/bin/python scripts/bench_distributed.py [--tune build/apps/tune/tune] [--steps 30] [--rounds 2]
                                                  [--hidden 256] [--layers 4] [--batch 8]

For the same global batch, the SFT recipe (fp32, a Llama of --hidden/--layers, random init, the letters data made
by scripts/make_letters_data.py) runs
  N=1: one process, every core;
  N=2: `tune train --nproc 2`, strategy ddp, the cores divided (one thread each on 2 cores),
alternately for --rounds rounds, and reports per configuration:
  step time: the median over the logged steps after the first 5 (metrics.jsonl elapsed_s), best round;
  bytes on the loopback interface per step (/proc/net/dev, lo, received; both ranks' traffic, includes the
  TCPStore's small messages) beside the ring all-reduce volume 2 (N-1) / N x gradient bytes x N ranks;
  peak memory per rank (memory.json: tracked tensor storage).
Nothing is asserted: the figures are printed as a table (README, "Distributed training").
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def loopback_bytes():
    for line in open("/proc/net/dev"):
        name, _, fields = line.partition(":")
        if name.strip() == "lo":
            return int(fields.split()[0])
    return 0


def write_recipe(path, data, args):
    path.write_text(f"""recipe: sft
seed: 1
mixed_precision: "no"
gradient_checkpointing: false
model:
  hidden_size: {args.hidden}
  intermediate_size: {args.hidden * 2}
  num_hidden_layers: {args.layers}
  num_attention_heads: 4
  num_key_value_heads: 4
  max_position_embeddings: 256
tokenizer: {data}/tokenizer.model
data:
  train: {data}/train.jsonl
  max_length: 128
  packing: true
training:
  max_steps: {args.steps}
logging:
  every: 1
checkpoint:
  every: 0
  keep_last: 1
""")


def run(tune, recipe, out, nproc, batch):
    command = [tune, "train", str(recipe), "--output-dir", str(out), f"training.batch_size={batch}"]
    if nproc > 1:
        command += ["--nproc", str(nproc), "threads=0"]
    before = loopback_bytes()
    subprocess.run(command, check=True, stderr=subprocess.DEVNULL)
    traffic = loopback_bytes() - before
    records = [json.loads(line) for line in open(out / "metrics.jsonl") if line.strip()]
    times = [b["elapsed_s"] - a["elapsed_s"] for a, b in zip(records, records[1:])][5:]
    memory = json.load(open(out / "memory.json"))
    return {
        "step_s": statistics.median(times),
        "bytes_per_step": traffic / len(records),
        "gradient_bytes": memory["gradients_bytes"],
        "peaks": memory.get("peak_bytes_per_rank", [memory["peak_bytes"]]),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tune", default=str(ROOT / "build/apps/tune/tune"))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8, help="global batch (rows)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = tmp / "data"
        subprocess.run([sys.executable, str(ROOT / "scripts/make_letters_data.py"), "--out", str(data), "--train", "2000",
                        "--test", "10"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["bash", str(ROOT / "scripts/train_tokenizer.sh"), str(data / "tokenizer.model"),
                        str(data / "train.jsonl")], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        recipe = tmp / "bench.yaml"
        write_recipe(recipe, data, args)
        best = {}
        for round_index in range(args.rounds):
            for nproc in (1, 2):
                out = tmp / f"run-{nproc}-{round_index}"
                result = run(args.tune, recipe, out, nproc, args.batch // nproc)
                if nproc not in best or result["step_s"] < best[nproc]["step_s"]:
                    best[nproc] = result
        one, two = best[1], best[2]
        ring = 2 * (2 - 1) / 2 * two["gradient_bytes"] * 2
        print(f"model: hidden {args.hidden}, {args.layers} layers, {one['gradient_bytes'] / 4 / 1e6:.2f}M parameters "
              f"({one['gradient_bytes'] / 2**20:.1f} MiB of fp32 gradients); global batch {args.batch} x 128 tokens; "
              f"{os.cpu_count()} cores")
        print("| processes | step time | vs N=1 | loopback bytes / step | ring all-reduce volume | peak memory per rank |")
        print("|---|---|---|---|---|---|")
        for nproc, result in ((1, one), (2, two)):
            peaks = ", ".join(f"{p / 2**20:.1f} MiB" for p in result["peaks"])
            volume = f"{ring / 2**20:.2f} MiB" if nproc == 2 else "-"
            print(f"| {nproc} | {result['step_s'] * 1000:.0f} ms | {result['step_s'] / one['step_s']:.2f}x | "
                  f"{result['bytes_per_step'] / 2**20:.2f} MiB | {volume} | {peaks} |")


if __name__ == "__main__":
    main()
