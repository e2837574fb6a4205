// Where training memory goes, announced before the first step: parameters, gradients, optimizer state and an
// analytic estimate of activations for the checkpointing policy in use. The measured peak is logged per step.
#pragma once

#include <cstdint>
#include <string>

#include "tune/models/llama_config.h"

namespace tune::recipes::sft {

struct ActivationShape {
  int64_t batch = 1;
  int64_t sequence = 512;
  int64_t compute_bytes = 2;   // bytes per element of matmul outputs (2 under bf16/fp16 autocast, 4 otherwise)
};

// Activation bytes saved for backward by one decoder layer (without checkpointing). An estimate: it counts the
// tensors autograd keeps for Llama's layer (norm inputs, projections, attention probabilities, MLP activations).
int64_t estimate_layer_activation_bytes(const models::LlamaConfig& config, const ActivationShape& shape);

// Whole-model estimate: `checkpointed_layers` layers keep only their fp32 input; the rest keep everything; one
// layer's working set is added for the recompute; logits and loss are counted once.
int64_t estimate_activation_bytes(const models::LlamaConfig& config, const ActivationShape& shape,
                                  int64_t checkpointed_layers);

}  // namespace tune::recipes::sft
