#!/usr/bin/env python3
"""Latte memory/speed benchmark: training steps and gradient-guided sampling with activation checkpointing off and
on, side by side in one run, through the tune binary itself (what users run).

    .venv/bin/python scripts/bench_latte.py [--quick] [--repeat R] [--steps N] [--threads T] [--out FILE.json]

Default model: Latte-S/2 sizes (hidden 384, depth 12, 6 heads, patch 2) on 16-frame 32x32 pixel clips, i.e. 256
tokens per frame: the token count of Latte-S/2 on 256x256 videos through the SD VAE (32x32x4 latents), with 3
instead of 4 input channels. bf16 autocast, batch 1. For each repeat the policies run back to back in fresh
processes (so they share the machine's noise):
  - `tune train` for --steps steps (+1 unmeasured warm-up step): median step time from metrics.jsonl, and peak
    tensor memory (tracking allocator) minus the parameters, gradients, optimizer state and EMA of memory.json:
    the activations and temporaries of a step (an understatement: gradients are allocated during backward, so not
    all of them exist at the peak); and the peak over the memory plan (that state plus the activation estimate);
  - `tune infer --grad --json` (reference-frame + smoothness guidance, DDIM, --sample-steps steps) on the weights
    trained above: sampling time and peak memory.
Ratios are policy / off. --quick: a small model for a smoke test of the script. Needs the project built
(scripts/build.sh); generates its data with scripts/make_moving_shapes.py in a temporary folder.

--xl: Latte-XL/2 (hidden 1152, depth 28, 16 heads, patch 2) on 16 frames of 32x32x4 latents (the latent size of
256x256 videos through the SD VAE), batch 1, on --device (cuda on the GPU machine). The data are random latents
(scripts/make_random_latents.py, tune-latents-v1) next to the test fixture VAE (tests/fixtures/vae, which
downsamples by 2: image_size 64), so no video decoding is needed; guided sampling uses the smoothness objective
only (a reference frame would need FFmpeg to read). Peak memory on CUDA is the caching allocator's.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_recipe(path, args, data, out, policy):
    lines = [
        "recipe: latte", f"output_dir: {out}", "seed: 0", f"threads: {args.threads}", "mixed_precision: bf16",
        f"device: {args.device}",
        f"gradient_checkpointing: {'false' if policy == 'off' else 'true'}",
    ]
    if policy != "off":
        lines += ["checkpointing:", f"  policy: {policy}"]
    lines += [
        "model:", "  variant: Latte-S/2", f"  hidden_size: {args.hidden}", f"  depth: {args.depth}",
        f"  num_heads: {args.heads}", f"  patch_size: {args.patch}",
    ] + ([f"  vae: {os.path.join(ROOT, 'tests/fixtures/vae')}"] if args.xl else []) + [
        "data:", f"  path: {data}", f"  num_frames: {args.frames}", "  frame_interval: 1",
        f"  image_size: {args.size}", "  flip: false", "  cache_frames: true",
    ] + ([f"  latents: {data}"] if args.xl else []) + [
        "training:", f"  batch_size: {args.batch}", f"  max_steps: {args.steps + 1}",
        "logging:", "  every: 1", "checkpoint:", f"  every: {args.steps + 1}",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def run(command):
    completed = subprocess.run(command, capture_output=True, text=True)
    if completed.returncode != 0:
        sys.stderr.write(completed.stderr[-4000:])
        raise SystemExit(f"bench_latte: {' '.join(command)} exited {completed.returncode}")
    return completed


def train_once(args, work, data, policy):
    out = os.path.join(work, f"run-{policy}")
    shutil.rmtree(out, ignore_errors=True)
    recipe = os.path.join(work, f"{policy}.yaml")
    write_recipe(recipe, args, data, out, policy)
    run([args.tune, "train", recipe])
    metrics = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if line.strip()]
    elapsed = [m["elapsed_s"] for m in metrics]
    step_times = [b - a for a, b in zip(elapsed, elapsed[1:])]  # the first step (warm-up) is not measured
    memory = json.load(open(os.path.join(out, "memory.json")))
    plan = memory["plan"] if "plan" in memory else memory
    state = sum(plan.get(key, 0) for key in ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "ema_bytes"))
    peak = max(m["peak_mem_bytes"] for m in metrics)
    # The plan: the state that lives across steps plus the activation estimate. Gradients are allocated during
    # backward (the optimizer drops them after each step, as PyTorch's set_to_none), so at the peak part of them
    # does not exist yet: the plan is an upper bound by up to the gradient bytes.
    return out, {"step_s": statistics.median(step_times), "peak_bytes": peak, "activation_bytes": peak - state,
                 "plan_bytes": state + plan.get("activations_estimate_bytes", 0)}


def sample_once(args, run_dir, reference, policy):
    overrides = ["gradient_checkpointing=false"] if policy == "off" else ["gradient_checkpointing=true",
                                                                          f"checkpointing.policy={policy}"]
    guidance = [f"guidance.reference={reference}"] if reference else []
    completed = run([args.tune, "infer", run_dir, "--class", "0", "--grad", "--json", "--steps", str(args.sample_steps),
                     "--out", os.path.join(os.path.dirname(run_dir), f"sample-{policy}.safetensors")] + guidance +
                    overrides)
    summary = json.loads(completed.stdout.strip().splitlines()[-1])
    return {"sampling_s": summary["sampling_s"], "peak_bytes": summary["peak_mem_bytes"],
            "checkpointing": summary["gradient_checkpointing"]}


def mib(value):
    return f"{value / 2**20:.1f} MiB"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tune", default=os.path.join(ROOT, "build/apps/tune/tune"))
    parser.add_argument("--quick", action="store_true", help="tiny model: checks the script, not a measurement")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="measured training steps per run")
    parser.add_argument("--sample-steps", type=int, default=4, help="DDIM steps of the guided sampling run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--policies", default="off full", help="checkpointing policies; off is always included")
    parser.add_argument("--out", help="write all results as JSON here")
    parser.add_argument("--device", default="cpu", help="cpu | cuda")
    parser.add_argument("--xl", action="store_true", help="Latte-XL/2 on 16x32x32x4 random latents (see above)")
    args = parser.parse_args()
    args.hidden, args.depth, args.heads, args.patch, args.frames, args.size = 384, 12, 6, 2, 16, 32
    if args.xl:
        args.hidden, args.depth, args.heads, args.patch, args.frames, args.size = 1152, 28, 16, 2, 16, 64
    if args.quick:
        args.hidden, args.depth, args.heads, args.patch, args.frames, args.size = 64, 4, 2, 4, 4, 16
    policies = ["off"] + [p for p in args.policies.split() if p != "off"]
    if not os.path.exists(args.tune):
        raise SystemExit(f"bench_latte: {args.tune} not found; build first (bash scripts/build.sh)")

    with tempfile.TemporaryDirectory(prefix="bench-latte-") as work:
        if args.xl:
            data = os.path.join(work, "latents")
            run([sys.executable, os.path.join(ROOT, "scripts/make_random_latents.py"), "--out", data,
                 "--vae", os.path.join(ROOT, "tests/fixtures/vae"), "--image-size", str(args.size),
                 "--num-frames", str(args.frames)])
            reference = None
        else:
            data = os.path.join(work, "shapes")
            run([sys.executable, os.path.join(ROOT, "scripts/make_moving_shapes.py"), "--out", data,
                 "--videos-per-class", "2", "--num-frames", str(args.frames), "--size", str(args.size),
                 "--shape-size", str(args.size // 4)])
            reference = os.path.join(data, "0_right", "v0000", "frame_00000.png")
        results = {p: {"train": [], "sample": []} for p in policies}
        for repeat in range(args.repeat):
            trained = {}
            for policy in policies:
                trained[policy], measured = train_once(args, work, data, policy)
                results[policy]["train"].append(measured)
                print(f"[{repeat + 1}/{args.repeat}] train {policy}: step {measured['step_s']:.2f} s, "
                      f"activations {mib(measured['activation_bytes'])}", file=sys.stderr)
            for policy in policies:  # every policy samples from the same weights
                measured = sample_once(args, trained["off"], reference, policy)
                results[policy]["sample"].append(measured)
                print(f"[{repeat + 1}/{args.repeat}] infer --grad {policy}: {measured['sampling_s']:.2f} s, "
                      f"peak {mib(measured['peak_bytes'])}", file=sys.stderr)

    def med(policy, kind, key):
        return statistics.median(r[key] for r in results[policy][kind])

    print(f"\nLatte {'(quick) ' if args.quick else ''}hidden {args.hidden}, depth {args.depth}, heads {args.heads}, "
          f"patch {args.patch}, {args.frames} frames of {args.size}x{args.size} pixels "
          f"({(args.size // (2 if args.xl else 1) // args.patch) ** 2} tokens/frame{', latents' if args.xl else ''}), batch {args.batch}, bf16, {args.threads} threads; "
          f"medians of {args.repeat} runs\n")
    print("| policy | train step | x off | activations + temporaries | x off | peak | peak / plan | "
          f"infer --grad ({args.sample_steps} DDIM steps) | x off | infer peak | x off |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for policy in policies:
        step, act, peak = med(policy, "train", "step_s"), med(policy, "train", "activation_bytes"), med(policy, "train", "peak_bytes")
        sample_s, sample_peak = med(policy, "sample", "sampling_s"), med(policy, "sample", "peak_bytes")
        plan = med(policy, "train", "plan_bytes")
        print(f"| {policy} | {step:.2f} s | {step / med('off', 'train', 'step_s'):.2f} | {mib(act)} | "
              f"{act / med('off', 'train', 'activation_bytes'):.2f} | {mib(peak)} | {peak / plan:.2f} | "
              f"{sample_s:.2f} s | "
              f"{sample_s / med('off', 'sample', 'sampling_s'):.2f} | {mib(sample_peak)} | "
              f"{sample_peak / med('off', 'sample', 'peak_bytes'):.2f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"settings": {k: v for k, v in vars(args).items()}, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
