#!/usr/bin/env python3
"""Latte training step, tune against the reference model code in PyTorch, side by side in one run.

    .venv/bin/python scripts/bench_latte_official.py [--repeat R] [--steps N] [--threads T] [--gemm auto,native,fp32]
        [--policies off,full] [--reference diffusers,official-math,official-flash --official LATTE_CLONE]
        [--profile DIR] [--out FILE.json]

Model: Latte-S/2 sizes as tune's configs and scripts/bench_latte.py mean them (hidden 384, depth 12 = 6 spatial +
6 temporal blocks, 6 heads, patch 2, mlp_ratio 4, learn_sigma so 8 output channels), on 8 frames of 32x32x4
latents (256 tokens per frame), batch 2, bf16 autocast over fp32 weights, 1 thread (--threads), one step =
forward + backward + AdamW update. Activation checkpointing off and on (tune: gradient_checkpointing with policy
full, i.e. every block; PyTorch: diffusers' enable_gradient_checkpointing, torch.utils.checkpoint per block).

  (a) PyTorch, --reference: `official-math` / `official-flash` are the official model code itself (class Latte of
      models/latte.py in a clone of github.com/Vchitect/Latte given by --official; attention_mode 'math' is its
      default, 'flash' its scaled_dot_product_attention; needs einops; see official_latte()); `diffusers` is
      Hugging Face diffusers' LatteTransformer3DModel (a port of the official Vchitect/Latte code) in
      PyTorch eager, configured like the official class-conditional model as far as it goes: no cross-attention
      (cross_attention_dim None), adaLN-single timestep conditioning (one shared D->6D linear plus a per-block
      table instead of the official per-block D->6D linear: the same per-token maths, 12 fewer tiny [2, 384] x
      [384, 2304] GEMMs), a dummy one-token caption whose projection is unused by the blocks. Loss: MSE of the
      first 4 output channels against random noise (the diffusion noise/target sampling is negligible at this size).
      The official references keep the EMA of the model that the official train.py keeps (an fp32 deepcopy,
      stepped by its utils.update_ema after each update), as tune's latte recipe keeps one by default
      (--no-reference-ema drops it; tune's then with --tune-ema-decay 0); diffusers' model is measured bare.
      Memory: peak RSS of the process (ru_maxrss) and its growth over the RSS after the model, optimizer and
      inputs were built (activations, gradients, AdamW state, allocator caches).
      A '+compile' suffix (official-math+compile) wraps the model in torch.compile (Inductor, default mode; the
      compilation happens in the untimed warm-up step; with checkpointing, torch.utils.checkpoint inside it).
  (b) tune: `tune train` (recipe latte) on random latents (scripts/make_random_latents.py, tune-latents-v1, next
      to tests/fixtures/vae, so no video decoding), max_steps N+1, step time = the median difference of
      metrics.jsonl's elapsed_s (the first, warm-up step unmeasured; includes tune's diffusion loss with the
      learn_sigma VLB term and its data loading from the in-memory latent cache). Memory: peak tracked tensor
      bytes (metrics.jsonl peak_mem_bytes) and peak RSS of the process (ru_maxrss through wait4).

For each repeat every (implementation, policy, gemm) runs once in a fresh process, alternating, so they share
the machine's noise; medians over repeats are reported. --gemm lists tune's CPU GEMM modes: auto = tune's own choice (measured at the run's
start and cached: recipes/cpu_kernel_choice.h), native = LibTorch's own bf16 GEMM, fp32 = tune's fp32-accumulate
kernels (TUNE_CPU_GEMM).

--profile DIR: additionally one profiled PyTorch step per policy (torch.profiler, CPU, written as Chrome traces
DIR/pytorch-<policy>.json) and a per-op summary table of both (self CPU time per op). tune's side is profiled by
tests/models/test_latte_diffusers.cpp's hidden case "[.profile]" (see its comment).

Needs the project built (build/apps/tune/tune) and diffusers in .venv (scripts/requirements.txt).
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# --size: hidden, depth (spatial + temporal blocks), heads, patch, frames, latent side, latent channels, batch.
SIZES = {"s": (384, 12, 6, 2, 8, 32, 4, 2), "xl": (1152, 28, 16, 2, 16, 32, 4, 1)}
HIDDEN, DEPTH, HEADS, PATCH, FRAMES, LATENT, CHANNELS, BATCH = SIZES["s"]


def set_size(size):
    global HIDDEN, DEPTH, HEADS, PATCH, FRAMES, LATENT, CHANNELS, BATCH
    HIDDEN, DEPTH, HEADS, PATCH, FRAMES, LATENT, CHANNELS, BATCH = SIZES[size]


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def official_latte(args):
    """The official model code (Vchitect/Latte models/latte.py from the clone --official names), class Latte at
    Latte-S/2 sizes, unconditional (extras 1), attention_mode 'math' (its default: explicit softmax) or 'flash'
    (scaled_dot_product_attention). Its imports: einops (pip install einops) and timm's Mlp and PatchEmbed; without
    timm installed, two stand-ins with timm's structure and maths (Linear-act-Linear; Conv2d patchify + flatten)
    are registered, since timm pulls torchvision. Checkpointing (not in the official code): each block through
    torch.utils.checkpoint (non-reentrant), as a PyTorch user would add it."""
    import importlib.util
    import types

    import torch
    try:
        import timm.models.vision_transformer  # noqa: F401
    except ImportError:
        class Mlp(torch.nn.Module):
            def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=torch.nn.GELU,
                         drop=0.0, **_):
                super().__init__()
                self.fc1 = torch.nn.Linear(in_features, hidden_features or in_features)
                self.act = act_layer()
                self.fc2 = torch.nn.Linear(hidden_features or in_features, out_features or in_features)

            def forward(self, x):
                return self.fc2(self.act(self.fc1(x)))

        class PatchEmbed(torch.nn.Module):
            def __init__(self, img_size=224, patch_size=16, in_chans=3, embed_dim=768, bias=True, **_):
                super().__init__()
                self.patch_size = (patch_size, patch_size)
                self.num_patches = (img_size // patch_size) ** 2
                self.proj = torch.nn.Conv2d(in_chans, embed_dim, patch_size, patch_size, bias=bias)

            def forward(self, x):
                return self.proj(x).flatten(2).transpose(1, 2)

        names = ["timm", "timm.models", "timm.models.vision_transformer"]
        for name in names:
            sys.modules[name] = types.ModuleType(name)
        sys.modules["timm.models.vision_transformer"].Mlp = Mlp
        sys.modules["timm.models.vision_transformer"].PatchEmbed = PatchEmbed
    path = os.path.join(args.official, "models", "latte.py")
    spec = importlib.util.spec_from_file_location("official_latte", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["official_latte"] = module  # torch.compile (dynamo) looks the module up by name
    spec.loader.exec_module(module)
    mode = args.reference.removesuffix("+compile").split("-", 1)[1]
    model = module.Latte(input_size=LATENT, patch_size=PATCH, in_channels=CHANNELS, hidden_size=HIDDEN, depth=DEPTH,
                         num_heads=HEADS, num_frames=FRAMES, learn_sigma=True, extras=1, attention_mode=mode)
    model.train()
    if args.policy != "off":
        from torch.utils.checkpoint import checkpoint
        for block in model.blocks:
            block.forward = (lambda original: lambda x, c: checkpoint(original, x, c, use_reentrant=False))(
                block.forward)
    return model


def pytorch_worker(args):
    """One process: builds diffusers' Latte, runs warm-up + args.steps timed steps, prints one JSON line."""
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    compiled = args.reference.endswith("+compile")
    args.reference = args.reference.removesuffix("+compile")
    if args.reference == "diffusers":
        from diffusers import LatteTransformer3DModel
        model = LatteTransformer3DModel(
            num_attention_heads=HEADS, attention_head_dim=HIDDEN // HEADS, in_channels=CHANNELS,
            out_channels=2 * CHANNELS, num_layers=DEPTH // 2, cross_attention_dim=None, attention_bias=True,
            sample_size=LATENT, patch_size=PATCH, activation_fn="gelu-approximate", norm_type="ada_norm_single",
            norm_elementwise_affine=False, norm_eps=1e-6, caption_channels=HIDDEN, video_length=FRAMES)
        model.train()
        if args.policy != "off":
            model.enable_gradient_checkpointing()
    else:
        model = official_latte(args)
    model.to(device)
    # On CUDA the fused kernel, as torch's trainers pick where they can (the official train.py predates it: its
    # default foreach update is slower, not smaller); tune's AdamW is fused on CUDA too.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, fused=device.type == "cuda")
    ema = None
    if args.reference_ema:
        # As the official train.py: an fp32 deepcopy of the model without gradients, stepped after every update by
        # its utils.update_ema (decay 0.9999, in place over named_parameters).
        import copy
        ema = copy.deepcopy(model)
        ema.requires_grad_(False)
        ema_params = dict(ema.named_parameters())
    if compiled:
        # torch.compile (Inductor, default mode) of the whole model; compiling happens in the untimed warm-up step.
        model = torch.compile(model)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, CHANNELS, FRAMES, LATENT, LATENT, generator=gen)  # diffusers' layout [B, C, F, H, W]
    noise = torch.randn(x.shape, generator=gen)
    t = torch.randint(0, 1000, (BATCH,), generator=gen)
    caption = torch.zeros(BATCH, 1, HIDDEN)
    x, noise, t, caption = (v.to(device) for v in (x, noise, t, caption))

    def forward():
        if args.reference == "diffusers":
            return model(x, timestep=t, encoder_hidden_states=caption, return_dict=False)[0]
        return model(x.transpose(1, 2), t).transpose(1, 2)  # the official layout is [B, F, C, H, W]

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = forward()
        loss = torch.nn.functional.mse_loss(out[:, :CHANNELS].float(), noise)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if ema is not None:
            with torch.no_grad():
                for name, param in model.named_parameters():
                    ema_params[name.removeprefix("_orig_mod.")].mul_(0.9999).add_(param.data, alpha=1 - 0.9999)
        return loss

    base = rss_bytes()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = timed_steps(step, args.steps, torch.cuda.synchronize if cuda else None)
    result = {"step_s": statistics.median(times), "times": times,
              "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
              "base_rss_bytes": base}
    result["rss_growth_bytes"] = result["peak_rss_bytes"] - base
    if cuda:  # torch.cuda.max_memory_allocated: model, gradients, AdamW state, EMA, activations
        result["peak_cuda_bytes"] = torch.cuda.max_memory_allocated()
    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        os.makedirs(args.profile, exist_ok=True)
        prof.export_chrome_trace(os.path.join(args.profile, f"{args.reference}-{args.policy}.json"))
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)
        with open(os.path.join(args.profile, f"{args.reference}-{args.policy}.txt"), "w") as f:
            f.write(table)
    print(json.dumps(result))


