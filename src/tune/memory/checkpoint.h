// Activation checkpointing, written as a torch::autograd::Function because LibTorch has no checkpoint().
// Forward runs the block under no-grad and keeps only its input; backward restores the RNG and autocast state
// forward saw, recomputes the block with grad on and returns gradients through torch::autograd::grad, so both
// backward() and an outer autograd::grad work. Parameters are explicit inputs: a block whose input needs no
// grad (frozen embeddings + LoRA) still gets parameter gradients, each exactly once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tune/nn/block_runner.h"

namespace tune::memory {

// Checkpoints one call of `block` when grad mode is on; a plain call under no-grad.
torch::Tensor checkpoint(const nn::BlockFunction& block, const torch::Tensor& input,
                         const std::vector<torch::Tensor>& params);

// sqrt: checkpoint about sqrt(L) evenly spaced blocks (segments are part 2). selective, offload: part 2.
enum class Policy { off, full, every_k, sqrt };

struct CheckpointOptions {
  Policy policy = Policy::full;
  int64_t k = 2;  // every_k: checkpoint blocks 0, k, 2k, ...
};

Policy parse_policy(const std::string& name);  // throws tune::UsageError listing valid names

class CheckpointRunner : public nn::BlockRunner {
 public:
  CheckpointRunner(CheckpointOptions options, int64_t num_blocks);
  torch::Tensor run(int64_t block_index, const nn::BlockFunction& block, const torch::Tensor& input,
                    const std::vector<torch::Tensor>& params) override;
  bool is_checkpointed(int64_t block_index) const;
  int64_t checkpointed_blocks() const;
  // "on, policy full, 8/8 blocks" / "off"
  std::string describe() const;

 private:
  CheckpointOptions options_;
  int64_t num_blocks_;
  std::vector<bool> checkpointed_;
};

}  // namespace tune::memory
