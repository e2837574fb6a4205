// finish_step: the guarded update at the end of every training step.
#include "tune/train/optimizer_step.h"

#include <cmath>

#include "tune/core/error.h"

namespace tune::train {

StepOutcome finish_step(const std::vector<torch::Tensor>& params, AdamW& optimizer,
                        precision::DynamicLossScaler* scaler, double max_norm, double lr, bool loss_is_finite,
                        const std::function<double(double)>& sum_over_ranks, HeldGradients* held) {
  StepOutcome outcome;
  bool finite = loss_is_finite;
  if (scaler != nullptr && held != nullptr) {
    throw Error("finish_step: held gradients with a loss scaler (the scaler unscales param.grad() in place)");
  }
  if (scaler != nullptr) {
    outcome.loss_scale = scaler->current_scale();
    finite = scaler->unscale_and_check(params) && finite;
  }
  // Leaves non-finite gradients unclipped.
  outcome.grad_norm = clip_grad_norm(params, max_norm, sum_over_ranks, held);
  finite = finite && std::isfinite(outcome.grad_norm);
  if (finite) optimizer.step(lr, held);
  if (scaler != nullptr) scaler->update(!finite);
  optimizer.zero_grad();
  if (held != nullptr) held->clear();
  outcome.applied = finite;
  return outcome;
}

}  // namespace tune::train
