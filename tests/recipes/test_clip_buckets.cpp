// Batches of clips grouped by shape (Sana's aspect-ratio buckets): every batch from one group, each clip at most once
// an epoch, batches emitted as the epoch's permutation fills a bucket (the official AspectRatioBatchSampler's way,
// checked here as properties of the permutation), remainders dropped, and an exact resume from a saved position.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <map>
#include <set>

#include "tune/core/error.h"
#include "tune/data/seeded_shuffle.h"
#include "tune/recipes/diffusion/clip_batches.h"

using namespace tune::recipes::diffusion_common;
using Catch::Contains;

namespace {

// Clip i is [1, 2, h, w] filled with i, its group i % groups, a group's clips 1 + group pixels high (stackable only
// within the group).
class GroupedClips final : public ClipSource {
 public:
  GroupedClips(int64_t count, int64_t groups) : count_(count), groups_(groups) {}
  int64_t size() const override { return count_; }
  int64_t group(int64_t index) const override { return index % groups_; }
  Clip get(int64_t index, std::mt19937_64& /*generator*/) const override {
    Clip clip;
    clip.frames = torch::full({1, 2, 1 + group(index), 3}, static_cast<double>(index));
    return clip;
  }

 private:
  int64_t count_, groups_;
};

std::vector<int64_t> clip_ids(const ClipBatch& batch) {
  std::vector<int64_t> ids;
  for (int64_t row = 0; row < batch.clips.size(0); ++row) ids.push_back(batch.clips[row][0][0][0][0].item<int64_t>());
  return ids;
}

}  // namespace

TEST_CASE("grouped batches: one group per batch, each clip once an epoch, in the order buckets fill",
          "[recipes][buckets]") {
  // 23 clips in 3 groups (8, 8, 7 clips), batches of 3: 2 + 2 + 2 = 6 batches an epoch, 5 clips dropped.
  const auto source = std::make_shared<GroupedClips>(23, 3);
  const uint64_t seed = 11;
  ClipBatcher batcher(source, 3, seed);
  REQUIRE(batcher.batches_per_epoch() == 6);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    const auto order = tune::data::seeded_permutation(23, seed * 1000003ULL + static_cast<uint64_t>(epoch));
    std::map<int64_t, size_t> position;
    for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
    std::set<int64_t> seen;
    size_t previous_last = 0;
    std::map<int64_t, int64_t> per_group;
    for (int64_t b = 0; b < 6; ++b) {
      const auto ids = clip_ids(batcher.next());
      REQUIRE(ids.size() == 3);
      size_t last = 0;
      for (const int64_t id : ids) {
        CHECK(id % 3 == ids[0] % 3);      // one group
        CHECK(seen.insert(id).second);    // never twice in an epoch
        last = std::max(last, position[id]);
      }
      // Emitted when its bucket filled: batches come out in the order of their last clip in the permutation.
      if (b > 0) CHECK(last > previous_last);
      previous_last = last;
      ++per_group[ids[0] % 3];
    }
    for (const auto& [group, batches] : per_group) CHECK(batches == 2);
    // The clips left out are each group's last (under 3) in the permutation.
    std::map<int64_t, int64_t> dropped;
    for (const int64_t id : order) {
      if (!seen.count(id)) ++dropped[id % 3];
    }
    CHECK(dropped[0] == 2);
    CHECK(dropped[1] == 2);
    CHECK(dropped[2] == 1);
  }
  CHECK(batcher.position().epoch == 1);
}

TEST_CASE("grouped batches resume exactly from a saved position", "[recipes][buckets]") {
  const auto source = std::make_shared<GroupedClips>(40, 4);
  ClipBatcher straight(source, 4, 5);
  std::vector<std::vector<int64_t>> expected;
  for (int i = 0; i < 13; ++i) expected.push_back(clip_ids(straight.next()));  // crosses into the second epoch
  ClipBatcher first(source, 4, 5);
  for (int i = 0; i < 7; ++i) first.next();
  ClipBatcher resumed(source, 4, 5);
  resumed.restore(first.position());
  for (int i = 7; i < 13; ++i) CHECK(clip_ids(resumed.next()) == expected[static_cast<size_t>(i)]);
}

TEST_CASE("grouped batches: no bucket holding a whole batch is an error naming the key", "[recipes][buckets]") {
  const auto source = std::make_shared<GroupedClips>(6, 3);  // 2 clips a group
  CHECK_THROWS_AS(ClipBatcher(source, 3, 0), tune::InputError);
  CHECK_THROWS_WITH(ClipBatcher(source, 3, 0), Contains("training.batch_size") && Contains("at most 2"));
  CHECK(ClipBatcher(source, 2, 0).batches_per_epoch() == 3);
}

TEST_CASE("grouped batches resumed with another global batch size go on from the next epoch", "[recipes][buckets]") {
  const auto source = std::make_shared<GroupedClips>(40, 4);
  ClipBatcher first(source, 4, 5);
  for (int i = 0; i < 3; ++i) first.next();
  ClipBatcher resumed(source, 2, 5);
  resumed.restore(first.position());
  CHECK(resumed.position().epoch == 1);
  CHECK(resumed.position().batch_in_epoch == 0);
  // The same size continues where it was.
  ClipBatcher same(source, 4, 5);
  same.restore(first.position());
  CHECK(same.position().epoch == 0);
  CHECK(same.position().batch_in_epoch == 3);
}
