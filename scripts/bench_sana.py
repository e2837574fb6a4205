#!/usr/bin/env python3
"""Sana training step, tune against diffusers' own SanaTransformer2DModel in PyTorch, side by side in one run.

    .venv/bin/python scripts/bench_sana.py [--repeat R] [--steps N] [--threads T] [--policies off,full]
        [--tune build/apps/tune/tune] [--out FILE.json]
    python3 scripts/bench_sana.py --size 1600m --device cuda [--batch B] [--lora-rank 16]
        [--policies off,full,selective] [--work /dev/shm] ...            (on a GPU: scripts/gpu/run_all.sh sana)

Model, --size cpu (the default): a Sana transformer of the published family's block (SanaTransformer2DModel: linear
self-attention, cross-attention to a Gemma 2 caption, GLUMBConv) at a CPU size: 4 blocks of 16 heads x 32 (hidden
512), cross-attention 8 x 64, caption channels 2304 (Gemma 2 2B's width) over 300 tokens (a quarter of them real, the
rest masked), 32 latent channels of 16 x 16 (a 512 x 512 image through DC-AE f32c32), batch 2. --size 1600m:
Sana_1600M_1024px's transformer (scripts/make_sana_1600m_configs.py: 20 blocks, hidden 2240, 1.6 B parameters) with
random weights, 32 x 32 latents (1024 x 1024 images), batch --batch (1 by default, the published recipe's).
bf16 autocast over fp32 weights, AdamW, one step = forward + flow-matching loss + backward + update, with the same
random initial weights on both sides.
  (a) PyTorch: diffusers' model in eager mode, `enable_gradient_checkpointing()` for any policy but off (diffusers
      has one: every block); the official trainer's objective written out (logit-normal timesteps, sigmas shifted
      by 3, x_t = (1 - s) x0 + s eps, target eps - x0, MSE); torch.optim.AdamW (foreach on the CPU; on CUDA
      fused=True, Hugging Face Trainer's default). Memory: the process's peak RSS; on CUDA
      torch.cuda.max_memory_allocated() (weights included).
      --lora-rank R: LoRA (rank R, alpha R, on to_q, to_k, to_v, to_out.0: diffusers' Sana LoRA script's targets)
      through peft (`add_adapter`), the base frozen in fp32 as in tune ("pytorch"), and on CUDA also frozen in bf16
      with the adapters in fp32 as diffusers' train_dreambooth_lora_sana.py casts it ("pytorch-bf16base").
  (b) tune: `tune train` (recipe sana) on random prepared latents and caption embeddings
      (scripts/make_random_latents.py --text-channels 2304) in a pipeline directory holding the same transformer
      weights (the other components as configs only: training loads neither encoder); the step time is the median
      difference of metrics.jsonl's elapsed_s after one warm-up step; memory: peak RSS (wait4) and tune's tracked
      tensor peak (on CUDA the caching allocator's peak of allocated bytes, as PyTorch's), and tune's own memory
      plan for the run (memory.json) beside the measurement. On CUDA (or with --variants) also tune's memory levers:
      "tune-bf16base" (LoRA with param_dtype bf16: the frozen base in bf16) and "tune-no-ema" (full fine-tune with
      ema.decay 0: no EMA copy; tune's recipe keeps one by default, as the official trainer, diffusers' rows none).
Each repeat runs every (implementation, policy) in a fresh process, alternating; medians over repeats are reported.
A configuration that fails (out of memory, say) is recorded with its error and the others go on.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_latte_official import run_with_rss, timed_steps  # noqa: E402
from make_sana_1600m_configs import SANA_1600M  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU_SIZE = dict(in_channels=32, out_channels=32, num_attention_heads=16, attention_head_dim=32, num_layers=4,
                num_cross_attention_heads=8, cross_attention_head_dim=64, cross_attention_dim=512,
                caption_channels=2304, mlp_ratio=2.5, sample_size=16, patch_size=1)
SIZES = {"cpu": (CPU_SIZE, 16, 2), "1600m": (SANA_1600M, 32, 1)}  # transformer, latent side, default batch
TOKENS, REAL_TOKENS = 300, 75
LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]


def transformer_config(args):
    return SIZES[args.size][0]


def make_pipeline(args, directory):
    import torch
    from diffusers import SanaTransformer2DModel
    from make_sana_1600m_configs import write_pipeline_configs
    write_pipeline_configs(directory, transformer_config(args))
    torch.manual_seed(0)
    # Initialised where the run happens (1.6 B parameters initialise in seconds on a GPU, minutes on its host).
    with torch.device(args.device):
        model = SanaTransformer2DModel(**transformer_config(args))
    model.save_pretrained(os.path.join(directory, "transformer"))


def pytorch_worker(args):
    """One process: diffusers' model from the pipeline directory, warm-up + args.steps timed steps, one JSON line."""
    import resource
    import torch
    from diffusers import SanaTransformer2DModel
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    model = SanaTransformer2DModel.from_pretrained(os.path.join(args.pipeline, "transformer")).to(device).train()
    if args.policy != "off":
        model.enable_gradient_checkpointing()
    if args.lora_rank:
        from peft import LoraConfig
        model.requires_grad_(False)
        if args.base_dtype == "bf16":
            model.to(torch.bfloat16)
        model.add_adapter(LoraConfig(r=args.lora_rank, lora_alpha=args.lora_rank, init_lora_weights="gaussian",
                                     target_modules=LORA_TARGETS))
        for parameter in model.parameters():  # the adapters train in fp32 (diffusers' cast_training_params)
            if parameter.requires_grad:
                parameter.data = parameter.data.float()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, weight_decay=0.0, **({"fused": True} if cuda else {}))
    gen = torch.Generator().manual_seed(1)
    latent, batch = SIZES[args.size][1], args.batch
    x0 = torch.randn(batch, 32, latent, latent, generator=gen).to(device)
    caption = torch.randn(batch, TOKENS, transformer_config(args)["caption_channels"], generator=gen).to(device)
    mask = (torch.arange(TOKENS) < REAL_TOKENS).long().expand(batch, TOKENS).to(device)

    def step():
        u = torch.sigmoid(torch.randn(batch, generator=gen)).to(device)
        sigma = 3.0 * u / (1 + 2.0 * u)
        noise = torch.randn(x0.shape, generator=gen).to(device)
        noisy = (1 - sigma.view(-1, 1, 1, 1)) * x0 + sigma.view(-1, 1, 1, 1) * noise
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = model(noisy, encoder_hidden_states=caption, encoder_attention_mask=mask,
                        timestep=(sigma * 1000).long(), return_dict=False)[0]
        loss = torch.nn.functional.mse_loss(out.float(), noise - x0)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    try:
        result = {"step_s": statistics.median(timed_steps(step, args.steps))}
    except torch.OutOfMemoryError as error:
        result = {"error": "out of memory: " + str(error).splitlines()[0][:300]}
    result["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if cuda:
        result["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
    print(json.dumps(result))


# tune's memory levers measured beside its defaults (on CUDA, or with --variants): a LoRA run's frozen base in bf16,
# a full fine-tune without the EMA copy.
TUNE_VARIANTS = {"tune-bf16base": ["param_dtype: bf16"], "tune-no-ema": ["ema:", "  decay: 0"]}


def write_recipe(path, args, latents, out, policy, extra=()):
    lines = ["recipe: sana", f"output_dir: {out}", "seed: 0", f"threads: {args.threads}", f"device: {args.device}",
             "mixed_precision: bf16", f"gradient_checkpointing: {'false' if policy == 'off' else 'true'}"]
    if policy not in ("off", "full"):
        lines += ["checkpointing:", f"  policy: {policy}"]
    lines += ["model:", f"  path: {args.pipeline}", "data:", f"  latents: {latents}",
              f"  image_size: {SIZES[args.size][1] * 32}",
              "training:", f"  batch_size: {args.batch}", f"  max_steps: {args.steps + 1}", "logging:", "  every: 1",
              "checkpoint:", f"  every: {args.steps + 1}", "sampling:", f"  max_text_tokens: {TOKENS}"]
    if args.lora_rank:
        lines += ["lora:", f"  rank: {args.lora_rank}", f"  alpha: {args.lora_rank}",
                  f"  target_modules: [{', '.join(LORA_TARGETS)}]"]
    lines += list(extra)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def planned_bytes(out):
    memory_file = os.path.join(out, "memory.json")
    if not os.path.exists(memory_file):
        return None
    plan = json.load(open(memory_file))
    plan = plan.get("plan", plan)
    return sum(plan.get(key, 0) for key in ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes",
                                            "ema_bytes", "activations_estimate_bytes"))


def tune_once(args, work, latents, policy, variant="tune"):
    out = os.path.join(work, f"run-{policy}-{time.time_ns()}")
    recipe = os.path.join(work, f"{variant}-{policy}.yaml")
    write_recipe(recipe, args, latents, out, policy, TUNE_VARIANTS.get(variant, ()))
    try:
        _, rss = run_with_rss([args.tune, "train", recipe])
        metrics = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if line.strip()]
        elapsed = [m["elapsed_s"] for m in metrics if "elapsed_s" in m]
        tracked = max(m["peak_mem_bytes"] for m in metrics if "peak_mem_bytes" in m)
        result = {"step_s": statistics.median(b - a for a, b in zip(elapsed, elapsed[1:])), "peak_rss_bytes": rss,
                  "tracked_peak_bytes": tracked, "plan_bytes": planned_bytes(out)}
        if args.device == "cuda":
            result["peak_mem_bytes"] = tracked
    except SystemExit as error:  # run_with_rss printed the child's stderr
        result = {"error": str(error)[-600:]}
    shutil.rmtree(out, ignore_errors=True)  # a Sana-1600M checkpoint with AdamW's moments is ~19 GB
    return result


