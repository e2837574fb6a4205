// Seeded, resumable batching of training clips from videos or prepared latents.
#include "tune/recipes/latte/latte_data.h"

#include <fmt/format.h>

#include "tune/core/error.h"

namespace tune::recipes::latte {
namespace {

class VideoClips final : public ClipSource {
 public:
  explicit VideoClips(std::shared_ptr<const data::VideoDataset> dataset) : dataset_(std::move(dataset)) {}
  int64_t size() const override { return dataset_->size(); }
  Clip get(int64_t index, std::mt19937_64& generator) const override {
    auto example = dataset_->get(index, generator);
    return {example.video, example.label};
  }

 private:
  std::shared_ptr<const data::VideoDataset> dataset_;
};

class LatentClips final : public ClipSource {
 public:
  LatentClips(std::shared_ptr<const data::LatentDataset> dataset, std::vector<int64_t> shape)
      : dataset_(std::move(dataset)), shape_(std::move(shape)) {}
  int64_t size() const override { return dataset_->size(); }
  Clip get(int64_t index, std::mt19937_64& /*crop and flip were drawn when prepared*/) const override {
    auto example = dataset_->get(index);
    if (example.latent.sizes() != c10::IntArrayRef(shape_)) {
      throw InputError(fmt::format("{}: tensor 'latent' has shape {}, but the model takes {} (frames, channels, "
                                   "height, width)", dataset_->item_path(example.index).string(),
                                   c10::str(example.latent.sizes()), c10::str(c10::IntArrayRef(shape_))));
    }
    return {example.latent.to(torch::kFloat), example.label};
  }

 private:
  std::shared_ptr<const data::LatentDataset> dataset_;
  std::vector<int64_t> shape_;
};

}  // namespace

std::shared_ptr<const data::VideoDataset> make_video_dataset(const LatteSettings& settings) {
  return std::make_shared<const data::VideoDataset>(settings.data.path.value(),
                                                    diffusion_common::video_dataset_options(settings.data));
}

std::shared_ptr<const ClipSource> video_clips(std::shared_ptr<const data::VideoDataset> dataset) {
  return std::make_shared<VideoClips>(std::move(dataset));
}

std::shared_ptr<const ClipSource> latent_clips(std::shared_ptr<const data::LatentDataset> dataset,
                                              std::vector<int64_t> shape) {
  return std::make_shared<LatentClips>(std::move(dataset), std::move(shape));
}

}  // namespace tune::recipes::latte
