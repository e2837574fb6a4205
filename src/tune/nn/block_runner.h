// How a model's repeated blocks are executed. A model calls its runner for each block and never knows whether
// the block is checkpointed, offloaded or run plainly: memory/ provides runners, recipes install them.
#pragma once

#include <torch/types.h>

#include <functional>
#include <vector>

namespace tune::nn {

// A block as a function of its input. It must own what it uses (capture by value): a checkpointing runner calls it
// again during backward, after the model's forward has returned.
using BlockFunction = std::function<torch::Tensor(const torch::Tensor& input)>;

class BlockRunner {
 public:
  virtual ~BlockRunner() = default;
  // `params`: the block's trainable parameters (requires_grad), passed explicitly so that a runner that
  // recomputes the block can return their gradients even when `input` does not require grad.
  virtual torch::Tensor run(int64_t block_index, const BlockFunction& block, const torch::Tensor& input,
                            const std::vector<torch::Tensor>& params) = 0;
};

// Runs each block as a plain call.
class PlainBlockRunner : public BlockRunner {
 public:
  torch::Tensor run(int64_t, const BlockFunction& block, const torch::Tensor& input,
                    const std::vector<torch::Tensor>&) override {
    return block(input);
  }
};

}  // namespace tune::nn
