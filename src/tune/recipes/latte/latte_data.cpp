// Seeded, resumable batching of training clips from videos or prepared latents.
#include "tune/recipes/latte/latte_data.h"

#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/data/seeded_shuffle.h"

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
  const auto& data = settings.data;
  data::VideoDatasetOptions options;
  options.clip = {data.num_frames, data.frame_interval, data.image_size, data.flip};
  options.on_bad_video = data.skip_bad_videos ? data::OnBadVideo::skip : data::OnBadVideo::fail;
  options.cache_frames = data.cache_frames;
  return std::make_shared<const data::VideoDataset>(data.path.value(), options);
}

std::shared_ptr<const ClipSource> video_clips(std::shared_ptr<const data::VideoDataset> dataset) {
  return std::make_shared<VideoClips>(std::move(dataset));
}

std::shared_ptr<const ClipSource> latent_clips(std::shared_ptr<const data::LatentDataset> dataset,
                                              std::vector<int64_t> shape) {
  return std::make_shared<LatentClips>(std::move(dataset), std::move(shape));
}

ClipBatcher::ClipBatcher(std::shared_ptr<const ClipSource> source, int64_t batch_size, uint64_t seed)
    : source_(std::move(source)), batch_size_(batch_size), seed_(seed) {}

int64_t ClipBatcher::batches_per_epoch() const {
  // Incomplete last batches are dropped, as Latte's DataLoader(drop_last=True): every batch has batch_size clips.
  return std::max<int64_t>(1, source_->size() / batch_size_);
}

ClipBatch ClipBatcher::next() {
  if (position_.batch_in_epoch >= batches_per_epoch()) {
    ++position_.epoch;
    position_.batch_in_epoch = 0;
  }
  if (planned_epoch_ != position_.epoch) {
    order_ = data::seeded_permutation(source_->size(), seed_ * 1000003ULL + static_cast<uint64_t>(position_.epoch));
    planned_epoch_ = position_.epoch;
  }
  std::vector<torch::Tensor> clips;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < batch_size_; ++i) {
    const int64_t slot = (position_.batch_in_epoch * batch_size_ + i) % source_->size();
    // A generator per clip, from where the clip sits in the stream: resuming reproduces crops and flips exactly.
    std::mt19937_64 generator(seed_ ^ (static_cast<uint64_t>(position_.epoch) << 32) ^ static_cast<uint64_t>(slot));
    auto clip = source_->get(order_[static_cast<size_t>(slot)], generator);
    clips.push_back(clip.frames);
    labels.push_back(clip.label);
  }
  ++position_.batch_in_epoch;
  return {torch::stack(clips), torch::tensor(labels, torch::kLong)};
}

}  // namespace tune::recipes::latte