def pytorch_once(args, policy, base_dtype="fp32"):
    command = [sys.executable, os.path.abspath(__file__), "--worker", "--policy", policy, "--pipeline", args.pipeline,
               "--threads", str(args.threads), "--steps", str(args.steps), "--size", args.size, "--device",
               args.device, "--batch", str(args.batch), "--lora-rank", str(args.lora_rank), "--base-dtype", base_dtype]
    try:
        stdout, rss = run_with_rss(command)
    except SystemExit as error:
        return {"error": str(error)[-600:]}
    result = json.loads(stdout.strip().splitlines()[-1])
    result["peak_rss_bytes"] = rss
    return result


def median_of(runs, key):
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tune", default=os.path.join(ROOT, "build/apps/tune/tune"))
    parser.add_argument("--size", choices=sorted(SIZES), default="cpu")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int)
    parser.add_argument("--lora-rank", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--policies", default="off,full")
    parser.add_argument("--work", help="folder for the pipeline, latents and runs (a tmpfs such as /dev/shm on a GPU)")
    parser.add_argument("--pipeline", help="reuse this pipeline directory (made by an earlier run with --keep)")
    parser.add_argument("--keep", action="store_true", help="keep the pipeline and latents in --work")
    parser.add_argument("--variants", action="store_true",
                        help="also tune's memory levers (LoRA: param_dtype bf16; full: ema.decay 0); on CUDA always")
    parser.add_argument("--implementations",
                        help="comma-separated subset and order of the rows to run (pytorch, pytorch-bf16base, tune, "
                             "tune-bf16base, tune-no-ema); by default every one that applies")
    parser.add_argument("--out")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--policy", help=argparse.SUPPRESS)
    parser.add_argument("--base-dtype", default="fp32", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.batch = args.batch or SIZES[args.size][2]
    if args.worker:
        return pytorch_worker(args)
    policies = args.policies.split(",")
    implementations = ["pytorch", "tune"]
    if args.lora_rank and args.device == "cuda":
        implementations.insert(1, "pytorch-bf16base")
    if args.variants or args.device == "cuda":
        implementations.append("tune-bf16base" if args.lora_rank else "tune-no-ema")
    if args.implementations:  # a short GPU call runs the rows it has time for, most wanted first
        wanted = args.implementations.split(",")
        unknown = [name for name in wanted if name not in implementations]
        if unknown:
            parser.error(f"--implementations: {', '.join(unknown)} not among this run's rows "
                         f"({', '.join(implementations)})")
        implementations = wanted
    work = args.work or tempfile.mkdtemp(prefix="bench-sana-")
    os.makedirs(work, exist_ok=True)
    latent = SIZES[args.size][1]
    try:
        if not args.pipeline:
            args.pipeline = os.path.join(work, f"pipeline-{args.size}")
            if not os.path.exists(os.path.join(args.pipeline, "transformer", "config.json")):
                make_pipeline(args, args.pipeline)
        latents = os.path.join(work, f"latents-{args.size}-b{args.batch}")
        if not os.path.exists(os.path.join(latents, "latents.json")):
            completed = subprocess.run(
                [sys.executable, os.path.join(ROOT, "scripts/make_random_latents.py"), "--out", latents, "--vae",
                 os.path.join(args.pipeline, "vae"), "--image-size", str(latent * 32), "--num-frames", "1",
                 "--text-channels", str(transformer_config(args)["caption_channels"]), "--max-text-tokens",
                 str(TOKENS), "--classes", "1", "--videos-per-class", str(max(4, args.batch))],
                capture_output=True, text=True)
            if completed.returncode != 0:
                raise SystemExit(completed.stderr)
        results = {(impl, p): [] for impl in implementations for p in policies}
        for _ in range(args.repeat):
            for policy in policies:
                for impl in implementations:
                    if impl.startswith("pytorch") and policy not in ("off", "full") and args.device == "cuda":
                        continue  # diffusers has one checkpointing policy (every block), measured as full
                    result = (tune_once(args, work, latents, policy, impl) if impl.startswith("tune") else
                              pytorch_once(args, policy, "bf16" if impl.endswith("bf16base") else "fp32"))
                    print(json.dumps({"impl": impl, "policy": policy, **result}), flush=True)
                    results[(impl, policy)].append(result)
    finally:
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)
    report(args, policies, implementations, results)


def report(args, policies, implementations, results):
    config = transformer_config(args)
    memory_key = "peak_mem_bytes" if args.device == "cuda" else "peak_rss_bytes"
    what = f"LoRA rank {args.lora_rank}" if args.lora_rank else "full fine-tune"
    print(f"\nSana training step ({what}), {config['num_layers']} blocks x hidden "
          f"{config['num_attention_heads'] * config['attention_head_dim']}, batch {args.batch} x "
          f"{SIZES[args.size][1]}^2 latents, {TOKENS} caption tokens, bf16 autocast, {args.device}, median of "
          f"{args.repeat} run(s) of {args.steps} steps")
    print(f"| policy | implementation | step | x PyTorch's time | {memory_key} | x PyTorch's | tune plan | note |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    summary = {"size": args.size, "device": args.device, "batch": args.batch, "lora_rank": args.lora_rank,
               "steps": args.steps, "repeat": args.repeat, "rows": []}
    for policy in policies:
        base = results.get(("pytorch", "full" if policy not in ("off", "full") else policy), [])
        base_step, base_memory = median_of(base, "step_s"), median_of(base, memory_key)
        for impl in implementations:
            runs = results[(impl, policy)]
            if not runs:
                continue
            step, memory = median_of(runs, "step_s"), median_of(runs, memory_key)
            plan = median_of(runs, "plan_bytes")
            errors = "; ".join(r["error"][-160:] for r in runs if "error" in r)
            ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"  # noqa: E731
            print(f"| {policy} | {impl} | {f'{step:.3f} s' if step else '-'} | {ratio(step, base_step)} | "
                  f"{f'{memory / 2**30:.2f} GiB' if memory else '-'} | {ratio(memory, base_memory)} | "
                  f"{f'{plan / 2**30:.2f} GiB' if plan else '-'} | {errors} |")
            summary["rows"].append({"policy": policy, "implementation": impl, "step_s": step, memory_key: memory,
                                    "plan_bytes": plan, "runs": runs})
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
