#!/usr/bin/env python3
"""Sana training step, tune against diffusers' own SanaTransformer2DModel in PyTorch, side by side in one run.

    .venv/bin/python scripts/bench_sana.py [--repeat R] [--steps N] [--threads T] [--policies off,full]
        [--tune build/apps/tune/tune] [--out FILE.json]

Model: a Sana transformer of the published family's block (SanaTransformer2DModel: linear self-attention, cross-
attention to a Gemma 2 caption, GLUMBConv) at a CPU size: 4 blocks of 16 heads x 32 (hidden 512), cross-attention
8 x 64, caption channels 2304 (Gemma 2 2B's width) over 300 tokens (a quarter of them real, the rest masked), 32
latent channels of 16 x 16 (a 512 x 512 image through DC-AE f32c32), batch 2, bf16 autocast over fp32 weights, AdamW,
one step = forward + flow-matching loss + backward + update, with the same random initial weights on both sides.
  (a) PyTorch: diffusers' model in eager mode, `enable_gradient_checkpointing()` for policy full; the official
      trainer's objective written out (logit-normal timesteps, sigmas shifted by 3, x_t = (1 - s) x0 + s eps,
      target eps - x0, MSE); torch.optim.AdamW (foreach). Memory: the process's peak RSS.
  (b) tune: `tune train` (recipe sana) on random prepared latents and caption embeddings
      (scripts/make_random_latents.py --text-channels 2304) in a pipeline directory holding the same transformer
      weights (the other components as configs only: training loads neither encoder); the step time is the median
      difference of metrics.jsonl's elapsed_s after one warm-up step; memory: peak RSS (wait4) and tune's tracked
      tensor peak.
Each repeat runs every (implementation, policy) in a fresh process, alternating; medians over repeats are reported.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_latte_official import run_with_rss  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRANSFORMER = dict(in_channels=32, out_channels=32, num_attention_heads=16, attention_head_dim=32, num_layers=4,
                   num_cross_attention_heads=8, cross_attention_head_dim=64, cross_attention_dim=512,
                   caption_channels=2304, mlp_ratio=2.5, sample_size=16, patch_size=1)
BATCH, LATENT, TOKENS, REAL_TOKENS = 2, 16, 300, 75


def make_pipeline(directory):
    import torch
    from diffusers import SanaTransformer2DModel
    from make_sana_1600m_configs import write_pipeline_configs
    write_pipeline_configs(directory, TRANSFORMER)
    torch.manual_seed(0)
    SanaTransformer2DModel(**TRANSFORMER).save_pretrained(os.path.join(directory, "transformer"))


def pytorch_worker(args):
    """One process: diffusers' model from the pipeline directory, warm-up + args.steps timed steps, one JSON line."""
    import resource
    import torch
    from diffusers import SanaTransformer2DModel
    torch.set_num_threads(args.threads)
    model = SanaTransformer2DModel.from_pretrained(os.path.join(args.pipeline, "transformer")).train()
    if args.policy != "off":
        model.enable_gradient_checkpointing()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    gen = torch.Generator().manual_seed(1)
    x0 = torch.randn(BATCH, 32, LATENT, LATENT, generator=gen)
    caption = torch.randn(BATCH, TOKENS, TRANSFORMER["caption_channels"], generator=gen)
    mask = (torch.arange(TOKENS) < REAL_TOKENS).long().expand(BATCH, TOKENS)

    def step():
        u = torch.sigmoid(torch.randn(BATCH, generator=gen))
        sigma = 3.0 * u / (1 + 2.0 * u)
        noise = torch.randn(x0.shape, generator=gen)
        noisy = (1 - sigma.view(-1, 1, 1, 1)) * x0 + sigma.view(-1, 1, 1, 1) * noise
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(noisy, encoder_hidden_states=caption, encoder_attention_mask=mask,
                        timestep=(sigma * 1000).long(), return_dict=False)[0]
        loss = torch.nn.functional.mse_loss(out.float(), noise - x0)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # warm-up (AdamW state allocated here)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    print(json.dumps({"step_s": statistics.median(times),
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


