// Classifier-free guidance: doubled batch, guided eps channels, conditional variance channels.
#include "tune/diffusion/guidance.h"

#include "tune/core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

namespace tune::diffusion {

torch::Tensor combine_classifier_free_guidance(const torch::Tensor& doubled_output, int64_t eps_channels,
                                               double scale, int64_t channel_dim) {
  if (doubled_output.dim() <= channel_dim || doubled_output.size(0) % 2 != 0 || eps_channels < 1 ||
      eps_channels > doubled_output.size(channel_dim)) {
    throw Error(fmt::format("diffusion classifier-free guidance: expected an output [2B, ...] with at least {} "
                            "channels on dim {}, got shape {}",
                            eps_channels, channel_dim, fmt::join(doubled_output.sizes(), "x")));
  }
  const int64_t half = doubled_output.size(0) / 2;
  const auto cond = doubled_output.narrow(0, 0, half);
  const auto uncond = doubled_output.narrow(0, half, half);
  const auto cond_eps = cond.narrow(channel_dim, 0, eps_channels);
  const auto uncond_eps = uncond.narrow(channel_dim, 0, eps_channels);
  const auto guided = uncond_eps + scale * (cond_eps - uncond_eps);
  const int64_t rest = doubled_output.size(channel_dim) - eps_channels;
  if (rest == 0) return guided;
  return torch::cat({guided, cond.narrow(channel_dim, eps_channels, rest)}, channel_dim);
}

ModelFn classifier_free_guidance(ConditionalModelFn model, torch::Tensor labels, torch::Tensor null_labels,
                                 double scale, int64_t channel_dim) {
  if (labels.dim() < 1) {
    throw Error(fmt::format("diffusion classifier-free guidance: labels must be [B, ...], got shape {}",
                            fmt::join(labels.sizes(), "x")));
  }
  const auto conditioning = torch::cat({labels, null_labels.to(labels.options()).expand_as(labels)}, 0);
  return [model = std::move(model), conditioning, scale, channel_dim](const torch::Tensor& x, const torch::Tensor& t) {
    if (x.dim() <= channel_dim || 2 * x.size(0) != conditioning.size(0)) {
      throw Error(fmt::format("diffusion classifier-free guidance: a batch of shape {} for {} labels (channels on dim "
                              "{})",
                              fmt::join(x.sizes(), "x"), conditioning.size(0) / 2, channel_dim));
    }
    const auto output = model(torch::cat({x, x}, 0), torch::cat({t, t}, 0), conditioning.to(x.device()));
    return combine_classifier_free_guidance(output, x.size(channel_dim), scale, channel_dim);
  };
}

}  // namespace tune::diffusion
