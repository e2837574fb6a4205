// The cache of large CPU blocks: reuse by size (up to a quarter larger), and the mapped total held within the live
// peak plus the slack (which follows the churning bytes), whatever order blocks come and go in.
#include "tune/core/cpu_block_cache.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using tune::memory_tracker::CpuBlockCache;

namespace {
constexpr size_t kMiB = size_t{1} << 20;

// The "THPeligible" field of the /proc/self/smaps entry holding `address`: 1 where the mapping may take transparent
// huge pages (-1: no entry found).
int thp_eligible(const void* address) {
  const auto target = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= target && target < end;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      return std::stoi(line.substr(12));
    }
  }
  return -1;
}

bool thp_available() {
  std::ifstream setting("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string text((std::istreambuf_iterator<char>(setting)), std::istreambuf_iterator<char>());
  return text.find("[always]") != std::string::npos || text.find("[madvise]") != std::string::npos;
}
}  // namespace

TEST_CASE("cpu block cache: a freed block serves the next request of its size without a new mapping") {
  CpuBlockCache cache(128 << 10, 64 * kMiB);
  const CpuBlockCache::Block first = cache.allocate(3 * kMiB + 5);
  CHECK(first.size == CpuBlockCache::mapping_bytes(3 * kMiB + 5));
  CHECK(first.size >= 3 * kMiB + 5);
  std::memset(first.data, 7, 3 * kMiB + 5);  // the whole request is writable
  cache.free(first);
  const CpuBlockCache::Block again = cache.allocate(3 * kMiB + 5);
  CHECK(again.data == first.data);
  CHECK(static_cast<unsigned char*>(again.data)[3 * kMiB] == 7);  // the same pages: nothing faulted in afresh
  const auto stats = cache.stats();
  CHECK(stats.hits == 1);
  CHECK(stats.misses == 1);
  CHECK(stats.cached_bytes == 0);
  CHECK(stats.mapped_bytes == static_cast<int64_t>(first.size));
  cache.free(again);
}

TEST_CASE("cpu block cache: a cached block up to a quarter larger serves, a larger one does not") {
  CpuBlockCache cache(128 << 10, 64 * kMiB);
  const CpuBlockCache::Block big = cache.allocate(4 * kMiB);
  cache.free(big);
  const CpuBlockCache::Block smaller = cache.allocate(4 * kMiB - kMiB / 2);  // 4 MiB is within a quarter of it
  CHECK(smaller.data == big.data);
  CHECK(smaller.size == big.size);  // the block keeps its own size, so freeing it gives back the whole mapping
  cache.free(smaller);
  const CpuBlockCache::Block much_smaller = cache.allocate(2 * kMiB);  // 4 MiB is twice it: a new mapping
  CHECK(much_smaller.data != big.data);
  CHECK(much_smaller.size == 2 * kMiB);
  CHECK(cache.stats().misses == 2);
  cache.free(much_smaller);
}

TEST_CASE("cpu block cache: a miss unmaps the least recently freed blocks to stay within peak plus slack") {
  const int64_t slack = 8 * kMiB;
  CpuBlockCache cache(128 << 10, slack);
  // Live peak 16 MiB: four 4 MiB blocks at once.
  std::vector<CpuBlockCache::Block> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(cache.allocate(4 * kMiB));
  for (const auto& block : blocks) cache.free(block);
  CHECK(cache.stats().peak_live_bytes == 16 * static_cast<int64_t>(kMiB));
  CHECK(cache.stats().cached_bytes == 16 * static_cast<int64_t>(kMiB));
  // A 10 MiB request fits none of them: mapping it beside all four would reach 26 MiB > 16 + 8, so the oldest go.
  const CpuBlockCache::Block large = cache.allocate(10 * kMiB);
  const auto stats = cache.stats();
  CHECK(stats.evictions == 1);
  CHECK(stats.mapped_bytes == 22 * static_cast<int64_t>(kMiB));
  CHECK(stats.mapped_bytes <= stats.peak_live_bytes + slack);
  // The freshest 4 MiB blocks stayed: a 4 MiB request is a hit.
  const CpuBlockCache::Block reused = cache.allocate(4 * kMiB);
  CHECK(reused.data == blocks[3].data);
  cache.free(reused);
  cache.free(large);
}

TEST_CASE("cpu block cache: a miss that must make room cuts a larger cached block down to the request") {
  const int64_t slack = 1 * kMiB;
  CpuBlockCache cache(128 << 10, slack);
  const CpuBlockCache::Block big = cache.allocate(8 * kMiB);
  const CpuBlockCache::Block mid = cache.allocate(6 * kMiB);
  std::memset(mid.data, 5, 6 * kMiB);
  const CpuBlockCache::Block other = cache.allocate(2 * kMiB);  // live peak 16 MiB
  cache.free(big);
  cache.free(mid);
  // 3 MiB: no hit (6 MiB is more than a quarter above it). Mapped beside the cached 14 MiB it would make 19 MiB,
  // past the 16 MiB peak plus max(1 MiB, 14 MiB / 8) of slack: the smallest larger block serves, cut to 3 MiB.
  const CpuBlockCache::Block piece = cache.allocate(3 * kMiB);
  CHECK(piece.data == mid.data);
  CHECK(piece.size == 3 * kMiB);
  CHECK(static_cast<unsigned char*>(piece.data)[3 * kMiB - 1] == 5);  // its pages stayed: nothing faulted afresh
  std::memset(piece.data, 6, 3 * kMiB);                               // and the whole request is writable
  auto stats = cache.stats();
  CHECK(stats.reuses == 1);
  CHECK(stats.evictions == 0);
  CHECK(stats.misses == 4);
  CHECK(stats.mapped_bytes == 13 * static_cast<int64_t>(kMiB));
  CHECK(stats.cached_bytes == 8 * static_cast<int64_t>(kMiB));
  // The 8 MiB block is still cached whole: a request of its size is a hit.
  const CpuBlockCache::Block again = cache.allocate(8 * kMiB);
  CHECK(again.data == big.data);
  cache.free(again);
  cache.free(piece);
  cache.free(other);
  stats = cache.stats();
  CHECK(stats.cached_bytes == 13 * static_cast<int64_t>(kMiB));
  CHECK(stats.mapped_bytes <= stats.peak_live_bytes + std::max<int64_t>(slack, stats.churn_bytes / 8));
}

