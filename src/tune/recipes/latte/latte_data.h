// Batches of training clips for Latte, in a seeded order that resumes exactly: the epoch order comes from
// (seed, epoch) and each clip's random crop and flip from (seed, epoch, position), never from shared state.
// Clips come from decoded videos (pixels, encoded by the VAE at each step when one is configured) or from latents
// that `tune prepare` wrote, so that training needs no VAE in memory.
#pragma once

#include <torch/types.h>

#include <memory>
#include <random>

#include "tune/data/sft_loader.h"
#include "tune/data/video_dataset.h"
#include "tune/recipes/latte/latte_settings.h"

namespace tune::recipes::latte {

struct Clip {
  torch::Tensor frames;  // [F, C, H, W] float: pixels in [-1, 1] or prepared (scaled) latents
  int64_t label = 0;
};

// What the batcher draws from.
class ClipSource {
 public:
  virtual ~ClipSource() = default;
  virtual int64_t size() const = 0;
  // Clip `index`; `generator` decides its random crop and flip (unused where clips are fixed).
  virtual Clip get(int64_t index, std::mt19937_64& generator) const = 0;
};

// The videos of data.path, read as the data.* keys say.
std::shared_ptr<const data::VideoDataset> make_video_dataset(const LatteSettings& settings);

std::shared_ptr<const ClipSource> video_clips(std::shared_ptr<const data::VideoDataset> dataset);
// `shape`: what every latent must be, [F, C, h, w]; another shape is a tune::InputError naming the file.
std::shared_ptr<const ClipSource> latent_clips(std::shared_ptr<const data::LatentDataset> dataset,
                                              std::vector<int64_t> shape);

struct ClipBatch {
  torch::Tensor clips;   // [B, F, C, H, W]
  torch::Tensor labels;  // [B] int64
};

class ClipBatcher {
 public:
  ClipBatcher(std::shared_ptr<const ClipSource> source, int64_t batch_size, uint64_t seed);

  ClipBatch next();
  int64_t batches_per_epoch() const;
  data::LoaderPosition position() const { return {position_.epoch, position_.batch_in_epoch, batch_size_}; }
  void restore(data::LoaderPosition position) { position_ = data::rebatch(position, batch_size_); }

 private:
  std::shared_ptr<const ClipSource> source_;
  int64_t batch_size_;
  uint64_t seed_;
  data::LoaderPosition position_;
  int64_t planned_epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace tune::recipes::latte
