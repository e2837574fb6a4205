// Sana's training image: torchvision's Resize(S) (short side to S, bilinear with antialiasing, as PIL resizes),
// CenterCrop(S), ToTensor and Normalize(0.5, 0.5), as Sana's default_train transform composes them.
// Latte's clips (clip_sampling.h) resize without antialiasing, as F.interpolate does; photos downscaled by large
// factors need it, so images take PIL's way.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>

namespace tune::data {

struct ResizedSize {
  int64_t height = 0;
  int64_t width = 0;
};

// torchvision's Resize(size) output: the short side becomes `size`, the long side int(size * long / short)
// (truncated), so a 40x30 image at 16 becomes 21x16.
ResizedSize short_side_resized_size(int64_t height, int64_t width, int64_t size);

// float [C, H, W] (or [N, C, H, W]) -> the size above, bilinear with PIL's antialiasing when shrinking (the filter
// widens with the scale); unchanged when the short side is already `size`.
torch::Tensor resize_short_side_antialiased(const torch::Tensor& image, int64_t size);

// uint8 [H, W, 3] -> float [3, size, size] in [-1, 1]: /255, resize the short side, center crop (offsets
// round((H - size) / 2) with Python's half-to-even, as torchvision's CenterCrop), (x - 0.5) / 0.5.
torch::Tensor transform_image(const torch::Tensor& rgb, int64_t size);

// The official multi-scale trainer's resize (Sana's SanaWebDatasetMS) of an image of height x width to cover
// target_height x target_width with its aspect kept: the side whose scale is larger gets its target exactly, the
// other int(side * scale) (truncated, as Python computes it), and never less than its target (an exact tie whose
// division falls just short would leave torchvision's CenterCrop padding a black row).
ResizedSize cover_resized_size(int64_t height, int64_t width, int64_t target_height, int64_t target_width);

// uint8 [H, W, 3] -> float [3, height, width] in [-1, 1], as the multi-scale trainer's transform: resized to
// cover_resized_size with Pillow's bicubic filter (antialiased when shrinking; each of its two passes stored in 8 bits
// as Pillow stores them), center crop (offsets rounded half to even), (x - 0.5) / 0.5.
torch::Tensor transform_image_to(const torch::Tensor& rgb, int64_t height, int64_t width);

// Decodes `path` (read_image) to uint8 [H, W, 3]; an unreadable image throws tune::InputError naming the file and
// the formats expected.
torch::Tensor read_training_image(const std::filesystem::path& path);

// Decodes `path` (read_image) and transforms it. An unreadable image throws tune::InputError naming the file;
// size < 1 throws tune::Error.
torch::Tensor load_training_image(const std::filesystem::path& path, int64_t size);

}  // namespace tune::data
