// The end of a training step, shared by every recipe: unscale (fp16), check for inf/NaN, clip, update, zero.
#pragma once

#include <torch/types.h>

#include <functional>
#include <vector>

#include "tune/precision/loss_scaler.h"
#include "tune/train/adamw.h"

namespace tune::train {

struct StepOutcome {
  bool applied = false;     // false: the update was skipped (non-finite loss or gradients)
  double grad_norm = 0.0;   // before clipping, after unscaling
  double loss_scale = 1.0;  // the scale used for this step (1 without a scaler)
};

// With a scaler, gradients are unscaled first and the scaler is updated with the outcome (an overflow halves the
// scale). Gradients are clipped to max_norm (<= 0: measured only). The optimizer steps only when the loss and every
// gradient are finite. Gradients are always cleared afterwards. `sum_over_ranks`: for gradients sharded over ranks
// (clip_grad_norm); a non-finite gradient on any rank makes the global norm non-finite, so every rank skips alike.
// `held`: gradients held outside param.grad() (train/compact_gradients.h; not with a scaler), cleared too.
StepOutcome finish_step(const std::vector<torch::Tensor>& params, AdamW& optimizer,
                        precision::DynamicLossScaler* scaler, double max_norm, double lr, bool loss_is_finite,
                        const std::function<double(double)>& sum_over_ranks = {}, HeldGradients* held = nullptr);

}  // namespace tune::train
