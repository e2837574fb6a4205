// Classifier-free guidance as a model wrapper, as Latte's forward_with_cfg: one model call on the doubled batch
// (conditional rows first, then the same x with the null class), guidance on the eps channels only.
#pragma once

#include "tune/diffusion/gaussian_diffusion.h"

#include <torch/types.h>

#include <functional>

namespace tune::diffusion {

// A class- or text-conditioned model: x [N, ...], original timesteps [N], conditioning y [N, ...] -> raw output.
using ConditionalModelFn =
    std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& y)>;

// doubled_output [2B, ...]: rows 0..B-1 conditional, B..2B-1 unconditional. Returns [B, ...]:
// the first eps_channels channels (on channel_dim) are uncond + scale * (cond - uncond), the remaining
// (variance) channels are the conditional rows' own. Scale 1 returns the conditional half.
torch::Tensor combine_classifier_free_guidance(const torch::Tensor& doubled_output, int64_t eps_channels,
                                               double scale, int64_t channel_dim = 2);

// A ModelFn for the samplers over x [B, ...]: calls model(cat[x, x], cat[t, t], cat[labels, null_labels]) once
// and combines with eps_channels = x.size(channel_dim). null_labels is expanded to labels' shape (a single null
// class id works). Equivalent to the conditional half of Latte's doubled sampling batch.
ModelFn classifier_free_guidance(ConditionalModelFn model, torch::Tensor labels, torch::Tensor null_labels,
                                 double scale, int64_t channel_dim = 2);

}  // namespace tune::diffusion