def run(command, env=None):
    """Runs a child to completion; returns its stdout."""
    completed = subprocess.run(command, capture_output=True, text=True, env=env)
    if completed.returncode != 0:
        sys.stderr.write(completed.stderr[-4000:])
        raise SystemExit(f"bench_latte_official: {' '.join(command)} exited {completed.returncode}")
    return completed.stdout


def timed_steps(step, count, synchronize=None):
    """One untimed warm-up call of step() (AdamW's state is allocated there), then the seconds of `count` calls
    (each to the device's completion, where `synchronize` waits for it)."""
    step()
    times = []
    for _ in range(count):
        if synchronize:
            synchronize()
        start = time.perf_counter()
        step()
        if synchronize:
            synchronize()
        times.append(time.perf_counter() - start)
    return times


def run_with_rss(command, env=None):
    """Runs a child with fork/exec and wait4, so the child's own ru_maxrss is known. Returns (stdout, peak bytes)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        pid = os.fork()
        if pid == 0:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            try:
                os.execvpe(command[0], command, env if env is not None else os.environ)
            finally:
                os._exit(127)
        _, status, usage = os.wait4(pid, 0)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.stderr.write(stderr[-4000:])
        raise SystemExit(f"bench_latte_official: {' '.join(command)} exited {os.waitstatus_to_exitcode(status)}")
    return stdout, usage.ru_maxrss * 1024


def write_recipe(path, args, data, out, policy):
    lines = [
        "recipe: latte", f"output_dir: {out}", "seed: 0", f"threads: {args.threads}", "mixed_precision: bf16",
        f"device: {args.device}", f"gradient_checkpointing: {'false' if policy == 'off' else 'true'}",
    ]
    if policy != "off":
        lines += ["checkpointing:", f"  policy: {policy}"]
    lines += [
        "model:", "  variant: Latte-S/2", f"  hidden_size: {HIDDEN}", f"  depth: {DEPTH}", f"  num_heads: {HEADS}",
        f"  patch_size: {PATCH}", f"  vae: {os.path.join(ROOT, 'tests/fixtures/vae')}",
        "data:", f"  path: {data}", f"  num_frames: {FRAMES}", "  frame_interval: 1",
        f"  image_size: {2 * LATENT}", "  flip: false", "  cache_frames: true", f"  latents: {data}",
        "training:", f"  batch_size: {BATCH}", f"  max_steps: {args.steps + 1}",
        "logging:", "  every: 1", "checkpoint:", f"  every: {args.steps + 1}",
    ]
    if args.tune_ema_decay is not None:
        lines += ["ema:", f"  decay: {args.tune_ema_decay}"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def tune_once(args, work, data, policy, gemm):
    out = os.path.join(work, f"run-{policy}-{gemm}")
    shutil.rmtree(out, ignore_errors=True)
    recipe = os.path.join(work, f"{policy}-{gemm}.yaml")
    write_recipe(recipe, args, data, out, policy)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    env.pop("TUNE_CPU_GEMM", None)
    if gemm != "auto":
        env["TUNE_CPU_GEMM"] = gemm
    # The build tree may be shared: while the binary is being relinked it is missing (or exec fails, 126/127);
    # wait for it and run again rather than lose the whole comparison.
    for attempt in range(6):
        waited = 0
        while not os.path.exists(args.tune) and waited < 600:
            time.sleep(10)
            waited += 10
        built = os.path.getmtime(args.tune) if os.path.exists(args.tune) else 0
        try:
            _, peak_rss = run_with_rss([args.tune, "train", recipe], env)
            break
        except SystemExit as error:
            if attempt == 5:
                raise
            print(f"{error}; retrying in 20 s", file=sys.stderr)
            shutil.rmtree(out, ignore_errors=True)
            time.sleep(20)
    metrics = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if line.strip()]
    elapsed = [m["elapsed_s"] for m in metrics]
    times = [b - a for a, b in zip(elapsed, elapsed[1:])]
    return {"step_s": statistics.median(times), "times": times,
            "peak_tensor_bytes": max(m["peak_mem_bytes"] for m in metrics), "peak_rss_bytes": peak_rss,
            "tune_built": time.strftime("%H:%M:%S", time.localtime(built))}


def pytorch_once(args, policy, reference):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    command = [sys.executable, os.path.abspath(__file__), "--worker", "--policy", policy, "--reference", reference,
               "--steps", str(args.steps), "--threads", str(args.threads), "--size", args.size,
               "--device", args.device]
    if args.official:
        command += ["--official", args.official]
    if reference_keeps_ema(args, reference):
        command.append("--reference-ema")
    stdout, peak_rss = run_with_rss(command, env)
    result = json.loads(stdout.strip().splitlines()[-1])
    result["peak_rss_bytes"] = peak_rss
    return result


def reference_keeps_ema(args, reference):
    """The official trainer (Vchitect/Latte train.py) keeps an EMA of the model, as tune's latte recipe does by
    default; diffusers' model is measured bare (its training scripts keep one only with --use_ema)."""
    return reference.startswith("official") and not args.no_reference_ema


