#!/usr/bin/env python3
"""Latte-1 (text-to-video) at its real size: gradient-enabled sampling, tune against diffusers' own transformer,
and tune's training step per checkpointing policy; each configuration in a fresh process, side by side in one run.

    python3 scripts/bench_latte1.py --tune build-cuda/apps/tune/tune --pipeline DIR [--device cuda]
        [--frames 16] [--size 512] [--small-size 256] [--sample-steps 2] [--train-steps 3]
        [--cases tune-infer,diffusers,tune-train] [--timeout 240] [--out FILE.json]

DIR is a LattePipeline directory (scripts/make_real_size_pipeline.py writes one with Latte-1's real configs and
random weights). Cases, in this order (--cases picks groups; results are appended to --out after each case, so a
run cut short keeps what it measured):

  tune-infer   `tune infer DIR --prompt P --frames F --height S --width S --steps N --grad --json` (classifier-free
               guidance at the pipeline's scale 7.5: batch 2 through the transformer; DDIM; smoothness guidance of the
               predicted x0; bf16 autocast over the published fp32 weights), checkpointing full and off, at
               F x S x S (the seed's case: 16 x 512 x 512) and F x --small-size^2. Peak: tune's JSON
               peak_mem_bytes (the CUDA caching allocator's peak while denoising, transformer weights included);
               the memory plan tune printed before denoising (weights + activations_estimate_bytes). A run that
               fails (out of memory) is recorded with the last lines of its error.
  diffusers    The same guided step (one, at the first DDIM timestep) through diffusers' LatteTransformer3DModel
               loaded from DIR/transformer (fp32 weights, frozen, eval mode, bf16 autocast, SDPA attention),
               latents [1, 4, F, S/8, S/8] with requires_grad, random caption embeddings [2, 120, 4096] (the
               T5 encoder runs before and without gradients in both tools), CFG, x0 = (x - sqrt(1 - abar) eps) /
               sqrt(abar), loss = the mean squared difference of consecutive frames of x0, backward to the
               latents; with and without enable_gradient_checkpointing(). Peak: torch.cuda.max_memory_allocated()
               (weights included), or the out-of-memory error.
  tune-train   `tune train` (recipe latte_t2v, full fine-tune, AdamW, EMA, bf16 autocast, batch 1) on random
               prepared latents and caption embeddings (scripts/make_random_latents.py --text-channels, 4096 here) of
               16 x --small-size^2 clips, per checkpointing policy (off, full, selective): median step time over
               --train-steps (after one warm-up step) and peak_mem_bytes from metrics.jsonl.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "a dog wearing sunglasses on a beach"


def gib(value):
    return f"{value / 2**30:.2f} GiB" if isinstance(value, (int, float)) else str(value)


def run(command, timeout, env=None):
    start = time.time()
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s", time.time() - start
    error = None
    if completed.returncode != 0:
        lines = (completed.stderr or completed.stdout).strip().splitlines()
        error = f"exit {completed.returncode}: " + " | ".join(lines[-4:])[-800:]
    return completed, error, time.time() - start


def tune_infer(args, work, frames, size, policy):
    out = os.path.join(work, f"infer-{policy}-{frames}x{size}.safetensors")
    command = [args.tune, "infer", args.pipeline, "--prompt", PROMPT, "--frames", str(frames), "--height", str(size),
               "--width", str(size), "--steps", str(args.sample_steps), "--grad", "--json", "--out", out,
               f"device={args.device}", "mixed_precision=bf16",
               "gradient_checkpointing=" + ("false" if policy == "off" else "true")]
    completed, error, seconds = run(command, args.timeout)
    result = {"case": f"tune-infer-{policy}-{frames}x{size}", "tool": "tune", "policy": policy, "frames": frames,
              "size": size, "process_s": round(seconds, 1)}
    if error:
        result["error"] = error
        return result
    summary = json.loads(completed.stdout.strip().splitlines()[-1])
    result.update({key: summary[key] for key in ("peak_mem_bytes", "weights_bytes", "activations_estimate_bytes",
                                                   "sampling_s", "gradient_checkpointing")})
    result["plan_bytes"] = summary["weights_bytes"] + summary["activations_estimate_bytes"]
    return result


def diffusers_case(args, frames, size, checkpointing):
    command = [sys.executable, os.path.abspath(__file__), "--diffusers-child", "--pipeline", args.pipeline,
               "--device", args.device, "--frames", str(frames), "--size", str(size)] + \
              (["--checkpointing"] if checkpointing else [])
    completed, error, seconds = run(command, args.timeout)
    name = "ckpt" if checkpointing else "plain"
    result = {"case": f"diffusers-{name}-{frames}x{size}", "tool": "diffusers", "frames": frames, "size": size,
              "policy": "enable_gradient_checkpointing()" if checkpointing else "off", "process_s": round(seconds, 1)}
    if error:
        result["error"] = error
    else:
        result.update(json.loads(completed.stdout.strip().splitlines()[-1]))
    return result


def diffusers_child(args):
    # One guided DDIM step with gradients, as a user of diffusers' LattePipeline would write it (see the docstring).
    import torch
    from diffusers import DDIMScheduler, LatteTransformer3DModel

    device = torch.device(args.device)
    transformer = LatteTransformer3DModel.from_pretrained(os.path.join(args.pipeline, "transformer"),
                                                          torch_dtype=torch.float32).to(device).eval()
    transformer.requires_grad_(False)
    if args.checkpointing:
        transformer.enable_gradient_checkpointing()
    scheduler = DDIMScheduler.from_pretrained(os.path.join(args.pipeline, "scheduler"))
    scheduler.set_timesteps(50)
    timestep = scheduler.timesteps[0]
    alpha_bar = scheduler.alphas_cumprod[timestep].item()
    generator = torch.Generator().manual_seed(0)
    latent_size = args.size // 8
    latents = torch.randn(1, 4, args.frames, latent_size, latent_size, generator=generator).to(device)
    latents.requires_grad_(True)
    captions = torch.randn(2, 120, transformer.config.caption_channels, generator=generator).to(device)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.time()
    try:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            output = transformer(torch.cat([latents, latents]), encoder_hidden_states=captions,
                                 timestep=torch.tensor([timestep, timestep], device=device),
                                 enable_temporal_attentions=True, return_dict=False)[0]
        unconditional, conditional = output[:, :4].float().chunk(2)
        eps = unconditional + 7.5 * (conditional - unconditional)
        x0 = (latents - (1 - alpha_bar) ** 0.5 * eps) / alpha_bar ** 0.5
        loss = (x0[:, :, 1:] - x0[:, :, :-1]).pow(2).mean()
        loss.backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        result = {"step_s": round(time.time() - start, 3), "grad_norm": latents.grad.norm().item()}
    except torch.OutOfMemoryError as error:
        result = {"error": "out of memory: " + str(error).splitlines()[0][:300]}
    if device.type == "cuda":
        result["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
        result["device_total_bytes"] = torch.cuda.get_device_properties(device).total_memory
    result["weights_bytes"] = sum(p.numel() * p.element_size() for p in transformer.parameters())
    print(json.dumps(result))


def tune_train(args, work, latents, policy):
    out = os.path.join(work, f"train-{policy}")
    shutil.rmtree(out, ignore_errors=True)
    recipe = os.path.join(work, f"train-{policy}.yaml")
    lines = ["recipe: latte_t2v", f"output_dir: {out}", "seed: 0", f"device: {args.device}", "mixed_precision: bf16",
             f"gradient_checkpointing: {'false' if policy == 'off' else 'true'}"]
    if policy != "off":
        lines += ["checkpointing:", f"  policy: {policy}"]
    lines += ["model:", f"  path: {args.pipeline}", "data:", f"  latents: {latents}", f"  num_frames: {args.frames}",
              "  frame_interval: 1", f"  image_size: {args.small_size}", "  flip: false", "  caption_dropout: 0.1",
              "training:", "  batch_size: 1", f"  max_steps: {args.train_steps + 1}", "logging:", "  every: 1",
              "checkpoint:", f"  every: {args.train_steps + 1}"]
    with open(recipe, "w") as f:
        f.write("\n".join(lines) + "\n")
    completed, error, seconds = run([args.tune, "train", recipe], args.timeout)
    result = {"case": f"tune-train-{policy}", "tool": "tune", "policy": policy, "frames": args.frames,
              "size": args.small_size, "process_s": round(seconds, 1)}
    if not error:
        metrics = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if line.strip()]
        elapsed = [m["elapsed_s"] for m in metrics if "elapsed_s" in m]
        steps = [b - a for a, b in zip(elapsed, elapsed[1:])]
        result.update({"step_s": round(statistics.median(steps), 4) if steps else None,
                       "peak_mem_bytes": max(m["peak_mem_bytes"] for m in metrics if "peak_mem_bytes" in m)})
        memory_file = os.path.join(out, "memory.json")
        if os.path.exists(memory_file):
            plan = json.load(open(memory_file))
            plan = plan.get("plan", plan)
            result["plan_bytes"] = sum(plan.get(key, 0) for key in (
                "parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "ema_bytes",
                "activations_estimate_bytes"))
    else:
        result["error"] = error
    shutil.rmtree(out, ignore_errors=True)  # a checkpoint of Latte-1 with AdamW and EMA is ~17 GB
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tune", default=os.path.join(ROOT, "build/apps/tune/tune"))
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--small-size", type=int, default=256)
    parser.add_argument("--sample-steps", type=int, default=2)
    parser.add_argument("--train-steps", type=int, default=3)
    parser.add_argument("--policies", default="off full selective", help="training's checkpointing policies")
    parser.add_argument("--cases", default="tune-infer,diffusers,tune-train")
    parser.add_argument("--timeout", type=int, default=240, help="seconds per case")
    parser.add_argument("--out")
    parser.add_argument("--diffusers-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--checkpointing", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.diffusers_child:
        return diffusers_child(args)
    groups = args.cases.split(",")
    results = []

    def record(result):
        results.append(result)
        line = "  ".join(f"{k}={gib(v) if k.endswith('bytes') else v}" for k, v in result.items())
        print(line, flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"pipeline": args.pipeline, "device": args.device, "results": results}, f, indent=1)

    big, small = (args.frames, args.size), (args.frames, args.small_size)
    with tempfile.TemporaryDirectory(prefix="bench-latte1-") as work:
        if "tune-infer" in groups:
            record(tune_infer(args, work, *big, "full"))
        if "diffusers" in groups:
            record(diffusers_case(args, *big, checkpointing=True))
            record(diffusers_case(args, *big, checkpointing=False))
        if "tune-train" in groups:
            latents = os.path.join(work, "latents")
            vae = os.path.join(args.pipeline, "vae")
            with open(os.path.join(args.pipeline, "transformer", "config.json")) as f:
                caption_channels = json.load(f)["caption_channels"]
            completed, error, _ = run([sys.executable, os.path.join(ROOT, "scripts/make_random_latents.py"), "--out",
                                       latents, "--vae", vae, "--image-size", str(args.small_size), "--num-frames",
                                       str(args.frames), "--text-channels", str(caption_channels)], args.timeout)
            if error:
                record({"case": "make_random_latents", "error": error})
            else:
                for policy in args.policies.split():
                    record(tune_train(args, work, latents, policy))
        if "tune-infer" in groups:
            record(tune_infer(args, work, *big, "off"))
            record(tune_infer(args, work, *small, "full"))
            record(tune_infer(args, work, *small, "off"))
        if "diffusers" in groups:
            record(diffusers_case(args, *small, checkpointing=True))
            record(diffusers_case(args, *small, checkpointing=False))

    print("\n| case | peak | plan | time | note |\n|---|---:|---:|---:|---|")
    for r in results:
        time_s = r.get("sampling_s", r.get("step_s", ""))
        print(f"| {r['case']} | {gib(r.get('peak_mem_bytes', '-'))} | {gib(r.get('plan_bytes', '-'))} | {time_s} | "
              f"{r.get('error', '')[:160]} |")


if __name__ == "__main__":
    main()
