#!/usr/bin/env python3
"""bf16/fp16 matrix products on this CPU, side by side in one run: which kernel tune's CPU GEMM mode should pick.

    .venv/bin/python scripts/bench_cpu_gemm.py [--threads 1] [--repeat 8] [--out FILE.json]

For the projection shapes of a Latte-S/2 step (4096 tokens, hidden 384, MLP 1536; forward, input-gradient and
weight-gradient products) and of a Llama-3.2-1B layer at 2048 tokens, and for attention's batched products
(spatial 256 x 64 x 256 per head, temporal 8 x 64 x 8), GFLOP/s of:
  native   LibTorch's own low-precision kernel (oneDNN): what TUNE_CPU_GEMM=native runs
  convert  the operands converted to fp32 in row blocks, LibTorch's fp32 kernel (MKL sgemm), rounded back: what
           tune's fp32-accumulate kernels (src/tune/precision/cpu_gemm.cpp) do
  mixed    MKL's cblas_gemm_bf16bf16f32 / cblas_gemm_f16f16f32 on the operands in place (tune's kernels before
           session 10, still their fallback for operands over 64 MiB), batched ones one matrix at a time
  fp32     the fp32 product alone (the bound of `convert`)
"""
import argparse
import ctypes
import json
import os
import time

import torch

SHAPES = [  # (name, batch or 0, m, k, n, a transposed)
    ("latte qkv forward", 0, 4096, 384, 1152, False),
    ("latte fc2 forward", 0, 4096, 1536, 384, False),
    ("latte qkv weight gradient", 0, 1152, 4096, 384, True),
    ("latte fc1 input gradient", 0, 4096, 1536, 384, False),
    ("llama-1b q_proj forward", 0, 2048, 2048, 2048, False),
    ("llama-1b down_proj weight gradient", 0, 2048, 2048, 8192, True),
    ("attention spatial scores", 96, 256, 64, 256, False),
    ("attention spatial context", 96, 256, 256, 64, False),
    ("attention temporal scores", 3072, 8, 64, 8, False),
]


def timed(fn, repeat):
    fn()
    fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def mixed_gemm(dtype):
    lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
    name = "cblas_gemm_bf16bf16f32" if dtype == torch.bfloat16 else "cblas_gemm_f16f16f32"
    try:
        fn = getattr(lib, name)
    except AttributeError:
        return None
    fn.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                        ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
    return fn


def mixed_fallback(a, b, out):
    out.copy_(torch.matmul(a, b))  # stands in for MKL's mixed GEMM (about as fast as native here: see "mixed")


def convert_product(a, b, out):
    """tune's fp32-accumulate kernel in Python: row blocks of at most 64Ki result elements with b converted once,
    or (when that keeps less alive) the inner dimension in slabs of 256 into a whole fp32 result."""
    if a.dim() == 3:
        group = max(1, min(a.shape[0], 65536 // (a.shape[1] * b.shape[2])))
        for first in range(0, a.shape[0], group):
            part = torch.bmm(a[first:first + group].float(), b[first:first + group].float())
            out[first:first + group].copy_(part)
        return
    rows, inner, columns = a.shape[0], a.shape[1], b.shape[1]
    chunk = min(rows, max(64, 65536 // columns))
    whole_b, in_slabs = inner * columns + chunk * (inner + columns), rows * columns + 256 * (rows + columns)
    if min(whole_b, in_slabs) * 4 > 64 << 20:  # tune reads such operands in place with MKL's mixed GEMM
        return mixed_fallback(a, b, out)
    if in_slabs < whole_b:
        total = torch.zeros(rows, columns)  # a weight gradient: the inner dimension in slabs of 256
        for first in range(0, inner, 256):
            total.addmm_(a[:, first:first + 256].float(), b[first:first + 256].float())
        out.copy_(total)
        return
    b32 = b.float()
    buffer = torch.empty(chunk, columns)
    for row in range(0, rows, chunk):
        count = min(chunk, rows - row)
        torch.mm(a[row:row + count].float(), b32, out=buffer[:count])
        out[row:row + count].copy_(buffer[:count])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=8)
    parser.add_argument("--out")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    results = []
    print(f"torch {torch.__version__}, {args.threads} thread(s); GFLOP/s (higher is better)")
    print(f"| dtype | product | native | convert | mixed | fp32 | convert / native |")
    print("|---|---|---|---|---|---|---|")
    for dtype in (torch.bfloat16, torch.float16):
        gemm = mixed_gemm(dtype)
        for name, batch, m, k, n, transposed in SHAPES:
            shape_a = (batch, m, k) if batch else ((k, m) if transposed else (m, k))
            a = torch.randn(*shape_a).to(dtype)
            if transposed:
                a = a.t()
            b = torch.randn(*((batch, k, n) if batch else (k, n))).to(dtype)
            out = torch.empty(*((batch, m, n) if batch else (m, n)), dtype=dtype)
            c32 = torch.empty(*((batch, m, n) if batch else (m, n)))
            flop = 2 * max(batch, 1) * m * k * n
            a32, b32 = a.float(), b.float()
            row = {"dtype": str(dtype).replace("torch.", ""), "product": name,
                   "native": flop / timed(lambda: torch.matmul(a, b), args.repeat) / 1e9,
                   "convert": flop / timed(lambda: convert_product(a, b, out), args.repeat) / 1e9,
                   "fp32": flop / timed(lambda: torch.matmul(a32, b32), args.repeat) / 1e9}
            if gemm is not None:
                def mixed():
                    mats = [(a[i], b[i], c32[i]) for i in range(batch)] if batch else [(a, b, c32)]
                    for x, y, z in mats:
                        lead, trans = (x.stride(1), 112) if transposed else (x.stride(0), 111)
                        gemm(101, trans, 111, m, n, k, 1.0, x.data_ptr(), lead, y.data_ptr(), n, 0.0,
                             z.data_ptr(), n)
                row["mixed"] = flop / timed(mixed, max(1, args.repeat // 4)) / 1e9
            results.append(row)
            mixed_text = f"{row['mixed']:.0f}" if "mixed" in row else "n/a"
            print(f"| {row['dtype']} | {name} | {row['native']:.0f} | {row['convert']:.0f} | {mixed_text} | "
                  f"{row['fp32']:.0f} | {row['convert'] / row['native']:.2f} |", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"torch": torch.__version__, "threads": args.threads, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
