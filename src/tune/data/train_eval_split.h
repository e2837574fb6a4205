// The held-out split every recipe's data shares: a seeded shuffle of indices, the last `eval_fraction` of them (at
// least one when the fraction is > 0) evaluated, each side kept in file order.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tune/core/error.h"
#include "tune/data/seeded_shuffle.h"

namespace tune::data {

template <typename Item>
void split_train_eval_items(std::vector<Item> all, double eval_fraction, uint64_t seed, std::vector<Item>& train,
                            std::vector<Item>& eval) {
  if (!(eval_fraction >= 0.0 && eval_fraction < 1.0)) {
    throw UsageError(fmt::format("eval_fraction must be in [0, 1), got {}", eval_fraction));
  }
  const auto count = static_cast<int64_t>(all.size());
  int64_t eval_count = 0;
  if (eval_fraction > 0.0) {
    eval_count = std::max<int64_t>(1, static_cast<int64_t>(eval_fraction * static_cast<double>(count) + 0.5));
  }
  if (eval_count >= count && eval_count > 0) {
    throw UsageError(fmt::format("eval_fraction {} of {} examples leaves nothing to train on; HINT: lower "
                                 "eval_fraction or give a separate eval file",
                                 eval_fraction, count));
  }
  std::vector<int64_t> order = seeded_permutation(count, seed);
  std::vector<int64_t> train_indices(order.begin(), order.end() - eval_count);
  std::vector<int64_t> eval_indices(order.end() - eval_count, order.end());
  // Each side keeps the file's order: the split is random, the listing stays readable.
  std::sort(train_indices.begin(), train_indices.end());
  std::sort(eval_indices.begin(), eval_indices.end());
  train.clear();
  eval.clear();
  for (int64_t index : train_indices) train.push_back(std::move(all[static_cast<size_t>(index)]));
  for (int64_t index : eval_indices) eval.push_back(std::move(all[static_cast<size_t>(index)]));
}

}  // namespace tune::data
