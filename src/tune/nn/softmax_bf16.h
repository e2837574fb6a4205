// Softmax over the last dimension of bf16 attention scores, computed in fp32 as softmax(scores, -1, kFloat) does,
// with a vectorised CPU kernel that reads the bf16 scores directly and can write bf16 probabilities directly.
//
// Why: tune's attention cores take the softmax of bf16 scores in fp32 and use the probabilities in bf16 (the value
// product), and the recomputing core does so twice a step (forward, and again in backward). Through LibTorch that is
// three passes over the [B, H, T, S] scores beyond the softmax itself: the scores cast to fp32, the fp32
// probabilities written, and their cast to bf16 (on the Latte-S/2 step at one thread 48 ms of casts a step beside
// 69 ms of softmax, where the official model code spends 38 ms in all). Here it is one pass: bf16 in, fp32 inside,
// bf16 (or fp32) out.
#pragma once

#include <torch/types.h>

#include <utility>

namespace tune::nn {

// Whether softmax_of_bf16_scores takes tune's kernel for `scores`: a contiguous bf16 CPU tensor (not with
// TUNE_CPU_SOFTMAX=libtorch).
bool softmax_uses_tune_kernel(const torch::Tensor& scores);
// Whether tune's softmax kernels are on at all (not TUNE_CPU_SOFTMAX=libtorch).
bool softmax_kernel_enabled();

// softmax(scores, -1) computed in fp32 and returned as `out_dtype` (kFloat32, or the scores' dtype), the value only
// (no autograd graph). With tune's kernel the fp32 value differs from LibTorch's by a few fp32 ulps (its exp is a
// polynomial to ~2 ulps; the row sum in another order), and a bf16 result is that value rounded to nearest even, as
// a cast of the fp32 result would be. A logit of -inf or below -87 under the row's maximum gets exactly 0 (a masked
// key); a row holding a NaN, or nothing but -inf, is NaN throughout, as LibTorch's. Elsewhere LibTorch's softmax
// (then cast).
torch::Tensor softmax_of_bf16_scores(const torch::Tensor& scores, torch::ScalarType out_dtype);

// The recomputing attention core's backward through its softmax, fused: from bf16 `scores` and the bf16 gradient of
// the probabilities `grad_probabilities` (same shape, contiguous), p = softmax(scores) in fp32 exactly as
// softmax_of_bf16_scores computes it, and the scores' gradient p * (dp - sum_j p_j dp_j) in fp32 (LibTorch's softmax
// backward formula, the row sum in another order); returns {p, gradient}, both rounded to bf16 (p for the value
// gradient's product). One pass per row instead of the fp32 probabilities, the gradient's cast to fp32, LibTorch's
// softmax backward into fp32 and its cast back. Only where softmax_uses_tune_kernel(scores) and the gradient is a
// contiguous bf16 tensor of the same shape (softmax_backward_uses_tune_kernel); the caller takes LibTorch's path
// otherwise.
bool softmax_backward_uses_tune_kernel(const torch::Tensor& scores, const torch::Tensor& grad_probabilities);
std::pair<torch::Tensor, torch::Tensor> softmax_and_backward_of_bf16_scores(const torch::Tensor& scores,
                                                                            const torch::Tensor& grad_probabilities);

// The fp32 softmax of bf16 scores with autograd, as softmax(scores, -1, kFloat) (keeps its output; the input's
// gradient in bf16), through softmax_of_bf16_scores: the plain attention core's form, so that it and the recomputing
// core produce the same probabilities.
torch::Tensor softmax_of_bf16_scores_differentiable(const torch::Tensor& scores);

}  // namespace tune::nn
