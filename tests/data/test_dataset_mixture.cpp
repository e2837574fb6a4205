// Weighted mixtures of several files: each epoch holds round(weight x N) examples of a file of N (at least 1), the
// whole file as often as that fits and the rest drawn without replacement, continuing across epochs; with every
// weight 1 the loader behaves exactly as without weights.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "tune/core/error.h"
#include "tune/data/dataset_mixture.h"
#include "tune/data/preference_loader.h"
#include "tune/data/sft_loader.h"

using namespace tune::data;

namespace {

constexpr int64_t kFirstId = 1000;

// `counts[s]` examples of source s; example i's tokens are all kFirstId + i, so a batch names its examples.
MixedExamples mixture(const std::vector<int64_t>& counts, const std::vector<double>& weights) {
  MixedExamples mixed;
  mixed.source_weights = weights;
  int64_t id = kFirstId;
  for (size_t source = 0; source < counts.size(); ++source) {
    for (int64_t i = 0; i < counts[source]; ++i, ++id) {
      TokenizedExample example;
      example.input_ids.assign(static_cast<size_t>(2 + id % 5), id);
      example.labels = example.input_ids;
      example.source = static_cast<int32_t>(source);
      mixed.examples.push_back(example);
    }
  }
  return mixed;
}

// How many times each example appears in one epoch of the loader (every batch of the epoch, every segment).
std::map<int64_t, int64_t> epoch_counts(SftLoader& loader) {
  std::map<int64_t, int64_t> counts;
  const int64_t epoch = loader.position().epoch;
  while (loader.position().epoch == epoch) {
    const SftBatch batch = loader.next();
    auto ids = batch.input_ids.accessor<int64_t, 2>();
    auto positions = batch.position_ids.accessor<int64_t, 2>();
    auto segments = batch.segment_ids.accessor<int64_t, 2>();
    for (int64_t b = 0; b < batch.input_ids.size(0); ++b) {
      for (int64_t t = 0; t < batch.input_ids.size(1); ++t) {
        if (segments[b][t] >= 0 && positions[b][t] == 0) ++counts[ids[b][t] - kFirstId];
      }
    }
  }
  return counts;
}

}  // namespace

TEST_CASE("examples_per_epoch is round(weight x N), at least 1", "[data][mixture]") {
  CHECK(examples_per_epoch(100, 1.0) == 100);
  CHECK(examples_per_epoch(100, 2.5) == 250);
  CHECK(examples_per_epoch(7, 0.5) == 4);  // 3.5 rounds away from zero
  CHECK(examples_per_epoch(10, 0.001) == 1);
  CHECK(examples_per_epoch(0, 3.0) == 0);
  CHECK_THROWS_AS(examples_per_epoch(1000, 1e300), tune::UsageError);
}

TEST_CASE("each epoch draws round(weight x N) examples from each file", "[data][mixture]") {
  const std::vector<int64_t> sizes{40, 25, 9};
  const std::vector<double> weights{1.0, 2.4, 0.5};
  LoaderOptions options;
  options.batch_size = 3;
  options.max_length = 16;
  options.seed = 11;
  SftLoader loader(mixture(sizes, weights), options);
  std::map<int64_t, int64_t> over_two_epochs;
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto counts = epoch_counts(loader);
    std::vector<int64_t> per_file(sizes.size(), 0);
    std::vector<int64_t> first_of{0, 40, 65, 74};
    for (const auto& [example, times] : counts) {
      over_two_epochs[example] += times;
      for (size_t s = 0; s < sizes.size(); ++s) {
        if (example >= first_of[s] && example < first_of[s + 1]) {
          per_file[s] += times;
          // Whole passes first: no example of a file appears more than ceil(weight) times.
          CHECK(times <= static_cast<int64_t>(std::ceil(weights[s])));
          if (weights[s] >= 1.0) CHECK(times >= static_cast<int64_t>(std::floor(weights[s])));
        }
      }
    }
    for (size_t s = 0; s < sizes.size(); ++s) {
      CAPTURE(epoch, s);
      CHECK(per_file[s] == examples_per_epoch(sizes[s], weights[s]));  // 40, 60, 5
    }
  }
  // The fraction continues through the file: weight 0.5 of 9 examples takes 5 then 5, covering all 9 in two epochs.
  for (int64_t example = 65; example < 74; ++example) CHECK(over_two_epochs[example] >= 1);
  // 2.4 x 25 = 60: two passes (50) and 10 drawn per epoch; over two epochs 20 distinct of the 25 get a third time.
  int64_t thrice = 0;
  for (int64_t example = 40; example < 65; ++example) thrice += over_two_epochs[example] == 6 ? 1 : 0;
  CHECK(thrice == 0);
  int64_t five = 0;
  for (int64_t example = 40; example < 65; ++example) five += over_two_epochs[example] == 5 ? 1 : 0;
  CHECK(five == 20);
}

