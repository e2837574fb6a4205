#include "tune/recipes/diffusion/video_guidance.h"

#include <fmt/format.h>
#include <torch/autograd.h>

namespace tune::recipes::diffusion_common {

diffusion::GuidanceFn make_video_guidance(VideoGuidanceObjective objective) {
  // log p(y | x_t) up to a constant: minus the weighted objective on the predicted clean video.
  return [objective = std::move(objective)](const torch::Tensor& x, const torch::Tensor&,
                                            const torch::Tensor& pred_xstart) {
    torch::Tensor value = torch::zeros({}, pred_xstart.options().dtype(torch::kFloat32));
    if (objective.reference.defined() && objective.reference_weight != 0) {
      const auto frame = pred_xstart.select(1, objective.reference_frame).to(torch::kFloat32);
      value = value + objective.reference_weight * (frame - objective.reference).pow(2).sum();
    }
    if (objective.smoothness_weight != 0 && pred_xstart.size(1) > 1) {
      const auto steps = (pred_xstart.slice(1, 1) - pred_xstart.slice(1, 0, -1)).to(torch::kFloat32);
      value = value + objective.smoothness_weight * steps.pow(2).sum();
    }
    if (!value.requires_grad()) return torch::zeros_like(x);
    return -torch::autograd::grad({value}, {x})[0];
  };
}

std::string describe(const VideoGuidanceObjective& objective) {
  const bool reference = objective.reference.defined();
  return fmt::format("reference frame {} (weight {}), temporal smoothness (weight {})",
                     reference ? std::to_string(objective.reference_frame) : "none",
                     reference ? objective.reference_weight : 0.0, objective.smoothness_weight);
}

}  // namespace tune::recipes::diffusion_common
