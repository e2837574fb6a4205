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
#include <cstring>
#include <deque>
#include <iterator>
#include <vector>
#include <mutex>

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

// Freed blocks of 32 MiB and more, kept for reuse by an allocation of exactly the same size. glibc maps every block
// above its largest mmap threshold (32 MiB) afresh and unmaps it on free, so a step that frees and re-creates the
// same large temporaries (attention scores at long sequences; checkpointing's recompute) would fault in and zero
// new pages each time. Training repeats the same sizes every step, so exact-size reuse is enough. Bounded: past
// kMaxCachedBytes the oldest blocks are really freed. Cached blocks are not tensor storage: the live and peak
// counters exclude them (RSS does not).
class LargeBlockCache {
 public:
  static constexpr int64_t kMinBytes = int64_t{32} << 20;
  static constexpr int64_t kMaxCachedBytes = int64_t{1} << 30;

  // Takes ownership of a freed block (data as handed out, its header intact); false: too small, not kept.
  bool put(void* data, int64_t size) {
    if (size < kMinBytes || size > kMaxCachedBytes) return false;
    std::vector<void*> evicted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks_.push_back({data, size});
      bytes_ += size;
      while (bytes_ > kMaxCachedBytes) {
        evicted.push_back(blocks_.front().data);
        bytes_ -= blocks_.front().size;
        blocks_.pop_front();
      }
    }
    for (void* block : evicted) release(block);
    return true;
  }

  // A cached block of exactly `size` bytes (most recently freed first), or null.
  void* take(int64_t size) {
    if (size < kMinBytes) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
      if (it->size != size) continue;
      void* data = it->data;
      bytes_ -= size;
      blocks_.erase(std::next(it).base());
      return data;
    }
    return nullptr;
  }

  static void release(void* data) {
    auto* header = reinterpret_cast<Header*>(static_cast<char*>(data) - kHeaderBytes);
    const Header record = *header;  // copy out: the original deleter frees the memory holding it
    record.original_deleter(record.original_context);
  }

 private:
  struct Block {
    void* data;
    int64_t size;
  };
  std::mutex mutex_;
  std::deque<Block> blocks_;
  int64_t bytes_ = 0;
};

LargeBlockCache& large_blocks() {
  static auto* cache = new LargeBlockCache();  // leaked on purpose, like the allocator: used until exit
  return *cache;
}

void tracked_delete(void* data) {
  if (data == nullptr) return;
  const int64_t size = reinterpret_cast<Header*>(static_cast<char*>(data) - kHeaderBytes)->size;
  g_live_bytes.fetch_sub(size, std::memory_order_relaxed);
  if (!large_blocks().put(data, size)) LargeBlockCache::release(data);
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
    if (void* reused = large_blocks().take(static_cast<int64_t>(n))) {
      add_live(static_cast<int64_t>(n));
      return {reused, reused, &tracked_delete, c10::Device(c10::DeviceType::CPU)};
    }
    c10::DataPtr original = original_->allocate(n + kHeaderBytes);
    auto* base = static_cast<char*>(original.get());
    auto* header = reinterpret_cast<Header*>(base);
    header->size = static_cast<int64_t>(n);
    header->original_deleter = original.get_deleter();
    header->original_context = original.release_context();  // ownership now lives in the header
    add_live(static_cast<int64_t>(n));
    void* data = base + kHeaderBytes;
    return {data, data, &tracked_delete, original.device()};
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
// memory in the process for reuse, as PyTorch's CUDA caching allocator does on the GPU, removes that. RSS then stays
// near the run's peak, which the tracked peak already is. Blocks above 32 MiB (glibc's maximum threshold) go through
// LargeBlockCache instead.
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
