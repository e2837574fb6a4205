// A FLOP model of one SFT training step, for the planner's relative step time: what checkpointing costs in
// recompute against the forward and backward it saves memory for. A model, not a measurement: it counts matmul
// FLOPs exactly and elementwise work roughly, and ignores memory traffic, kernel efficiency and communication.
#pragma once

#include <cstdint>

#include "tune/memory/checkpoint.h"
#include "tune/models/llama.h"
#include "tune/models/llama_config.h"

namespace tune::recipes::sft {

// FLOPs per token of one step (the token count cancels in every ratio: each term scales with batch x sequence, the
// attention terms through the sequence, which the split of the global batch does not change).
struct StepFlops {
  double forward = 0;
  double backward = 0;
  double recompute = 0;
  // (forward + backward + recompute) / (forward + backward): the step time relative to no checkpointing.
  double relative_time() const { return (forward + backward + recompute) / (forward + backward); }
};

// `fused_attention`: LibTorch's scaled_dot_product_attention (nn::uses_fused_attention), whose backward recomputes the probabilities for every
// policy (so selective checkpointing adds no attention recompute there).
StepFlops step_flops(const models::LlamaConfig& config, const models::LlamaLoraOptions& lora, int64_t sequence,
                     const memory::CheckpointRunner& runner, bool fused_attention);

}  // namespace tune::recipes::sft
