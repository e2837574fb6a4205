// The SFT loader: a seeded order per epoch, rows packed first-fit (or one example each), batches as tensors.
#include "tune/data/sft_loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/data/first_fit_packer.h"
#include "tune/data/seeded_shuffle.h"

namespace tune::data {

SftLoader::SftLoader(std::vector<TokenizedExample> examples, LoaderOptions options)
    : SftLoader(MixedExamples{std::move(examples), {}}, options) {}

SftLoader::SftLoader(MixedExamples examples, LoaderOptions options)
    : examples_(std::move(examples.examples)), options_(options) {
  if (is_weighted(examples.source_weights)) source_weights_ = std::move(examples.source_weights);
  if (examples_.empty()) throw InputError("the SFT loader got no examples");
  if (options_.batch_size < 1) throw UsageError(fmt::format("batch_size must be at least 1, got {}", options_.batch_size));
  for (size_t i = 0; i < examples_.size(); ++i) {
    const auto length = static_cast<int64_t>(examples_[i].input_ids.size());
    if (length == 0 || length > options_.max_length || examples_[i].labels.size() != examples_[i].input_ids.size()) {
      throw UsageError(fmt::format("example {} has {} tokens and {} labels; the loader needs 1..max_length ({}) "
                                   "tokens with one label each; HINT: tokenize with the same max_length",
                                   i, length, examples_[i].labels.size(), options_.max_length));
    }
  }
  plan_epoch(0);
}

std::vector<std::vector<int64_t>> SftLoader::plan_rows(const std::vector<int64_t>& order) const {
  std::vector<std::vector<int64_t>> rows;
  if (!options_.packing) {
    for (int64_t index : order) rows.push_back({index});
    return rows;
  }
  std::vector<int64_t> lengths;
  lengths.reserve(order.size());
  for (int64_t index : order) lengths.push_back(static_cast<int64_t>(examples_[static_cast<size_t>(index)].input_ids.size()));
  rows = first_fit_rows(lengths, options_.max_length);
  for (auto& row : rows) {
    for (auto& slot : row) slot = order[static_cast<size_t>(slot)];  // positions in `order` -> example indices
  }
  return rows;
}

void SftLoader::plan_epoch(int64_t epoch) {
  // The epoch's examples (with a weighted mixture, some repeated or left out), then their seeded order. Unweighted,
  // the pool is 0..n-1, so the order is the permutation itself, as it always was.
  std::vector<int64_t> pool(examples_.size());
  if (source_weights_.empty()) {
    std::iota(pool.begin(), pool.end(), int64_t{0});
  } else {
    std::vector<int32_t> source_of;
    source_of.reserve(examples_.size());
    for (const auto& example : examples_) source_of.push_back(example.source);
    pool = mixture_epoch(source_of, source_weights_, options_.seed, epoch);
  }
  std::vector<int64_t> order = pool;
  if (options_.shuffle) {
    const auto permutation = seeded_permutation(static_cast<int64_t>(pool.size()), options_.seed + static_cast<uint64_t>(epoch));
    for (size_t i = 0; i < pool.size(); ++i) order[i] = pool[static_cast<size_t>(permutation[i])];
  }
  epoch_rows_ = plan_rows(order);
  planned_epoch_ = epoch;
}

int64_t SftLoader::batches_per_epoch() const {
  const auto rows = static_cast<int64_t>(epoch_rows_.size());
  return (rows + options_.batch_size - 1) / options_.batch_size;
}

SftBatch SftLoader::make_batch(const std::vector<std::vector<int64_t>>& rows, size_t first_row, size_t end_row) const {
  // Rows pad to the longest in the batch, not to max_length: no compute is spent on a short batch's padding (unless
  // fixed_shape asks for one shape throughout).
  int64_t width = options_.fixed_shape ? options_.max_length : 1;
  for (size_t r = first_row; r < end_row; ++r) {
    int64_t length = 0;
    for (int64_t index : rows[r]) length += static_cast<int64_t>(examples_[static_cast<size_t>(index)].input_ids.size());
    width = std::max(width, length);
  }
  const auto height =
      options_.fixed_shape ? options_.batch_size : static_cast<int64_t>(end_row - first_row);
  auto input_ids = torch::zeros({height, width}, torch::kLong);  // padding id 0: masked by labels and segments
  auto labels = torch::full({height, width}, kIgnoreIndex, torch::kLong);
  auto position_ids = torch::zeros({height, width}, torch::kLong);
  auto segment_ids = torch::full({height, width}, int64_t{-1}, torch::kLong);
  auto ids_out = input_ids.accessor<int64_t, 2>();
  auto labels_out = labels.accessor<int64_t, 2>();
  auto positions_out = position_ids.accessor<int64_t, 2>();
  auto segments_out = segment_ids.accessor<int64_t, 2>();

  SftBatch batch;
  for (int64_t b = 0; b < static_cast<int64_t>(end_row - first_row); ++b) {  // fixed_shape's extra rows: padding
    int64_t column = 0;
    const auto& row = rows[first_row + static_cast<size_t>(b)];
    for (size_t segment = 0; segment < row.size(); ++segment) {
      const auto& example = examples_[static_cast<size_t>(row[segment])];
      for (size_t t = 0; t < example.input_ids.size(); ++t, ++column) {
        ids_out[b][column] = example.input_ids[t];
        // A segment's first token would be predicted from the previous sample's last token: no loss there.
        labels_out[b][column] = t == 0 ? kIgnoreIndex : example.labels[t];
        positions_out[b][column] = static_cast<int64_t>(t);
        segments_out[b][column] = static_cast<int64_t>(segment);
        if (t > 0 && example.labels[t] != kIgnoreIndex) ++batch.loss_tokens;  // == labels[:, 1:] != -100
      }
      ++batch.samples;
    }
    batch.tokens += column;
  }
  batch.input_ids = input_ids;
  batch.labels = labels;
  batch.position_ids = position_ids;
  batch.segment_ids = segment_ids;
  return batch;
}

SftBatch SftLoader::next() {
  if (planned_epoch_ != position_.epoch) plan_epoch(position_.epoch);
  const auto batch_size = static_cast<size_t>(options_.batch_size);
  const size_t first_row = static_cast<size_t>(position_.batch_in_epoch) * batch_size;
  const size_t end_row = std::min(first_row + batch_size, epoch_rows_.size());
  SftBatch batch = make_batch(epoch_rows_, first_row, end_row);
  // Move past the end eagerly, so position() after an epoch's last batch reads {epoch + 1, 0}.
  if (++position_.batch_in_epoch >= batches_per_epoch()) {
    position_ = {position_.epoch + 1, 0};
    plan_epoch(position_.epoch);
  }
  return batch;
}

LoaderPosition rebatch(LoaderPosition position, int64_t rows_per_batch) {
  if (position.rows_per_batch <= 0 || position.rows_per_batch == rows_per_batch || rows_per_batch <= 0) {
    position.rows_per_batch = rows_per_batch;
    return position;
  }
  const int64_t row = position.batch_in_epoch * position.rows_per_batch;
  const int64_t again = row % rows_per_batch;
  if (again != 0) {
    log::warn("resuming with {} rows per global batch where the checkpoint counted {}: row {} of epoch {} is inside "
              "a batch, so its first {} row(s) are trained on again", rows_per_batch, position.rows_per_batch, row,
              position.epoch, again);
  }
  return {position.epoch, row / rows_per_batch, rows_per_batch};
}

void SftLoader::restore(LoaderPosition position) {
  if (position.epoch < 0 || position.batch_in_epoch < 0) {
    throw InputError(fmt::format("data position (epoch {}, batch {}) is negative", position.epoch,
                                 position.batch_in_epoch));
  }
  position = rebatch(position, options_.batch_size);
  plan_epoch(position.epoch);
  if (position.batch_in_epoch > batches_per_epoch()) {
    throw InputError(fmt::format("data position (epoch {}, batch {}) is past the epoch's {} batches; HINT: resume "
                                 "with the same data, batch_size, max_length, packing and seed",
                                 position.epoch, position.batch_in_epoch, batches_per_epoch()));
  }
  position_ = position;
  if (position_.batch_in_epoch == batches_per_epoch()) {
    position_ = {position.epoch + 1, 0};
    plan_epoch(position_.epoch);
  }
}

std::vector<SftBatch> SftLoader::all_batches_in_order() const {
  std::vector<int64_t> order(examples_.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  const auto rows = plan_rows(order);
  std::vector<SftBatch> batches;
  const auto batch_size = static_cast<size_t>(options_.batch_size);
  for (size_t first = 0; first < rows.size(); first += batch_size) {
    batches.push_back(make_batch(rows, first, std::min(first + batch_size, rows.size())));
  }
  return batches;
}

SftBatch slice_rows(const SftBatch& batch, int64_t begin, int64_t end) {
  SftBatch slice;
  slice.input_ids = batch.input_ids.slice(0, begin, end);
  slice.labels = batch.labels.slice(0, begin, end);
  slice.position_ids = batch.position_ids.slice(0, begin, end);
  slice.segment_ids = batch.segment_ids.slice(0, begin, end);
  if (end <= begin) return slice;
  slice.loss_tokens = slice.labels.slice(1, 1).ne(kIgnoreIndex).sum().item<int64_t>();
  slice.tokens = slice.segment_ids.ge(0).sum().item<int64_t>();
  slice.samples = (std::get<0>(slice.segment_ids.max(1)) + 1).sum().item<int64_t>();
  return slice;
}

}  // namespace tune::data
