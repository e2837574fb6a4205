// Resolution binning as diffusers' SanaPipeline does it by default (use_resolution_binning=True): a requested size
// is replaced by the nearest entry of a fixed table of sizes (by the ratio height / width), the image is generated
// there, and the decoded image is scaled to cover the requested size and centre-cropped to it. The tables are the
// published constants the pipelines use (ASPECT_RATIO_512_BIN / 1024 from PixArt-alpha, 2048 from PixArt-Sigma,
// 4096 from Sana), chosen by the transformer's sample_size: 16, 32, 64, 128 latents.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace tune::diffusion {

struct BinnedSize {
  int64_t height = 0, width = 0;  // pixels
  double ratio = 1.0;             // the table's key: its nominal height / width
};

// The table entry for (height, width) (the first of the keys nearest to height / width, as Python's min), or nullopt
// when no table belongs to `sample_size` (SanaPipeline refuses binning there with "Invalid sample size").
std::optional<BinnedSize> aspect_ratio_bin(int64_t sample_size, int64_t height, int64_t width);

// The official trainer's multi-scale buckets (Sana's model.multi_scale with data.aspect_ratio_type ASPECT_RATIO_R):
// PixArt-Sigma's 40-key table, whose ASPECT_RATIO_256 / 512 / 1024 / 2048 / 4096 are ASPECT_RATIO_2048_BIN's sizes
// scaled by R / 2048. tune scales it to any R and rounds each side down to a multiple of `unit` (the VAE's factor x
// the transformer's patch size; at least one unit), so that every bucket is a whole number of patches: the official
// 512-4096 tables are unchanged for DC-AE's 32, ASPECT_RATIO_256's 144 becomes 128. Sides are in pixels.
std::vector<BinnedSize> training_buckets(int64_t resolution, int64_t unit);

// The bucket of an image of height x width: the first of the keys nearest to height / width (the official
// get_closest_ratio, Python's min over the table in its order).
BinnedSize nearest_bucket(const std::vector<BinnedSize>& buckets, int64_t height, int64_t width);

// diffusers' VaeImageProcessor.resize_and_crop_tensor: images [N, C, H, W] scaled by max(height / H, width / W)
// (sizes truncated to integers, bilinear without corner alignment) and centre-cropped (offsets floor-halved) to
// height x width. Unchanged when the size already matches.
torch::Tensor resize_and_crop(const torch::Tensor& images, int64_t height, int64_t width);

}  // namespace tune::diffusion
