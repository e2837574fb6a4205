// Measured memory: a checkpointed deep stack peaks lower than the plain one, and repeated training steps do
// not leak (saved inputs, capsules and recompute graphs are all freed).
#include <catch2/catch.hpp>

#include "test_blocks.h"
#include "tune/core/memory_tracker.h"

using tune::test::TestStack;

namespace {

// Wide activations, small matmuls: saved activations dominate memory while fp32 compute stays cheap.
constexpr int64_t kBlocks = 12, kDim = 64, kHidden = 256, kBatch = 128;

int64_t step_peak_bytes(TestStack& stack, tune::nn::BlockRunner& runner, const torch::Tensor& input) {
  stack.zero_grad();
  const int64_t before = tune::memory_tracker::cpu_live_bytes();
  tune::memory_tracker::reset_cpu_peak();
  stack.forward(runner, input).pow(2).mean().backward();
  return tune::memory_tracker::cpu_peak_bytes() - before;
}

}  // namespace

TEST_CASE("a checkpointed deep stack peaks lower than the plain stack", "[checkpoint][memory]") {
  tune::memory_tracker::install();
  TestStack stack(kBlocks, kDim, kHidden);
  torch::manual_seed(5);
  const torch::Tensor input = torch::randn({kBatch, kDim});
  tune::nn::PlainBlockRunner plain;
  auto runner = tune::test::full_runner(kBlocks);
  step_peak_bytes(stack, runner, input);  // warm-up: grads allocated once, as in a training loop
  const int64_t plain_peak = step_peak_bytes(stack, plain, input);
  const int64_t checkpointed_peak = step_peak_bytes(stack, runner, input);
  INFO("plain peak " << plain_peak << " bytes, checkpointed peak " << checkpointed_peak << " bytes");
  CHECK(checkpointed_peak > 0);
  // Plain keeps ~6 activations of [batch, hidden] per block; checkpointed keeps one [batch, dim] input per block
  // plus one block's recompute, so the saving is well over half here.
  CHECK(checkpointed_peak * 2 < plain_peak);
}

TEST_CASE("no memory growth over 50 checkpointed training steps", "[checkpoint][memory]") {
  tune::memory_tracker::install();
  TestStack stack(4, kDim, kHidden);
  auto runner = tune::test::full_runner(4);
  torch::manual_seed(9);
  const torch::Tensor input = torch::randn({32, kDim});
  int64_t live_after_5 = 0;
  for (int step = 1; step <= 50; ++step) {
    stack.zero_grad();
    stack.forward(runner, input.detach().requires_grad_(step % 2 == 0)).pow(2).mean().backward();
    {
      torch::NoGradGuard no_grad;
      for (auto& p : stack.params()) p.sub_(p.grad() * 1e-3);
    }
    if (step == 5) live_after_5 = tune::memory_tracker::cpu_live_bytes();
  }
  const int64_t live_after_50 = tune::memory_tracker::cpu_live_bytes();
  INFO("live bytes after step 5: " << live_after_5 << ", after step 50: " << live_after_50);
  CHECK(live_after_50 <= live_after_5 + 4096);
}

TEST_CASE("sqrt on 16 blocks peaks between full and off, well under off", "[checkpoint][memory]") {
  tune::memory_tracker::install();
  constexpr int64_t kDeep = 16;
  TestStack stack(kDeep, kDim, kHidden);
  torch::manual_seed(5);
  const torch::Tensor input = torch::randn({kBatch, kDim});
  auto peak = [&](tune::nn::BlockRunner& runner) {
    stack.zero_grad();
    const int64_t before = tune::memory_tracker::cpu_live_bytes();
    tune::memory_tracker::reset_cpu_peak();
    stack.forward_stack(runner, input).pow(2).mean().backward();
    return tune::memory_tracker::cpu_peak_bytes() - before;
  };
  tune::nn::PlainBlockRunner plain;
  auto full = tune::test::full_runner(kDeep);
  tune::memory::CheckpointRunner sqrt_runner(tune::memory::CheckpointOptions{tune::memory::Policy::sqrt, 2}, kDeep);
  peak(full);  // warm-up
  const int64_t off_peak = peak(plain);
  const int64_t full_peak = peak(full);
  const int64_t sqrt_peak = peak(sqrt_runner);
  INFO("peaks: off " << off_peak << ", full " << full_peak << ", sqrt " << sqrt_peak << " bytes");
  // sqrt keeps 4 segment inputs and recomputes 4 blocks at a time: about 4/16 of off plus the kept inputs.
  CHECK(sqrt_peak < 0.6 * static_cast<double>(off_peak));
  CHECK(sqrt_peak > full_peak);
}

// Under gradient accumulation .grad already holds the earlier micro-batches' gradients when a checkpointed block's
// backward makes its own. Returned to the outer pass at the end of that backward, all of the block's fresh weight
// gradients would be alive at once beside .grad (the MLP's and o_proj's through a Llama layer's attention backward);
// memory/checkpoint.cpp adds each into .grad as it is made.
TEST_CASE("under gradient accumulation a checkpointed block adds each weight gradient to .grad as it is made",
          "[checkpoint][memory]") {
  tune::memory_tracker::install();
  constexpr int64_t kWidth = 256, kRows = 8, kWeights = 4;
  constexpr int64_t kWeightBytes = kWidth * kWidth * 4;
  torch::manual_seed(3);
  std::vector<torch::Tensor> weights, plain_weights;
  for (int64_t i = 0; i < kWeights; ++i) {
    weights.push_back((torch::randn({kWidth, kWidth}) / 16).requires_grad_(true));
    plain_weights.push_back(weights.back().detach().clone().requires_grad_(true));
  }
  // One block of four [W, W] products in a row: its backward makes four weight gradients, one after the other.
  auto block_of = [](const std::vector<torch::Tensor>& ws) {
    return [ws](const torch::Tensor& x) {
      torch::Tensor h = x;
      for (const auto& w : ws) h = torch::tanh(h.mm(w));
      return h;
    };
  };
  auto runner = tune::test::full_runner(1);
  tune::nn::PlainBlockRunner plain;
  auto micro_batch = [&](tune::nn::BlockRunner& r, const std::vector<torch::Tensor>& ws, int64_t seed) {
    torch::manual_seed(seed);
    return r.run(0, block_of(ws), torch::randn({kRows, kWidth}), ws).pow(2).sum();
  };
  micro_batch(runner, weights, 1).backward();  // .grad exists from here on, as after a first micro-batch
  micro_batch(plain, plain_weights, 1).backward();
  const int64_t before = tune::memory_tracker::cpu_live_bytes();
  tune::memory_tracker::reset_cpu_peak();
  micro_batch(runner, weights, 2).backward();
  const int64_t peak = tune::memory_tracker::cpu_peak_bytes() - before;
  micro_batch(plain, plain_weights, 2).backward();
  INFO("second micro-batch's peak above its start: " << peak << " bytes; one weight gradient " << kWeightBytes);
  // Held to the end, four fresh gradients (4 x 256 KiB) would be alive at once; added as made, one at a time (the
  // activations, [8, 256] each, are small beside them).
  CHECK(peak < 2 * kWeightBytes);
  for (int64_t i = 0; i < kWeights; ++i) CHECK(torch::equal(weights[i].grad(), plain_weights[i].grad()));
}
