// A small residual block (LayerNorm -> Linear -> GELU -> Dropout -> Linear) and helpers that run a stack of them
// plainly or checkpointed, so the checkpointed gradients can be checked against the plain run as the truth.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "tune/memory/checkpoint.h"
#include "tune/nn/block_runner.h"

namespace tune::test {

struct TestBlockImpl : torch::nn::Module {
  TestBlockImpl(int64_t dim, int64_t hidden, double dropout = 0.3)
      : norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})))),
        fc1(register_module("fc1", torch::nn::Linear(dim, hidden))),
        drop(register_module("drop", torch::nn::Dropout(dropout))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, dim))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = fc1(norm(x));
    if (on_hidden) on_hidden(h);
    return x + fc2(drop(torch::gelu(h)));
  }

  torch::nn::LayerNorm norm;
  torch::nn::Linear fc1;
  torch::nn::Dropout drop;
  torch::nn::Linear fc2;
  std::function<void(const torch::Tensor&)> on_hidden;  // observes each call (forward and recompute)
};
TORCH_MODULE(TestBlock);

struct TestStack {
  TestStack(int64_t num_blocks, int64_t dim, int64_t hidden) {
    torch::manual_seed(1234);  // same weights for every stack built with the same sizes
    for (int64_t i = 0; i < num_blocks; ++i) blocks.emplace_back(dim, hidden);
  }

  std::vector<torch::Tensor> params() const {
    std::vector<torch::Tensor> all;
    for (const auto& block : blocks) {
      for (const auto& p : block->parameters()) all.push_back(p);
    }
    return all;
  }

  torch::Tensor forward(nn::BlockRunner& runner, torch::Tensor x) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      std::shared_ptr<TestBlockImpl> block = blocks[i].ptr();
      x = runner.run(static_cast<int64_t>(i), [block](const torch::Tensor& in) { return block->forward(in); }, x,
                     block->parameters());
    }
    return x;
  }

  // The same stack through run_stack (where a runner may group blocks into segments).
  torch::Tensor forward_stack(nn::BlockRunner& runner, const torch::Tensor& x) {
    std::vector<std::shared_ptr<TestBlockImpl>> all;
    for (const auto& block : blocks) all.push_back(block.ptr());
    return runner.run_stack(
        static_cast<int64_t>(all.size()),
        [all](int64_t i, const torch::Tensor& in) { return all[static_cast<size_t>(i)]->forward(in); }, x,
        [&all](int64_t i) { return all[static_cast<size_t>(i)]->parameters(); });
  }

  void zero_grad() {
    for (auto& p : params()) p.mutable_grad() = torch::Tensor();
  }

  std::vector<TestBlock> blocks;
};

// Every param's gradient, cloned (undefined stays undefined).
inline std::vector<torch::Tensor> param_grads(const TestStack& stack) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : stack.params()) grads.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return grads;
}

inline bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].defined() != b[i].defined()) return false;
    if (a[i].defined() && !torch::equal(a[i], b[i])) return false;
  }
  return true;
}

// How many nodes of output's autograd graph have `name_part` in their name (e.g. "CheckpointFunction").
inline int64_t count_graph_nodes(const torch::Tensor& output, const std::string& name_part) {
  std::unordered_set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> pending{output.grad_fn().get()};
  int64_t count = 0;
  while (!pending.empty()) {
    torch::autograd::Node* node = pending.back();
    pending.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    if (node->name().find(name_part) != std::string::npos) ++count;
    for (const auto& edge : node->next_edges()) pending.push_back(edge.function.get());
  }
  return count;
}

inline memory::CheckpointRunner full_runner(int64_t num_blocks) {
  return memory::CheckpointRunner(memory::CheckpointOptions{memory::Policy::full, 2}, num_blocks);
}

}  // namespace tune::test
