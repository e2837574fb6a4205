// Test helpers shared by the memory tests: their Llama shape, and the activation memory of one training step as the
// estimates define it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>

#include "tune/core/memory_tracker.h"
#include "tune/models/llama_config.h"
#include "tune/precision/mixed_precision.h"

namespace tune::testing {

// The memory tests' Llama (the benchmark's shape: hidden 256, 4 heads, MLP 688, vocab 256): big enough that
// activations dominate a step's transient memory (attention probabilities and MLP activations outweigh the bf16
// weight copies), small enough for a few seconds of bf16 compute on CPU.
inline models::LlamaConfig activation_heavy_llama_config(int64_t layers = 8, int64_t max_positions = 512) {
  models::LlamaConfig config;
  config.vocab_size = 256;
  config.hidden_size = 256;
  config.intermediate_size = 688;
  config.num_hidden_layers = layers;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 4;
  config.max_position_embeddings = max_positions;
  return config;
}

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
