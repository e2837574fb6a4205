// Seeded, resumable batching of video clips.
#include "tune/recipes/latte/latte_data.h"

#include "tune/data/seeded_shuffle.h"

namespace tune::recipes::latte {

VideoBatcher::VideoBatcher(std::shared_ptr<const data::VideoDataset> dataset, int64_t batch_size, uint64_t seed)
    : dataset_(std::move(dataset)), batch_size_(batch_size), seed_(seed) {}

int64_t VideoBatcher::batches_per_epoch() const {
  // Incomplete last batches are dropped, as Latte's DataLoader(drop_last=True): every batch has batch_size clips.
  return std::max<int64_t>(1, dataset_->size() / batch_size_);
}

VideoBatch VideoBatcher::next() {
  if (position_.batch_in_epoch >= batches_per_epoch()) {
    ++position_.epoch;
    position_.batch_in_epoch = 0;
  }
  if (planned_epoch_ != position_.epoch) {
    order_ = data::seeded_permutation(dataset_->size(), seed_ * 1000003ULL + static_cast<uint64_t>(position_.epoch));
    planned_epoch_ = position_.epoch;
  }
  std::vector<torch::Tensor> videos;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < batch_size_; ++i) {
    const int64_t slot = (position_.batch_in_epoch * batch_size_ + i) % dataset_->size();
    // A generator per clip, from where the clip sits in the stream: resuming reproduces crops and flips exactly.
    std::mt19937_64 generator(seed_ ^ (static_cast<uint64_t>(position_.epoch) << 32) ^ static_cast<uint64_t>(slot));
    auto example = dataset_->get(order_[static_cast<size_t>(slot)], generator);
    videos.push_back(example.video);
    labels.push_back(example.label);
  }
  ++position_.batch_in_epoch;
  return {torch::stack(videos), torch::tensor(labels, torch::kLong)};
}

}  // namespace tune::recipes::latte
