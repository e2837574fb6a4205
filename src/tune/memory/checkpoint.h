// Activation checkpointing, written as a torch::autograd::Function because LibTorch has no checkpoint().
// Forward runs the block (or region, or segment of blocks) under no-grad and keeps only its inputs; backward
// restores the RNG and autocast state forward saw, recomputes the block with grad on and returns gradients
// through torch::autograd::grad, so both backward() and an outer autograd::grad work. Parameters are explicit inputs: a block whose input needs no
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

// Where a checkpoint keeps its saved inputs until backward.
enum class SavedInputs {
  on_device,      // referenced where they are (no copy)
  offloaded_cpu,  // copied to pinned CPU memory in forward, copied back to the device in backward (CUDA only)
};

// The general form: `function` of several inputs (a region, or a segment of blocks), with its trainable
// parameters. Every input and parameter that requires grad gets its gradient; inputs that do not are not
// differentiated in the recompute.
torch::Tensor checkpoint(const nn::RegionFunction& function, const std::vector<torch::Tensor>& inputs,
                         const std::vector<torch::Tensor>& params, SavedInputs saved = SavedInputs::on_device);

// off: no recompute. full: every block. every_k: blocks 0, k, 2k, ... sqrt: the blocks in segments of
// ceil(sqrt(L)), one checkpoint per segment keeping only the segment's input (needs run_stack; a model that
// calls run() per block gets one checkpoint per block). selective: blocks run plainly, their norm, attention-core
// and activation regions are recomputed. offload: as full, the kept block inputs in pinned CPU memory (CUDA).
enum class Policy { off, full, every_k, sqrt, selective, offload };

struct CheckpointOptions {
  Policy policy = Policy::full;
  int64_t k = 2;  // every_k: checkpoint blocks 0, k, 2k, ...
};

// Throws tune::UsageError listing valid names, and for offload when no CUDA device is available.
Policy parse_policy(const std::string& name);
const char* policy_name(Policy policy);

class CheckpointRunner : public nn::BlockRunner {
 public:
  // Throws tune::UsageError for offload when no CUDA device is available.
  CheckpointRunner(CheckpointOptions options, int64_t num_blocks);
  torch::Tensor run(int64_t block_index, const nn::BlockFunction& block, const torch::Tensor& input,
                    const std::vector<torch::Tensor>& params) override;
  // sqrt: one checkpoint per segment of segment_size() blocks; other policies: per block, as run().
  torch::Tensor run_stack(int64_t count, const nn::StackFunction& block, const torch::Tensor& input,
                          const nn::StackParamsFunction& params_of) override;
  // selective: a checkpoint of the region; other policies: a plain call (inside a checkpointed block the
  // block's own recompute covers it, and checkpoints are never nested).
  torch::Tensor run_region(nn::RegionKind kind, const nn::RegionFunction& region, const std::vector<torch::Tensor>& inputs,
                           const std::vector<torch::Tensor>& params) override;
  // selective: every region kind; other policies: none.
  bool recomputes(nn::RegionKind kind) const override;

  Policy policy() const { return options_.policy; }
  // Whether block `block_index`'s activations are dropped in forward and recomputed in backward as a whole
  // (sqrt: every block, its segment's input being kept; selective: none, only regions are recomputed).
  bool is_checkpointed(int64_t block_index) const;
  int64_t checkpointed_blocks() const;
  // Blocks per recomputed segment: ceil(sqrt(L)) for sqrt, 1 otherwise.
  int64_t segment_size() const { return segment_size_; }
  // "on, policy full, 8/8 blocks" / "off" / "on, policy sqrt (4 segments of 4 blocks), 16/16 blocks" /
  // "on, policy selective (norms, attention core, activations recomputed), 8 blocks"
  std::string describe() const;

 private:
  CheckpointOptions options_;
  int64_t num_blocks_;
  int64_t segment_size_ = 1;
  std::vector<bool> checkpointed_;
};

}  // namespace tune::memory
