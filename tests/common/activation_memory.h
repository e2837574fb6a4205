// Test helper shared by the memory tests: the activation memory of one training step as the estimates define it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>

#include "tune/core/memory_tracker.h"
#include "tune/precision/mixed_precision.h"

namespace tune::testing {

// Peak live CPU tensor bytes during `loss_of()` (run under bf16 autocast, as the training steps run their forward)
// and the loss's backward (outside the scope), minus the live bytes before. Parameter gradients left by an earlier
// step are zeroed in place first, so backward accumulates into existing storage and the figure holds no
// parameter-gradient memory (only the transient gradient of whichever weight is being accumulated), as in every
// training step after the first. The tracking allocator must be installed (memory_tracker::install()).
inline int64_t measure_step_activation_bytes(torch::nn::Module& model, const std::function<torch::Tensor()>& loss_of) {
  for (auto& parameter : model.parameters()) {
    if (parameter.grad().defined()) parameter.mutable_grad().zero_();
  }
  const int64_t before = memory_tracker::cpu_live_bytes();
  memory_tracker::reset_cpu_peak();
  torch::Tensor loss;
  {
    precision::AutocastScope autocast(precision::MixedPrecision::bf16, torch::kCPU);
    loss = loss_of();
  }
  loss.backward();
  return memory_tracker::cpu_peak_bytes() - before;
}

}  // namespace tune::testing
