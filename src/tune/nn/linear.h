// A Linear layer applied through ATen's linear operator, keeping its fp32 weight rather than a compute-dtype copy
// for backward under autocast.
//
// torch::nn::Linear::forward goes through the C++ frontend's functional linear, which for inputs of more than two
// dimensions runs matmul and then adds the bias in place: no fused addmm, and under bf16 autocast an in-place add of
// the fp32 bias into the bf16 product (mixed dtypes, slow on the CPU: 0.8 s of a 9 s Latte-S/2 step) whose
// gradient is a separate reduction. ATen's linear (what PyTorch's nn.Linear calls) folds a contiguous 3-D input
// into one addmm with the bias cast alongside the weight, and its autocast rule covers the bias too.
//
// Under autocast, autograd keeps the weight's compute-dtype copy from each linear's forward to its backward (for
// the input's gradient). Where that graph lives until a later backward (a plainly run block: what
// nn::graph_kept_until_backward says) and the weight trains in another dtype than the compute dtype (fp32 master
// weights), `linear` instead runs a node with the same products (the same kernels on the same operands, so the same
// bits) that keeps the fp32 weight, alive anyway as the parameter, and casts it again in backward. On Latte-S/2 at
// policy off those copies were ~48 MiB of a 1.1 GB peak, for one cast per layer in backward.
#pragma once

#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <optional>

namespace tune::nn {

// Whether `linear` keeps the weight itself rather than its autocast copy: under autocast to another dtype than the
// weight's, with the graph kept until backward and a weight that trains. The activation estimates ask it.
inline bool linear_recasts_weight(bool low_precision, bool kept_until_backward, bool weight_trains) {
  return low_precision && kept_until_backward && weight_trains;
}

// The dtype autocast runs a matmul in on `device` now, if autocast is on there.
std::optional<torch::ScalarType> autocast_compute_dtype(const torch::Device& device);

// torch::linear with every operand cast to `dtype` and autocast excluded: what autocast runs (the same kernel on the
// same values) without its cast cache, which would keep each weight's copy until the autocast scope ends (after the
// loss, where a step's peak can be); this one is freed with the product.
torch::Tensor linear_in_dtype(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
                              torch::ScalarType dtype);

// The weight's gradient of a product of `flat_input` [rows, in] with `weight` [out, in] transposed, from the
// product's gradient `grad` [rows, out], as addmm's backward forms it (the input's transpose times the gradient, then
// transposed: the fp32-accumulate kernels sum in the plain form's order) and cast and laid out as the weight in one
// pass (the plain form's ToCopy; a transposed gradient would be copied again by AccumulateGrad). For the custom
// nodes that keep the fp32 weight (this file's, nn/gelu_linear).
torch::Tensor linear_weight_gradient(const torch::Tensor& flat_input, const torch::Tensor& grad,
                                     const torch::Tensor& weight);
// Their bias: whether there is one and its dtype, saved in forward; in backward its gradient (the plain form's: the
// product's gradient `grad` [rows, out] summed over rows, cast to the bias's dtype) where input `bias_input` of the
// node needs one, else undefined.
void save_bias_kind(torch::autograd::AutogradContext* ctx, const torch::Tensor& bias, const torch::Tensor& weight);
torch::Tensor linear_bias_gradient(torch::autograd::AutogradContext* ctx, const torch::Tensor& grad,
                                   size_t bias_input);

// torch::linear(input, weight, bias), in the form above where linear_recasts_weight holds for the current thread's
// autocast state (on input's device), grad mode and nn::graph_kept_until_backward.
torch::Tensor linear(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias);

inline torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& input) {
  return linear(input, layer->weight, layer->bias);
}

}  // namespace tune::nn
