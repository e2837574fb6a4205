// Nearest-key suggestions for unknown config keys.
#include "tune/config/suggest.h"

#include <algorithm>

namespace tune::config {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  // One row of the dynamic-programming table at a time: keys are short, but there are many of them.
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

namespace {

std::string last_part(const std::string& key) {
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

}  // namespace

std::optional<std::string> nearest_key(const std::string& unknown, const std::vector<std::string>& known) {
  // A third of the length allows two typos in "optimizer.lr" but not a different word in "seed".
  const std::size_t allowed = std::max<std::size_t>(2, unknown.size() / 3);
  std::optional<std::string> best;
  std::size_t best_distance = allowed + 1;
  for (const std::string& candidate : known) {
    // The distance is at least the difference in length: a candidate that cannot beat the best is not computed.
    // Long unknown keys (a fuzzed config has many) then cost nothing against the short known ones.
    const std::size_t length_gap = unknown.size() > candidate.size() ? unknown.size() - candidate.size()
                                                                      : candidate.size() - unknown.size();
    if (length_gap >= best_distance) continue;
    const std::size_t distance = edit_distance(unknown, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  if (best) return best;

  // The right name in the wrong section: suggest it only when there is exactly one such key.
  std::optional<std::string> same_name;
  const std::string name = last_part(unknown);
  for (const std::string& candidate : known) {
    if (last_part(candidate) != name) continue;
    if (same_name) return std::nullopt;
    same_name = candidate;
  }
  return same_name;
}

}  // namespace tune::config
