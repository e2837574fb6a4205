// Latte's training clips with their class labels: from decoded videos (pixels, encoded by the VAE at each step when
// one is configured) or from latents that `tune prepare` wrote, so that training needs no VAE in memory. The
// batcher is the video recipes' shared one (recipes/diffusion/clip_batches.h).
#pragma once

#include <torch/types.h>

#include <memory>
#include <random>

#include "tune/data/video_dataset.h"
#include "tune/recipes/diffusion/clip_batches.h"
#include "tune/recipes/latte/latte_settings.h"

namespace tune::recipes::latte {

using diffusion_common::Clip;
using diffusion_common::ClipBatch;
using diffusion_common::ClipBatcher;
using diffusion_common::ClipSource;

// The videos of data.path, read as the data.* keys say.
std::shared_ptr<const data::VideoDataset> make_video_dataset(const LatteSettings& settings);

std::shared_ptr<const ClipSource> video_clips(std::shared_ptr<const data::VideoDataset> dataset);
// `shape`: what every latent must be, [F, C, h, w]; another shape is a tune::InputError naming the file.
std::shared_ptr<const ClipSource> latent_clips(std::shared_ptr<const data::LatentDataset> dataset,
                                              std::vector<int64_t> shape);

}  // namespace tune::recipes::latte
