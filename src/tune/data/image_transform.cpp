// Resizing and cropping training images as torchvision does for Sana (see image_transform.h).
#include "tune/data/image_transform.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
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

ResizedSize cover_resized_size(int64_t height, int64_t width, int64_t target_height, int64_t target_width) {
  if (height <= 0 || width <= 0 || target_height <= 0 || target_width <= 0) {
    throw Error(fmt::format("cannot resize a {}x{} image to cover {}x{}", width, height, target_width, target_height));
  }
  // Python's true divisions of integers, each correctly rounded, as double division of exact integers is.
  const auto divided = [](int64_t numerator, int64_t denominator) {
    return static_cast<double>(numerator) / static_cast<double>(denominator);
  };
  if (divided(target_height, height) > divided(target_width, width)) {
    return {target_height, std::max(target_width, static_cast<int64_t>(divided(width * target_height, height)))};
  }
  return {std::max(target_height, static_cast<int64_t>(divided(height * target_width, width))), target_width};
}

torch::Tensor transform_image_to(const torch::Tensor& rgb, int64_t height, int64_t width) {
  if (rgb.dim() != 3 || rgb.size(2) != 3 || rgb.scalar_type() != torch::kUInt8) {
    throw Error(fmt::format("transform_image_to expects uint8 [H, W, 3], got {} {}",
                            std::string(c10::toString(rgb.scalar_type())), c10::str(rgb.sizes())));
  }
  auto image = rgb.permute({2, 0, 1}).to(torch::kFloat).div_(255.0).unsqueeze(0);  // ToTensor, batched
  const ResizedSize resized = cover_resized_size(image.size(2), image.size(3), height, width);
  // PyTorch's port of Pillow's separable bicubic (a = -0.5, support widened by the shrink factor), one axis at a time
  // as Pillow resamples (horizontally, then vertically), each pass stored in 8 bits as Pillow stores it: rounding and
  // clipping between the passes decides what bicubic's overshoot at a sharp edge becomes (up to 4 levels otherwise).
  // A pass over an unchanged axis is the identity (the kernel is 1 at 0 and 0 at the other integers).
  const auto stored_in_8_bits = [](torch::Tensor pixels) {
    return pixels.mul_(255.0).round_().clamp_(0.0, 255.0).div_(255.0);
  };
  if (resized.width != image.size(3)) {
    image = stored_in_8_bits(
        torch::_upsample_bicubic2d_aa(image, {image.size(2), resized.width}, /*align_corners=*/false));
  }
  if (resized.height != image.size(2)) {
    image = stored_in_8_bits(
        torch::_upsample_bicubic2d_aa(image, {resized.height, resized.width}, /*align_corners=*/false));
  }
  // torchvision's CenterCrop: round((H - h) / 2), halves to even (std::nearbyint in the default rounding mode).
  const auto top = static_cast<int64_t>(std::nearbyint(static_cast<double>(resized.height - height) / 2.0));
  const auto left = static_cast<int64_t>(std::nearbyint(static_cast<double>(resized.width - width) / 2.0));
  image = image.squeeze(0).narrow(1, top, height).narrow(2, left, width);
  return image.sub(0.5).div_(0.5).contiguous();
}

torch::Tensor read_training_image(const std::filesystem::path& path) {
  try {
    return read_image(path);
  } catch (const InputError& error) {
    // The decoder speaks of videos and frames (images go through the same libav path); say what was expected.
    throw InputError(fmt::format("{}: not a readable image (expected one of {}): {}", path.string(),
                                 fmt::join(image_file_extensions(), " "), error.what()));
  }
}

torch::Tensor load_training_image(const std::filesystem::path& path, int64_t size) {
  if (size < 1) throw Error(fmt::format("{}: image size must be at least 1, got {}", path.string(), size));
  return transform_image(read_training_image(path), size);
}

}  // namespace tune::data
