// full_shard against a float64 reference: two forked ranks, each with its own data, train a small stack (three
// blocks through a checkpointing runner wrapped by FullyShardedParameters; a frozen weight in block 1 as LoRA's
// base, a bias in block 2, a head outside the blocks in the rest unit) through two micro-batches. After
// finish_gradients the shards' gradients, gathered whole, must equal the float64 gradients of the whole loss over
// both ranks' data; whenever no forward or backward runs, no parameter holds bytes. With prefetching, the next
// block's parameters are already on their way while a block runs forward, and never more than two blocks' are
// resident.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <map>
#include <string>

#include "distributed/two_ranks.h"
#include "tune/distributed/fully_sharded.h"
#include "tune/memory/checkpoint.h"
#include "tune/nn/block_runner.h"

namespace {

using tune::distributed::FullyShardedParameters;
using tune::distributed::ProcessGroup;
using tune::distributed::ShardUnitSpec;

constexpr int kRows = 4, kMicroBatches = 2, kRanks = 2, kBlocks = 3;

struct Model {
  std::vector<torch::Tensor> weights;  // block i's [8, 8]
  torch::Tensor frozen, bias, head;

  std::vector<std::pair<std::string, torch::Tensor>> trainable() const {
    return {{"blocks.0.weight", weights[0]}, {"blocks.1.weight", weights[1]}, {"blocks.2.weight", weights[2]},
            {"blocks.2.bias", bias}, {"head", head}};
  }
};

Model make_model(torch::ScalarType dtype) {
  torch::manual_seed(5);
  Model m;
  for (int i = 0; i < kBlocks; ++i) m.weights.push_back((torch::randn({8, 8}) / 3).to(dtype).requires_grad_());
  m.frozen = (torch::randn({8, 8}) / 3).to(dtype);
  m.bias = torch::randn({8}).to(dtype).requires_grad_();
  m.head = torch::randn({4, 8}).to(dtype).requires_grad_();
  return m;
}

torch::Tensor rank_input(int rank, int micro_batch, torch::ScalarType dtype) {
  torch::manual_seed(200 + rank * 10 + micro_batch);
  return torch::randn({kRows, 8}).to(dtype);
}

// What a block saw of the other blocks' parameters when it ran (full_shard runs only).
struct Residency {
  int max_resident_blocks = 0;
  int forward_calls = 0;            // block calls outside a recompute, of blocks 0 .. kBlocks - 2
  int next_resident_in_forward = 0;  // ... during which the next block's parameters held bytes (a prefetch)
};

void observe(const Model& m, int64_t i, Residency* seen) {
  if (seen == nullptr) return;
  int resident = 0;
  for (const auto& weight : m.weights) resident += weight.storage().nbytes() > 0 ? 1 : 0;
  seen->max_resident_blocks = std::max(seen->max_resident_blocks, resident);
  if (!tune::nn::RecomputeScope::active() && i + 1 < kBlocks) {
    ++seen->forward_calls;
    if (m.weights[static_cast<size_t>(i + 1)].storage().nbytes() > 0) ++seen->next_resident_in_forward;
  }
}

torch::Tensor loss_of(const Model& m, const torch::Tensor& x, tune::nn::BlockRunner* runner,
                      Residency* seen = nullptr) {
  const tune::nn::StackFunction block = [&m, seen](int64_t i, const torch::Tensor& h) {
    observe(m, i, seen);
    torch::Tensor y = torch::tanh(torch::matmul(h, m.weights[static_cast<size_t>(i)].t()));
    if (i == 1) y = torch::matmul(y, m.frozen);
    if (i == 2) y = y + m.bias;
    return y;
  };
  const tune::nn::StackParamsFunction params_of = [&m](int64_t i) {
    std::vector<torch::Tensor> params{m.weights[static_cast<size_t>(i)]};
    if (i == 2) params.push_back(m.bias);
    return params;
  };
  torch::Tensor hidden = x;
  if (runner != nullptr) {
    hidden = runner->run_stack(kBlocks, block, x, params_of);
  } else {
    for (int i = 0; i < kBlocks; ++i) hidden = block(i, hidden);
  }
  return torch::matmul(hidden, m.head.t()).pow(2).sum() / static_cast<double>(kRows * kMicroBatches * kRanks);
}

std::map<std::string, torch::Tensor> reference_gradients() {
  const Model m = make_model(torch::kFloat64);
  torch::Tensor total = torch::zeros({}, torch::kFloat64);
  for (int rank = 0; rank < kRanks; ++rank) {
    for (int micro = 0; micro < kMicroBatches; ++micro) total = total + loss_of(m, rank_input(rank, micro, torch::kFloat64), nullptr);
  }
  std::vector<torch::Tensor> wrt;
  for (const auto& [name, tensor] : m.trainable()) wrt.push_back(tensor);
  const auto grads = torch::autograd::grad({total}, wrt);
  std::map<std::string, torch::Tensor> named;
  for (size_t i = 0; i < wrt.size(); ++i) named[m.trainable()[i].first] = grads[i];
  return named;
}

bool all_released(const Model& m) {
  bool released = m.frozen.storage().nbytes() == 0 && m.bias.storage().nbytes() == 0 && m.head.storage().nbytes() == 0;
  for (const auto& weight : m.weights) released = released && weight.storage().nbytes() == 0;
  return released;
}

bool sharded_gradients_match(int rank, uint16_t port, tune::memory::Policy policy, bool prefetch) {
  ProcessGroup group(two_rank_environment(rank, port), test_group_options());
  const Model m = make_model(torch::kFloat32);
  std::vector<ShardUnitSpec> blocks(kBlocks);
  for (int i = 0; i < kBlocks; ++i) {
    blocks[i].name = "blocks." + std::to_string(i);
    blocks[i].params.emplace_back(blocks[i].name + ".weight", m.weights[static_cast<size_t>(i)]);
  }
  blocks[1].params.emplace_back("blocks.1.frozen", m.frozen);
  blocks[2].params.emplace_back("blocks.2.bias", m.bias);
  FullyShardedParameters sharded(group, blocks, {"rest", {{"head", m.head}}}, torch::kFloat32, prefetch);
  tune::memory::CheckpointOptions options;
  options.policy = policy;
  const auto runner = sharded.wrap(std::make_shared<tune::memory::CheckpointRunner>(options, kBlocks));
  if (!all_released(m)) return false;
  Residency seen;
  for (int micro = 0; micro < kMicroBatches; ++micro) {
    sharded.gather_rest();
    loss_of(m, rank_input(rank, micro, torch::kFloat32), runner.get(), &seen).backward();
  }
  sharded.finish_gradients();
  if (!all_released(m)) return false;
  // Prefetching: every forward call of a block found the next block's gather started (each of the forward's, and at
  // least one in each backward, counted); without it, none. Either way at most two blocks' parameters resident.
  if (seen.max_resident_blocks > 2) return false;
  if (prefetch) {
    if (seen.forward_calls == 0 || seen.next_resident_in_forward != seen.forward_calls) return false;
    if (sharded.prefetched_units() < seen.forward_calls + kMicroBatches) return false;
  } else if (seen.next_resident_in_forward != 0 || sharded.prefetched_units() != 0) {
    return false;
  }
  const auto reference = reference_gradients();
  size_t compared = 0;
  for (auto* flat : sharded.flat_parameters()) {
    if (!flat->trainable()) continue;
    if (!flat->shard().grad().defined()) return false;
    for (const auto& [name, grad] : flat->split(flat->gather_whole(flat->shard().grad()))) {
      const auto& expected = reference.at(name);
      const double scale = std::max(1.0, expected.abs().max().item<double>());
      if ((grad.to(torch::kFloat64) - expected).abs().max().item<double>() > 1e-5 * scale) return false;
      ++compared;
    }
  }
  // The frozen weight and every parameter's values survive sharding: gathered, they are the initial ones.
  sharded.gather_all();
  const Model initial = make_model(torch::kFloat32);
  const bool values = torch::equal(m.frozen, initial.frozen) && torch::equal(m.head, initial.head) &&
                      torch::equal(m.weights[1], initial.weights[1]);
  sharded.release_all();
  return compared == reference.size() && values && all_released(m);
}

}  // namespace

TEST_CASE("full_shard: reduce-scattered gradients equal the float64 gradients of all ranks' data",
          "[distributed][full_shard]") {
  using tune::memory::Policy;
  for (const Policy policy : {Policy::off, Policy::full, Policy::sqrt, Policy::selective}) {
    for (const bool prefetch : {true, false}) {
      DYNAMIC_SECTION("checkpointing " << tune::memory::policy_name(policy) << (prefetch ? ", prefetch" : "")) {
        run_two_ranks([policy, prefetch](int rank, uint16_t port) {
          return sharded_gradients_match(rank, port, policy, prefetch);
        });
      }
    }
  }
}
