// The general checkpoint (several inputs, some without grad, plus params), sqrt's segments through run_stack,
// and regions: checkpointed only under selective, plain inside checkpointed blocks and under no-grad.
// The plain run is the truth throughout.
#include <catch2/catch.hpp>

#include <memory>

#include "test_blocks.h"
#include "tune/core/error.h"

using tune::memory::checkpoint;
using tune::memory::CheckpointOptions;
using tune::memory::CheckpointRunner;
using tune::memory::Policy;
using tune::nn::PlainBlockRunner;
using tune::nn::RegionKind;
using tune::test::all_equal;
using tune::test::count_graph_nodes;
using tune::test::param_grads;
using tune::test::TestStack;

namespace {

constexpr int64_t kDim = 8, kHidden = 16, kBatch = 4;

struct StackResult {
  torch::Tensor output;
  torch::Tensor input_grad;
  std::vector<torch::Tensor> grads;
  int64_t checkpoint_nodes = 0;
  int64_t block_calls = 0;
};

// Forward through run_stack, then backward with a non-uniform upstream gradient; dropout is active, so the
// segment recompute must replay the RNG across several blocks.
StackResult run_stack_once(TestStack& stack, tune::nn::BlockRunner& runner) {
  auto calls = std::make_shared<int64_t>(0);
  for (auto& block : stack.blocks) block->on_hidden = [calls](const torch::Tensor&) { ++*calls; };
  stack.zero_grad();
  torch::manual_seed(7);
  torch::Tensor input = torch::randn({kBatch, kDim}).requires_grad_(true);
  torch::Tensor weights = torch::randn({kBatch, kDim});
  torch::Tensor output = stack.forward_stack(runner, input);
  const int64_t nodes = count_graph_nodes(output, "CheckpointFunction");
  torch::rand({100});  // a training loop draws between forward and backward
  (output * weights).sum().backward();
  for (auto& block : stack.blocks) block->on_hidden = nullptr;
  return {output.detach(), input.grad().clone(), param_grads(stack), nodes, *calls};
}

}  // namespace

TEST_CASE("checkpoint of several inputs and params: grads equal the plain call, none for inputs without grad",
          "[checkpoint][segments]") {
  torch::manual_seed(3);
  const torch::Tensor a0 = torch::randn({3, 5}), b0 = torch::randn({3, 5}), c0 = torch::randn({3, 5});
  torch::Tensor weight = torch::randn({5}).requires_grad_(true);
  int calls = 0;
  auto function = [&calls, weight](const std::vector<torch::Tensor>& x) {
    ++calls;
    return torch::sin(x[0] * weight + x[1]) * x[2];
  };
  auto run = [&](bool checkpointed) {
    weight.mutable_grad() = torch::Tensor();
    torch::Tensor a = a0.clone().requires_grad_(true), b = b0.clone(), c = c0.clone().requires_grad_(true);
    torch::Tensor out = checkpointed ? checkpoint(function, {a, b, c}, {weight}) : function({a, b, c});
    (out * out).sum().backward();
    CHECK_FALSE(b.grad().defined());
    return std::vector<torch::Tensor>{out.detach(), a.grad(), c.grad(), weight.grad()};
  };
  const auto expected = run(false);
  calls = 0;
  const auto got = run(true);
  CHECK(calls == 2);  // forward, then the recompute
  CHECK(all_equal(got, expected));

  // autograd::grad w.r.t. one input only: that gradient, and no parameter work.
  weight.mutable_grad() = torch::Tensor();
  torch::Tensor a = a0.clone().requires_grad_(true), c = c0.clone().requires_grad_(true);
  const torch::Tensor grad_c = torch::autograd::grad({checkpoint(function, {a, b0, c}, {weight}).sum()}, {c})[0];
  const torch::Tensor plain_c = torch::autograd::grad({function({a, b0, c}).sum()}, {c})[0];
  CHECK(torch::equal(grad_c, plain_c));
  CHECK_FALSE(weight.grad().defined());
}

TEST_CASE("sqrt on 16 blocks: 4 segment checkpoints, grads bitwise equal to plain with dropout",
          "[checkpoint][segments]") {
  TestStack stack(16, kDim, kHidden);
  PlainBlockRunner plain;
  CheckpointRunner sqrt_runner(CheckpointOptions{Policy::sqrt, 2}, 16);
  const StackResult expected = run_stack_once(stack, plain);
  const StackResult got = run_stack_once(stack, sqrt_runner);
  CHECK(expected.checkpoint_nodes == 0);
  CHECK(got.checkpoint_nodes == 4);   // one per segment: only 4 block inputs are kept
  CHECK(expected.block_calls == 16);
  CHECK(got.block_calls == 32);       // every block once in forward, once in its segment's recompute
  CHECK(torch::equal(got.output, expected.output));
  CHECK(torch::equal(got.input_grad, expected.input_grad));
  CHECK(all_equal(got.grads, expected.grads));

  // 8 blocks: segments of 3, 3, 2.
  TestStack eight(8, kDim, kHidden);
  CheckpointRunner sqrt_eight(CheckpointOptions{Policy::sqrt, 2}, 8);
  const StackResult plain_eight = run_stack_once(eight, plain);
  const StackResult got_eight = run_stack_once(eight, sqrt_eight);
  CHECK(got_eight.checkpoint_nodes == 3);
  CHECK(all_equal(got_eight.grads, plain_eight.grads));
}

