// timm-style patch embedding.
#include "tune/nn/patch_embed.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

namespace tune::nn {

PatchEmbedImpl::PatchEmbedImpl(const PatchEmbedOptions& options_) : options(options_) { reset(); }

void PatchEmbedImpl::reset() {
  if (options.patch_size() <= 0 || options.image_size() % options.patch_size() != 0) {
    throw std::invalid_argument(fmt::format("PatchEmbed: patch_size {} must be positive and divide image_size {}",
                                            options.patch_size(), options.image_size()));
  }
  proj = register_module("proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(options.in_channels(), options.embed_dim(),
                                                                            options.patch_size())
                                                       .stride(options.patch_size())
                                                       .bias(options.bias())));
}

torch::Tensor PatchEmbedImpl::forward(const torch::Tensor& images) {
  if (options.strict_image_size()) {
    if (images.dim() != 4 || images.size(1) != options.in_channels() || images.size(2) != options.image_size() ||
        images.size(3) != options.image_size()) {
      throw std::invalid_argument(fmt::format("PatchEmbed: input must be [N, {}, {}, {}], got [{}]", options.in_channels(),
                                              options.image_size(), options.image_size(), fmt::join(images.sizes(), ", ")));
    }
  } else {
    const int64_t patch = options.patch_size();
    if (images.dim() != 4 || images.size(1) != options.in_channels() || images.size(2) % patch != 0 ||
        images.size(3) % patch != 0) {
      throw std::invalid_argument(fmt::format("PatchEmbed: input must be [N, {}, H, W] with H and W multiples of {}, got [{}]",
                                              options.in_channels(), patch, fmt::join(images.sizes(), ", ")));
    }
  }
  return proj(images).flatten(2).transpose(1, 2);
}

}  // namespace tune::nn
