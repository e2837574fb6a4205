// Resizing and cropping training images as torchvision does for Sana (see image_transform.h).
#include "tune/data/image_transform.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>

#include "tune/core/error.h"
#include "tune/data/clip_sampling.h"
#include "tune/data/video_reader.h"

namespace tune::data {

ResizedSize short_side_resized_size(int64_t height, int64_t width, int64_t size) {
  if (height <= 0 || width <= 0 || size <= 0) {
    throw Error(fmt::format("cannot resize a {}x{} image to short side {}", width, height, size));
  }
  const int64_t short_side = std::min(height, width), long_side = std::max(height, width);
  // Python's int(size * long / short): an exact integer product, one correctly rounded division, truncation.
  const auto resized_long =
      static_cast<int64_t>(static_cast<double>(size * long_side) / static_cast<double>(short_side));
  if (height <= width) return {size, resized_long};
  return {resized_long, size};
}

torch::Tensor resize_short_side_antialiased(const torch::Tensor& image, int64_t size) {
  if (!(image.dim() == 3 || image.dim() == 4) || !image.is_floating_point()) {
    throw Error(fmt::format("resize_short_side_antialiased expects float [C, H, W] or [N, C, H, W], got {} {}",
                            std::string(c10::toString(image.scalar_type())), c10::str(image.sizes())));
  }
  const int64_t height = image.size(-2), width = image.size(-1);
  const ResizedSize resized = short_side_resized_size(height, width, size);
  if (resized.height == height && resized.width == width) return image;  // PIL returns a copy: nothing to filter
  const auto batch = image.dim() == 3 ? image.unsqueeze(0) : image;
  // The _aa kernel is PyTorch's port of PIL's separable resampling (support scaled by the shrink factor), the one
  // torchvision uses for tensors with antialias=True.
  auto out = torch::_upsample_bilinear2d_aa(batch, {resized.height, resized.width}, /*align_corners=*/false);
  return image.dim() == 3 ? out.squeeze(0) : out;
}

torch::Tensor transform_image(const torch::Tensor& rgb, int64_t size) {
  if (rgb.dim() != 3 || rgb.size(2) != 3 || rgb.scalar_type() != torch::kUInt8) {
    throw Error(fmt::format("transform_image expects uint8 [H, W, 3], got {} {}",
                            std::string(c10::toString(rgb.scalar_type())), c10::str(rgb.sizes())));
  }
  auto image = rgb.permute({2, 0, 1}).to(torch::kFloat).div_(255.0);  // ToTensor
  image = center_crop(resize_short_side_antialiased(image, size), size);
  return image.sub(0.5).div_(0.5).contiguous();
}

torch::Tensor load_training_image(const std::filesystem::path& path, int64_t size) {
  if (size < 1) throw Error(fmt::format("{}: image size must be at least 1, got {}", path.string(), size));
  torch::Tensor rgb;
  try {
    rgb = read_image(path);
  } catch (const InputError& error) {
    // The decoder speaks of videos and frames (images go through the same libav path); say what was expected.
    throw InputError(fmt::format("{}: not a readable image (expected one of {}): {}", path.string(),
                                 fmt::join(image_file_extensions(), " "), error.what()));
  }
  return transform_image(rgb, size);
}

}  // namespace tune::data
