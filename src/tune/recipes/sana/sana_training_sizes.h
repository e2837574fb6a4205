// The sizes Sana trains at: data.image_size square, or with data.aspect_ratio_buckets the official trainer's
// multi-scale buckets at that resolution (diffusion/aspect_ratio_bins.h), every image at the bucket nearest its own
// aspect ratio. Shared by `tune prepare` (which size each image is encoded at), training (which latent shapes it
// accepts, and the largest for its memory estimate) and `tune plan`.
#pragma once

#include <cstdint>
#include <vector>

#include "tune/config/config.h"
#include "tune/diffusion/aspect_ratio_bins.h"
#include "tune/recipes/sana/sana_settings.h"

namespace tune::recipes::sana {

// Pixel sizes in the table's order (one square without buckets); keys whose rounded sizes coincide stay separate
// entries, so that diffusion::nearest_bucket picks as the official table does. `unit` = the VAE's factor x the
// patch size; data.image_size must be a multiple of it (config.fail names the key otherwise).
std::vector<diffusion::BinnedSize> sana_training_sizes(const SanaDataSettings& data, int64_t vae_factor,
                                                       int64_t patch_size, const config::Config& config);

// Each size once, in first-seen order: the latent shapes training accepts.
std::vector<diffusion::BinnedSize> distinct_sizes(const std::vector<diffusion::BinnedSize>& sizes);

// The size with the most pixels (the first of equals): where a step's activations peak.
diffusion::BinnedSize largest_training_size(const std::vector<diffusion::BinnedSize>& sizes);

}  // namespace tune::recipes::sana
