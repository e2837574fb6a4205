// A FLOP model of one SFT training step, for the planner's relative step time: what checkpointing costs in
// recompute against the forward and backward it saves memory for. A model, not a measurement: it counts matmul
// FLOPs exactly and elementwise work roughly, and ignores memory traffic, kernel efficiency and communication.
#pragma once

#include <cstdint>

#include "tune/memory/checkpoint.h"
#include "tune/models/llama.h"
#include "tune/models/llama_config.h"
#include "tune/nn/attention_core.h"

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

// The attention core's form (nn::attention_core_form) in the layers of a step: `kept`, a layer whose graph lives
// until backward (not checkpointed); `recomputed`, a checkpointed layer's recompute; `selective`, a layer under
// selective checkpointing. LibTorch's fused kernel and tune's recomputing core rebuild the scores in their own
// backward; tune's plain core does not.
struct AttentionCoreForms {
  nn::AttentionCoreForm kept = nn::AttentionCoreForm::plain;
  nn::AttentionCoreForm recomputed = nn::AttentionCoreForm::plain;
  nn::AttentionCoreForm selective = nn::AttentionCoreForm::plain;
};

// forward and backward are policy off's (every layer kept), recompute what the policy adds to them: the forwards it
// repeats, and the difference its layers' attention cores make to backward (a checkpointed layer's plain core
// rebuilds nothing, so on the CPU that term is negative).
StepFlops step_flops(const models::LlamaConfig& config, const models::LlamaLoraOptions& lora, int64_t sequence,
                     const memory::CheckpointRunner& runner, const AttentionCoreForms& attention);

}  // namespace tune::recipes::sft
