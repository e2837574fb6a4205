// Latte's temporal sampling and spatial transforms for one training clip (see clip_sampling.h).
#include "tune/data/clip_sampling.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tune/core/error.h"
#include "tune/data/seeded_shuffle.h"
#include "tune/data/video_reader.h"

namespace tune::data {

TemporalWindow sample_temporal_window(int64_t total_frames, int64_t span, std::mt19937_64& generator) {
  const int64_t last_begin = std::max<int64_t>(0, total_frames - span - 1);
  TemporalWindow window;
  window.begin = static_cast<int64_t>(uniform_below(generator, static_cast<uint64_t>(last_begin) + 1));
  window.end = std::min(window.begin + span, total_frames);
  return window;
}

std::vector<int64_t> linspace_frame_indices(int64_t begin, int64_t end, int64_t num_frames) {
  std::vector<int64_t> indices;
  if (num_frames <= 0) return indices;
  const auto start = static_cast<double>(begin);
  const auto stop = static_cast<double>(end - 1);
  if (num_frames == 1) return {begin};
  // numpy: step = (stop - start) / (num - 1); y = arange(num) * step + start; y[-1] = stop; astype(int) truncates.
  const double step = (stop - start) / static_cast<double>(num_frames - 1);
  for (int64_t k = 0; k < num_frames; ++k) {
    const double value = k == num_frames - 1 ? stop : static_cast<double>(k) * step + start;
    indices.push_back(static_cast<int64_t>(std::trunc(value)));
  }
  return indices;
}

std::vector<int64_t> sample_clip_indices(int64_t total_frames, const ClipOptions& options,
                                         std::mt19937_64& generator, const std::string& source) {
  if (options.num_frames <= 0 || options.frame_interval <= 0) {
    throw UsageError(fmt::format("clip sampling needs num_frames > 0 and frame_interval > 0, got {} and {}",
                                 options.num_frames, options.frame_interval));
  }
  if (total_frames < options.num_frames) {
    throw InputError(fmt::format("{}: too short: {} frames, a clip needs at least num_frames = {}", source,
                                 total_frames, options.num_frames));
  }
  const auto window = sample_temporal_window(total_frames, options.num_frames * options.frame_interval, generator);
  return linspace_frame_indices(window.begin, window.end, options.num_frames);
}

torch::Tensor resize_short_side(const torch::Tensor& clip, int64_t image_size) {
  TORCH_CHECK(clip.dim() == 4 && clip.is_floating_point(), "resize_short_side expects float [F, C, H, W], got ",
              clip.sizes());
  const int64_t height = clip.size(2), width = clip.size(3);
  const double scale = static_cast<double>(image_size) / static_cast<double>(std::min(height, width));
  // F.interpolate's output size is floor(size * scale) in doubles; that can land one below image_size on the short
  // side (e.g. 256 / 240 * 240 < 256), where Latte's center crop would then fail: the short side is image_size.
  int64_t out_height = static_cast<int64_t>(std::floor(static_cast<double>(height) * scale));
  int64_t out_width = static_cast<int64_t>(std::floor(static_cast<double>(width) * scale));
  if (height <= width) out_height = image_size;
  if (width <= height) out_width = image_size;
  return torch::upsample_bilinear2d(clip, {out_height, out_width}, /*align_corners=*/false, scale, scale);
}

torch::Tensor center_crop(const torch::Tensor& clip, int64_t size) {
  const int64_t height = clip.size(-2), width = clip.size(-1);
  if (height < size || width < size) {
    throw Error(fmt::format("center_crop: {}x{} frames are smaller than the crop {}x{}", width, height, size, size));
  }
  // Python's round() rounds halves to even, as std::nearbyint does in the default rounding mode.
  const auto top = static_cast<int64_t>(std::nearbyint((height - size) / 2.0));
  const auto left = static_cast<int64_t>(std::nearbyint((width - size) / 2.0));
  return clip.narrow(-2, top, size).narrow(-1, left, size);
}

torch::Tensor transform_clip(const torch::Tensor& frames, int64_t image_size, bool flip) {
  TORCH_CHECK(frames.dim() == 4 && frames.size(3) == 3 && frames.scalar_type() == torch::kUInt8,
              "transform_clip expects uint8 [F, H, W, 3], got ", frames.sizes(), " ", frames.scalar_type());
  auto clip = frames.permute({0, 3, 1, 2}).to(torch::kFloat).div_(255.0);  // Latte's ToTensorVideo
  if (flip) clip = clip.flip({-1});
  clip = center_crop(resize_short_side(clip, image_size), image_size);
  return clip.sub(0.5).div_(0.5).contiguous();
}

torch::Tensor transform_frames_to(const torch::Tensor& frames, int64_t height, int64_t width) {
  if (height == width) return transform_clip(frames, height, /*flip=*/false);
  TORCH_CHECK(frames.dim() == 4 && frames.size(3) == 3 && frames.scalar_type() == torch::kUInt8,
              "transform_frames_to expects uint8 [F, H, W, 3], got ", frames.sizes(), " ", frames.scalar_type());
  const auto clip = frames.permute({0, 3, 1, 2}).to(torch::kFloat).div_(255.0);
  const int64_t in_height = clip.size(2), in_width = clip.size(3);
  const double scale = std::max(static_cast<double>(height) / static_cast<double>(in_height),
                                static_cast<double>(width) / static_cast<double>(in_width));
  // The binding side is exact; the other is at least its target (floor of a product that can fall just short).
  const bool height_binds = static_cast<double>(height) / static_cast<double>(in_height) >= 
                            static_cast<double>(width) / static_cast<double>(in_width);
  const int64_t out_height =
      height_binds ? height : std::max(height, static_cast<int64_t>(std::floor(static_cast<double>(in_height) * scale)));
  const int64_t out_width =
      height_binds ? std::max(width, static_cast<int64_t>(std::floor(static_cast<double>(in_width) * scale))) : width;
  const auto resized = torch::upsample_bilinear2d(clip, {out_height, out_width}, /*align_corners=*/false);
  const auto top = static_cast<int64_t>(std::nearbyint((out_height - height) / 2.0));
  const auto left = static_cast<int64_t>(std::nearbyint((out_width - width) / 2.0));
  return resized.narrow(2, top, height).narrow(3, left, width).sub(0.5).div_(0.5).contiguous();
}

torch::Tensor sample_clip(VideoSource& video, const ClipOptions& options, std::mt19937_64& generator) {
  const auto indices = sample_clip_indices(video.frame_count(), options, generator, video.path().string());
  const bool flip = options.random_flip && uniform_below(generator, 2) == 1;
  return transform_clip(video.read_frames(indices), options.image_size, flip);
}

}  // namespace tune::data
