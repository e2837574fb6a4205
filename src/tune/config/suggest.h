// "Did you mean ...?" for unknown config keys: the nearest schema key by edit distance.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace tune::config {

// Levenshtein distance (insertions, deletions, substitutions each cost 1).
std::size_t edit_distance(const std::string& a, const std::string& b);

// The known key closest to `unknown`, when it is close enough to be a likely typo, or else the one known key
// whose last part equals `unknown`'s (a top-level "lr" suggests "optimizer.lr"). nullopt when nothing fits.
std::optional<std::string> nearest_key(const std::string& unknown, const std::vector<std::string>& known);

}  // namespace tune::config
