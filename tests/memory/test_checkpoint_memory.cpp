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
