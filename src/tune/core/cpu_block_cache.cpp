// Large CPU blocks as their own mappings, reused by size, their total bounded by the live peak (header comment).
#include "tune/core/cpu_block_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <optional>
#include <string_view>

namespace tune::memory_tracker {

namespace {

size_t page_bytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

void unmap(void* block, size_t size) { munmap(block, size); }

constexpr size_t kHugePage = size_t{2} << 20;

bool huge_pages_wanted() {
  static const bool wanted = [] {
    const char* value = std::getenv("TUNE_CPU_HUGE_PAGES");
    return value == nullptr || std::string_view(value) != "0";
  }();
  return wanted;
}

// A fresh anonymous mapping of `size` bytes (whole pages). Blocks of 2 MiB and more start on a 2 MiB boundary and
// are marked for transparent huge pages: a training step maps hundreds of MiB afresh (the cache's misses), and with
// 4 KiB pages each MiB costs 256 page faults (measured on the Latte-S/2 step, 48k faults a step, ~7% of its time in
// the kernel); with huge pages it is one fault per 2 MiB. Where THP is off ("never") the advice is ignored.
void* map_block(size_t size) {
  if (!huge_pages_wanted() || size < kHugePage) {
    return mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  void* raw = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return raw;
  // Trim the over-allocation to a 2 MiB-aligned start: the head below it and the tail after the block go back.
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) & ~(kHugePage - 1);
  const size_t head = aligned - start;
  if (head > 0) munmap(raw, head);
  if (kHugePage - head > 0) munmap(reinterpret_cast<void*>(aligned + size), kHugePage - head);
  madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

}  // namespace

CpuBlockCache::CpuBlockCache(size_t min_bytes, int64_t min_slack_bytes)
    : min_bytes_(min_bytes), min_slack_bytes_(min_slack_bytes) {}

CpuBlockCache::~CpuBlockCache() {
  for (const Block& cached : order_) unmap(cached.data, cached.size);
}

size_t CpuBlockCache::mapping_bytes(size_t bytes) {
  const size_t page = page_bytes();
  return (bytes + page - 1) / page * page;
}

int64_t CpuBlockCache::slack_bytes() const { return std::max(min_slack_bytes_, stats_.churn_bytes / 8); }

void CpuBlockCache::evict_oldest() {
  const Block oldest = order_.front();
  auto& same_size = by_size_[oldest.size];
  same_size.erase(std::find(same_size.begin(), same_size.end(), order_.begin()));
  if (same_size.empty()) by_size_.erase(oldest.size);
  order_.pop_front();
  unmap(oldest.data, oldest.size);
  stats_.cached_bytes -= static_cast<int64_t>(oldest.size);
  stats_.mapped_bytes -= static_cast<int64_t>(oldest.size);
  ++stats_.evictions;
}

CpuBlockCache::Block CpuBlockCache::take_cut_to(BySize::iterator larger, size_t size) {
  // The least recently freed block of that size.
  const Order::iterator position = larger->second.front();
  const Block block = *position;
  larger->second.erase(larger->second.begin());
  if (larger->second.empty()) by_size_.erase(larger);
  order_.erase(position);
  stats_.cached_bytes -= static_cast<int64_t>(block.size);
  if (block.size > size) {
    unmap(static_cast<char*>(block.data) + size, block.size - size);
    stats_.mapped_bytes -= static_cast<int64_t>(block.size - size);
  }
  return {block.data, size};
}

CpuBlockCache::Block CpuBlockCache::allocate(size_t bytes) {
  const size_t size = mapping_bytes(bytes);
  std::lock_guard<std::mutex> lock(mutex_);

  // A cached block up to a quarter larger serves too: a step asks for many nearly equal sizes (fp32 and bf16 copies,
  // per-layer shapes), and exact matching alone missed ~3x as often on the 8-layer Llama step.
  auto fitting = by_size_.lower_bound(size);
  if (fitting != by_size_.end() && fitting->first <= size + size / 4) {
    const Order::iterator newest = fitting->second.back();
    const Block block = *newest;
    fitting->second.pop_back();
    if (fitting->second.empty()) by_size_.erase(fitting);
    order_.erase(newest);
    stats_.cached_bytes -= static_cast<int64_t>(block.size);
    live_bytes_ += static_cast<int64_t>(block.size);
    stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, live_bytes_);
    ++stats_.hits;
    return block;
  }

  // A miss: make room first, so that mapped bytes never pass the live peak (which now includes this block) by more
  // than the slack. Blocks freed longest ago go first: the ones a repeating step is least likely to ask for next.
  // Where room must be made, the smallest cached block larger than the request (the least recently freed of its
  // size) is cut down to it first: its pages are in memory already, so the request needs no fresh mapping, no page
  // faults and no zeroing by the kernel, and the tail going back makes the room (8-layer Llama step, `full`: 545
  // misses a run instead of 623, 122 of them served so; Latte-S/2 `full`: peak RSS 881 -> 871 MiB).
  live_bytes_ += static_cast<int64_t>(size);
  stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, live_bytes_);
  const int64_t limit = stats_.peak_live_bytes + slack_bytes();
  std::optional<Block> reused;
  if (stats_.mapped_bytes + static_cast<int64_t>(size) > limit && fitting != by_size_.end()) {
    reused = take_cut_to(fitting, size);
  }
  while (!order_.empty() && stats_.mapped_bytes + (reused ? 0 : static_cast<int64_t>(size)) > limit) {
    evict_oldest();
  }
  if (reused) {
    ++stats_.misses;
    ++stats_.reuses;
    return *reused;
  }
  void* data = map_block(size);
  if (data == MAP_FAILED) {
    live_bytes_ -= static_cast<int64_t>(size);
    throw std::bad_alloc();
  }
  stats_.mapped_bytes += static_cast<int64_t>(size);
  stats_.peak_mapped_bytes = std::max(stats_.peak_mapped_bytes, stats_.mapped_bytes);
  ++stats_.misses;
  return {data, size};
}

void CpuBlockCache::free(Block block) {
  std::lock_guard<std::mutex> lock(mutex_);
  live_bytes_ -= static_cast<int64_t>(block.size);
  stats_.churn_bytes = std::max(stats_.churn_bytes, stats_.peak_live_bytes - live_bytes_);
  order_.push_back(block);
  by_size_[block.size].push_back(std::prev(order_.end()));
  stats_.cached_bytes += static_cast<int64_t>(block.size);
}

CpuBlockCache::Stats CpuBlockCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace tune::memory_tracker
