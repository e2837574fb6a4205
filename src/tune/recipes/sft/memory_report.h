// Where training memory goes, announced before the first step: parameters, gradients, optimizer state and an
// analytic estimate of activations for the checkpointing policy in use. The measured peak is logged per step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tune/models/llama_config.h"

namespace tune::recipes::sft {

struct ActivationShape {
  int64_t batch = 1;
  int64_t sequence = 512;
  int64_t compute_bytes = 2;   // bytes per element of matmul outputs (2 under bf16/fp16 autocast, 4 otherwise)
};

// The estimates count what the step allocates on top of what lives across steps (parameters, their gradients,
// optimizer state): the tensors autograd saves in our Llama implementation (models/llama_layers.cpp, nn/), the
// low-precision weight copies autocast makes, and the largest transient working set. They assume fp32 weights
// (under autocast every matmul weight gets a compute-dtype copy), no LoRA and no biases (both add little).

// Bytes one decoder layer keeps for backward when it is not checkpointed, its fp32 input included.
int64_t estimate_layer_activation_bytes(const models::LlamaConfig& config, const ActivationShape& shape);

// Peak activation bytes of one forward + backward with the given layers checkpointed (one flag per layer). The
// peak is the larger of the end of forward (every layer's saved tensors plus the logits and loss) and the
// backward of some layer i (what layers before i keep, plus layer i's saved set, recomputed if checkpointed,
// plus its gradient working set).
int64_t estimate_activation_bytes(const models::LlamaConfig& config, const ActivationShape& shape,
                                  const std::vector<bool>& checkpointed);

// Same when only the number of checkpointed layers is known: an upper bound over where they sit, reached when
// the last layer is checkpointed (its recompute then runs while every plain layer still holds its activations).
// Exact for policy full; a policy that leaves plain layers after its last checkpointed one peaks lower.
int64_t estimate_activation_bytes(const models::LlamaConfig& config, const ActivationShape& shape,
                                  int64_t checkpointed_layers);

// sqrt policy: segments of `segment_size` layers checkpointed as one (only segment inputs kept in forward).
int64_t estimate_segmented_activation_bytes(const models::LlamaConfig& config, const ActivationShape& shape,
                                            int64_t segment_size);

}  // namespace tune::recipes::sft
