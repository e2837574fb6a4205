#!/usr/bin/env python3
"""The attention core alone: tune's plain and probability-recomputing forms beside LibTorch's fused
scaled_dot_product_attention (SDPA), forward + backward, side by side in one process per sequence length.

    .venv/bin/python scripts/bench_attention.py [--seq 256 1024 2048 4096] [--threads 2] [--out FILE.json]

Prints a Markdown table: time and memory of each implementation and SDPA's ratios against the plain core
(tune's choice for policies off/full). "saved" is what autograd keeps between forward and backward beyond q, k, v
and the mask; "peak" the tracked peak during forward + backward beyond them. B=1, 4 heads of 64 unless told.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seq", nargs="+", default=["256", "1024", "2048", "4096"])
    parser.add_argument("--mask", nargs="+", default=["causal", "packed"])
    parser.add_argument("--dtype", nargs="+", default=["bf16", "fp32"])
    parser.add_argument("--threads", default="2")
    parser.add_argument("--repeat", default="3")
    parser.add_argument("--binary", default=os.path.join(ROOT, "build/apps/bench/tune-bench-attention"))
    parser.add_argument("--out", help="also write the raw JSON lines here")
    args = parser.parse_args()

    rows = []
    for seq in args.seq:  # one process per length, so one configuration's allocations do not shape the next
        command = [args.binary, "--seq", seq, "--mask", *args.mask, "--dtype", *args.dtype, "--threads",
                   args.threads, "--repeat", args.repeat]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        rows += [json.loads(line) for line in output.splitlines() if line.startswith("{")]
        print(f"seq {seq} done", file=sys.stderr)
    if args.out:
        with open(args.out, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)

    mib = 1 << 20
    by_key = {(r["seq"], r["mask"], r["dtype"], r["impl"]): r for r in rows}
    print(f"cpu_gemm: {rows[0]['cpu_gemm']}\n")
    print("| seq | mask | dtype | plain s | recomputing s | sdpa s | sdpa / plain time | plain saved / peak MiB "
          "| sdpa saved / peak MiB |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for (seq, mask, dtype, impl), r in by_key.items():
        if impl != "plain":
            continue
        rec, sdpa = by_key[(seq, mask, dtype, "recomputing")], by_key[(seq, mask, dtype, "sdpa")]
        print(f"| {seq} | {mask} | {dtype} | {r['seconds']:.3f} | {rec['seconds']:.3f} | {sdpa['seconds']:.3f} "
              f"| {sdpa['seconds'] / r['seconds']:.2f} | {r['saved_bytes'] / mib:.1f} / {r['peak_bytes'] / mib:.1f} "
              f"| {sdpa['saved_bytes'] / mib:.1f} / {sdpa['peak_bytes'] / mib:.1f} |")


if __name__ == "__main__":
    main()
