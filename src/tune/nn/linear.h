// A Linear layer applied through ATen's linear operator.
//
// torch::nn::Linear::forward goes through the C++ frontend's functional linear, which for inputs of more than two
// dimensions runs matmul and then adds the bias in place: no fused addmm, and under bf16 autocast an in-place add of
// the fp32 bias into the bf16 product (mixed dtypes, slow on the CPU: 0.8 s of a 9 s Latte-S/2 step) whose
// gradient is a separate reduction. ATen's linear (what PyTorch's nn.Linear calls) folds a contiguous 3-D input
// into one addmm with the bias cast alongside the weight, and its autocast rule covers the bias too.
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

namespace tune::nn {

inline torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& input) {
  return torch::linear(input, layer->weight, layer->bias);
}

}  // namespace tune::nn
