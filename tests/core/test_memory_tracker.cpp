// The tracking CPU allocator: live and peak counts follow tensor storage, frees are safe whichever allocator
// made the storage, and the counters hold up under concurrent allocation.
#include "tune/core/cpu_block_cache.h"
#include "tune/core/memory_tracker.h"

#include <c10/core/CPUAllocator.h>
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdlib>
#include <thread>
#include <vector>

namespace mt = tune::memory_tracker;

namespace {
constexpr int64_t kTenMegabytes = 10 * 1000 * 1000;
}

TEST_CASE("memory tracker: a 10 MB tensor raises live bytes and freeing it restores them") {
  mt::install();
  REQUIRE(mt::installed());
  const int64_t before = mt::cpu_live_bytes();
  {
    auto t = torch::empty({kTenMegabytes}, torch::kUInt8);
    CHECK(mt::cpu_live_bytes() - before >= kTenMegabytes);
    CHECK(mt::cpu_peak_bytes() >= mt::cpu_live_bytes());
  }
  CHECK(mt::cpu_live_bytes() == before);
}

TEST_CASE("memory tracker: peak keeps the maximum and reset_cpu_peak lowers it to live") {
  mt::install();
  mt::reset_cpu_peak();
  const int64_t base = mt::cpu_live_bytes();
  CHECK(mt::cpu_peak_bytes() == base);
  {
    auto a = torch::empty({2 * kTenMegabytes}, torch::kUInt8);
    auto b = torch::empty({kTenMegabytes}, torch::kUInt8);
  }
  const int64_t peak = mt::cpu_peak_bytes();
  CHECK(peak - base >= 3 * kTenMegabytes);
  {
    auto c = torch::empty({kTenMegabytes}, torch::kUInt8);  // below the earlier peak: peak unchanged
  }
  CHECK(mt::cpu_peak_bytes() == peak);
  CHECK(mt::peak_bytes(/*cuda=*/false) == peak);

  mt::reset_cpu_peak();
  CHECK(mt::cpu_peak_bytes() == mt::cpu_live_bytes());
  {
    auto d = torch::empty({kTenMegabytes}, torch::kUInt8);
  }
  CHECK(mt::cpu_peak_bytes() - base >= kTenMegabytes);
  CHECK(mt::cpu_peak_bytes() < peak);
  mt::reset_peak(/*cuda=*/false);
  CHECK(mt::cpu_peak_bytes() == mt::cpu_live_bytes());
}

TEST_CASE("memory tracker: storage allocated before install is freed safely and never counted") {
  // Within one process the first test case to run installs; this case only makes sense when it runs first
  // (as it does under CTest, one process per case), otherwise it still checks the counts stay consistent.
  const bool was_installed = mt::installed();
  auto early = torch::ones({kTenMegabytes / 4}, torch::kFloat);
  mt::install();
  const int64_t live = mt::cpu_live_bytes();
  early = torch::Tensor();  // frees through whichever deleter made it
  if (!was_installed) {
    CHECK(mt::cpu_live_bytes() == live);
  } else {
    CHECK(mt::cpu_live_bytes() == live - kTenMegabytes);
  }
  CHECK(mt::cpu_live_bytes() >= 0);
}

