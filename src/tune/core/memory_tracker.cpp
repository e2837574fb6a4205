// A CPU allocator that wraps LibTorch's and counts live and peak bytes of tensor storage, plus the per-device
// peak used by the step log.
#include "tune/core/memory_tracker.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>

#if defined(TUNE_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <ATen/ops/empty.h>
#endif

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>

#include "tune/core/cpu_block_cache.h"

namespace tune::memory_tracker {
namespace {

std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_peak_bytes{0};
std::atomic<bool> g_installed{false};

// Bookkeeping stored in-band, just before the bytes handed out. An out-of-band heap record as the DataPtr's
// context would be simpler, but Allocator::raw_allocate() asserts context == data, and oneDNN (ideep) allocates
// its scratch memory through GetAllocator(CPU)->raw_allocate()/raw_deallocate(), so the context must stay equal
// to the data pointer and the deleter must find the record from the data pointer alone.
struct Header {
  int64_t size;                    // requested bytes, what the counters see
  void* original_context;          // the wrapped allocator's DataPtr, released into these two fields
  c10::DeleterFnPtr original_deleter;
};
// A multiple of the CPU allocator's alignment, so the pointer after the header is as aligned as the original.
constexpr size_t kHeaderBytes = 64;
static_assert(kHeaderBytes >= sizeof(Header) && kHeaderBytes % c10::gAlignment == 0,
              "header must keep the original allocation's alignment");

void add_live(int64_t bytes) {
  const int64_t live = g_live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t peak = g_peak_bytes.load(std::memory_order_relaxed);
  // CAS loop: another thread may raise the peak between our load and store.
  while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

// Blocks from 128 KiB up come from their own mappings, reused by size and bounded by the live peak
// (cpu_block_cache.h: glibc's one untrimmed heap fragmented, so RSS followed the heap rather than the tensors).
// Smaller ones stay with LibTorch's allocator (malloc). TUNE_CPU_BLOCK_CACHE=off hands every block to LibTorch's
// allocator as before (glibc, with the settings below), for side-by-side comparisons.
constexpr size_t kBlockCacheMinBytes = size_t{128} << 10;
// The least slack over the live peak (an eighth of the peak when that is more). On the 8-layer Llama step with full
// checkpointing (live peak 174 MiB) a slack of 16 MiB missed 300 times a step, 32 MiB 200, 48 MiB 90, 64 MiB 8.
constexpr int64_t kBlockCacheSlackBytes = int64_t{64} << 20;

CpuBlockCache* block_cache() {
  // Leaked on purpose, like the allocator: tensors freed during static destruction still return blocks to it.
  static CpuBlockCache* cache = [] {
    const char* setting = std::getenv("TUNE_CPU_BLOCK_CACHE");
    const bool off = setting != nullptr && (std::string_view(setting) == "off" || std::string_view(setting) == "0");
    return off ? nullptr : new CpuBlockCache(kBlockCacheMinBytes, kBlockCacheSlackBytes);
  }();
  return cache;
}

void tracked_delete(void* data) {
  if (data == nullptr) return;
  auto* header = reinterpret_cast<Header*>(static_cast<char*>(data) - kHeaderBytes);
  const Header record = *header;  // copy out: freeing releases the memory holding it
  g_live_bytes.fetch_sub(record.size, std::memory_order_relaxed);
  if (record.original_deleter == nullptr) {
    // A block of the cache keeps its mapping's size where other blocks keep their deleter's context.
    block_cache()->free({header, reinterpret_cast<size_t>(record.original_context)});
  } else {
    record.original_deleter(record.original_context);
  }
}

class TrackingAllocator final : public c10::Allocator {
 public:
  explicit TrackingAllocator(c10::Allocator* original) : original_(original) {}

  // LibTorch 1.13 declares allocate() const, 2.3+ non-const. Defining both (without `override`) makes whichever
  // the base declares the virtual override and the other a plain overload, with no version test; clang's warning
  // about the missing `override` is therefore silenced here.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Winconsistent-missing-override"
#endif
  c10::DataPtr allocate(size_t n) const { return allocate_tracked(n); }
  c10::DataPtr allocate(size_t n) { return allocate_tracked(n); }

  // Pure virtual from LibTorch 2.3 (used by storage clone / copy-on-write); a plain member on 1.13.
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }
#if defined(__clang__)
#pragma clang diagnostic pop
#endif

  c10::DeleterFnPtr raw_deleter() const override { return &tracked_delete; }

 private:
  c10::DataPtr allocate_tracked(size_t n) const {
    Header* header = nullptr;
    CpuBlockCache* cache = block_cache();
    if (cache != nullptr && n + kHeaderBytes >= cache->min_bytes()) {
      const CpuBlockCache::Block block = cache->allocate(n + kHeaderBytes);
      header = static_cast<Header*>(block.data);
      header->original_deleter = nullptr;  // marks a block of the cache
      header->original_context = reinterpret_cast<void*>(block.size);
    } else {
      c10::DataPtr original = original_->allocate(n + kHeaderBytes);
      header = static_cast<Header*>(original.get());
      header->original_deleter = original.get_deleter();
      header->original_context = original.release_context();  // ownership now lives in the header
    }
    header->size = static_cast<int64_t>(n);
    add_live(static_cast<int64_t>(n));
    void* data = reinterpret_cast<char*>(header) + kHeaderBytes;
    return {data, data, &tracked_delete, c10::Device(c10::DeviceType::CPU)};
  }

  c10::Allocator* original_;
};

}  // namespace

namespace {

// glibc returns freed memory to the kernel eagerly: blocks above the (dynamic) mmap threshold are unmapped on
// free, and free space at the top of the heap is trimmed. Training frees and re-allocates the same large
// temporaries every step, and activation checkpointing does so even more (the recompute re-creates what the
// forward freed), so each one came back as fresh pages to fault in and zero: on an 8-layer, 1024-token bf16 Llama
// this made full checkpointing cost +78% step time instead of +31% (scripts/bench_checkpointing.sh). Keeping freed
// memory in the process for reuse, as PyTorch's CUDA caching allocator does on the GPU, removes that. Since blocks
// from 128 KiB up moved to their own cache (CpuBlockCache), this governs the small ones (and every block with
// TUNE_CPU_BLOCK_CACHE=off).
void keep_freed_memory_for_reuse() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024);
#endif
}

}  // namespace

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    keep_freed_memory_for_reuse();
    // Leaked on purpose: tensors freed during static destruction still call into it.
    static auto* tracker = new TrackingAllocator(c10::GetCPUAllocator());
    // Priority above the default registration (0) so a later default-priority SetCPUAllocator cannot silently
    // drop tracking. Storage allocated before this point keeps its original deleter and is never counted.
    c10::SetCPUAllocator(tracker, /*priority=*/1);
    g_installed.store(true);
  });
}

