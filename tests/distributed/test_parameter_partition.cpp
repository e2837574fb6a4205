// shard_grad_op's parameter shares (distributed/parameter_partition.h): contiguous, balanced, every rank agreeing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <vector>

#include "tune/distributed/parameter_partition.h"

using tune::distributed::partition_by_bytes;

namespace {

std::vector<int64_t> share_bytes(const std::vector<int64_t>& bytes, const std::vector<int>& owner, int ranks) {
  std::vector<int64_t> shares(static_cast<size_t>(ranks), 0);
  for (size_t i = 0; i < bytes.size(); ++i) shares[static_cast<size_t>(owner[i])] += bytes[i];
  return shares;
}

}  // namespace

TEST_CASE("parameter shares are contiguous and within one parameter of an even split", "[distributed]") {
  // A Llama-like list: embedding, then per layer four attention and three MLP matrices and two norms, then the head.
  std::vector<int64_t> bytes{4096 * 256 * 4};
  for (int layer = 0; layer < 6; ++layer) {
    for (int i = 0; i < 4; ++i) bytes.push_back(256 * 256 * 4);
    for (int i = 0; i < 3; ++i) bytes.push_back(256 * 688 * 4);
    bytes.push_back(256 * 4);
    bytes.push_back(256 * 4);
  }
  bytes.push_back(4096 * 256 * 4);
  const int64_t total = std::accumulate(bytes.begin(), bytes.end(), int64_t{0});
  const int64_t largest = *std::max_element(bytes.begin(), bytes.end());
  for (const int ranks : {1, 2, 3, 4, 7}) {
    const auto owner = partition_by_bytes(bytes, ranks);
    REQUIRE(owner.size() == bytes.size());
    CHECK(std::is_sorted(owner.begin(), owner.end()));
    CHECK(owner.front() == 0);
    for (const int64_t share : share_bytes(bytes, owner, ranks)) {
      INFO(ranks << " ranks: share " << share << " of " << total);
      CHECK(std::abs(share - total / ranks) <= largest);
    }
  }
  // The same sizes give the same shares (every rank computes them on its own).
  CHECK(partition_by_bytes(bytes, 4) == partition_by_bytes(bytes, 4));
}

TEST_CASE("parameter shares: more ranks than parameters, and empty lists", "[distributed]") {
  const auto owner = partition_by_bytes({100, 100}, 4);
  CHECK(std::is_sorted(owner.begin(), owner.end()));
  CHECK(owner[0] != owner[1]);
  CHECK(partition_by_bytes({}, 3).empty());
  CHECK(partition_by_bytes({0, 0}, 2) == std::vector<int>{0, 0});
}
