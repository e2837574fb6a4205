// Dynamic loss scaling for fp16 training: the loss is multiplied by a scale before backward so small gradients
// survive fp16; gradients are unscaled before clipping; a step whose gradients hold inf/NaN is skipped and the
// scale halved; after `growth_interval` clean steps the scale doubles (torch.cuda.amp.GradScaler semantics).
// Written with plain tensor ops: Debian's LibTorch 1.13 has no fused CPU kernels for this.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace tune::precision {

struct LossScalerOptions {
  double initial_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps before the scale grows
};

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(LossScalerOptions options = {});

  torch::Tensor scale(const torch::Tensor& loss) const { return loss * scale_; }
  // Divides every defined gradient by the scale in place; returns false if any gradient holds inf or NaN.
  bool unscale_and_check(const std::vector<torch::Tensor>& params) const;
  // Records the outcome of a step: backs off after an overflow, grows after growth_interval clean steps.
  void update(bool found_non_finite);

  double current_scale() const { return scale_; }
  int64_t clean_steps() const { return clean_steps_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  // Restores the state saved in a checkpoint.
  void restore(double scale, int64_t clean_steps, int64_t skipped_steps);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t clean_steps_ = 0;
  int64_t skipped_steps_ = 0;
};

}  // namespace tune::precision
