// RMSNorm forward and backward as CPU kernels over rows, for fp32 inputs and weights (the residual stream under
// autocast, or an fp32 run).
//
// Why: LibTorch has no CPU kernel for RMSNorm (at::_fused_rms_norm is composite there), so the formula runs op by
// op: the square, the mean, the rsqrt, two products forward, and in backward each op's gradient plus the weight's
// row sum, about sixteen passes over [tokens, hidden] fp32 tensors, with the normalised tensor kept for backward.
// On issue 22's 8-layer Llama step (17 norms over 2048 x 256) that was ~7.6 ms a norm forward and backward at one
// thread, a sixth of the step. Here each row is read once forward (its sum of squares, then the output) and once
// backward, and only the input and one rstd per row are kept.
//
// The values are the formula's with its roundings: normalised = x * rstd rounded to fp32, then multiplied by the
// weight (Llama) or by 1 + weight rounded to fp32 (Gemma's zero-centred form); the row's sum of squares is taken in
// another order than ATen's mean, so equal to the op-by-op form within fp32 rounding, not bit for bit.
// TUNE_CPU_NORM=libtorch keeps the op-by-op form (as for nn/modulated_norm_cpu).
#pragma once

#include <torch/types.h>

namespace tune::nn {

// Whether tune's CPU norm kernels (these and nn/modulated_norm_cpu's) run: not with TUNE_CPU_NORM=libtorch, which
// keeps LibTorch's op-by-op forms (for measuring one against the other).
bool cpu_norm_kernels_enabled();

// Whether the kernels take these: CPU, input fp32 contiguous with at least one element, weight fp32 [hidden]
// contiguous matching the input's last dimension; cpu_norm_kernels_enabled().
bool rms_norm_cpu_fits(const torch::Tensor& input, const torch::Tensor& weight);

// weight * (x * rsqrt(mean(x^2) + eps)) over the last dimension (zero_centred: (1 + weight) * ...), differentiable
// in input and weight; keeps the input and a per-row rstd for backward.
torch::Tensor rms_norm_cpu(const torch::Tensor& input, const torch::Tensor& weight, double eps, bool zero_centred);

}  // namespace tune::nn
