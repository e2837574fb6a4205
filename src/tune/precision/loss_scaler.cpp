// Dynamic loss scaler with plain tensor ops (no fused AMP kernels needed).
#include "tune/precision/loss_scaler.h"

namespace tune::precision {

DynamicLossScaler::DynamicLossScaler(LossScalerOptions options) : options_(options), scale_(options.initial_scale) {}

bool DynamicLossScaler::unscale_and_check(const std::vector<torch::Tensor>& params) const {
  torch::NoGradGuard no_grad;
  bool finite = true;
  const double inverse = 1.0 / scale_;
  for (const auto& param : params) {
    auto grad = param.grad();
    if (!grad.defined()) continue;
    grad.mul_(inverse);
    // isfinite().all() per tensor keeps this to one reduction each; the sum of a tensor could overflow on its own.
    if (finite && !torch::isfinite(grad).all().item<bool>()) finite = false;
  }
  return finite;
}

void DynamicLossScaler::update(bool found_non_finite) {
  if (found_non_finite) {
    scale_ *= options_.backoff_factor;
    clean_steps_ = 0;
    ++skipped_steps_;
    return;
  }
  if (++clean_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    clean_steps_ = 0;
  }
}

void DynamicLossScaler::restore(double scale, int64_t clean_steps, int64_t skipped_steps) {
  scale_ = scale;
  clean_steps_ = clean_steps;
  skipped_steps_ = skipped_steps;
}

}  // namespace tune::precision
