#!/usr/bin/env python3
"""tune against PyTorch eager on this CPU, side by side in one run: the LLM step and the Latte step.

    .venv/bin/python scripts/bench_cpu.py [--threads 1,0] [--repeat 3] [--steps 3] [--policies off,full,every_k,sqrt]
        [--compile] [--no-latte] [--latte-policies off,full] [--official LATTE_CLONE] [--cache-dir DIR]
        [--out FILE.json]

LLM (issue 22's configuration): a random Llama, 8 layers x hidden 256, 4 heads, MLP 672, vocabulary 2000, batch
4 x 512 tokens, bf16 autocast over fp32 weights, one AdamW update per step; tune-bench (apps/bench) against
scripts/bench_pytorch_llama.py (the same model in PyTorch eager, torch.utils.checkpoint per checkpointed block).
Each (threads, policy, tool) runs in a fresh process, the tools alternating within a repeat so they share the
machine's noise; the ratio uses each tool's median over repeats of its best step (step_s_min): three repeats by
default, so that one repeat slowed by a shared machine (steps 1.5x apart have been seen) moves no median. Memory:
peak RSS of each process. --compile adds the PyTorch model under torch.compile (Inductor, compiled in the warm-up step).
Latte: scripts/bench_latte_official.py (tune train against diffusers' LatteTransformer3DModel, Latte-S/2 sizes, and
with --official a clone of github.com/Vchitect/Latte, the official model code; needs einops) at each thread count,
its own interleaving.

tune's default settings throughout: its CPU kernels are chosen by measurement (recipes/cpu_kernel_choice.h) and
cached in --cache-dir (default: a fresh temporary directory, so the first tune process of each thread count
measures and the others read the cache, as a user's runs would). The report starts with the CPU model, its
relevant feature flags, the thread counts and the library versions, so tables from different machines stay apart
(docs/BENCHMARKS.md keeps one per CPU).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable
LLM = ["--layers", "8", "--hidden", "256", "--heads", "4", "--intermediate", "672", "--vocab", "2000", "--batch", "4",
       "--seq", "512", "--dtype", "bf16", "--optimizer"]
FLAGS = ["avx2", "avx512f", "avx512bw", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "amx_fp16"]


def cpu_description():
    model, flags = platform.processor() or "unknown", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model in ("unknown", platform.processor()):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    return model, [flag for flag in FLAGS if flag in flags], os.cpu_count()


def run_json(command, env):
    completed = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    if completed.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(command)} failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    return json.loads(lines[-1]), completed.stderr


def kernel_lines(stderr):
    return [line.split("CPU kernels: ", 1)[1] for line in stderr.splitlines() if "CPU kernels: " in line]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,0", help="comma-separated thread counts (0: all of this machine's)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--policies", default="off,full,every_k,sqrt")
    parser.add_argument("--compile", action="store_true", help="also PyTorch under torch.compile")
    parser.add_argument("--compile-policies", default="off,full",
                        help="the policies --compile runs (each compiles for about a minute on 2 cores)")
    parser.add_argument("--no-latte", action="store_true")
    parser.add_argument("--official", help="a clone of github.com/Vchitect/Latte (Latte's official-math reference)")
    parser.add_argument("--latte-policies", default="off,full")
    parser.add_argument("--latte-repeat", type=int, default=3, help="Latte's repeats (medians of them, as --repeat)")
    parser.add_argument("--tune-bench", default=os.path.join(ROOT, "build/apps/bench/tune-bench"))
    parser.add_argument("--cache-dir", help="tune's kernel choice cache (TUNE_CACHE_DIR); default: a fresh one")
    parser.add_argument("--out", help="write every result as JSON here")
    args = parser.parse_args()

    model, flags, cores = cpu_description()
    import torch  # the PyTorch peer's version, for the header
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="tune-kernel-cache-")
    env = dict(os.environ, TUNE_CACHE_DIR=cache_dir)
    for forced in ("TUNE_CPU_GEMM", "TUNE_CPU_ATTENTION", "TUNE_ATTENTION_CHUNK_ROWS"):
        env.pop(forced, None)  # tune's defaults, measured
    thread_counts = [int(t) if int(t) > 0 else cores for t in args.threads.split(",")]
    header = {"cpu": model, "flags": flags, "cores": cores, "torch": torch.__version__, "threads": thread_counts,
              "kernel_cache": cache_dir}
    print(f"CPU: {model} ({cores} logical cores; flags: {' '.join(flags) or 'none of ' + ' '.join(FLAGS)}); "
          f"PyTorch {torch.__version__}", file=sys.stderr)

    results, choices = [], {}
    for threads in thread_counts:
        for repeat in range(args.repeat):
            for policy in args.policies.split(","):
                compiled = args.compile and policy in args.compile_policies.split(",")
                order = ["tune", "pytorch"] + (["pytorch+compile"] if compiled else [])
                if repeat % 2 == 1:
                    order.reverse()
                for tool in order:
                    common = LLM + ["--policy", policy, "--threads", str(threads), "--steps", str(args.steps)]
                    if tool == "tune":
                        result, stderr = run_json([args.tune_bench] + common, env)
                        choices.setdefault(threads, kernel_lines(stderr))
                    else:
                        extra = ["--compile"] if tool == "pytorch+compile" else []
                        result, _ = run_json([PYTHON, os.path.join(ROOT, "scripts/bench_pytorch_llama.py")] + common
                                             + extra, env)
                    result.update({"tool": tool, "threads_requested": threads, "repeat": repeat})
                    results.append(result)
                    print(f"[{threads} threads, {repeat + 1}/{args.repeat}] {policy} {tool}: "
                          f"{result['step_s_min']:.3f} s, RSS {result['rss_peak_bytes'] / 2**20:.0f} MiB",
                          file=sys.stderr)

    latte = {}
    if not args.no_latte:
        for threads in thread_counts:
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                command = [PYTHON, os.path.join(ROOT, "scripts/bench_latte_official.py"), "--threads", str(threads),
                           "--repeat", str(args.latte_repeat), "--steps", str(args.steps), "--policies",
                           args.latte_policies,
                           "--gemm", "auto", "--out", out.name]
                if args.official:
                    command += ["--reference", "official-math,diffusers", "--official", args.official]
                else:
                    command += ["--reference", "diffusers"]
                completed = subprocess.run(command, capture_output=True, text=True, env=env)
                if completed.returncode != 0:
                    raise RuntimeError(f"bench_latte_official.py failed:\n{completed.stderr[-3000:]}")
                latte[threads] = {"table": completed.stdout.strip(), "results": json.load(open(out.name))}

    print(f"\n### {model}\n")
    print(f"Flags: {' '.join(flags) or '(none of ' + ' '.join(FLAGS) + ')'}; {cores} logical cores; "
          f"PyTorch {torch.__version__}; `scripts/bench_cpu.py --repeat {args.repeat} --steps {args.steps}`.\n")
    for threads in thread_counts:
        print(f"tune's kernel choice at {threads} thread(s): " + "; ".join(choices.get(threads, [])) + "\n")
    print("LLM step (8 layers x hidden 256, MLP 672, vocab 2000, 4 x 512 tokens, bf16 autocast, AdamW):\n")
    peers = ["pytorch"] + (["pytorch+compile"] if args.compile else [])
    print("| threads | policy | tune step | PyTorch | tune / PyTorch | tune RSS | PyTorch RSS | RSS ratio |"
          + (" PyTorch compiled | tune / compiled | RSS ratio |" if args.compile else ""))
    print("|---|---|---|---|---|---|---|---|" + ("---|---|---|" if args.compile else ""))
    for threads in thread_counts:
        for policy in args.policies.split(","):
            def pick(tool):
                return [r for r in results if r["tool"] == tool and r["threads_requested"] == threads
                        and r["policy"] == policy]

            def step(tool):
                return statistics.median(r["step_s_min"] for r in pick(tool))

            def rss(tool):
                return statistics.median(r["rss_peak_bytes"] for r in pick(tool))
            row = f"| {threads} | {policy} | {step('tune'):.3f} s |"
            for peer in peers:
                if not pick(peer):
                    row += " | | |"
                    continue
                if peer == "pytorch":
                    row += (f" {step(peer):.3f} s | {step('tune') / step(peer):.2f}x | {rss('tune') / 2**20:.0f} MiB | "
                            f"{rss(peer) / 2**20:.0f} MiB | {rss('tune') / rss(peer):.2f}x |")
                else:
                    row += f" {step(peer):.3f} s | {step('tune') / step(peer):.2f}x | {rss('tune') / rss(peer):.2f}x |"
            print(row)
    for threads, entry in latte.items():
        print(f"\nLatte step at {threads} thread(s) (scripts/bench_latte_official.py):\n\n{entry['table']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine": header, "kernel_choices": choices, "llm": results,
                       "latte": {t: e["results"] for t, e in latte.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
