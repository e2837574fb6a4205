// The aspect-ratio tables of diffusers' PixArt and Sana pipelines, and the resize back (aspect_ratio_bins.h).
#include "tune/diffusion/aspect_ratio_bins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>

namespace tune::diffusion {
namespace {

struct Entry {
  const char* key;  // the table's key as published (a rounded ratio, not always height / width exactly)
  int64_t height, width;
};

// ASPECT_RATIO_512_BIN; ASPECT_RATIO_1024_BIN is the same keys at twice the sizes.
constexpr Entry kBin512[] = {
    {"0.25", 256, 1024}, {"0.28", 256, 928}, {"0.32", 288, 896}, {"0.33", 288, 864}, {"0.35", 288, 832},
    {"0.4", 320, 800},   {"0.42", 320, 768}, {"0.48", 352, 736}, {"0.5", 352, 704},  {"0.52", 352, 672},
    {"0.57", 384, 672},  {"0.6", 384, 640},  {"0.68", 416, 608}, {"0.72", 416, 576}, {"0.78", 448, 576},
    {"0.82", 448, 544},  {"0.88", 480, 544}, {"0.94", 480, 512}, {"1.0", 512, 512},  {"1.07", 512, 480},
    {"1.13", 544, 480},  {"1.21", 544, 448}, {"1.29", 576, 448}, {"1.38", 576, 416}, {"1.46", 608, 416},
    {"1.67", 640, 384},  {"1.75", 672, 384}, {"2.0", 704, 352},  {"2.09", 736, 352}, {"2.4", 768, 320},
    {"2.5", 800, 320},   {"3.0", 864, 288},  {"4.0", 1024, 256}};

// ASPECT_RATIO_2048_BIN; ASPECT_RATIO_4096_BIN is the same keys at twice the sizes.
constexpr Entry kBin2048[] = {
    {"0.25", 1024, 4096}, {"0.26", 1024, 3968}, {"0.27", 1024, 3840}, {"0.28", 1024, 3712}, {"0.32", 1152, 3584},
    {"0.33", 1152, 3456}, {"0.35", 1152, 3328}, {"0.4", 1280, 3200},  {"0.42", 1280, 3072}, {"0.48", 1408, 2944},
    {"0.5", 1408, 2816},  {"0.52", 1408, 2688}, {"0.57", 1536, 2688}, {"0.6", 1536, 2560},  {"0.68", 1664, 2432},
    {"0.72", 1664, 2304}, {"0.78", 1792, 2304}, {"0.82", 1792, 2176}, {"0.88", 1920, 2176}, {"0.94", 1920, 2048},
    {"1.0", 2048, 2048},  {"1.07", 2048, 1920}, {"1.13", 2176, 1920}, {"1.21", 2176, 1792}, {"1.29", 2304, 1792},
    {"1.38", 2304, 1664}, {"1.46", 2432, 1664}, {"1.67", 2560, 1536}, {"1.75", 2688, 1536}, {"2.0", 2816, 1408},
    {"2.09", 2944, 1408}, {"2.4", 3072, 1280},  {"2.5", 3200, 1280},  {"2.89", 3328, 1152}, {"3.0", 3456, 1152},
    {"3.11", 3584, 1152}, {"3.62", 3712, 1024}, {"3.75", 3840, 1024}, {"3.88", 3968, 1024}, {"4.0", 4096, 1024}};

template <size_t N>
std::vector<BinnedSize> scaled(const Entry (&table)[N], int64_t numerator, int64_t denominator, int64_t unit) {
  std::vector<BinnedSize> sizes;
  sizes.reserve(N);
  for (const Entry& entry : table) {
    // Integer arithmetic: the official tables' sizes exactly, a floor to the unit elsewhere. The key as float(key).
    const auto side = [&](int64_t pixels) {
      return std::max<int64_t>(1, pixels * numerator / (denominator * unit)) * unit;
    };
    sizes.push_back({side(entry.height), side(entry.width), std::strtod(entry.key, nullptr)});
  }
  return sizes;
}

}  // namespace

BinnedSize nearest_bucket(const std::vector<BinnedSize>& buckets, int64_t height, int64_t width) {
  TORCH_CHECK(!buckets.empty(), "nearest_bucket: no buckets to choose from");
  const double ratio = static_cast<double>(height) / static_cast<double>(width);
  const BinnedSize* best = nullptr;
  double best_distance = 0;
  for (const BinnedSize& bucket : buckets) {
    const double distance = std::abs(bucket.ratio - ratio);
    if (best == nullptr || distance < best_distance) {  // ties keep the first, as Python's min
      best = &bucket;
      best_distance = distance;
    }
  }
  return *best;
}

std::optional<BinnedSize> aspect_ratio_bin(int64_t sample_size, int64_t height, int64_t width) {
  switch (sample_size) {
    case 16: return nearest_bucket(scaled(kBin512, 1, 1, 1), height, width);
    case 32: return nearest_bucket(scaled(kBin512, 2, 1, 1), height, width);
    case 64: return nearest_bucket(scaled(kBin2048, 1, 1, 1), height, width);
    case 128: return nearest_bucket(scaled(kBin2048, 2, 1, 1), height, width);
    default: return std::nullopt;
  }
}

std::vector<BinnedSize> training_buckets(int64_t resolution, int64_t unit) {
  return scaled(kBin2048, resolution, 2048, unit);
}

torch::Tensor resize_and_crop(const torch::Tensor& images, int64_t height, int64_t width) {
  const int64_t in_height = images.size(2), in_width = images.size(3);
  if (in_height == height && in_width == width) return images;
  const double scale = std::max(static_cast<double>(height) / static_cast<double>(in_height),
                                static_cast<double>(width) / static_cast<double>(in_width));
  // Truncated as int() does; a product that lands just below the target (199.99...) keeps the target, where
  // diffusers' crop would slice a row short.
  const int64_t resized_height = std::max(height, static_cast<int64_t>(static_cast<double>(in_height) * scale));
  const int64_t resized_width = std::max(width, static_cast<int64_t>(static_cast<double>(in_width) * scale));
  const auto resized = torch::upsample_bilinear2d(images, {resized_height, resized_width}, /*align_corners=*/false);
  const int64_t top = (resized_height - height) / 2, left = (resized_width - width) / 2;
  return resized.narrow(2, top, height).narrow(3, left, width);
}

}  // namespace tune::diffusion