TEST_CASE("weighted epochs are deterministic and restorable", "[data][mixture]") {
  LoaderOptions options;
  options.batch_size = 4;
  options.max_length = 16;
  options.seed = 5;
  const auto mixed = mixture({30, 12}, {0.3, 3.0});
  SftLoader first(mixed, options);
  for (int i = 0; i < 17; ++i) first.next();
  SftLoader resumed(mixed, options);
  resumed.restore(first.position());
  for (int i = 0; i < 20; ++i) {
    const SftBatch a = first.next(), b = resumed.next();
    CHECK(a.input_ids.equal(b.input_ids));
  }
  CHECK(mixture_epoch({0, 0, 1}, {0.5, 2.0}, 1, 3) == mixture_epoch({0, 0, 1}, {0.5, 2.0}, 1, 3));
  CHECK_THROWS_AS(mixture_epoch({0, 2}, {1.0, 1.0}, 1, 0), tune::UsageError);
}

TEST_CASE("with every weight 1 the mixture is the plain loader", "[data][mixture]") {
  LoaderOptions options;
  options.batch_size = 3;
  options.max_length = 16;
  options.seed = 2;
  const auto mixed = mixture({10, 7}, {1.0, 1.0});
  SftLoader weighted(mixed, options);
  SftLoader plain(mixed.examples, options);
  CHECK(weighted.batches_per_epoch() == plain.batches_per_epoch());
  for (int i = 0; i < 15; ++i) CHECK(weighted.next().input_ids.equal(plain.next().input_ids));
}

TEST_CASE("the preference loader mixes data.train's files by weight as the SFT loader does", "[data][mixture]") {
  // Pairs of files 0 (20 pairs, weight 0.5) and 1 (6 pairs, weight 2): an epoch holds 10 + 12 pairs, the second
  // file's each exactly twice; pair i's prompt is the single token i, so a batch names its pairs.
  std::vector<TokenizedPair> pairs;
  for (int64_t i = 0; i < 26; ++i) {
    TokenizedPair pair;
    pair.prompt_ids = {i};
    pair.chosen_ids = {1, 2};
    pair.rejected_ids = {3};
    pair.file_index = i < 20 ? 0 : 1;
    pairs.push_back(pair);
  }
  PreferenceLoader loader(pairs, 4, /*shuffle=*/true, 9, {0.5, 2.0});
  CHECK(loader.batches_per_epoch() == 6);  // ceil(22 / 4)
  std::map<int64_t, int64_t> seen;
  for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
    const PreferenceBatch batch = loader.next();
    for (int64_t p = 0; p < batch.pairs; ++p) ++seen[batch.input_ids[p][0].item<int64_t>()];
  }
  int64_t first_file = 0;
  for (const auto& [pair, times] : seen) {
    if (pair < 20) {
      first_file += times;
      CHECK(times == 1);
    } else {
      CHECK(times == 2);
    }
  }
  CHECK(first_file == 10);
  CHECK(loader.position().epoch == 1);
  // A resumed loader continues with the same batches; unweighted, every pair once per epoch.
  PreferenceLoader resumed(pairs, 4, true, 9, {0.5, 2.0});
  resumed.restore(loader.position());
  for (int i = 0; i < 8; ++i) CHECK(loader.next().input_ids.equal(resumed.next().input_ids));
  CHECK(PreferenceLoader(pairs, 4, true, 9, {1.0, 1.0}).batches_per_epoch() == 7);
  CHECK(PreferenceLoader(pairs, 4, true, 9, {0.5, 2.0}).all_batches_in_order().size() == 7);
}
