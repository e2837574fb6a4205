#!/usr/bin/env python3
"""Data-parallel training on this machine: what communication costs, measured side by side in one run.

    .venv/bin/python scripts/bench_distributed.py [--tune build/apps/tune/tune] [--steps 30] [--rounds 2]
                                                  [--hidden 256] [--layers 4] [--batch 8]

For the same global batch, the SFT recipe (fp32, a Llama of --hidden/--layers, random init, the letters data made
by scripts/make_letters_data.py) runs
  N=1: one process, every core;
  N=2: `tune train --nproc 2` with each strategy (ddp, shard_grad_op, full_shard; full_shard also with
  distributed.prefetch=false), the cores divided (one thread each on 2 cores),
alternately for --rounds rounds, and reports per configuration:
  step time: the median over the logged steps after the first 5 (metrics.jsonl elapsed_s), best round;
  bytes on the loopback interface per step (/proc/net/dev, lo, received; both ranks' traffic, includes the
  TCPStore's small messages) beside the volume the strategy needs in theory, over all N ranks: ddp's ring
  all-reduce 2 (N-1)/N x G x N; shard_grad_op each gradient reduced to its owner (a reduce-scatter's
  (N-1)/N x G x N) plus each owner's updated share to the others (N-1)/N x P x N; full_shard the parameters gathered in forward and again in backward plus the gradients
  reduce-scattered, (2 P + G) (N-1)/N x N (an upper bound: the rest of the model is gathered once per step);
  G gradient bytes, P parameter bytes;
  peak memory per rank, and resident memory (memory.json: tracked tensor storage once gradients are reduced:
  parameters, gradients, optimizer state, what a sharding strategy divides).
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


# label -> the overrides of an N=2 run
STRATEGIES = {
    "ddp": ["distributed.strategy=ddp"],
    "shard_grad_op": ["distributed.strategy=shard_grad_op"],
    "full_shard": ["distributed.strategy=full_shard"],
    "full_shard, no prefetch": ["distributed.strategy=full_shard", "distributed.prefetch=false"],
}


def run(tune, recipe, out, nproc, batch, strategy):
    command = [tune, "train", str(recipe), "--output-dir", str(out), f"training.batch_size={batch}"]
    if nproc > 1:
        command += ["--nproc", str(nproc), "threads=0"] + STRATEGIES[strategy]
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
        "parameter_bytes": memory["parameters_bytes"],
        "peaks": memory.get("peak_bytes_per_rank", [memory["peak_bytes"]]),
        "resident": memory.get("resident_bytes_per_rank", [memory["resident_bytes"]]),
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
        configurations = [(1, "single")] + [(2, strategy) for strategy in STRATEGIES]
        best = {}
        for round_index in range(args.rounds):
            for nproc, strategy in configurations:
                out = tmp / f"run-{strategy.replace(', ', '-').replace(' ', '_')}-{round_index}"
                result = run(args.tune, recipe, out, nproc, args.batch // nproc, strategy)
                if strategy not in best or result["step_s"] < best[strategy]["step_s"]:
                    best[strategy] = result
        one = best["single"]
        n, grads, params = 2, one["gradient_bytes"], one["parameter_bytes"]
        share = (n - 1) / n * n
        volume = {"single": None, "ddp": 2 * grads * share, "shard_grad_op": (grads + params) * share,
                  "full_shard": (2 * params + grads) * share, "full_shard, no prefetch": (2 * params + grads) * share}
        print(f"model: hidden {args.hidden}, {args.layers} layers, {grads / 4 / 1e6:.2f}M parameters "
              f"({grads / 2**20:.1f} MiB of fp32 gradients); global batch {args.batch} x 128 tokens; "
              f"{os.cpu_count()} cores")
        print("| processes | strategy | step time | vs N=1 | loopback bytes / step | theoretical volume | "
              "peak memory per rank | resident per rank |")
        print("|---|---|---|---|---|---|---|---|")
        for nproc, strategy in configurations:
            result = best[strategy]
            peaks = ", ".join(f"{p / 2**20:.1f}" for p in result["peaks"])
            resident = ", ".join(f"{p / 2**20:.1f}" for p in result["resident"])
            theory = f"{volume[strategy] / 2**20:.2f} MiB" if volume[strategy] else "-"
            print(f"| {nproc} | {strategy if nproc > 1 else '-'} | {result['step_s'] * 1000:.0f} ms | "
                  f"{result['step_s'] / one['step_s']:.2f}x | {result['bytes_per_step'] / 2**20:.2f} MiB | {theory} | "
                  f"{peaks} MiB | {resident} MiB |")


if __name__ == "__main__":
    main()
