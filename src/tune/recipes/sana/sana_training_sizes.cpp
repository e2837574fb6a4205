#include "tune/recipes/sana/sana_training_sizes.h"

#include <fmt/format.h>

#include <algorithm>

namespace tune::recipes::sana {

std::vector<diffusion::BinnedSize> sana_training_sizes(const SanaDataSettings& data, int64_t vae_factor,
                                                       int64_t patch_size, const config::Config& config) {
  const int64_t unit = vae_factor * patch_size;
  if (data.image_size % unit != 0) {
    config.fail("data.image_size", fmt::format("({}) must be a multiple of {} (the VAE's factor {} x patch size {})",
                                               data.image_size, unit, vae_factor, patch_size));
  }
  if (!data.aspect_ratio_buckets) return {{data.image_size, data.image_size, 1.0}};
  return diffusion::training_buckets(data.image_size, unit);
}

std::vector<diffusion::BinnedSize> distinct_sizes(const std::vector<diffusion::BinnedSize>& sizes) {
  std::vector<diffusion::BinnedSize> distinct;
  for (const auto& size : sizes) {
    const bool seen = std::any_of(distinct.begin(), distinct.end(), [&](const diffusion::BinnedSize& other) {
      return other.height == size.height && other.width == size.width;
    });
    if (!seen) distinct.push_back(size);
  }
  return distinct;
}

diffusion::BinnedSize largest_training_size(const std::vector<diffusion::BinnedSize>& sizes) {
  TORCH_CHECK(!sizes.empty(), "largest_training_size: no sizes");
  diffusion::BinnedSize largest = sizes.front();
  for (const auto& size : sizes) {
    if (size.height * size.width > largest.height * largest.width) largest = size;
  }
  return largest;
}

}  // namespace tune::recipes::sana
