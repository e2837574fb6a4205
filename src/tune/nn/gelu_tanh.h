// The tanh-approximated GELU (DiT's, T5's and Latte-1's `gelu(x, approximate="tanh")`) and its derivative, with a
// vectorised CPU kernel for bf16 where LibTorch's is slow.
//
// Why: LibTorch 2.13's CPU kernel evaluates tanh through Sleef's accurate tanh, 8.2 ms for a [4096, 1536] bf16
// tensor at one thread on the AVX512-BF16 EPYC (its exp-based sigmoid takes 2.1 ms, its erf GELU 2.0 ms), and
// Latte's MLP runs GELU three times a step per block (forward, the recompute in fc2's backward, GELU's backward):
// ~300 ms of a 2.3 s Latte-S/2 step. The same function written as x * sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3)
// (0.5 (1 + tanh(u)) = sigmoid(2u) exactly), with one polynomial exp in fp32, runs in a fraction of that.
#pragma once

#include <torch/types.h>

namespace tune::nn {

// gelu(x, "tanh"), the value only (no autograd graph). bf16 CPU tensors go through tune's kernel: computed in fp32
// (exp to ~2 fp32 ulps) and rounded once to bf16, so it differs from LibTorch's by at most one bf16 ulp, and only
// where LibTorch's fp32 value sits within a few fp32 ulps of a rounding boundary, or in the far negative tail, where
// 1 + tanh(u) cancels in LibTorch's form and x * sigmoid(2u) stays accurate. Every other dtype and device, and
// TUNE_CPU_GELU=libtorch, runs LibTorch's gelu.
torch::Tensor gelu_tanh(const torch::Tensor& x);

// The input's gradient of gelu_tanh: grad * d gelu / dx at x, in the dtype of x, by the same rule (tune's kernel
// for bf16 CPU tensors of one shape, LibTorch's gelu_backward otherwise).
torch::Tensor gelu_tanh_backward(const torch::Tensor& grad, const torch::Tensor& x);
// The same, written over `grad` where tune's kernel runs (else a new tensor, as above): for a caller whose incoming
// gradient dies here, one [rows, inner] tensor less at the MLP's backward peak.
torch::Tensor gelu_tanh_backward_(const torch::Tensor& grad, const torch::Tensor& x);

// gelu_tanh with autograd: keeps x (as LibTorch's GELU does) and differentiates through gelu_tanh_backward.
torch::Tensor gelu_tanh_differentiable(const torch::Tensor& x);

// Whether `x` (and a gradient like it) takes tune's kernel.
bool gelu_tanh_uses_tune_kernel(const torch::Tensor& x);

}  // namespace tune::nn
