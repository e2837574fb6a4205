#include "tune/train/cuda_graph_step.h"

#include <string>
#include <utility>

#include "tune/core/error.h"

#if defined(TUNE_WITH_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>
#endif

namespace tune::train {

#if defined(TUNE_WITH_CUDA)

struct CudaGraphStep::State {
  State(std::function<torch::Tensor()> step_, std::function<void()> clear_, torch::Device device_, int eager_)
      : step(std::move(step_)),
        clear_gradients(std::move(clear_)),
        device(device_),
        eager_steps(eager_),
        stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index())) {}
  std::function<torch::Tensor()> step;
  std::function<void()> clear_gradients;
  torch::Device device;
  int eager_steps;
  int calls = 0;
  // Warm-up and capture run here: a graph cannot be captured on the default stream, and the warm-up's lazy
  // initialisations (cuBLAS workspaces are per stream) must happen on the stream that is captured.
  c10::cuda::CUDAStream stream;
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  torch::Tensor loss;
  int64_t capture_peak = 0;
  int64_t capture_reserved = 0;
};

namespace {

// `waiting` runs nothing more until everything queued on `queued` so far has run (the host does not wait).
void order_after(const c10::cuda::CUDAStream& waiting, const c10::cuda::CUDAStream& queued) {
  at::cuda::CUDAEvent event;
  event.record(queued);
  event.block(waiting);
}

auto device_stats(const torch::Device& device) {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
}

}  // namespace

bool cuda_graphs_available() { return true; }

CudaGraphStep::CudaGraphStep(std::function<torch::Tensor()> step, std::function<void()> clear_gradients,
                             torch::Device device, int eager_steps) {
  if (!device.is_cuda()) {
    throw UsageError("a CUDA graph of the training step needs a CUDA device, the step runs on " + device.str());
  }
  if (device.index() < 0) device = torch::Device(torch::kCUDA, c10::cuda::current_device());
  c10::cuda::CUDAGuard guard(device);
  state_ = std::make_unique<State>(std::move(step), std::move(clear_gradients), device, std::max(eager_steps, 1));
}

CudaGraphStep::~CudaGraphStep() = default;

torch::Tensor CudaGraphStep::run() {
  State& s = *state_;
  c10::cuda::CUDAGuard device_guard(s.device);
  const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(s.device.index());
  ++s.calls;
  if (s.graph) {
    s.graph->replay();  // on the caller's stream, in order with its other work
    return s.loss;
  }
  if (s.calls <= s.eager_steps) {
    order_after(s.stream, caller);
    {
      c10::cuda::CUDAStreamGuard on_side(s.stream);
      s.loss = s.step();
    }
    order_after(caller, s.stream);
    s.loss.record_stream(caller);  // the caller reads it on its stream
    s.clear_gradients();
    return s.loss;
  }
  // Capture. The gradients are unset, so the captured backward allocates them (in the graph's pool) and every
  // replay writes them afresh. Nothing is in flight and the allocator's cache is empty, so the reserved bytes that
  // capture adds are the pool's.
  s.clear_gradients();
  torch::cuda::synchronize(s.device.index());
  c10::cuda::CUDACachingAllocator::emptyCache();
  c10::cuda::CUDACachingAllocator::resetPeakStats(s.device.index());
  const int64_t reserved_before = device_stats(s.device).reserved_bytes[0].current;
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  {
    c10::cuda::CUDAStreamGuard on_side(s.stream);
    graph->capture_begin();
    try {
      s.loss = s.step();
      graph->capture_end();
    } catch (const std::exception& error) {
      // Ends the (now invalid) capture so the stream is usable again, then says what failed: an operation the
      // capture does not allow (a host synchronisation, a host-to-device copy from pageable memory, ...).
      try {
        graph->capture_end();
      } catch (...) {
      }
      const std::string what = error.what();
      throw Error("the training step could not be captured into a CUDA graph (an operation in it is not allowed "
                  "under capture; run without the CUDA graph): " + what.substr(0, what.find('\n')));
    }
  }
  const auto stats = device_stats(s.device);
  s.capture_peak = stats.allocated_bytes[0].peak;
  s.capture_reserved = stats.reserved_bytes[0].current - reserved_before;
  s.graph = std::move(graph);
  s.graph->replay();  // capture recorded the step without running it
  return s.loss;
}

bool CudaGraphStep::captured() const { return state_->graph != nullptr; }
int64_t CudaGraphStep::capture_peak_bytes() const { return state_->capture_peak; }
int64_t CudaGraphStep::capture_reserved_bytes() const { return state_->capture_reserved; }

#else  // a LibTorch without CUDA

struct CudaGraphStep::State {};

bool cuda_graphs_available() { return false; }

CudaGraphStep::CudaGraphStep(std::function<torch::Tensor()> /*step*/, std::function<void()> /*clear_gradients*/,
                             torch::Device /*device*/, int /*eager_steps*/) {
  throw UsageError("a CUDA graph of the training step needs tune built against a CUDA LibTorch "
                   "(scripts/build_cuda.sh); this build has none");
}
CudaGraphStep::~CudaGraphStep() = default;
torch::Tensor CudaGraphStep::run() { return {}; }
bool CudaGraphStep::captured() const { return false; }
int64_t CudaGraphStep::capture_peak_bytes() const { return 0; }
int64_t CudaGraphStep::capture_reserved_bytes() const { return 0; }

#endif

}  // namespace tune::train
