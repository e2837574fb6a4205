// Sets LibTorch's intra-op thread pool size from the config (default: all cores).
#include "tune/core/threads.h"

#include <ATen/Parallel.h>

#include <thread>

namespace tune {

int configure_threads(int requested) {
  int threads = requested > 0 ? requested : static_cast<int>(std::thread::hardware_concurrency());
  if (threads <= 0) threads = 1;
  at::set_num_threads(threads);
  return at::get_num_threads();
}

}  // namespace tune
