// Batches of SFT examples, packed or padded, in a seeded order that can be saved and restored exactly.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "tune/data/dataset_mixture.h"
#include "tune/data/sft_dataset.h"

namespace tune::data {

struct SftBatch {
  torch::Tensor input_ids;     // [B, T] int64
  torch::Tensor labels;        // [B, T] int64, kIgnoreIndex where no loss (incl. padding and segment starts)
  torch::Tensor position_ids;  // [B, T] int64, restarting at 0 for each packed sample
  torch::Tensor segment_ids;   // [B, T] int64: sample index within the row (0, 1, ...), -1 for padding
  int64_t loss_tokens = 0;     // number of positions whose *shifted* label counts in the loss
  int64_t tokens = 0;          // non-padding tokens
  int64_t samples = 0;
};

struct LoaderOptions {
  int64_t batch_size = 1;      // rows per batch
  int64_t max_length = 512;    // the most tokens a row holds; rows pad to the longest row of their batch
  bool packing = true;         // greedily fill each row with whole samples (first fit in shuffled order)
                               // off: one sample per row
  bool shuffle = true;
  uint64_t seed = 0;
  // Every batch batch_size rows of max_length tokens (padding rows and columns: segment -1, no loss), so every step
  // has one shape, which a CUDA graph of the step needs (training.cuda_graph).
  bool fixed_shape = false;
};

struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;
  int64_t rows_per_batch = 0;  // the (global) batch size batch_in_epoch counts in; 0: not recorded (older runs)
};

// `position` counted in batches of `rows_per_batch` rows: a run resumed with another global batch (another number of
// processes, or batch size) goes on from the same row of the epoch. A row in the middle of a new batch rounds down
// to that batch's start, saying how many rows are seen again.
LoaderPosition rebatch(LoaderPosition position, int64_t rows_per_batch);

// Rows [begin, end) of a batch with their counts recomputed: a data-parallel rank's share of a global batch. The
// padded width stays the global batch's, so every rank computes exactly what one process would for those rows.
SftBatch slice_rows(const SftBatch& batch, int64_t begin, int64_t end);

class SftLoader {
 public:
  SftLoader(std::vector<TokenizedExample> examples, LoaderOptions options);
  // Several files mixed by weight (dataset_mixture.h): each epoch holds the examples mixture_epoch chooses, shuffled
  // together; with every weight 1 exactly what the constructor above gives.
  SftLoader(MixedExamples examples, LoaderOptions options);

  // The next batch; wraps to a new epoch (a new seeded order: seed + epoch) at the end of the data.
  SftBatch next();
  int64_t batches_per_epoch() const;  // of the epoch position() is in (with packing, epochs differ slightly)
  LoaderPosition position() const { return {position_.epoch, position_.batch_in_epoch, options_.batch_size}; }
  void restore(LoaderPosition position);  // the next batch is exactly the one an uninterrupted run would get
  // Every batch of one pass, in order, without shuffling (evaluation).
  std::vector<SftBatch> all_batches_in_order() const;

 private:
  std::vector<TokenizedExample> examples_;
  std::vector<double> source_weights_;  // empty unless the mixture is weighted
  LoaderOptions options_;
  LoaderPosition position_;
  std::vector<std::vector<int64_t>> epoch_rows_;  // per batch row: example indices (implementation detail)
  int64_t planned_epoch_ = -1;                     // the epoch epoch_rows_ was planned for
  void plan_epoch(int64_t epoch);
  std::vector<std::vector<int64_t>> plan_rows(const std::vector<int64_t>& order) const;
  SftBatch make_batch(const std::vector<std::vector<int64_t>>& rows, size_t first_row, size_t end_row) const;
};

}  // namespace tune::data
