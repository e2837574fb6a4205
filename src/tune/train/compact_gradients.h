// Parameter gradients kept in bf16 where that loses nothing: half their memory under bf16 autocast.
//
// Under bf16 autocast a weight's gradient is a bf16 product that the weight cast's backward widens to fp32, so the
// fp32 grad autograd keeps (4 bytes an element) carries 2 bytes of information. With checkpointing a step's memory
// peaks late in backward, where most of these gradients already exist (Latte-S/2 at `full`: 101 MiB of its 706 MiB
// peak; docs/BENCHMARKS.md). A hook after each parameter's gradient accumulation (autograd's post-accumulate-grad
// hook) copies the gradient to bf16 when every element fits (precision::to_bf16_if_exact) and drops the fp32 tensor;
// one that does not fit (an embedding's sum of several bf16 contributions taken in fp32) stays in param.grad(). A
// second contribution in the same step (gradient accumulation, a parameter used twice) is added to the widened first
// one in fp32, as autograd's own accumulation does, and the sum stays in fp32. AdamW::step and clip_grad_norm make
// each held gradient in fp32 again a few MiB at a time (train::HeldGradients): the update is the one over fp32
// gradients, bit for bit.
//
// For CPU float32 parameters (others are left alone), one process (data parallelism reads param.grad() in its own
// hooks), no loss scaler (fp16 unscales param.grad() in place).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tune/train/adamw.h"

namespace tune::train {

class CompactGradients final : public HeldGradients {
 public:
  // Installs the hook on each CPU float32 parameter of `params` (replacing any post-accumulate-grad hook there).
  explicit CompactGradients(const std::vector<torch::Tensor>& params);
  ~CompactGradients() override;  // removes the hooks
  CompactGradients(const CompactGradients&) = delete;
  CompactGradients& operator=(const CompactGradients&) = delete;

  bool holds(const torch::Tensor& param) const override;
  torch::Tensor make(const torch::Tensor& param) const override;
  void scale(double factor) override;
  void clear() override;

  int64_t held_count() const;  // gradients held in bf16 now
  int64_t held_bytes() const;  // their bytes
  // Called by the hook once autograd has accumulated into param.grad().
  void after_accumulation(const torch::Tensor& param);

 private:
  struct Entry {
    torch::Tensor compact;  // the bf16 gradient, while held
    bool full = false;      // this step's gradient stays in param.grad() (did not fit, or a second contribution)
  };
  std::vector<torch::Tensor> params_;
  std::unordered_map<const c10::TensorImpl*, Entry> entries_;
  std::vector<double> factors_;  // scale()'s factors since clear(), applied in order when a gradient is made
  mutable std::mutex mutex_;
};

}  // namespace tune::train
