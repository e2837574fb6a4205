#!/usr/bin/env python3
"""Memory of gradient-enabled inference (`tune infer --grad`) on a Llama: checkpointing on, off, and plain
generation, side by side in one run.

    .venv/bin/python scripts/bench_infer_grad.py [--lengths 256 1024 2048] [--policies full selective off]
                                                 [--tune build/apps/tune/tune] [--out FILE.json]

Each configuration runs `tune infer recipes/sft-tiny.yaml --prompt P --grad --json` in a fresh process with the
benchmark model of scripts/bench_checkpointing.sh (hidden 256, 8 layers, 4 heads, MLP 688; random weights: the
memory does not depend on them) and a prompt of the given length in tokens, generating 4 tokens. `tune` reports
two measured peaks of tracked tensor memory (parameters included): generation (forward only, KV cache) and the
gradient pass (forward over prompt + output with autograd on, backward to every prompt embedding). The script
prints both and the gradient pass's extra over forward-only generation, for each checkpointing policy.
Needs the letters tokenizer: `bash scripts/prepare_letters.sh data/letters` (scripts/run_default.sh runs it).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = ["model.hidden_size=256", "model.intermediate_size=688", "model.num_hidden_layers=8",
         "model.num_attention_heads=4", "model.num_key_value_heads=4", "model.max_position_embeddings=4096"]


def prompt_of(length):
    # The letters tokenizer gives one token per "x " pair; the chat template adds a few more around it.
    letters = "abcdefghijklmnopqrstuvwxyz"
    return " ".join(letters[i % 26] for i in range(length))


def run(tune, length, policy, threads, empty_dir):
    # output_dir points at an empty directory: no trained checkpoint of recipes/sft-tiny.yaml is picked up.
    overrides = MODEL + [f"threads={threads}", f"output_dir={empty_dir}"]
    mode = ["--grad"]
    if policy == "off":
        overrides.append("gradient_checkpointing=false")
    else:
        overrides += ["gradient_checkpointing=true", f"checkpointing.policy={policy}"]
    command = [tune, "infer", os.path.join(ROOT, "recipes/sft-tiny.yaml"), *overrides, "--prompt", prompt_of(length),
               "--max-new-tokens", "4", "--json", *mode]
    start = time.time()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.time() - start
    if result.returncode != 0:
        sys.exit(f"tune infer failed ({result.returncode}):\n{result.stderr}")
    data = json.loads(result.stdout)
    attribution = data["attribution"]
    return {
        "prompt_tokens": len(data["prompt_ids"]),
        "policy": policy,
        "checkpointing": attribution["gradient_checkpointing"],
        "generation_peak_bytes": data["generation_peak_mem_bytes"],
        "grad_peak_bytes": attribution["peak_mem_bytes"],
        "process_s": seconds,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--policies", nargs="+", default=["full", "selective", "off"])
    parser.add_argument("--tune", default=os.path.join(ROOT, "build/apps/tune/tune"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    if not os.path.exists(os.path.join(ROOT, "data/letters/tokenizer.model")):
        sys.exit("data/letters/tokenizer.model is missing: run bash scripts/prepare_letters.sh data/letters")

    rows = []
    mib = 1 << 20
    print("| prompt tokens | policy | generation peak MiB | --grad peak MiB | --grad extra over generation MiB |"
          " extra / off's extra | process s |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for length in args.lengths:
        # Policies interleaved per length: they share the machine's state at that moment.
        with tempfile.TemporaryDirectory() as empty_dir:
            results = [run(args.tune, length, policy, args.threads, empty_dir) for policy in args.policies]
        for r in results:
            r["grad_extra_bytes"] = r["grad_peak_bytes"] - r["generation_peak_bytes"]
        off = next((r for r in results if r["policy"] == "off"), None)
        for r in results:
            ratio = r["grad_extra_bytes"] / off["grad_extra_bytes"] if off and off["grad_extra_bytes"] > 0 else None
            r["extra_over_off_extra"] = ratio
            print(f"| {r['prompt_tokens']} | {r['policy']} | {r['generation_peak_bytes'] / mib:.1f} | "
                  f"{r['grad_peak_bytes'] / mib:.1f} | {r['grad_extra_bytes'] / mib:.1f} | "
                  f"{'-' if ratio is None else f'{ratio:.3f}'} | {r['process_s']:.1f} |", flush=True)
            rows.append(r)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
