// SftLoader: packed rows (positions, segments, boundary labels), padding, epoch coverage, determinism, restore.
#include <catch2/catch.hpp>

#include <map>
#include <random>

#include "tune/data/first_fit_packer.h"
#include "tune/data/sft_loader.h"

using namespace tune::data;

namespace {
constexpr int64_t kFirstId = 1000;

// Example i: every token is kFirstId + i (so a segment names its example), length 3 + (i * 7) % 11, labels
// masked on the first half.
std::vector<TokenizedExample> numbered_examples(int64_t count) {
  std::vector<TokenizedExample> examples;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t length = 3 + (i * 7) % 11;
    TokenizedExample example;
    for (int64_t t = 0; t < length; ++t) {
      example.input_ids.push_back(kFirstId + i);
      example.labels.push_back(t < length / 2 ? kIgnoreIndex : kFirstId + i);
    }
    examples.push_back(example);
  }
  return examples;
}

bool same_batch(const SftBatch& a, const SftBatch& b) {
  return a.input_ids.equal(b.input_ids) && a.labels.equal(b.labels) && a.position_ids.equal(b.position_ids) &&
         a.segment_ids.equal(b.segment_ids) && a.loss_tokens == b.loss_tokens && a.tokens == b.tokens &&
         a.samples == b.samples;
}

// Checks every invariant of one batch against the examples; returns the example ids it holds, in order.
std::vector<int64_t> check_batch(const SftBatch& batch, const std::vector<TokenizedExample>& examples,
                                 int64_t max_length) {
  std::vector<int64_t> seen;
  const int64_t rows = batch.input_ids.size(0), width = batch.input_ids.size(1);
  REQUIRE(width <= max_length);
  auto ids = batch.input_ids.accessor<int64_t, 2>();
  auto labels = batch.labels.accessor<int64_t, 2>();
  auto positions = batch.position_ids.accessor<int64_t, 2>();
  auto segments = batch.segment_ids.accessor<int64_t, 2>();
  int64_t loss_tokens = 0, tokens = 0;
  for (int64_t b = 0; b < rows; ++b) {
    int64_t t = 0, segment = 0;
    while (t < width && segments[b][t] >= 0) {
      REQUIRE(segments[b][t] == segment);
      const int64_t example_index = ids[b][t] - kFirstId;
      const auto& example = examples[static_cast<size_t>(example_index)];
      const auto length = static_cast<int64_t>(example.input_ids.size());
      REQUIRE(t + length <= width);  // never split across rows
      for (int64_t k = 0; k < length; ++k, ++t) {
        CHECK(ids[b][t] == example.input_ids[k]);
        CHECK(segments[b][t] == segment);
        CHECK(positions[b][t] == k);
        // The first token of every segment carries no loss; the rest copy the example's labels.
        CHECK(labels[b][t] == (k == 0 ? kIgnoreIndex : example.labels[k]));
        if (t > 0 && labels[b][t] != kIgnoreIndex) ++loss_tokens;
      }
      tokens += length;
      seen.push_back(example_index);
      ++segment;
    }
    for (; t < width; ++t) {  // padding
      CHECK(segments[b][t] == -1);
      CHECK(labels[b][t] == kIgnoreIndex);
    }
  }
  CHECK(batch.loss_tokens == loss_tokens);
  CHECK(batch.loss_tokens == batch.labels.slice(1, 1).ne(kIgnoreIndex).sum().item<int64_t>());
  CHECK(batch.tokens == tokens);
  CHECK(batch.samples == static_cast<int64_t>(seen.size()));
  return seen;
}
}  // namespace

// rebatch() of {epoch, batch, rows per batch} as a vector, for CHECKs.
std::vector<int64_t> data_rebatch_rows(LoaderPosition position, int64_t rows_per_batch) {
  const auto moved = tune::data::rebatch(position, rows_per_batch);
  return {moved.epoch, moved.batch_in_epoch, moved.rows_per_batch};
}

