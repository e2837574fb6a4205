#include "tune/data/preference_loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tune/core/error.h"
#include "tune/data/seeded_shuffle.h"

namespace tune::data {

namespace {

// `rows` rows of `width` padding: token 0, no label, position 0, segment and sequence -1.
void allocate_rows(PreferenceBatch& batch, int64_t rows, int64_t width) {
  batch.input_ids = torch::zeros({rows, width}, torch::kLong);
  batch.labels = torch::full({rows, width}, kIgnoreIndex, torch::kLong);
  batch.position_ids = torch::zeros({rows, width}, torch::kLong);
  batch.segment_ids = torch::full({rows, width}, int64_t{-1}, torch::kLong);
  batch.sequence_ids = torch::full({rows, width}, int64_t{-1}, torch::kLong);
}

}  // namespace

PreferenceBatch collate_pairs(const std::vector<const TokenizedPair*>& pairs) {
  const auto count = static_cast<int64_t>(pairs.size());
  int64_t width = 1;
  for (const TokenizedPair* pair : pairs) {
    const auto prompt = static_cast<int64_t>(pair->prompt_ids.size());
    width = std::max({width, prompt + static_cast<int64_t>(pair->chosen_ids.size()),
                      prompt + static_cast<int64_t>(pair->rejected_ids.size())});
  }
  PreferenceBatch batch;
  batch.pairs = count;
  allocate_rows(batch, 2 * count, width);
  auto ids = batch.input_ids.accessor<int64_t, 2>();
  auto sequences = batch.sequence_ids.accessor<int64_t, 2>();
  auto labels = batch.labels.accessor<int64_t, 2>();
  auto positions = batch.position_ids.accessor<int64_t, 2>();
  auto segments = batch.segment_ids.accessor<int64_t, 2>();
  for (int64_t i = 0; i < count; ++i) {
    const TokenizedPair& pair = *pairs[static_cast<size_t>(i)];
    for (const auto& [row_index, completion] :
         {std::pair{i, &pair.chosen_ids}, std::pair{count + i, &pair.rejected_ids}}) {
      // A plain copy: clang 14 (the fuzzing build) cannot capture a structured binding in a lambda.
      const int64_t row = row_index;
      int64_t column = 0;
      auto put = [&](int64_t id, bool scored) {
        ids[row][column] = id;
        if (scored) labels[row][column] = id;
        positions[row][column] = column;
        segments[row][column] = 0;
        sequences[row][column] = row;
        ++column;
      };
      for (const int64_t id : pair.prompt_ids) put(id, false);
      for (const int64_t id : *completion) put(id, true);
      batch.tokens += column;
    }
  }
  const bool precomputed = std::all_of(pairs.begin(), pairs.end(), [](const TokenizedPair* pair) {
    return !std::isnan(pair->reference_chosen) && !std::isnan(pair->reference_rejected);
  });
  if (precomputed && count > 0) {
    batch.reference_chosen = torch::empty({count}, torch::kFloat);
    batch.reference_rejected = torch::empty({count}, torch::kFloat);
    auto chosen = batch.reference_chosen.accessor<float, 1>();
    auto rejected = batch.reference_rejected.accessor<float, 1>();
    for (int64_t i = 0; i < count; ++i) {
      chosen[i] = pairs[static_cast<size_t>(i)]->reference_chosen;
      rejected[i] = pairs[static_cast<size_t>(i)]->reference_rejected;
    }
  }
  return batch;
}

PreferenceBatch slice_pairs(const PreferenceBatch& batch, int64_t begin, int64_t end) {
  if (batch.packed) throw Error("slice_pairs: the batch is packed already; slice first, then pack");
  const int64_t count = batch.pairs;
  auto both_halves = [&](const torch::Tensor& tensor) {
    return torch::cat({tensor.slice(0, begin, end), tensor.slice(0, count + begin, count + end)});
  };
  PreferenceBatch slice;
  slice.pairs = end - begin;
  slice.input_ids = both_halves(batch.input_ids);
  slice.labels = both_halves(batch.labels);
  slice.position_ids = both_halves(batch.position_ids);
  slice.segment_ids = both_halves(batch.segment_ids);
  slice.tokens = slice.segment_ids.ge(0).sum().item<int64_t>();
  // Row r of the slice is sequence r again.
  slice.sequence_ids = torch::where(slice.segment_ids.ge(0),
                                    torch::arange(2 * slice.pairs, torch::kLong).unsqueeze(1).expand_as(slice.segment_ids),
                                    torch::full_like(slice.segment_ids, -1));
  if (batch.reference_chosen.defined()) {
    slice.reference_chosen = batch.reference_chosen.slice(0, begin, end);
    slice.reference_rejected = batch.reference_rejected.slice(0, begin, end);
  }
  return slice;
}

PreferenceBatch pack_pairs(const PreferenceBatch& batch) {
  if (batch.packed) return batch;
  const int64_t rows = batch.input_ids.size(0), width = batch.input_ids.size(1);
  const torch::Tensor lengths_tensor = batch.segment_ids.ge(0).sum(1);
  const auto lengths = lengths_tensor.accessor<int64_t, 1>();
  std::vector<int64_t> order(static_cast<size_t>(rows));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<int64_t>> bins;  // the sequences of each packed row, in placing order
  std::vector<int64_t> used;
  for (const int64_t row : order) {
    size_t bin = 0;
    while (bin < bins.size() && used[bin] + lengths[row] > width) ++bin;
    if (bin == bins.size()) {
      bins.emplace_back();
      used.push_back(0);
    }
    bins[bin].push_back(row);
    used[bin] += lengths[row];
  }
  if (static_cast<int64_t>(bins.size()) == rows) return batch;

  PreferenceBatch packed = batch;
  const auto packed_rows = static_cast<int64_t>(bins.size());
  packed.packed = true;
  allocate_rows(packed, packed_rows, width);
  const auto ids_in = batch.input_ids.accessor<int64_t, 2>();
  const auto labels_in = batch.labels.accessor<int64_t, 2>();
  auto ids = packed.input_ids.accessor<int64_t, 2>();
  auto labels = packed.labels.accessor<int64_t, 2>();
  auto positions = packed.position_ids.accessor<int64_t, 2>();
  auto segments = packed.segment_ids.accessor<int64_t, 2>();
  auto sequences = packed.sequence_ids.accessor<int64_t, 2>();
  for (int64_t bin = 0; bin < packed_rows; ++bin) {
    int64_t column = 0;
    for (size_t k = 0; k < bins[static_cast<size_t>(bin)].size(); ++k) {
      const int64_t row = bins[static_cast<size_t>(bin)][k];
      for (int64_t t = 0; t < lengths[row]; ++t, ++column) {
        ids[bin][column] = ids_in[row][t];
        // A sequence's first token is never a label: it would be scored against the sequence before it.
        labels[bin][column] = t == 0 ? kIgnoreIndex : labels_in[row][t];
        positions[bin][column] = t;
        segments[bin][column] = static_cast<int64_t>(k);
        sequences[bin][column] = row;
      }
    }
  }
  return packed;
}

PreferenceLoader::PreferenceLoader(std::vector<TokenizedPair> pairs, int64_t pairs_per_batch, bool shuffle,
                                   uint64_t seed, std::vector<double> file_weights)
    : pairs_(std::move(pairs)), pairs_per_batch_(pairs_per_batch), shuffle_(shuffle), seed_(seed) {
  if (pairs_.empty()) throw InputError("no preference pairs to train on");
  if (pairs_per_batch_ < 1) throw UsageError("PreferenceLoader: pairs_per_batch must be >= 1");
  if (is_weighted(file_weights)) file_weights_ = std::move(file_weights);
  epoch_pairs_ = static_cast<int64_t>(pairs_.size());
  if (!file_weights_.empty()) {
    std::vector<int64_t> counts(file_weights_.size(), 0);
    for (const auto& pair : pairs_) ++counts.at(static_cast<size_t>(pair.file_index));
    epoch_pairs_ = 0;
    for (size_t i = 0; i < counts.size(); ++i) epoch_pairs_ += examples_per_epoch(counts[i], file_weights_[i]);
  }
  plan_epoch(0);
}

void PreferenceLoader::plan_epoch(int64_t epoch) {
  // The epoch's pairs (a weighted mixture repeats some files and draws from others), then their seeded order.
  // Unweighted, the pool is 0..n-1, so the order is the permutation itself.
  std::vector<int64_t> pool(pairs_.size());
  if (file_weights_.empty()) {
    std::iota(pool.begin(), pool.end(), int64_t{0});
  } else {
    std::vector<int32_t> file_of;
    file_of.reserve(pairs_.size());
    for (const auto& pair : pairs_) file_of.push_back(pair.file_index);
    pool = mixture_epoch(file_of, file_weights_, seed_, epoch);
  }
  order_ = pool;
  if (shuffle_) {
    const std::vector<int64_t> permutation =
        seeded_permutation(static_cast<int64_t>(pool.size()), seed_ + static_cast<uint64_t>(epoch));
    for (size_t i = 0; i < pool.size(); ++i) order_[i] = pool[static_cast<size_t>(permutation[i])];
  }
  planned_epoch_ = epoch;
}

int64_t PreferenceLoader::batches_per_epoch() const {
  return (epoch_pairs_ + pairs_per_batch_ - 1) / pairs_per_batch_;
}

PreferenceBatch PreferenceLoader::batch_at(const std::vector<int64_t>& order, int64_t batch_index) const {
  const size_t first = static_cast<size_t>(batch_index * pairs_per_batch_);
  const size_t end = std::min(first + static_cast<size_t>(pairs_per_batch_), order.size());
  std::vector<const TokenizedPair*> chosen;
  for (size_t i = first; i < end; ++i) chosen.push_back(&pairs_[static_cast<size_t>(order[i])]);
  return collate_pairs(chosen);
}

PreferenceBatch PreferenceLoader::next() {
  if (planned_epoch_ != position_.epoch) plan_epoch(position_.epoch);
  PreferenceBatch batch = batch_at(order_, position_.batch_in_epoch);
  if (++position_.batch_in_epoch >= batches_per_epoch()) {
    position_ = {position_.epoch + 1, 0};
    plan_epoch(position_.epoch);
  }
  return batch;
}

void PreferenceLoader::restore(LoaderPosition position) {
  if (position.epoch < 0 || position.batch_in_epoch < 0) {
    throw InputError(fmt::format("data position (epoch {}, batch {}) is negative", position.epoch,
                                 position.batch_in_epoch));
  }
  position = rebatch(position, pairs_per_batch_);
  if (position.batch_in_epoch > batches_per_epoch()) {
    throw InputError(fmt::format("data position (epoch {}, batch {}) is past the epoch's {} batches; HINT: resume "
                                 "with the same data, batch_size, max_length and seed",
                                 position.epoch, position.batch_in_epoch, batches_per_epoch()));
  }
  plan_epoch(position.epoch);
  position_ = {position.epoch, position.batch_in_epoch, pairs_per_batch_};
}

std::vector<PreferenceBatch> PreferenceLoader::all_batches_in_order() const {
  std::vector<int64_t> order(pairs_.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::vector<PreferenceBatch> batches;
  const auto count = static_cast<int64_t>(pairs_.size());  // every pair once, whatever the mixture's weights
  for (int64_t b = 0; b * pairs_per_batch_ < count; ++b) batches.push_back(batch_at(order, b));
  return batches;
}

}  // namespace tune::data