TEST_CASE("memory tracker: raw_allocate and raw_deallocate work through the tracker (oneDNN uses them)") {
  mt::install();
  c10::Allocator* allocator = c10::GetCPUAllocator();
  REQUIRE(allocator->raw_deleter() != nullptr);
  const int64_t before = mt::cpu_live_bytes();
  void* p = allocator->raw_allocate(4096);
  REQUIRE(p != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
  std::memset(p, 1, 4096);
  CHECK(mt::cpu_live_bytes() - before == 4096);
  allocator->raw_deallocate(p);
  CHECK(mt::cpu_live_bytes() == before);
  // A large raw block (oneDNN's scratch pads can be) comes from the block cache and goes back to it.
  const auto report_before = mt::cpu_block_cache_stats();
  void* large = allocator->raw_allocate(1 << 20);
  REQUIRE(large != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(large) % 64 == 0);
  std::memset(large, 1, 1 << 20);
  CHECK(mt::cpu_live_bytes() - before == (1 << 20));
  allocator->raw_deallocate(large);
  CHECK(mt::cpu_live_bytes() == before);
  const auto report_after = mt::cpu_block_cache_stats();
  const bool cache_on = std::getenv("TUNE_CPU_BLOCK_CACHE") == nullptr;  // off: LibTorch's allocator had it
  CHECK(report_after.hits + report_after.misses == report_before.hits + report_before.misses + (cache_on ? 1 : 0));
}

TEST_CASE("memory tracker: ordinary ops, including bf16 and convolution kernels, run under the tracker") {
  mt::install();
  const int64_t before = mt::cpu_live_bytes();
  {
    auto x = torch::randn({4, 3, 16, 16});
    auto w = torch::randn({8, 3, 3, 3});
    auto y = torch::conv2d(x, w);
    auto a = torch::randn({32, 64}).to(torch::kBFloat16);
    auto b = torch::randn({64, 16}).to(torch::kBFloat16);
    auto c = torch::matmul(a, b);
    CHECK(y.sizes() == torch::IntArrayRef({4, 8, 14, 14}));
    CHECK(torch::allclose(c.to(torch::kFloat), torch::matmul(a.to(torch::kFloat), b.to(torch::kFloat)), 1e-2,
                          1e-1));
  }
  CHECK(mt::cpu_live_bytes() == before);
}

TEST_CASE("memory tracker: two threads allocating and freeing leave the counters consistent") {
  mt::install();
  const int64_t before = mt::cpu_live_bytes();
  mt::reset_cpu_peak();
  auto work = [] {
    for (int i = 0; i < 200; ++i) {
      auto t = torch::empty({1 << 16}, torch::kUInt8);
      auto u = torch::empty({(1 << 12) + i}, torch::kUInt8);
    }
  };
  std::thread first(work);
  std::thread second(work);
  {
    auto held = torch::empty({kTenMegabytes}, torch::kUInt8);
    first.join();
    second.join();
    CHECK(mt::cpu_live_bytes() - before >= kTenMegabytes);
  }
  CHECK(mt::cpu_live_bytes() == before);
  // Both threads can hold their two tensors at once on top of the 10 MB tensor, never more.
  CHECK(mt::cpu_peak_bytes() - before >= kTenMegabytes);
  CHECK(mt::cpu_peak_bytes() - before <= kTenMegabytes + 2 * ((1 << 16) + (1 << 12) + 200));
}

TEST_CASE("memory tracker: large blocks freed and allocated again are counted exactly and hold their data") {
  // Blocks from 128 KiB up are kept for reuse after free (core/cpu_block_cache.h): the counters must still see
  // only live tensor storage, and a reused block must behave as fresh storage.
  mt::install();
  constexpr int64_t kLarge = int64_t{40} << 20;
  const int64_t before = mt::cpu_live_bytes();
  const void* first_address = nullptr;
  {
    auto a = torch::full({kLarge}, 7, torch::kUInt8);
    first_address = a.data_ptr();
    CHECK(mt::cpu_live_bytes() - before == kLarge);
  }
  CHECK(mt::cpu_live_bytes() == before);
  mt::reset_cpu_peak();
  {
    auto b = torch::zeros({kLarge}, torch::kUInt8);  // same size: served from the freed block
    CHECK(b.data_ptr() == first_address);
    CHECK(mt::cpu_live_bytes() - before == kLarge);
    CHECK(mt::cpu_peak_bytes() - before == kLarge);
    CHECK(b.sum().item<int64_t>() == 0);
    auto c = torch::ones({kLarge}, torch::kUInt8);  // a second one while the first is live: a new block
    CHECK(c.data_ptr() != b.data_ptr());
    CHECK(mt::cpu_live_bytes() - before == 2 * kLarge);
    CHECK(c.sum().item<int64_t>() == kLarge);
  }
  CHECK(mt::cpu_live_bytes() == before);
}