def mib(value):
    return f"{value / 2**20:.0f} MiB"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tune", default=os.path.join(ROOT, "build/apps/tune/tune"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="measured steps per run (after 1 warm-up step)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--policies", default="off,full", help="tune checkpointing policies; PyTorch: off or on")
    parser.add_argument("--gemm", default="auto",
                        help="tune's CPU GEMM, comma-separated: auto (tune's own choice), native, fp32 (TUNE_CPU_GEMM)")
    parser.add_argument("--reference", default="diffusers",
                        help="PyTorch models, comma-separated: diffusers, official-math, official-flash; a "
                             "'+compile' suffix runs the model under torch.compile (e.g. official-math+compile)")
    parser.add_argument("--official", help="a clone of github.com/Vchitect/Latte (for the official-* references)")
    parser.add_argument("--profile", help="also write a torch.profiler trace of one PyTorch step per policy here")
    parser.add_argument("--tune-ema-decay", type=float,
                        help="tune's ema.decay (default: the recipe's, 0.9999, an fp32 copy of the weights as the "
                             "official train.py keeps; 0 keeps none, as diffusers' rows and --no-reference-ema)")
    parser.add_argument("--no-reference-ema", action="store_true",
                        help="the official-* references without the EMA their train.py keeps (an fp32 deepcopy "
                             "stepped by utils.update_ema after each update; kept by default, as tune's recipe does)")
    parser.add_argument("--size", choices=sorted(SIZES), default="s",
                        help="s: Latte-S/2, 8 frames, batch 2 (the CPU comparison); xl: Latte-XL/2 (hidden 1152, "
                             "depth 28, 16 heads), 16 frames of 32x32x4 latents (256x256 videos), batch 1")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="cuda: both sides on the GPU; memory is then the CUDA allocator's peak (PyTorch: "
                             "torch.cuda.max_memory_allocated; tune: metrics.jsonl peak_mem_bytes)")
    parser.add_argument("--out", help="write all results as JSON here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--reference-ema", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--policy", default="off", help=argparse.SUPPRESS)
    args = parser.parse_args()
    set_size(args.size)
    if args.worker:
        pytorch_worker(args)
        return
    policies = args.policies.split(",")
    gemms = args.gemm.split(",")
    references = args.reference.split(",")
    if any(r.startswith("official") for r in references) and not args.official:
        raise SystemExit("bench_latte_official: --reference official-* needs --official DIR (a Vchitect/Latte clone)")
    if not os.path.exists(args.tune):
        raise SystemExit(f"bench_latte_official: {args.tune} not found; build first (bash scripts/build.sh)")
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(args.tune)))
    print(f"tune binary {args.tune} built {stamp}", file=sys.stderr)

    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-latte-official-") as work:
        data = os.path.join(work, "latents")
        run([sys.executable, os.path.join(ROOT, "scripts/make_random_latents.py"), "--out", data,
             "--vae", os.path.join(ROOT, "tests/fixtures/vae"), "--image-size", str(2 * LATENT),
             "--num-frames", str(FRAMES)])
        for repeat in range(args.repeat):
            for policy in policies:
                for reference in references:
                    key = f"{reference} {policy}"
                    measured = pytorch_once(args, policy, reference)
                    results.setdefault(key, []).append(measured)
                    print(f"[{repeat + 1}/{args.repeat}] {key}: step {measured['step_s']:.3f} s, "
                          f"RSS peak {mib(measured['peak_rss_bytes'])} (+{mib(measured['rss_growth_bytes'])})",
                          file=sys.stderr)
                for gemm in gemms:
                    key = f"tune {policy} {gemm}"
                    measured = tune_once(args, work, data, policy, gemm)
                    results.setdefault(key, []).append(measured)
                    if args.out:  # after every run, so an interrupted comparison keeps what it measured
                        with open(args.out, "w") as f:
                            json.dump({"settings": vars(args), "results": results}, f, indent=1)
                    print(f"[{repeat + 1}/{args.repeat}] {key}: step {measured['step_s']:.3f} s, tensors peak "
                          f"{mib(measured['peak_tensor_bytes'])}, RSS peak {mib(measured['peak_rss_bytes'])}",
                          file=sys.stderr)
        if args.profile:
            for policy in policies:
                for reference in references:
                    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
                    run([sys.executable, os.path.abspath(__file__), "--worker", "--policy", policy, "--steps", "1",
                         "--reference", reference, "--threads", str(args.threads), "--profile", args.profile,
                         "--size", args.size, "--device", args.device]
                        + (["--official", args.official] if args.official else []), env)

    def med(key, field):
        return statistics.median(r[field] for r in results[key])

    name = "Latte-XL/2" if args.size == "xl" else "Latte-S/2"
    print(f"\n{name} (hidden {HIDDEN}, depth {DEPTH}, heads {HEADS}, patch {PATCH}), {FRAMES} frames of "
          f"{LATENT}x{LATENT}x{CHANNELS} latents, batch {BATCH}, bf16 autocast, "
          f"{'CUDA' if args.device == 'cuda' else str(args.threads) + ' thread(s)'}, "
          f"forward+backward+AdamW; medians of {args.repeat} runs x {args.steps} steps\n")
    if args.device == "cuda":
        print("| checkpointing | PyTorch model | PyTorch step | tune step | tune / PyTorch | PyTorch peak | tune peak | "
              "tune / PyTorch memory |")
        print("|---|---|---|---|---|---|---|---|")
        for policy in policies:
            for reference in references:
                pt, tu = f"{reference} {policy}", f"tune {policy} {gemms[0]}"
                print(f"| {policy} | {reference} | {med(pt, 'step_s'):.3f} s | {med(tu, 'step_s'):.3f} s | "
                      f"{med(tu, 'step_s') / med(pt, 'step_s'):.2f} | {mib(med(pt, 'peak_cuda_bytes'))} | "
                      f"{mib(med(tu, 'peak_tensor_bytes'))} | "
                      f"{med(tu, 'peak_tensor_bytes') / med(pt, 'peak_cuda_bytes'):.2f} |")
    print("| checkpointing | PyTorch model | PyTorch step | tune step (GEMM) | tune / PyTorch | "
          "PyTorch RSS peak (growth) | tune RSS peak | tune / PyTorch RSS | tune tensors peak |")
    print("|---|---|---|---|---|---|---|---|---|")
    for policy in policies:
        for reference in references:
            pt = f"{reference} {policy}"
            for gemm in gemms:
                tu = f"tune {policy} {gemm}"
                print(f"| {policy} | {reference} | {med(pt, 'step_s'):.3f} s | {med(tu, 'step_s'):.3f} s ({gemm}) | "
                      f"{med(tu, 'step_s') / med(pt, 'step_s'):.2f} | {mib(med(pt, 'peak_rss_bytes'))} "
                      f"(+{mib(med(pt, 'rss_growth_bytes'))}) | {mib(med(tu, 'peak_rss_bytes'))} | "
                      f"{med(tu, 'peak_rss_bytes') / med(pt, 'peak_rss_bytes'):.2f} | "
                      f"{mib(med(tu, 'peak_tensor_bytes'))} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"settings": vars(args), "tune_built": stamp, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
