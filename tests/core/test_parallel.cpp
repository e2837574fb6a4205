// tune::parallel_for (core/parallel.h): every item once, on several of LibTorch's intra-op threads when it has them,
// serially inside a parallel region, and exceptions reach the caller.
#include <catch2/catch.hpp>
#include <ATen/Parallel.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

#include "tune/core/parallel.h"

namespace {

// Restores LibTorch's intra-op thread count.
struct ThreadCount {
  explicit ThreadCount(int threads) : saved(at::get_num_threads()) { at::set_num_threads(threads); }
  ~ThreadCount() { at::set_num_threads(saved); }
  int saved;
};

}  // namespace

TEST_CASE("parallel_for covers every item exactly once, in chunks of at least the grain") {
  for (const int threads : {1, 2, 4}) {
    const ThreadCount count(threads);
    for (const auto& range : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {0, 1000, 1}, {5, 1005, 300}, {-7, 93, 1000}, {0, 3, 1}, {10, 10, 1}, {0, 100000, 64}}) {
      const int64_t begin = std::get<0>(range), end = std::get<1>(range), grain = std::get<2>(range);
      INFO(threads << " threads, [" << begin << ", " << end << "), grain " << grain);
      std::vector<std::atomic<int>> seen(static_cast<size_t>(std::max<int64_t>(end - begin, 0)));
      std::atomic<int> calls{0}, out_of_range{0};
      std::atomic<int64_t> smallest{end - begin};
      // No Catch assertions on the worker threads (Catch2 is not thread-safe): counted, checked after.
      tune::parallel_for(begin, end, grain, [&](int64_t chunk_begin, int64_t chunk_end) {
        ++calls;
        if (chunk_begin < begin || chunk_begin >= chunk_end || chunk_end > end) {
          ++out_of_range;
          return;
        }
        int64_t current = smallest.load();
        while (chunk_end - chunk_begin < current && !smallest.compare_exchange_weak(current, chunk_end - chunk_begin)) {
        }
        for (int64_t i = chunk_begin; i < chunk_end; ++i) ++seen[static_cast<size_t>(i - begin)];
      });
      CHECK(out_of_range.load() == 0);
      for (const auto& item : seen) CHECK(item.load() == 1);
      CHECK(calls.load() <= threads);
      if (end - begin >= 2 * grain && calls.load() > 1) CHECK(smallest.load() >= grain);
      if (end == begin) CHECK(calls.load() == 0);
    }
  }
}

TEST_CASE("parallel_for runs on several threads when LibTorch has them, once inside a parallel region") {
  const ThreadCount count(2);
  std::mutex mutex;
  std::set<std::thread::id> ids;
  tune::parallel_for(0, 1 << 20, 1, [&](int64_t, int64_t) {
    // Long enough that one thread cannot take both chunks before the other starts.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::lock_guard<std::mutex> lock(mutex);
    ids.insert(std::this_thread::get_id());
  });
  CHECK(ids.size() == 2);
  // Nested: the inner loop is one call on the outer chunk's thread.
  std::atomic<int> inner_calls{0};
  tune::parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    tune::parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) {
      if (b == 0 && e == 1000) ++inner_calls;
    });
  });
  CHECK(inner_calls.load() == 2);
}

TEST_CASE("parallel_for passes an exception from a chunk to the caller") {
  const ThreadCount count(2);
  CHECK_THROWS_WITH(tune::parallel_for(0, 100, 1,
                                       [](int64_t chunk_begin, int64_t) {
                                         if (chunk_begin > 0) throw std::runtime_error("chunk failed");
                                       }),
                    "chunk failed");
}
