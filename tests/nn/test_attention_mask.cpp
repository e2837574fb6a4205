// Attention masks: causal, sliding-window, packed segments with padding, and decoding after a cache.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <limits>
#include <vector>

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

namespace {

// The sliding-window rule written out element by element, independently of make_causal_allowed's tensor algebra:
// query i at absolute index past + i sees key j iff j <= past + i, past + i - j < window (transformers'
// sliding_window_overlay: kv_idx > q_idx - sliding_window), and, when packed, both share a segment >= 0; a padding
// query (segment < 0) sees only itself.
torch::Tensor expected_sliding(int64_t length, int64_t past, int64_t window, const std::vector<int64_t>& segments) {
  auto expected = torch::zeros({1, length, past + length}, torch::kBool);
  auto access = expected.accessor<bool, 3>();
  for (int64_t i = 0; i < length; ++i) {
    for (int64_t j = 0; j < past + length; ++j) {
      const int64_t query = past + i;
      bool visible = j <= query && query - j < window;
      if (!segments.empty()) {
        const int64_t qs = segments[static_cast<size_t>(i)];
        visible = qs < 0 ? j == i : visible && segments[static_cast<size_t>(j)] == qs;
      }
      access[0][i][j] = visible;
    }
  }
  return expected;
}

}  // namespace

TEST_CASE("sliding-window mask: a query sees itself and the window - 1 keys before it", "[nn][mask]") {
  for (int64_t window : {1, 2, 3, 4, 7, 8, 20}) {
    INFO("window " << window);
    CHECK(torch::equal(make_causal_allowed(8, 0, {}, torch::kCPU, window), expected_sliding(8, 0, window, {})));
  }
  // Window 3 written out: row 5 sees keys 3, 4, 5.
  const auto allowed = make_causal_allowed(6, 0, {}, torch::kCPU, 3);
  const auto row = torch::tensor({0, 0, 0, 1, 1, 1}, torch::kBool);
  CHECK(torch::equal(allowed[0][5], row));
  // A window at least as long as the sequence is the causal mask.
  CHECK(torch::equal(make_causal_allowed(6, 0, {}, torch::kCPU, 6), make_causal_allowed(6, 0, {}, torch::kCPU)));
  CHECK(torch::equal(make_causal_mask(6, 0, {}, torch::kCPU, 3).squeeze(1).eq(0), allowed));
  CHECK_THROWS(make_causal_allowed(4, 0, {}, torch::kCPU, -1));
}

TEST_CASE("sliding-window mask after a cache counts distances from the absolute query index", "[nn][mask]") {
  for (int64_t window : {1, 3, 4, 10}) {
    for (int64_t past : {1, 5, 9}) {
      INFO("window " << window << ", past " << past);
      CHECK(torch::equal(make_causal_allowed(3, past, {}, torch::kCPU, window), expected_sliding(3, past, window, {})));
    }
  }
}

TEST_CASE("sliding-window mask with packed segments stays inside each segment", "[nn][mask]") {
  const std::vector<int64_t> segments = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, -1, -1};
  const auto ids = torch::tensor(segments, torch::kInt64).unsqueeze(0);
  for (int64_t window : {1, 2, 3, 5}) {
    INFO("window " << window);
    CHECK(torch::equal(make_causal_allowed(13, 0, ids, torch::kCPU, window), expected_sliding(13, 0, window, segments)));
  }
}