bool installed() { return g_installed.load(); }

int64_t cpu_live_bytes() { return g_live_bytes.load(std::memory_order_relaxed); }
int64_t cpu_peak_bytes() { return g_peak_bytes.load(std::memory_order_relaxed); }

CpuBlockCache::Stats cpu_block_cache_stats() {
  const CpuBlockCache* cache = block_cache();
  return cache == nullptr ? CpuBlockCache::Stats{} : cache->stats();
}

void reset_cpu_peak() { g_peak_bytes.store(g_live_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed); }

#if defined(TUNE_WITH_CUDA)
// The caching allocator's own counters (what torch.cuda.max_memory_allocated reports): bytes of live tensor
// storage, not the reserved pool. Index 0 of the per-pool stat arrays is StatType::AGGREGATE in every version
// (the enum moved namespaces in 2.x; its values did not). Run on an H100 with LibTorch 2.11 (scripts/build_cuda.sh);
// on a CPU-only LibTorch TUNE_WITH_CUDA is never defined.
namespace {
// The caching allocator's counters exist only once CUDA is initialised ("Invalid device argument ...: did you call
// init?" before): a command that resets the peak before its first CUDA tensor (tune infer, before loading) would
// fail. One byte allocated and freed initialises it, as any CUDA tensor would.
c10::DeviceIndex initialised_cuda_device() {
  static const bool initialised = [] {
    (void)at::empty({1}, at::TensorOptions().device(at::kCUDA).dtype(at::kByte));
    return true;
  }();
  (void)initialised;
  return c10::cuda::current_device();
}
}  // namespace

int64_t live_bytes(bool cuda) {
  if (!cuda) return cpu_live_bytes();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(initialised_cuda_device());
  return static_cast<int64_t>(stats.allocated_bytes[0].current);
}
int64_t peak_bytes(bool cuda) {
  if (!cuda) return cpu_peak_bytes();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(initialised_cuda_device());
  return static_cast<int64_t>(stats.allocated_bytes[0].peak);
}
void reset_peak(bool cuda) {
  if (!cuda) return reset_cpu_peak();
  c10::cuda::CUDACachingAllocator::resetPeakStats(initialised_cuda_device());
}
#else
// A LibTorch without CUDA runs nothing on a GPU: the CPU counters are the device's.
int64_t live_bytes(bool /*cuda*/) { return cpu_live_bytes(); }
int64_t peak_bytes(bool /*cuda*/) { return cpu_peak_bytes(); }
void reset_peak(bool /*cuda*/) { reset_cpu_peak(); }
#endif

}  // namespace tune::memory_tracker
