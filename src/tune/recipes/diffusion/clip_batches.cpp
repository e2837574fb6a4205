// Seeded, resumable batching of training clips with their conditioning.
#include "tune/recipes/diffusion/clip_batches.h"

#include "tune/data/seeded_shuffle.h"

namespace tune::recipes::diffusion_common {
namespace {

torch::Tensor rows_of(const torch::Tensor& tensor, int64_t begin, int64_t end) {
  return tensor.defined() ? tensor.slice(0, begin, end) : tensor;
}

torch::Tensor moved(const torch::Tensor& tensor, const torch::Device& device) {
  return tensor.defined() ? tensor.to(device) : tensor;
}

}  // namespace

Conditioning Conditioning::rows(int64_t begin, int64_t end) const {
  return {rows_of(labels, begin, end), rows_of(text, begin, end), rows_of(text_mask, begin, end)};
}

Conditioning Conditioning::to(const torch::Device& device) const {
  return {moved(labels, device), moved(text, device), moved(text_mask, device)};
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
  std::vector<torch::Tensor> clips, texts, masks;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < batch_size_; ++i) {
    const int64_t slot = (position_.batch_in_epoch * batch_size_ + i) % source_->size();
    // A generator per clip, from where the clip sits in the stream: resuming reproduces crops and flips exactly.
    std::mt19937_64 generator(seed_ ^ (static_cast<uint64_t>(position_.epoch) << 32) ^ static_cast<uint64_t>(slot));
    auto clip = source_->get(order_[static_cast<size_t>(slot)], generator);
    clips.push_back(clip.frames);
    labels.push_back(clip.label);
    if (clip.text.defined()) {
      texts.push_back(clip.text);
      masks.push_back(clip.text_mask);
    }
  }
  ++position_.batch_in_epoch;
  ClipBatch batch{torch::stack(clips), {torch::tensor(labels, torch::kLong), {}, {}}};
  if (!texts.empty()) {
    batch.condition.text = torch::stack(texts);
    batch.condition.text_mask = torch::stack(masks);
  }
  return batch;
}

}  // namespace tune::recipes::diffusion_common
