// tune::parallel_for through LibTorch's TensorIterator (parallel.h says why).
#include "tune/core/parallel.h"

#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>
#include <torch/torch.h>

#include <algorithm>

namespace tune {

void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  const int64_t items = end - begin;
  if (items <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t threads = at::get_num_threads();
  if (threads <= 1 || items < 2 * grain || at::in_parallel_region()) {
    f(begin, end);
    return;
  }
  // As many chunks as threads, but none under the grain: chunk c is [c * items / chunks, (c + 1) * items / chunks).
  const int64_t chunks = std::min(threads, items / grain);
  // Each element of `index` is a chunk's number; for_each hands every thread a contiguous run of them.
  torch::Tensor index = torch::arange(chunks, torch::kLong);
  at::TensorIterator iterator = at::TensorIteratorConfig()
                                    .add_output(index)
                                    .resize_outputs(false)
                                    .check_all_same_dtype(false)
                                    .build();
  iterator.for_each(
      [&](char** data, const int64_t* strides, int64_t size0, int64_t size1) {
        for (int64_t outer = 0; outer < size1; ++outer) {
          const char* row = data[0] + outer * strides[1];
          for (int64_t i = 0; i < size0; ++i) {
            const int64_t chunk = *reinterpret_cast<const int64_t*>(row + i * strides[0]);
            f(begin + chunk * items / chunks, begin + (chunk + 1) * items / chunks);
          }
        }
      },
      /*grain_size=*/1);
}

}  // namespace tune