TEST_CASE("cpu block cache: the slack follows what churns, not the blocks that stay live") {
  const int64_t min_slack = 1 * kMiB;
  CpuBlockCache cache(128 << 10, min_slack);
  // A long-lived 64 MiB block (weights, moments: never freed, never asked for again) and 8 MiB that churn.
  const CpuBlockCache::Block state = cache.allocate(64 * kMiB);
  std::vector<CpuBlockCache::Block> churning;
  for (int i = 0; i < 4; ++i) churning.push_back(cache.allocate(2 * kMiB));
  for (const auto& block : churning) cache.free(block);
  CHECK(cache.stats().peak_live_bytes == 72 * static_cast<int64_t>(kMiB));
  CHECK(cache.stats().churn_bytes == 8 * static_cast<int64_t>(kMiB));
  // A 3 MiB request fits no cached block. Mapped 72 + 3 MiB would pass the peak by 3 MiB, more than the slack of
  // max(1 MiB, 8 MiB / 8): one cached block goes. (An eighth of the 72 MiB peak, 9 MiB, would have kept all four.)
  const CpuBlockCache::Block other = cache.allocate(3 * kMiB);
  const auto stats = cache.stats();
  CHECK(stats.evictions == 1);
  CHECK(stats.mapped_bytes == 73 * static_cast<int64_t>(kMiB));
  cache.free(other);
  cache.free(state);
}

TEST_CASE("cpu block cache: under random traffic mapped bytes never pass the live peak plus the slack") {
  const int64_t min_slack = 4 * kMiB;
  CpuBlockCache cache(128 << 10, min_slack);
  std::mt19937 random(0);
  std::uniform_int_distribution<size_t> size_of(128 << 10, 6 * kMiB);
  std::vector<CpuBlockCache::Block> live;
  int64_t live_bytes = 0, peak_live = 0, peak_mapped = 0, churn = 0;
  for (int i = 0; i < 2000; ++i) {
    if (!live.empty() && (live.size() > 12 || random() % 2 == 0)) {
      const size_t index = random() % live.size();
      live_bytes -= static_cast<int64_t>(live[index].size);
      churn = std::max(churn, peak_live - live_bytes);
      cache.free(live[index]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(index));
    } else {
      const size_t bytes = size_of(random);
      live.push_back(cache.allocate(bytes));
      CHECK(live.back().size >= bytes);
      CHECK(live.back().size <= CpuBlockCache::mapping_bytes(bytes) + CpuBlockCache::mapping_bytes(bytes) / 4);
      live_bytes += static_cast<int64_t>(live.back().size);
      peak_live = std::max(peak_live, live_bytes);
    }
    const auto stats = cache.stats();
    REQUIRE(stats.mapped_bytes == live_bytes + stats.cached_bytes);
    REQUIRE(stats.peak_live_bytes == peak_live);
    REQUIRE(stats.churn_bytes == churn);
    REQUIRE(stats.mapped_bytes <= peak_live + std::max(min_slack, churn / 8));
    peak_mapped = std::max(peak_mapped, stats.mapped_bytes);
    REQUIRE(stats.peak_mapped_bytes == peak_mapped);  // the most the cache has added to RSS at any moment
  }
  const auto stats = cache.stats();
  CHECK(stats.hits > 0);
  CHECK(stats.evictions > 0);
  for (const auto& block : live) cache.free(block);
}

TEST_CASE("cpu block cache: blocks of 2 MiB and more start on a 2 MiB boundary and may take huge pages") {
  if (const char* off = std::getenv("TUNE_CPU_HUGE_PAGES"); off != nullptr && std::string(off) == "0") {
    WARN("TUNE_CPU_HUGE_PAGES=0: huge pages are off in this process");
    return;
  }
  CpuBlockCache cache(128 << 10, 64 * kMiB);
  std::vector<CpuBlockCache::Block> blocks;
  for (const size_t bytes : {2 * kMiB, 5 * kMiB + 4096, 9 * kMiB + 17}) {
    const CpuBlockCache::Block block = cache.allocate(bytes);
    INFO(bytes << " bytes");
    CHECK(reinterpret_cast<uintptr_t>(block.data) % (2 * kMiB) == 0);
    CHECK(block.size == CpuBlockCache::mapping_bytes(bytes));  // the over-allocation for alignment went back
    std::memset(block.data, 1, bytes);
    if (thp_available()) CHECK(thp_eligible(block.data) == 1);
    blocks.push_back(block);
  }
  // Smaller blocks stay plain page-aligned mappings.
  const CpuBlockCache::Block small = cache.allocate(kMiB);
  CHECK(reinterpret_cast<uintptr_t>(small.data) % 4096 == 0);
  CHECK(cache.stats().mapped_bytes == static_cast<int64_t>(2 * kMiB + CpuBlockCache::mapping_bytes(5 * kMiB + 4096) +
                                                           CpuBlockCache::mapping_bytes(9 * kMiB + 17) + kMiB));
  cache.free(small);
  for (const auto& block : blocks) cache.free(block);
}
