// Batches of video clips for Latte training, in a seeded order that resumes exactly: the epoch order comes from
// (seed, epoch) and each clip's random crop and flip from (seed, epoch, position), never from shared state.
#pragma once

#include <torch/types.h>

#include <memory>

#include "tune/data/sft_loader.h"
#include "tune/data/video_dataset.h"

namespace tune::recipes::latte {

struct VideoBatch {
  torch::Tensor videos;  // [B, F, 3, S, S] float in [-1, 1]
  torch::Tensor labels;  // [B] int64
};

class VideoBatcher {
 public:
  VideoBatcher(std::shared_ptr<const data::VideoDataset> dataset, int64_t batch_size, uint64_t seed);

  VideoBatch next();
  int64_t batches_per_epoch() const;
  data::LoaderPosition position() const { return position_; }
  void restore(data::LoaderPosition position) { position_ = position; }

 private:
  std::shared_ptr<const data::VideoDataset> dataset_;
  int64_t batch_size_;
  uint64_t seed_;
  data::LoaderPosition position_;
  int64_t planned_epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace tune::recipes::latte
