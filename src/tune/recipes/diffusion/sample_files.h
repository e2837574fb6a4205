// Writing sampled videos and images: the numbered file names of several samples and the formats `tune infer --out`
// takes (.mp4 / .gif, .png / .jpg / .jpeg through FFmpeg, .safetensors for the raw decoded tensor). Shared by the
// diffusion recipes.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <utility>
#include <string>
#include <vector>

namespace tune::recipes::diffusion_common {

// `out` itself for a single sample; out-<index>.<ext> for several.
std::filesystem::path numbered_path(const std::filesystem::path& out, int64_t index, int64_t count);

// video [F, 3, H, W] in [-1, 1]. A .safetensors file holds it as "video" (float32), then the `extra` tensors
// (e.g. the class label); any other extension is encoded as a video at `fps`. Creates the parent directory.
void write_video_sample(const std::filesystem::path& path, const torch::Tensor& video, int64_t fps,
                        const std::vector<std::pair<std::string, torch::Tensor>>& extra = {});

// image [3, H, W] in [-1, 1] (the VAE's range). A .safetensors file holds it as "image" (float32), then the `extra`
// tensors (e.g. the final latents); .png / .jpg / .jpeg are encoded (data::write_image: the same rounding as video
// frames); any other extension throws tune::UsageError listing these four. Creates the parent directory.
void write_image_sample(const std::filesystem::path& path, const torch::Tensor& image,
                        const std::vector<std::pair<std::string, torch::Tensor>>& extra = {});

}  // namespace tune::recipes::diffusion_common
