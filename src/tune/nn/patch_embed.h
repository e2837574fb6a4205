// Image to patch tokens as timm's PatchEmbed (no norm, flatten on): a Conv2d with kernel = stride = patch size,
// registered as "proj", so parameters are proj.weight [D, C, p, p] and proj.bias [D].
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

namespace tune::nn {

struct PatchEmbedOptions {
  PatchEmbedOptions(int64_t image_size, int64_t patch_size, int64_t in_channels, int64_t embed_dim)
      : image_size_(image_size), patch_size_(patch_size), in_channels_(in_channels), embed_dim_(embed_dim) {}
  TORCH_ARG(int64_t, image_size);   // square input H = W; with strict_image_size, inputs of another size are rejected
  TORCH_ARG(int64_t, patch_size);   // must divide image_size
  TORCH_ARG(int64_t, in_channels);
  TORCH_ARG(int64_t, embed_dim);
  TORCH_ARG(bool, bias) = true;
  // timm's strict_img_size. false: any H and W that patch_size divides (diffusers' PatchEmbed, whose sin-cos table
  // the model recomputes for the input's grid).
  TORCH_ARG(bool, strict_image_size) = true;
};

class PatchEmbedImpl : public torch::nn::Module {
 public:
  explicit PatchEmbedImpl(const PatchEmbedOptions& options);
  void reset();
  // [N, C, H, W] -> [N, (H / p) * (W / p), D], patches in row-major order. Throws std::invalid_argument for a
  // wrong channel count, or a size other than image_size (strict_image_size) or not divisible by patch_size.
  torch::Tensor forward(const torch::Tensor& images);

  int64_t grid_size() const { return options.image_size() / options.patch_size(); }
  int64_t num_patches() const { return grid_size() * grid_size(); }

  PatchEmbedOptions options;
  torch::nn::Conv2d proj{nullptr};
};
TORCH_MODULE(PatchEmbed);

}  // namespace tune::nn
