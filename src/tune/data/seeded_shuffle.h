// A portable seeded shuffle: std::shuffle and std::uniform_int_distribution are implementation-defined, so the
// same seed could give a different data order on another standard library; this one gives the same everywhere.
#pragma once

#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace tune::data {

// Uniform in [0, bound) without modulo bias: rejects the draws below 2^64 mod bound.
inline uint64_t uniform_below(std::mt19937_64& generator, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // == 2^64 mod bound, in unsigned arithmetic
  while (true) {
    const uint64_t draw = generator();
    if (draw >= threshold) return draw % bound;
  }
}

// 0..count-1 in a Fisher-Yates order fixed by the seed.
inline std::vector<int64_t> seeded_permutation(int64_t count, uint64_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(count));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::mt19937_64 generator(seed);
  for (int64_t i = count - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(uniform_below(generator, static_cast<uint64_t>(i) + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

}  // namespace tune::data
