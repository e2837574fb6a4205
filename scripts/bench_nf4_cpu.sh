#!/usr/bin/env bash
# QLoRA's NF4 product on the CPU (forward and input gradient at 2048 tokens, bf16 autocast), nn::nf4_linear's two
# CPU paths side by side in one process (apps/bench/bench_nf4.cpp): "fused" (the weight dequantised a slice at a
# time into fp32 for sgemm) and "dequantize" (the whole weight dequantised to bf16, then the product), under each
# CPU GEMM mode (TUNE_CPU_GEMM=native: LibTorch's bf16 kernels; fp32: tune's fp32-accumulate kernels).
#   bash scripts/bench_nf4_cpu.sh [build/apps/bench/tune-bench-nf4] [extra tune-bench-nf4 options]
set -euo pipefail
bench=${1:-build/apps/bench/tune-bench-nf4}
shift || true
for mode in native fp32; do
  TUNE_CPU_GEMM=$mode "$bench" --repeat 3 "$@" | sed "s/^{/{\"cpu_gemm\": \"$mode\", /"
done
