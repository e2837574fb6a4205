// Which blocks each checkpointing policy selects, how the runner describes itself, and policy parsing errors.
#include <catch2/catch.hpp>
#include <torch/cuda.h>

#include "tune/core/error.h"
#include "tune/memory/checkpoint.h"

using tune::memory::CheckpointOptions;
using tune::memory::CheckpointRunner;
using tune::memory::Policy;

namespace {

std::vector<int64_t> selected(Policy policy, int64_t num_blocks, int64_t k = 2) {
  CheckpointRunner runner(CheckpointOptions{policy, k}, num_blocks);
  std::vector<int64_t> blocks;
  for (int64_t i = 0; i < num_blocks; ++i) {
    if (runner.is_checkpointed(i)) blocks.push_back(i);
  }
  REQUIRE(runner.checkpointed_blocks() == static_cast<int64_t>(blocks.size()));
  return blocks;
}

using Blocks = std::vector<int64_t>;

}  // namespace

TEST_CASE("each policy checkpoints the expected blocks", "[checkpoint][policy]") {
  CHECK(selected(Policy::off, 8).empty());
  CHECK(selected(Policy::full, 8) == Blocks{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(selected(Policy::every_k, 8, 3) == Blocks{0, 3, 6});
  CHECK(selected(Policy::every_k, 8, 1) == Blocks{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(selected(Policy::every_k, 8, 20) == Blocks{0});
  // sqrt recomputes every block, in segments; only the segment inputs are kept (see segment_size()).
  CHECK(selected(Policy::sqrt, 16) == Blocks{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  CHECK(selected(Policy::sqrt, 1) == Blocks{0});
  CHECK(selected(Policy::sqrt, 0).empty());
  CHECK(selected(Policy::full, 0).empty());
  CHECK(selected(Policy::selective, 8).empty());  // blocks run plainly; their regions are recomputed
}

TEST_CASE("sqrt segments hold ceil(sqrt(L)) blocks; other policies checkpoint single blocks", "[checkpoint][policy]") {
  CHECK(CheckpointRunner(CheckpointOptions{Policy::sqrt, 2}, 16).segment_size() == 4);
  CHECK(CheckpointRunner(CheckpointOptions{Policy::sqrt, 2}, 8).segment_size() == 3);   // segments 3, 3, 2
  CHECK(CheckpointRunner(CheckpointOptions{Policy::sqrt, 2}, 24).segment_size() == 5);  // 5 segments
  CHECK(CheckpointRunner(CheckpointOptions{Policy::sqrt, 2}, 1).segment_size() == 1);
  CHECK(CheckpointRunner(CheckpointOptions{Policy::full, 2}, 16).segment_size() == 1);
}

TEST_CASE("describe() states policy and count", "[checkpoint][policy]") {
  CHECK(CheckpointRunner(CheckpointOptions{Policy::full, 2}, 8).describe() == "on, policy full, 8/8 blocks");
  CHECK(CheckpointRunner(CheckpointOptions{Policy::off, 2}, 8).describe() == "off");
  CHECK(CheckpointRunner(CheckpointOptions{Policy::every_k, 4}, 8).describe() == "on, policy every_k (k=4), 2/8 blocks");
  CHECK(CheckpointRunner(CheckpointOptions{Policy::sqrt, 2}, 24).describe() ==
        "on, policy sqrt (5 segments of up to 5 blocks, segment inputs kept), 24/24 blocks");
  CHECK(CheckpointRunner(CheckpointOptions{Policy::selective, 2}, 8).describe() ==
        "on, policy selective (norms, attention core, activations recomputed), 8 blocks");
}

TEST_CASE("parse_policy accepts the valid names and lists them on error", "[checkpoint][policy]") {
  CHECK(tune::memory::parse_policy("off") == Policy::off);
  CHECK(tune::memory::parse_policy("full") == Policy::full);
  CHECK(tune::memory::parse_policy("every_k") == Policy::every_k);
  CHECK(tune::memory::parse_policy("sqrt") == Policy::sqrt);
  CHECK(tune::memory::parse_policy("selective") == Policy::selective);
  REQUIRE_THROWS_AS(tune::memory::parse_policy("Full"), tune::UsageError);
  REQUIRE_THROWS_WITH(tune::memory::parse_policy("everything"),
                      Catch::Contains("'everything'") &&
                          Catch::Contains("off, full, every_k, sqrt, selective, offload"));
}

TEST_CASE("offload is rejected without CUDA, with the fix in the message", "[checkpoint][policy]") {
  if (torch::cuda::is_available()) {
    WARN("CUDA is available: the CPU rejection of offload is not exercised here");
    return;
  }
  REQUIRE_THROWS_AS(tune::memory::parse_policy("offload"), tune::UsageError);
  REQUIRE_THROWS_WITH(tune::memory::parse_policy("offload"),
                      Catch::Contains("checkpointing.policy offload needs a CUDA device; use full on CPU"));
  REQUIRE_THROWS_AS(CheckpointRunner(CheckpointOptions{Policy::offload, 2}, 4), tune::UsageError);
  REQUIRE_THROWS_WITH(CheckpointRunner(CheckpointOptions{Policy::offload, 2}, 4),
                      Catch::Contains("checkpointing.policy offload needs a CUDA device; use full on CPU"));
}

TEST_CASE("invalid runner settings are errors, not silently adjusted", "[checkpoint][policy]") {
  REQUIRE_THROWS_WITH(CheckpointRunner(CheckpointOptions{Policy::every_k, 0}, 8),
                      Catch::Contains("checkpointing.k") && Catch::Contains("got 0"));
  CheckpointRunner runner(CheckpointOptions{Policy::full, 2}, 4);
  REQUIRE_THROWS_WITH(runner.is_checkpointed(4), Catch::Contains("block index 4 out of range"));
}

TEST_CASE("the runner calls unselected blocks plainly", "[checkpoint][policy]") {
  CheckpointRunner runner(CheckpointOptions{Policy::every_k, 2}, 2);
  torch::Tensor weight = torch::ones({2}).requires_grad_(true);
  auto block = [&weight](const torch::Tensor& x) { return x * weight; };
  torch::Tensor input = torch::ones({2}).requires_grad_(true);
  torch::Tensor checkpointed = runner.run(0, block, input, {weight});
  torch::Tensor plain = runner.run(1, block, input, {weight});
  CHECK(checkpointed.grad_fn()->name().find("CheckpointFunction") != std::string::npos);
  CHECK(plain.grad_fn()->name() == "MulBackward0");
}