TEST_CASE("packed batches: positions, segments, boundary labels, each example once per epoch", "[data][loader]") {
  const auto examples = numbered_examples(40);
  LoaderOptions options;
  options.batch_size = 3;
  options.max_length = 24;
  options.seed = 5;
  SftLoader loader(examples, options);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    REQUIRE(loader.position().epoch == epoch);
    const int64_t batches = loader.batches_per_epoch();
    std::map<int64_t, int> count;
    int64_t rows_with_two_samples = 0;
    for (int64_t i = 0; i < batches; ++i) {
      const auto batch = loader.next();
      for (int64_t index : check_batch(batch, examples, options.max_length)) ++count[index];
      rows_with_two_samples += batch.segment_ids.amax(1).ge(1).sum().item<int64_t>();
      if (i + 1 < batches) CHECK(batch.input_ids.size(0) == options.batch_size);
    }
    CHECK(count.size() == examples.size());
    for (const auto& entry : count) CHECK(entry.second == 1);
    CHECK(rows_with_two_samples > 0);  // packing really packs
  }
}

TEST_CASE("unpacked batches: one example per row, padded to the longest in the batch", "[data][loader]") {
  const auto examples = numbered_examples(10);
  LoaderOptions options;
  options.batch_size = 4;
  options.max_length = 64;
  options.packing = false;
  options.shuffle = false;
  SftLoader loader(examples, options);
  CHECK(loader.batches_per_epoch() == 3);
  const auto first = loader.next();
  CHECK(check_batch(first, examples, options.max_length) == std::vector<int64_t>{0, 1, 2, 3});
  int64_t longest = 0;
  for (int i = 0; i < 4; ++i) longest = std::max<int64_t>(longest, examples[i].input_ids.size());
  CHECK(first.input_ids.size(1) == longest);
  CHECK(check_batch(loader.next(), examples, options.max_length) == std::vector<int64_t>{4, 5, 6, 7});
  const auto last = loader.next();
  CHECK(check_batch(last, examples, options.max_length) == std::vector<int64_t>{8, 9});  // a short final batch
  CHECK(loader.position().epoch == 1);
  CHECK(loader.position().batch_in_epoch == 0);
}

TEST_CASE("epoch order is seeded: same seed same stream, new epoch new order", "[data][loader]") {
  const auto examples = numbered_examples(30);
  LoaderOptions options;
  options.batch_size = 2;
  options.max_length = 32;
  options.seed = 11;
  SftLoader a(examples, options), b(examples, options);
  auto other_options = options;
  other_options.seed = 12;
  SftLoader other(examples, other_options);
  const int64_t batches = a.batches_per_epoch();
  std::vector<SftBatch> epoch0, epoch1;
  bool differs_from_other_seed = false;
  for (int64_t i = 0; i < batches; ++i) {
    epoch0.push_back(a.next());
    CHECK(same_batch(epoch0.back(), b.next()));
    differs_from_other_seed = differs_from_other_seed || !same_batch(epoch0.back(), other.next());
  }
  for (int64_t i = 0; i < a.batches_per_epoch(); ++i) epoch1.push_back(a.next());
  CHECK(differs_from_other_seed);
  CHECK(!same_batch(epoch0[0], epoch1[0]));
}

