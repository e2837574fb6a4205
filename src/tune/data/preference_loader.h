// Batches of preference pairs: each batch is its chosen sequences then its rejected ones (rows 0..P-1 and P..2P-1,
// pair i in rows i and P + i), prompt + completion right-padded to the longest row, the loss labels on the
// completion only; one forward runs both halves, as TRL concatenates them. Seeded shuffles per epoch, and a
// position to resume from exactly (as data::SftLoader).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "tune/data/dataset_mixture.h"
#include "tune/data/preference_dataset.h"
#include "tune/data/sft_loader.h"

namespace tune::data {

struct PreferenceBatch {
  torch::Tensor input_ids;     // [2P, T] int64 (padding id 0)
  torch::Tensor labels;        // [2P, T] int64: the token on completion positions, kIgnoreIndex elsewhere
  torch::Tensor position_ids;  // [2P, T] int64
  torch::Tensor segment_ids;   // [2P, T] int64: 0 on tokens, -1 on padding
  // [rows, T] int64: which sequence each token is, chosen i = i and rejected i = P + i; -1 on padding. Rows are
  // the sequences in that order, unless `packed` (pack_pairs).
  torch::Tensor sequence_ids;
  bool packed = false;
  int64_t pairs = 0;
  int64_t tokens = 0;          // non-padding tokens of both halves
  // [P] float32, the pairs' precomputed reference log-probs (TokenizedPair::reference_*); undefined unless every
  // pair of the batch has them.
  torch::Tensor reference_chosen, reference_rejected;
};

// Pairs in order into one batch (the padded width is their longest prompt + completion).
PreferenceBatch collate_pairs(const std::vector<const TokenizedPair*>& pairs);
// Pairs [begin, end) of a batch, both halves, with the batch's padded width: a data-parallel rank's share. Of a batch
// not yet packed.
PreferenceBatch slice_pairs(const PreferenceBatch& batch, int64_t begin, int64_t end);

// The batch's 2P sequences packed without padding into as few rows as fit the batch's width (first fit, longest
// first; segment ids tell the sequences of a row apart, positions restart in each): never more rows than before nor
// wider ones, so never more work; fewer rows when short sequences share one. The batch itself when nothing packs.
PreferenceBatch pack_pairs(const PreferenceBatch& batch);

class PreferenceLoader {
 public:
  // `file_weights` (indexed by TokenizedPair::file_index; empty or all 1: each pair once per epoch): several files
  // mixed by weight, each epoch drawing from them as dataset_mixture.h says, as the SFT loader does.
  PreferenceLoader(std::vector<TokenizedPair> pairs, int64_t pairs_per_batch, bool shuffle, uint64_t seed,
                   std::vector<double> file_weights = {});
  PreferenceBatch next();  // wraps to a new epoch (a new seeded order: seed + epoch) at the end of the data
  int64_t batches_per_epoch() const;
  LoaderPosition position() const { return {position_.epoch, position_.batch_in_epoch, pairs_per_batch_}; }
  void restore(LoaderPosition position);  // the next batch is the one an uninterrupted run would get
  std::vector<PreferenceBatch> all_batches_in_order() const;  // one pass, unshuffled (evaluation)

 private:
  std::vector<TokenizedPair> pairs_;
  std::vector<double> file_weights_;  // empty unless the mixture is weighted
  int64_t epoch_pairs_ = 0;           // pairs per epoch: all of them, or what the mixture draws
  int64_t pairs_per_batch_;
  bool shuffle_;
  uint64_t seed_;
  LoaderPosition position_;
  std::vector<int64_t> order_;  // the epoch's pair indices
  int64_t planned_epoch_ = -1;
  void plan_epoch(int64_t epoch);
  PreferenceBatch batch_at(const std::vector<int64_t>& order, int64_t batch_index) const;
};

}  // namespace tune::data
