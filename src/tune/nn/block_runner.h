// How a model's repeated blocks are executed. A model calls its runner for each block (or for the whole stack)
// and never knows whether the block is checkpointed, offloaded or run plainly: memory/ provides runners,
// recipes install them. Inside a block, the model marks regions (norms, attention core, activations) that a
// runner may checkpoint on their own (selective checkpointing).
#pragma once

#include <ATen/core/grad_mode.h>
#include <torch/types.h>

#include <functional>
#include <vector>

namespace tune::nn {

// A block as a function of its input. It must own what it uses (capture by value): a checkpointing runner calls it
// again during backward, after the model's forward has returned.
using BlockFunction = std::function<torch::Tensor(const torch::Tensor& input)>;
// Block `block_index` of a stack as a function of its input; the same ownership rule applies.
using StackFunction = std::function<torch::Tensor(int64_t block_index, const torch::Tensor& input)>;
// The trainable parameters (requires_grad) of block `block_index`.
using StackParamsFunction = std::function<std::vector<torch::Tensor>(int64_t block_index)>;
// A region inside a block as a function of its tensor inputs; the same ownership rule applies.
using RegionFunction = std::function<torch::Tensor(const std::vector<torch::Tensor>& inputs)>;

// What a region computes. Selective checkpointing recomputes these and keeps the matmul outputs between them:
// they are cheap to recompute but save large tensors (softmax probabilities, fp32 norm intermediates).
enum class RegionKind {
  norm,            // a normalisation layer (its weight is a region parameter)
  attention_core,  // scores, mask, softmax and the value product: after the q/k/v projections and RoPE. Blocks
                   // run it through nn::run_attention_core (attention_core.h), which asks recomputes()
  activation,      // an elementwise activation between matmuls, e.g. silu(gate) * up
};

class BlockRunner {
 public:
  virtual ~BlockRunner() = default;
  // `params`: the block's trainable parameters (requires_grad), passed explicitly so that a runner that
  // recomputes the block can return their gradients even when `input` does not require grad.
  virtual torch::Tensor run(int64_t block_index, const BlockFunction& block, const torch::Tensor& input,
                            const std::vector<torch::Tensor>& params) = 0;

  // Runs blocks 0 .. count-1 in sequence, each on the previous one's output. A runner may group consecutive
  // blocks into one recomputed segment (policy sqrt); the default runs each block through run().
  virtual torch::Tensor run_stack(int64_t count, const StackFunction& block, const torch::Tensor& input,
                                  const StackParamsFunction& params_of) {
    torch::Tensor hidden = input;
    for (int64_t i = 0; i < count; ++i) {
      // `block` copied into the closure: run() may keep the closure past this call.
      hidden = run(i, [block, i](const torch::Tensor& h) { return block(i, h); }, hidden, params_of(i));
    }
    return hidden;
  }

  // Runs one region of a block. `params`: the region's trainable parameters (as for run()). The default is a
  // plain call; a selective-checkpointing runner recomputes the region in backward.
  virtual torch::Tensor run_region(RegionKind kind, const RegionFunction& region, const std::vector<torch::Tensor>& inputs,
                                   const std::vector<torch::Tensor>& params) {
    (void)kind;
    (void)params;
    return region(inputs);
  }

  // Whether this runner recomputes regions of `kind` in backward. A region with a cheaper dedicated recomputing
  // form (the attention core, whose backward needs only the probabilities again) asks this and runs that form
  // instead of going through run_region.
  virtual bool recomputes(RegionKind kind) const {
    (void)kind;
    return false;
  }
};

// What a block calls to run a region: through `runner` when the block has one, else a plain call.
inline torch::Tensor run_region(BlockRunner* runner, RegionKind kind, const RegionFunction& region,
                                const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& params = {}) {
  return runner != nullptr ? runner->run_region(kind, region, inputs, params) : region(inputs);
}

// An RAII scope counted per thread: active() says whether one of this kind is open on the calling thread (scopes
// nest). Each kind (Tag) has its own count.
template <typename Tag>
class ThreadScope {
 public:
  ThreadScope() { ++depth(); }
  ~ThreadScope() { --depth(); }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;
  static bool active() { return depth() > 0; }

 private:
  static int& depth() {
    static thread_local int value = 0;
    return value;
  }
};

// Whether the current thread is inside a runner's recompute of a block or region during backward. A runner that
// wraps blocks (distributed full_shard gathers a block's parameters around each call) tells a recompute from a
// forward call with it; memory/checkpoint.cpp sets it around every recompute.
class RecomputeScope : public ThreadScope<RecomputeScope> {};

// Set around each block of a multi-block recompute segment but its last (policy sqrt, memory/checkpoint.cpp): that
// block's recomputed graph lives on while the segment's later blocks are differentiated, not only through its own
// backward, so what it keeps counts as a plainly run block's does.
class SegmentBlockScope : public ThreadScope<SegmentBlockScope> {};

// Whether what a layer saves for backward now is kept until a later block's backward, not only through the current
// block's: grad mode on, outside a checkpointed block's recompute (a plainly run block; `selective`: selective
// checkpointing's blocks, which run plainly while only their regions recompute) or inside a multi-block segment's
// recompute before its last block. Layers with a cheaper-to-keep autograd form (nn::run_attention_core,
// nn::run_gelu_linear) take it then.
inline bool graph_kept_until_backward(bool selective) {
  return at::GradMode::is_enabled() && (selective || !RecomputeScope::active() || SegmentBlockScope::active());
}

// Runs each block as a plain call.
class PlainBlockRunner : public BlockRunner {
 public:
  torch::Tensor run(int64_t, const BlockFunction& block, const torch::Tensor& input,
                    const std::vector<torch::Tensor>&) override {
    return block(input);
  }
};

}  // namespace tune::nn
