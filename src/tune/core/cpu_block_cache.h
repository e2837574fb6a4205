// Large CPU blocks mapped from the kernel directly and kept after free for reuse by an allocation of the same
// size, with the mapped total bounded by the largest live total seen so far plus a small slack.
//
// Why not glibc's heap: training frees and re-creates the same large temporaries every step (and activation
// checkpointing's recompute re-creates what forward freed), in an order that differs between forward, backward and
// the optimizer. Kept in one heap that is never trimmed (which fresh page faults made necessary, memory_tracker.cpp),
// those blocks fragment it: on issue 22's 8-layer Llama step with full checkpointing glibc's heap held 387 MB of
// address space for a tracked tensor peak of 183 MB, and peak RSS followed the heap, not the tensors. Here every
// block is its own mapping, so nothing fragments; a freed block waits in the cache for the next allocation of its
// size (a training step asks for the same sizes again, so most requests are hits and fault in nothing), and a miss
// first unmaps the least recently freed blocks until mapping the new one keeps the total within the live peak so far
// plus a slack (or, before that, cuts the smallest larger cached block down to the request, whose pages are in
// memory already). So RSS from large tensors stays within one slack of their peak. The slack scales with what churns,
// not with the peak: an eighth of the most the live total has fallen below its peak (at least 64 MiB). Weights,
// gradients' buffers and optimizer moments stay live all run and are never asked for again, so spare blocks beside
// them buy nothing; only the activations and temporaries freed and re-made each step need room to be matched by
// size. (With an eighth of the whole peak, Latte-S/2's step kept 138 MiB of spare blocks over a 1.1 GB peak of which
// 620 MiB is such state; an eighth of its churn keeps 76 MiB, with no measurable change in step time:
// docs/BENCHMARKS.md, session 35.)
// Blocks of 2 MiB and more are mapped on a 2 MiB boundary and advised for transparent huge pages (MADV_HUGEPAGE;
// TUNE_CPU_HUGE_PAGES=0 turns that off): the misses a step still has then fault in 2 MiB at a time, not 4 KiB (on the
// Latte-S/2 step 13k page faults a step instead of 48k).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <map>
#include <vector>

namespace tune::memory_tracker {

class CpuBlockCache {
 public:
  struct Stats {
    int64_t mapped_bytes = 0;       // live and cached blocks together: what this cache adds to RSS at most
    int64_t peak_mapped_bytes = 0;  // the most mapped at once so far
    int64_t cached_bytes = 0;       // freed blocks kept for reuse
    int64_t peak_live_bytes = 0;    // the largest total of live blocks so far (what bounds mapped_bytes)
    int64_t churn_bytes = 0;        // the most the live total has fallen below that peak: what a step frees and re-makes
    int64_t hits = 0, misses = 0, evictions = 0;
    int64_t reuses = 0;  // misses served by cutting a larger cached block down where room had to be made
  };

  // Blocks of at least `min_bytes` are this cache's (smaller ones stay with malloc, which packs them well);
  // `min_slack_bytes`: how far the mapped total may exceed the live peak before cached blocks are unmapped, or an
  // eighth of Stats::churn_bytes when that is more.
  CpuBlockCache(size_t min_bytes, int64_t min_slack_bytes);
  CpuBlockCache(const CpuBlockCache&) = delete;
  CpuBlockCache& operator=(const CpuBlockCache&) = delete;
  ~CpuBlockCache();  // unmaps cached blocks; live ones must have been freed

  size_t min_bytes() const { return min_bytes_; }
  // The whole mapping's size for a request of `bytes` (whole pages).
  static size_t mapping_bytes(size_t bytes);

  struct Block {
    void* data;
    size_t size;  // the mapping's bytes: at least the request, at most a quarter more (a reused larger block)
  };
  // A page-aligned block of at least `bytes` bytes (>= min_bytes()): a cached one of the smallest size from the
  // request's to a quarter above it; else, where mapping it would pass the bound, the smallest larger cached block
  // cut down to the request (its pages already in memory); else a fresh mapping (first unmapping the blocks freed
  // longest ago as far as the bound needs). Throws std::bad_alloc when the kernel refuses one.
  Block allocate(size_t bytes);
  // Gives back a block allocate() returned.
  void free(Block block);

  Stats stats() const;

 private:
  using Order = std::list<Block>;                                   // least recently freed first
  using BySize = std::map<size_t, std::vector<Order::iterator>>;  // each size's cached blocks, newest last

  void evict_oldest();         // mutex_ held
  // mutex_ held: the least recently freed block of `larger`'s size (>= size), its tail past `size` unmapped.
  Block take_cut_to(BySize::iterator larger, size_t size);
  int64_t slack_bytes() const;  // mutex_ held: how far mapped bytes may pass the live peak

  const size_t min_bytes_;
  const int64_t min_slack_bytes_;
  mutable std::mutex mutex_;
  Order order_;
  BySize by_size_;
  int64_t live_bytes_ = 0;
  Stats stats_;
};

// The statistics of the process's cache, the one the tracking CPU allocator (memory_tracker.h) hands large blocks
// from; all zero when TUNE_CPU_BLOCK_CACHE=off. Defined beside that allocator.
CpuBlockCache::Stats cpu_block_cache_stats();

}  // namespace tune::memory_tracker
