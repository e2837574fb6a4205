#include "tune/recipes/diffusion/image_guidance.h"

#include <fmt/format.h>
#include <torch/autograd.h>

namespace tune::recipes::diffusion_common {

diffusion::GuidanceFn make_image_guidance(ImageGuidanceObjective objective) {
  // log p(y | x_t) up to a constant: minus the weighted objective on the predicted clean latents.
  return [objective = std::move(objective)](const torch::Tensor& x, const torch::Tensor&,
                                            const torch::Tensor& pred_xstart) {
    const auto x0 = pred_xstart.to(torch::kFloat32);
    torch::Tensor value = torch::zeros({}, x0.options());
    if (objective.reference.defined() && objective.reference_weight != 0) {
      value = value + objective.reference_weight * (x0 - objective.reference.to(x0.device())).pow(2).sum();
    }
    if (objective.smoothness_weight != 0) {
      const auto rows = x0.slice(-2, 1) - x0.slice(-2, 0, -1);
      const auto columns = x0.slice(-1, 1) - x0.slice(-1, 0, -1);
      value = value + objective.smoothness_weight * (rows.pow(2).sum() + columns.pow(2).sum());
    }
    if (!value.requires_grad()) return torch::zeros_like(x);
    return -torch::autograd::grad({value}, {x})[0];
  };
}

std::string describe(const ImageGuidanceObjective& objective) {
  return fmt::format("reference image {}, spatial smoothness (weight {})",
                     objective.reference.defined() ? fmt::format("(weight {})", objective.reference_weight)
                                                   : std::string("none"),
                     objective.smoothness_weight);
}

}  // namespace tune::recipes::diffusion_common
