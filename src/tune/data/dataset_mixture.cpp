// Weighted epochs over several files (see dataset_mixture.h).
#include "tune/data/dataset_mixture.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tune/core/error.h"
#include "tune/data/seeded_shuffle.h"

namespace tune::data {

namespace {

// SplitMix64's finaliser: independent-looking seeds for each (run seed, file, pass) without a shared generator.
uint64_t mix(uint64_t value) {
  value += 0x9E3779B97F4A7C15ULL;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ULL;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBULL;
  return value ^ (value >> 31);
}

}  // namespace

int64_t examples_per_epoch(int64_t count, double weight) {
  if (count <= 0) return 0;
  // The epoch's plan holds one index per drawn example; beyond this it would not fit in memory (nor llround).
  constexpr double kMostPerEpoch = 2147483648.0;
  const double wanted = weight * static_cast<double>(count);
  if (!(wanted < kMostPerEpoch)) {
    throw UsageError(fmt::format("a data file of {} examples with weight {} would put {:.3g} examples in each epoch; "
                                 "HINT: lower its weight (passes over the file per epoch)",
                                 count, weight, wanted));
  }
  return std::max<int64_t>(1, std::llround(wanted));
}

bool is_weighted(const std::vector<double>& source_weights) {
  return std::any_of(source_weights.begin(), source_weights.end(), [](double weight) { return weight != 1.0; });
}

std::vector<int64_t> mixture_epoch(const std::vector<int32_t>& source_of, const std::vector<double>& source_weights,
                                   uint64_t seed, int64_t epoch) {
  std::vector<std::vector<int64_t>> members(source_weights.size());
  for (size_t i = 0; i < source_of.size(); ++i) {
    const int32_t source = source_of[i];
    if (source < 0 || static_cast<size_t>(source) >= source_weights.size()) {
      throw UsageError(fmt::format("example {} comes from data file {}, but only {} weights were given", i, source,
                                   source_weights.size()));
    }
    members[static_cast<size_t>(source)].push_back(static_cast<int64_t>(i));
  }
  std::vector<int64_t> epoch_examples;
  for (size_t source = 0; source < members.size(); ++source) {
    const std::vector<int64_t>& files_examples = members[source];
    const auto count = static_cast<int64_t>(files_examples.size());
    const int64_t total = examples_per_epoch(count, source_weights[source]);
    if (total == 0) continue;
    for (int64_t pass = 0; pass < total / count; ++pass) {
      epoch_examples.insert(epoch_examples.end(), files_examples.begin(), files_examples.end());
    }
    // The remainder walks an endless sequence of seeded permutations of the file from position epoch x remainder,
    // so fractional weights cover the whole file before repeating an example; where the walk crosses into the next
    // permutation, examples this epoch already drew are passed over (no example twice in one epoch's remainder).
    const int64_t remainder = total % count;
    if (remainder == 0) continue;
    std::vector<bool> drawn(static_cast<size_t>(count), false);
    std::vector<int64_t> permutation;
    int64_t permutation_number = -1;
    for (int64_t position = epoch * remainder, taken = 0; taken < remainder; ++position) {
      if (position / count != permutation_number) {
        permutation_number = position / count;
        permutation = seeded_permutation(count, mix(mix(seed ^ mix(source)) + static_cast<uint64_t>(permutation_number)));
      }
      const auto member = static_cast<size_t>(permutation[static_cast<size_t>(position % count)]);
      if (drawn[member]) continue;
      drawn[member] = true;
      epoch_examples.push_back(files_examples[member]);
      ++taken;
    }
  }
  return epoch_examples;
}

}  // namespace tune::data