def write_recipe(path, args, latents, out, policy):
    lines = ["recipe: sana", f"output_dir: {out}", "seed: 0", f"threads: {args.threads}", "mixed_precision: bf16",
             f"gradient_checkpointing: {'false' if policy == 'off' else 'true'}",
             "model:", f"  path: {args.pipeline}", "data:", f"  latents: {latents}", f"  image_size: {LATENT * 32}",
             "training:", f"  batch_size: {BATCH}", f"  max_steps: {args.steps + 1}", "logging:", "  every: 1",
             "checkpoint:", f"  every: {args.steps + 1}", "sampling:", f"  max_text_tokens: {TOKENS}"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def tune_once(args, work, latents, policy):
    out = os.path.join(work, f"run-{policy}-{time.time_ns()}")
    recipe = os.path.join(work, f"{policy}.yaml")
    write_recipe(recipe, args, latents, out, policy)
    _, rss = run_with_rss([args.tune, "train", recipe])
    metrics = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if line.strip()]
    elapsed = [m["elapsed_s"] for m in metrics]
    return {"step_s": statistics.median(b - a for a, b in zip(elapsed, elapsed[1:])), "peak_rss_bytes": rss,
            "tracked_peak_bytes": max(m["peak_mem_bytes"] for m in metrics)}


def pytorch_once(args, policy):
    stdout, rss = run_with_rss([sys.executable, os.path.abspath(__file__), "--worker", "--policy", policy,
                                "--pipeline", args.pipeline, "--threads", str(args.threads), "--steps",
                                str(args.steps)])
    result = json.loads(stdout.strip().splitlines()[-1])
    result["peak_rss_bytes"] = rss
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tune", default=os.path.join(ROOT, "build/apps/tune/tune"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--policies", default="off,full")
    parser.add_argument("--out")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--policy", help=argparse.SUPPRESS)
    parser.add_argument("--pipeline", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return pytorch_worker(args)
    policies = args.policies.split(",")
    with tempfile.TemporaryDirectory(prefix="bench-sana-") as work:
        args.pipeline = os.path.join(work, "pipeline")
        make_pipeline(args.pipeline)
        latents = os.path.join(work, "latents")
        completed = __import__("subprocess").run(
            [sys.executable, os.path.join(ROOT, "scripts/make_random_latents.py"), "--out", latents, "--vae",
             os.path.join(args.pipeline, "vae"), "--image-size", str(LATENT * 32), "--num-frames", "1",
             "--text-channels", str(TRANSFORMER["caption_channels"]), "--max-text-tokens", str(TOKENS),
             "--classes", "1", "--videos-per-class", "4"], capture_output=True, text=True)
        if completed.returncode != 0:
            raise SystemExit(completed.stderr)
        results = {(impl, p): [] for impl in ("pytorch", "tune") for p in policies}
        for _ in range(args.repeat):
            for policy in policies:
                results[("pytorch", policy)].append(pytorch_once(args, policy))
                results[("tune", policy)].append(tune_once(args, work, latents, policy))
    summary = {}
    print(f"Sana training step, {TRANSFORMER['num_layers']} blocks x hidden 512, batch {BATCH} x {LATENT}x{LATENT} "
          f"latents, {TOKENS} caption tokens, bf16 autocast, {args.threads} threads, median of {args.repeat} runs")
    print("| policy | PyTorch (diffusers) step | tune step | tune / PyTorch | PyTorch peak RSS | tune peak RSS | "
          "RSS ratio | tune tracked peak |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for policy in policies:
        med = {impl: {k: statistics.median(r[k] for r in results[(impl, policy)]) for k in ("step_s", "peak_rss_bytes")}
               for impl in ("pytorch", "tune")}
        tracked = statistics.median(r["tracked_peak_bytes"] for r in results[("tune", policy)])
        summary[policy] = {"pytorch": med["pytorch"], "tune": dict(med["tune"], tracked_peak_bytes=tracked),
                           "runs": {f"{impl}": results[(impl, policy)] for impl in ("pytorch", "tune")}}
        print(f"| {policy} | {med['pytorch']['step_s']:.3f} s | {med['tune']['step_s']:.3f} s | "
              f"{med['tune']['step_s'] / med['pytorch']['step_s']:.2f} | {med['pytorch']['peak_rss_bytes'] / 2**20:.0f} MiB | "
              f"{med['tune']['peak_rss_bytes'] / 2**20:.0f} MiB | "
              f"{med['tune']['peak_rss_bytes'] / med['pytorch']['peak_rss_bytes']:.2f} | {tracked / 2**20:.0f} MiB |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