TEST_CASE("restore reproduces the uninterrupted batch stream", "[data][loader]") {
  const auto examples = numbered_examples(25);
  for (bool packing : {true, false}) {
    LoaderOptions options;
    options.batch_size = 2;
    options.max_length = 20;
    options.packing = packing;
    options.seed = 3;
    SftLoader uninterrupted(examples, options);
    const int64_t batches = uninterrupted.batches_per_epoch();
    // Stop mid-epoch, and exactly at the end of an epoch.
    for (int64_t stop : {batches / 2, batches}) {
      SftLoader first_run(examples, options);
      for (int64_t i = 0; i < stop; ++i) first_run.next();
      const LoaderPosition saved = first_run.position();
      SftLoader resumed(examples, options);
      resumed.restore(saved);
      SftLoader reference(examples, options);
      for (int64_t i = 0; i < stop; ++i) reference.next();
      for (int64_t i = 0; i < 2 * batches + 1; ++i) {
        INFO("packing " << packing << ", stop " << stop << ", batch " << i);
        CHECK(same_batch(resumed.next(), reference.next()));
        CHECK(resumed.position().epoch == reference.position().epoch);
        CHECK(resumed.position().batch_in_epoch == reference.position().batch_in_epoch);
      }
    }
    // Restoring straight into a later epoch works too.
    SftLoader skip_ahead(examples, options);
    skip_ahead.restore({3, 1});
    SftLoader walked(examples, options);
    while (!(walked.position().epoch == 3 && walked.position().batch_in_epoch == 1)) walked.next();
    CHECK(same_batch(skip_ahead.next(), walked.next()));
  }
  SftLoader loader(examples, LoaderOptions{});
  CHECK_THROWS(loader.restore({0, loader.batches_per_epoch() + 1}));
  CHECK_THROWS(loader.restore({-1, 0}));
}

TEST_CASE("a position restored under another global batch size goes on from the same row", "[data][loader]") {
  // A run of 2 processes x 2 rows saved after 3 batches (row 12); resumed by one process with 2 rows per batch, or
  // by 4 processes x 2: the next batch starts at row 12 either way (rows planned alike, compared token by token).
  const auto examples = numbered_examples(40);
  LoaderOptions four;
  four.batch_size = 4;
  four.max_length = 20;
  four.seed = 7;
  LoaderOptions two = four, eight = four;
  two.batch_size = 2;
  eight.batch_size = 8;
  SftLoader rows(examples, two);  // the reference stream, 2 rows at a time
  for (int i = 0; i < 6; ++i) rows.next();
  const auto expected = torch::cat({rows.next().input_ids, rows.next().input_ids});  // rows 12..15

  SftLoader first_run(examples, four);
  for (int i = 0; i < 3; ++i) first_run.next();
  const LoaderPosition saved = first_run.position();
  CHECK(saved.rows_per_batch == 4);
  SftLoader smaller(examples, two);
  smaller.restore(saved);
  CHECK(smaller.position().batch_in_epoch == 6);
  const auto got = torch::cat({smaller.next().input_ids, smaller.next().input_ids});
  const int64_t width = std::min(got.size(1), expected.size(1));
  CHECK(torch::equal(got.narrow(1, 0, width), expected.narrow(1, 0, width)));

  // Row 12 is inside a batch of 8 (rows 8..15): that batch starts again, at row 8.
  SftLoader larger(examples, eight);
  larger.restore(saved);
  CHECK(larger.position().batch_in_epoch == 1);
  CHECK(data_rebatch_rows({0, 3, 4}, 8) == std::vector<int64_t>{0, 1, 8});
  // A position without a recorded batch size (a checkpoint from before it was recorded) is taken as it is.
  CHECK(data_rebatch_rows({2, 5, 0}, 8) == std::vector<int64_t>{2, 5, 8});
}

TEST_CASE("all_batches_in_order covers every example in file order", "[data][loader]") {
  const auto examples = numbered_examples(17);
  LoaderOptions options;
  options.batch_size = 4;
  options.max_length = 16;
  options.packing = false;
  SftLoader loader(examples, options);
  std::vector<int64_t> seen;
  for (const auto& batch : loader.all_batches_in_order()) {
    for (int64_t index : check_batch(batch, examples, options.max_length)) seen.push_back(index);
  }
  std::vector<int64_t> expected(17);
  std::iota(expected.begin(), expected.end(), 0);
  CHECK(seen == expected);
  CHECK(loader.position().batch_in_epoch == 0);  // evaluation leaves the training stream alone

  options.packing = true;
  SftLoader packed(examples, options);
  std::map<int64_t, int> count;
  for (const auto& batch : packed.all_batches_in_order()) {
    for (int64_t index : check_batch(batch, examples, options.max_length)) ++count[index];
  }
  CHECK(count.size() == 17);
}

