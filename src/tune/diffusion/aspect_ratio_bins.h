// Resolution binning as diffusers' SanaPipeline does it by default (use_resolution_binning=True): a requested size
// is replaced by the nearest entry of a fixed table of sizes (by the ratio height / width), the image is generated
// there, and the decoded image is scaled to cover the requested size and centre-cropped to it. The tables are the
// published constants the pipelines use (ASPECT_RATIO_512_BIN / 1024 from PixArt-alpha, 2048 from PixArt-Sigma,
// 4096 from Sana), chosen by the transformer's sample_size: 16, 32, 64, 128 latents.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>

namespace tune::diffusion {

struct BinnedSize {
  int64_t height = 0, width = 0;  // pixels
  double ratio = 1.0;             // the table's key: its nominal height / width
};

// The table entry for (height, width) (the first of the keys nearest to height / width, as Python's min), or nullopt
// when no table belongs to `sample_size` (SanaPipeline refuses binning there with "Invalid sample size").
std::optional<BinnedSize> aspect_ratio_bin(int64_t sample_size, int64_t height, int64_t width);

// diffusers' VaeImageProcessor.resize_and_crop_tensor: images [N, C, H, W] scaled by max(height / H, width / W)
// (sizes truncated to integers, bilinear without corner alignment) and centre-cropped (offsets floor-halved) to
// height x width. Unchanged when the size already matches.
torch::Tensor resize_and_crop(const torch::Tensor& images, int64_t height, int64_t width);

}  // namespace tune::diffusion
