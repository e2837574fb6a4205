// First-fit bin packing in O(log rows) per item: a max tree over the rows' free space finds the leftmost row
// an item fits in, so packing a large dataset every epoch stays cheap.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tune::data {

// Packs items (by length) into rows of `capacity`, each item into the first row with room, opening rows in
// order. Returns, per row, the item indices in the order they were placed.
inline std::vector<std::vector<int64_t>> first_fit_rows(const std::vector<int64_t>& lengths, int64_t capacity) {
  size_t leaves = 1;
  while (leaves < lengths.size()) leaves *= 2;
  // free_space[node]: the largest free space among the rows under node; unopened rows have full capacity.
  std::vector<int64_t> free_space(2 * leaves, capacity);
  std::vector<std::vector<int64_t>> rows;
  for (size_t item = 0; item < lengths.size(); ++item) {
    const int64_t length = lengths[item];
    size_t node = 1;
    while (node < leaves) node = free_space[2 * node] >= length ? 2 * node : 2 * node + 1;
    const size_t row = node - leaves;  // lengths never exceed capacity, so a row always fits
    if (row == rows.size()) rows.emplace_back();
    rows[row].push_back(static_cast<int64_t>(item));
    free_space[node] -= length;
    for (node /= 2; node >= 1; node /= 2) free_space[node] = std::max(free_space[2 * node], free_space[2 * node + 1]);
  }
  return rows;
}

}  // namespace tune::data
