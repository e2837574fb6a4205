// Attention masks: causal, packed segments with padding, and decoding after a cache.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <limits>

#include "tune/nn/attention_mask.h"

using tune::nn::make_causal_allowed;
using tune::nn::make_causal_mask;

TEST_CASE("causal mask: query i sees keys j <= i", "[nn][mask]") {
  const auto allowed = make_causal_allowed(4, 0, {}, torch::kCPU);
  const auto expected = torch::tensor({1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1}, torch::kBool).reshape({1, 4, 4});
  CHECK(torch::equal(allowed, expected));
  const auto mask = make_causal_mask(4, 0, {}, torch::kCPU);
  REQUIRE(mask.sizes() == torch::IntArrayRef({1, 1, 4, 4}));
  REQUIRE(mask.scalar_type() == torch::kBFloat16);
  CHECK(mask[0][0][0][0].item<float>() == 0.0f);
  CHECK(mask[0][0][0][1].item<float>() == static_cast<float>(std::numeric_limits<c10::BFloat16>::lowest()));
  CHECK(mask[0][0][0][1].item<float>() < -3e38f);
}

TEST_CASE("segment mask: attention stays inside a segment; padding sees only itself", "[nn][mask]") {
  const auto segments = torch::tensor({0, 0, 1, 1, 1, -1}, torch::kInt64).unsqueeze(0);
  const auto allowed = make_causal_allowed(6, 0, segments, torch::kCPU);
  const auto expected = torch::tensor({1, 0, 0, 0, 0, 0,
                                       1, 1, 0, 0, 0, 0,
                                       0, 0, 1, 0, 0, 0,
                                       0, 0, 1, 1, 0, 0,
                                       0, 0, 1, 1, 1, 0,
                                       0, 0, 0, 0, 0, 1}, torch::kBool).reshape({1, 6, 6});
  CHECK(torch::equal(allowed, expected));
}

TEST_CASE("cache mask: new tokens see every cached position and earlier new tokens", "[nn][mask]") {
  const auto allowed = make_causal_allowed(2, 3, {}, torch::kCPU);
  const auto expected = torch::tensor({1, 1, 1, 1, 0, 1, 1, 1, 1, 1}, torch::kBool).reshape({1, 2, 5});
  CHECK(torch::equal(allowed, expected));
  CHECK_THROWS(make_causal_allowed(2, 3, torch::zeros({1, 2}, torch::kInt64), torch::kCPU));
}