TEST_CASE("run_stack: full checkpoints each block, and a runner built for another depth is an error",
          "[checkpoint][segments]") {
  TestStack stack(4, kDim, kHidden);
  PlainBlockRunner plain;
  auto full = tune::test::full_runner(4);
  const StackResult expected = run_stack_once(stack, plain);
  const StackResult got = run_stack_once(stack, full);
  CHECK(got.checkpoint_nodes == 4);
  CHECK(all_equal(got.grads, expected.grads));
  CheckpointRunner wrong(CheckpointOptions{Policy::sqrt, 2}, 5);
  REQUIRE_THROWS_WITH(stack.forward_stack(wrong, torch::randn({kBatch, kDim})),
                      Catch::Contains("run_stack over 4 blocks") && Catch::Contains("built for 5 blocks"));
}

TEST_CASE("run_stack: a non-leaf tensor every block takes, listed with each block's params, gets its gradient once",
          "[checkpoint][segments]") {
  // A model's conditioning (Latte's c) computed from a trained embedder and taken by every block: listed among
  // the params of each block, sqrt's segments must list it once, or its gradient would be summed once per block
  // of the segment. The plain run is the truth.
  constexpr int64_t kBlocks = 6;
  torch::manual_seed(11);
  const torch::Tensor embedder = torch::randn({kDim}).requires_grad_(true);
  std::vector<torch::Tensor> scales;
  for (int64_t i = 0; i < kBlocks; ++i) scales.push_back(torch::randn({kDim}).requires_grad_(true));
  const torch::Tensor input0 = torch::randn({kBatch, kDim});
  auto run = [&](tune::nn::BlockRunner& runner) {
    embedder.mutable_grad() = torch::Tensor();
    for (auto& scale : scales) scale.mutable_grad() = torch::Tensor();
    const torch::Tensor condition = torch::sin(embedder);  // non-leaf, requires grad
    auto block = [scales, condition](int64_t i, const torch::Tensor& h) {
      return torch::tanh(h * scales[static_cast<size_t>(i)] + condition);
    };
    auto params_of = [&scales, &condition](int64_t i) {
      return std::vector<torch::Tensor>{scales[static_cast<size_t>(i)], condition};
    };
    const torch::Tensor input = input0.clone().requires_grad_(true);
    const torch::Tensor output = runner.run_stack(kBlocks, block, input, params_of);
    (output * output).sum().backward();
    std::vector<torch::Tensor> grads{input.grad(), embedder.grad()};
    for (const auto& scale : scales) grads.push_back(scale.grad());
    return grads;
  };
  PlainBlockRunner plain;
  const auto expected = run(plain);
  for (const Policy policy : {Policy::full, Policy::sqrt}) {
    INFO("policy " << static_cast<int>(policy));
    CheckpointRunner runner(CheckpointOptions{policy, 2}, kBlocks);
    const auto got = run(runner);
    REQUIRE(got.size() == expected.size());
    for (size_t k = 0; k < got.size(); ++k) {
      INFO("gradient " << k);
      // The shared tensor's gradient is summed over its blocks in another order inside a segment: to rounding.
      CHECK(torch::allclose(got[k], expected[k], 1e-6, 1e-7));
    }
  }
}

TEST_CASE("regions are checkpointed under selective only, never under no-grad", "[checkpoint][segments]") {
  torch::Tensor weight = torch::randn({6}).requires_grad_(true);
  auto region = [weight](const std::vector<torch::Tensor>& x) { return torch::silu(x[0]) * weight; };
  const torch::Tensor input = torch::randn({2, 6}).requires_grad_(true);
  auto grad_fn_name = [&](tune::nn::BlockRunner& runner) {
    return runner.run_region(RegionKind::activation, region, {input}, {weight}).grad_fn()->name();
  };
  CheckpointRunner selective(CheckpointOptions{Policy::selective, 2}, 2);
  CheckpointRunner full(CheckpointOptions{Policy::full, 2}, 2);
  PlainBlockRunner plain;
  CHECK(grad_fn_name(selective).find("CheckpointFunction") != std::string::npos);
  CHECK(grad_fn_name(full) == "MulBackward0");  // the checkpointed block's recompute covers it: no nesting
  CHECK(grad_fn_name(plain) == "MulBackward0");
  {
    torch::NoGradGuard no_grad;
    CHECK(selective.run_region(RegionKind::activation, region, {input}, {weight}).grad_fn() == nullptr);
  }
  // Under selective the block itself runs plainly.
  auto block = [weight](const torch::Tensor& x) { return x * weight; };
  CHECK(selective.run(0, block, input, {weight}).grad_fn()->name() == "MulBackward0");

  // The region's param and input gradients equal the plain call's.
  auto grads = [&](tune::nn::BlockRunner& runner) {
    return torch::autograd::grad({runner.run_region(RegionKind::activation, region, {input}, {weight}).pow(2).sum()},
                                 {input, weight});
  };
  CHECK(all_equal(grads(selective), grads(plain)));
}
