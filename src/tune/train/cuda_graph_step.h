// A whole training step (forward, backward, optimizer update) captured once into a CUDA graph and replayed: one
// launch per step instead of thousands, for steps where the host's kernel launches, not the GPU, set the pace
// (small batches, LoRA). What the captured step may do is what any CUDA graph allows:
//   - the same shapes every step, its inputs in the same device tensors (copy new data into them between steps);
//   - no host synchronisation inside (no .item(), no host-to-device copy from pageable memory);
//   - no device randomness (the checkpointing recompute cannot restore a generator's state under capture);
//   - hyperparameters the host passes by value (the learning rate handed to AdamW::step) are frozen at capture;
//   - host-side bookkeeping inside the step (AdamW's per-parameter step counts) runs once, at capture: the
//     device-side counts that the fused kernel reads advance on every replay.
// Gradients are written, not accumulated, by every replay (they were unset when the step was captured).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>

namespace tune::train {

// Whether this LibTorch can capture CUDA graphs (built against CUDA); on a CPU-only build CudaGraphStep's
// constructor throws a UsageError saying so.
bool cuda_graphs_available();

class CudaGraphStep {
 public:
  // `step` runs one training step on `device` (a CUDA device) and returns its loss (a device tensor);
  // `clear_gradients` sets the trained parameters' gradients to undefined (AdamW::zero_grad). The first
  // `eager_steps` calls of run() run `step` eagerly on a side stream (warm-up: lazy initialisation, cuBLAS
  // workspaces, the optimizer's state), the next captures it and replays it, every later call replays it.
  CudaGraphStep(std::function<torch::Tensor()> step, std::function<void()> clear_gradients, torch::Device device,
                int eager_steps = 2);
  ~CudaGraphStep();
  CudaGraphStep(const CudaGraphStep&) = delete;
  CudaGraphStep& operator=(const CudaGraphStep&) = delete;

  // Runs one step (every call is exactly one update); returns the loss, valid until the next call (after capture
  // the same device tensor every time). Does not wait for the device.
  torch::Tensor run();

  bool captured() const;
  // The caching allocator's peak of allocated bytes while the step was captured: the step's working set as it is
  // laid out in the graph's private pool, which stays reserved between replays (replays allocate nothing, so the
  // allocator's counters do not move while they run). 0 before capture.
  int64_t capture_peak_bytes() const;
  // Bytes the caching allocator reserved for the graph's pool at capture (its segments; >= the working set).
  int64_t capture_reserved_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tune::train
