// Products with an NF4 weight on the CPU that never hold the whole dequantised weight: W [N, K] is dequantised a
// slice of rows at a time straight into fp32 (each value rounded to the weight's own dtype first: bitsandbytes'
// values, as dequantize_nf4), and each slice is multiplied by LibTorch's fp32 kernel (MKL's sgemm) against the
// other operand converted to fp32, accumulated in fp32 and rounded once to that operand's dtype. That is what
// dequantise-then-multiply computes under tune's fp32-accumulate kernels (precision/cpu_gemm.h), without the
// dequantised weight (2 bytes per parameter) and its fp32 conversion, and with sgemm for weights too large to
// convert whole (which the fp32-accumulate kernel reads in place through MKL's slower mixed-precision GEMM).
// nn::nf4_linear takes these where the run measured them faster (recipes/cpu_kernel_choice, core/cpu_gemm_mode.h:
// nf4_cpu_fused_product); scripts/bench_nf4_cpu.sh compares the two side by side (docs/BENCHMARKS.md).
#pragma once

#include <torch/types.h>

#include "tune/precision/nf4.h"

namespace tune::precision {

// input [M, K] (bf16, fp16 or fp32) times W^T: [M, N] in input's dtype.
torch::Tensor nf4_cpu_linear(const torch::Tensor& input, const Nf4Tensor& weight);

// grad [M, N] times W: [M, K] in grad's dtype (the input gradient of nf4_cpu_linear).
torch::Tensor nf4_cpu_linear_input_grad(const torch::Tensor& grad, const Nf4Tensor& weight);

}  // namespace tune::precision
