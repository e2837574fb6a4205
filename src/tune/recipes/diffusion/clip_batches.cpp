// Seeded, resumable batching of training clips with their conditioning.
#include "tune/recipes/diffusion/clip_batches.h"

#include <fmt/format.h>

#include <map>
#include <utility>

#include "tune/core/error.h"
#include "tune/core/log.h"
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
    : source_(std::move(source)), batch_size_(batch_size), seed_(seed) {
  std::map<int64_t, int64_t> counts;
  groups_.reserve(static_cast<size_t>(source_->size()));
  for (int64_t index = 0; index < source_->size(); ++index) {
    groups_.push_back(source_->group(index));
    ++counts[groups_.back()];
  }
  if (counts.size() <= 1) {
    groups_.clear();  // one group: the plain order
    return;
  }
  int64_t largest = 0, left_out = 0, small_groups = 0;
  for (const auto& [group, count] : counts) {
    grouped_batches_ += count / batch_size_;
    largest = std::max(largest, count);
    if (count < batch_size_) left_out += count, ++small_groups;
  }
  if (grouped_batches_ == 0) {
    throw InputError(fmt::format("no aspect-ratio bucket of the training data holds a whole batch of {} "
                                 "(training.batch_size x processes; the {} buckets hold at most {} clips each); lower "
                                 "training.batch_size or add data", batch_size_, counts.size(), largest));
  }
  if (left_out > 0 && log::rank() == 0) {  // the same on every rank: said once
    log::warn("data: {} clips in {} aspect-ratio bucket(s) smaller than a batch of {} are never trained (each batch "
              "comes from one bucket); add such images or lower training.batch_size to train them",
              left_out, small_groups, batch_size_);
  }
}

void ClipBatcher::restore(data::LoaderPosition position) {
  if (!groups_.empty() && position.rows_per_batch > 0 && position.rows_per_batch != batch_size_) {
    if (log::rank() == 0) {
      log::warn("data: the checkpoint was made with a global batch of {} clips, this run takes {}: batches drawn one "
                "aspect-ratio bucket at a time cannot continue that epoch's, so training goes on from epoch {}",
                position.rows_per_batch, batch_size_, position.epoch + 1);
    }
    position_ = {position.epoch + 1, 0, batch_size_};
    return;
  }
  position_ = data::rebatch(position, batch_size_);
}

int64_t ClipBatcher::batches_per_epoch() const {
  if (!groups_.empty()) return grouped_batches_;
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
    grouped_plan_.clear();
    if (!groups_.empty()) {
      std::map<int64_t, std::vector<int64_t>> filling;
      for (const int64_t index : order_) {
        auto& bucket = filling[groups_[static_cast<size_t>(index)]];
        bucket.push_back(index);
        if (static_cast<int64_t>(bucket.size()) == batch_size_) grouped_plan_.push_back(std::exchange(bucket, {}));
      }
    }
  }
  const bool grouped = !groups_.empty();
  std::vector<torch::Tensor> clips, texts, masks;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < batch_size_; ++i) {
    const int64_t slot = grouped ? position_.batch_in_epoch * batch_size_ + i
                                 : (position_.batch_in_epoch * batch_size_ + i) % source_->size();
    const int64_t index = grouped ? grouped_plan_[static_cast<size_t>(position_.batch_in_epoch)][static_cast<size_t>(i)]
                                  : order_[static_cast<size_t>(slot)];
    // A generator per clip, from where the clip sits in the stream: resuming reproduces crops and flips exactly.
    std::mt19937_64 generator(seed_ ^ (static_cast<uint64_t>(position_.epoch) << 32) ^ static_cast<uint64_t>(slot));
    auto clip = source_->get(index, generator);
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
