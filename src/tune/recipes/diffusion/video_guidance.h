// Gradient-guided sampling of video diffusion models (`tune infer --grad`): an objective on the predicted clean
// video, whose gradient with respect to the noisy sample steers each step. Shared by the class-conditional and the
// text-to-video recipes; the objective lives in the model's space (VAE latents, or pixels without a VAE).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>

#include "tune/diffusion/sampler.h"

namespace tune::recipes::diffusion_common {

struct VideoGuidanceObjective {
  torch::Tensor reference;         // [C, h, w] in model space, or undefined: no reference-frame term
  int64_t reference_frame = 0;     // the sampled frame matched to `reference`
  double reference_weight = 1.0;
  double smoothness_weight = 0.1;  // squared differences of consecutive predicted frames
};

// g = -grad_x (reference_weight * |x0[:, f] - reference|^2 + smoothness_weight * sum |x0[:, i+1] - x0[:, i]|^2),
// x0 = pred_xstart [B, F, C, h, w], computed in fp32; zeros when no term depends on x.
diffusion::GuidanceFn make_video_guidance(VideoGuidanceObjective objective);

// "reference frame 0 (weight 1), temporal smoothness (weight 0.1)", for the log and --json.
std::string describe(const VideoGuidanceObjective& objective);

}  // namespace tune::recipes::diffusion_common