TEST_CASE("loader rejects bad input", "[data][loader]") {
  CHECK_THROWS(SftLoader(std::vector<TokenizedExample>{}, LoaderOptions{}));
  LoaderOptions options;
  options.max_length = 4;
  CHECK_THROWS_WITH(SftLoader(numbered_examples(3), options), Catch::Contains("max_length"));
  options.max_length = 64;
  options.batch_size = 0;
  CHECK_THROWS_WITH(SftLoader(numbered_examples(3), options), Catch::Contains("batch_size"));
}

TEST_CASE("first_fit_rows matches a plain first-fit", "[data][loader]") {
  std::mt19937_64 generator(1);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t capacity = 8 + static_cast<int64_t>(generator() % 40);
    std::vector<int64_t> lengths(static_cast<size_t>(1 + generator() % 200));
    for (auto& length : lengths) length = 1 + static_cast<int64_t>(generator() % capacity);
    std::vector<std::vector<int64_t>> expected;
    std::vector<int64_t> free_space;
    for (size_t item = 0; item < lengths.size(); ++item) {
      size_t row = 0;
      while (row < free_space.size() && free_space[row] < lengths[item]) ++row;
      if (row == free_space.size()) {
        free_space.push_back(capacity);
        expected.emplace_back();
      }
      free_space[row] -= lengths[item];
      expected[row].push_back(static_cast<int64_t>(item));
    }
    CHECK(first_fit_rows(lengths, capacity) == expected);
  }
}

TEST_CASE("fixed_shape: every batch batch_size rows of max_length tokens, the padding inert", "[data][loader]") {
  const auto examples = numbered_examples(10);
  LoaderOptions options;
  options.batch_size = 4;
  options.max_length = 32;
  options.packing = false;
  options.shuffle = false;
  LoaderOptions fixed = options;
  fixed.fixed_shape = true;
  SftLoader plain(examples, options);
  SftLoader padded(examples, fixed);
  for (int b = 0; b < 3; ++b) {  // the third is the short final batch: 2 rows padded to 4
    INFO("batch " << b);
    const auto expected = plain.next();
    const auto batch = padded.next();
    CHECK(check_batch(batch, examples, fixed.max_length) == check_batch(expected, examples, options.max_length));
    CHECK(batch.input_ids.sizes() == torch::IntArrayRef{4, 32});
    CHECK(batch.segment_ids.sizes() == torch::IntArrayRef{4, 32});
    const int64_t rows = expected.input_ids.size(0), width = expected.input_ids.size(1);
    // The real rows and columns hold exactly the plain batch; everything beyond is padding: id 0, no loss,
    // segment -1, position 0.
    CHECK(torch::equal(batch.input_ids.slice(0, 0, rows).slice(1, 0, width), expected.input_ids));
    CHECK(torch::equal(batch.labels.slice(0, 0, rows).slice(1, 0, width), expected.labels));
    CHECK(torch::equal(batch.segment_ids.slice(0, 0, rows).slice(1, 0, width), expected.segment_ids));
    CHECK(batch.labels.ne(kIgnoreIndex).sum().item<int64_t>() ==
          expected.labels.ne(kIgnoreIndex).sum().item<int64_t>());
    CHECK(batch.segment_ids.ge(0).sum().item<int64_t>() == expected.segment_ids.ge(0).sum().item<int64_t>());
    CHECK(batch.loss_tokens == expected.loss_tokens);
    CHECK(batch.tokens == expected.tokens);
    CHECK(batch.samples == expected.samples);
  }
}
