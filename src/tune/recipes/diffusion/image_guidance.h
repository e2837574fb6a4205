// Gradient-guided sampling of image diffusion models (`tune infer --grad`, Sana): an objective on the predicted
// clean latents whose gradient with respect to the noisy latents steers each step. The image counterpart of
// video_guidance: a reference image's latents, and spatial smoothness where the video objective has temporal.
#pragma once

#include <torch/types.h>

#include <string>

#include "tune/diffusion/sampler.h"

namespace tune::recipes::diffusion_common {

struct ImageGuidanceObjective {
  torch::Tensor reference;         // [C, h, w] latents, or undefined: no reference term
  double reference_weight = 1.0;
  double smoothness_weight = 0.1;  // squared differences of neighbouring latents, across rows and columns
};

// g = -grad_x (reference_weight * |x0 - reference|^2 + smoothness_weight * (sum |x0[.., i+1, :] - x0[.., i, :]|^2 +
// sum |x0[.., :, j+1] - x0[.., :, j]|^2)), x0 = pred_xstart [B, C, h, w], in fp32; zeros when no term depends on x.
diffusion::GuidanceFn make_image_guidance(ImageGuidanceObjective objective);

// "reference image (weight 1), spatial smoothness (weight 0.1)", for the log and --json.
std::string describe(const ImageGuidanceObjective& objective);

}  // namespace tune::recipes::diffusion_common
