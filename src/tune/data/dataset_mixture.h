// Several data files mixed by weight. A file's weight is how many passes over it one epoch makes, fractions
// allowed (as LLaMA-Factory's and XTuner's repeat factors): each epoch holds round(weight x N) of a file's N
// examples, at least 1: the file whole as many times as that fits, and the rest drawn without replacement,
// continuing through the file across epochs (weight 0.5: two consecutive epochs together see every example once).
// The draws depend only on the seed, the file and the epoch, so a resumed run sees the same epochs.
#pragma once

#include <cstdint>
#include <vector>

#include "tune/data/sft_dataset.h"

namespace tune::data {

// Training examples and the weights of the files they came from (examples[i].source indexes source_weights).
// Empty weights, or every weight 1: each example once per epoch.
struct MixedExamples {
  std::vector<TokenizedExample> examples;
  std::vector<double> source_weights;
  bool empty() const { return examples.empty(); }
  size_t size() const { return examples.size(); }
};

// round(weight x count), at least 1 (a listed file is never silently left out); 0 when count is 0. Throws
// UsageError beyond 2^31 examples per epoch.
int64_t examples_per_epoch(int64_t count, double weight);

// Whether the weights change anything: some weight differs from 1.
bool is_weighted(const std::vector<double>& source_weights);

// The example indices epoch `epoch` holds, file by file in `sources` order (examples in index order within a
// file, repeated passes one after the other, then the drawn remainder), for the loader to shuffle. Throws
// UsageError when an example's source has no weight.
std::vector<int64_t> mixture_epoch(const std::vector<int32_t>& source_of, const std::vector<double>& source_weights,
                                   uint64_t seed, int64_t epoch);

}  // namespace tune::data
