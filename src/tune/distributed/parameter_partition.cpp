// Contiguous, byte-balanced parameter shares (see parameter_partition.h).
#include "tune/distributed/parameter_partition.h"

#include <algorithm>
#include <stdexcept>

namespace tune::distributed {

std::vector<int> partition_by_bytes(const std::vector<int64_t>& bytes, int ranks) {
  if (ranks < 1) throw std::invalid_argument("partition_by_bytes: ranks must be >= 1");
  int64_t total = 0;
  for (const int64_t b : bytes) {
    if (b < 0) throw std::invalid_argument("partition_by_bytes: negative size");
    total += b;
  }
  // A parameter belongs to the rank whose slice [r, r + 1) * total / ranks holds its midpoint: contiguous, and
  // each rank's bytes are total / ranks give or take half a parameter at either end.
  std::vector<int> owner(bytes.size(), 0);
  int64_t before = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (total > 0) {
      const long double middle = static_cast<long double>(before) + static_cast<long double>(bytes[i]) / 2.0L;
      const auto rank = static_cast<int>(middle * ranks / static_cast<long double>(total));
      owner[i] = std::clamp(rank, 0, ranks - 1);
    }
    before += bytes[i];
  }
  return owner;
}

}  // namespace tune::distributed
