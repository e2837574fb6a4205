// guidance.reference as pixels: the image file, or a video's first frame, scaled to cover the sample's size and
// centre-cropped to it (for a square, exactly as training clips are cut). The recipe takes it to its model's space.
#pragma once

#include <torch/types.h>

#include <filesystem>

namespace tune::recipes::diffusion_common {

// [1, 3, height, width] float in [-1, 1]. Throws tune::InputError naming the file when it cannot be read.
torch::Tensor read_reference_pixels(const std::filesystem::path& path, int64_t height, int64_t width);

}  // namespace tune::recipes::diffusion_common
