// Batches of training clips for the video-diffusion recipes, in a seeded order that resumes exactly: the epoch
// order comes from (seed, epoch) and each clip's random crop and flip from (seed, epoch, position), never from
// shared state. A clip carries its conditioning: a class label (class-conditional Latte) or a caption's text
// embeddings and mask (text-to-video), stacked batch-major so the loop can take any rank's rows of a global batch.
#pragma once

#include <torch/types.h>

#include <memory>
#include <random>

#include "tune/data/sft_loader.h"

namespace tune::recipes::diffusion_common {

// What a denoiser is conditioned on, batch-major. Unused parts are undefined tensors.
struct Conditioning {
  torch::Tensor labels;     // [B] int64 class ids
  torch::Tensor text;       // [B, L, D] caption embeddings (as prepared: the text encoder's dtype)
  torch::Tensor text_mask;  // [B, L] int64, 1 = a real token

  Conditioning rows(int64_t begin, int64_t end) const;
  Conditioning to(const torch::Device& device) const;
};

struct Clip {
  torch::Tensor frames;  // [F, C, H, W] float: pixels in [-1, 1] or prepared (scaled) latents
  int64_t label = 0;
  torch::Tensor text, text_mask;  // [L, D] and [L] for captioned clips; undefined otherwise
};

// What the batcher draws from.
class ClipSource {
 public:
  virtual ~ClipSource() = default;
  virtual int64_t size() const = 0;
  // Clip `index`; `generator` decides its random crop and flip (unused where clips are fixed).
  virtual Clip get(int64_t index, std::mt19937_64& generator) const = 0;
  // Clips of one group share a shape and may be stacked into a batch (Sana's aspect-ratio buckets); clips of
  // different groups never meet in one. Known without reading the clip.
  virtual int64_t group(int64_t /*index*/) const { return 0; }
};

struct ClipBatch {
  torch::Tensor clips;  // [B, F, C, H, W]
  Conditioning condition;
};

// With one group, each epoch's permutation is cut into consecutive batches (a dataset smaller than a batch wraps
// around). With several, the permutation is dealt into per-group buckets in order and a batch is emitted whenever a
// bucket fills (the official AspectRatioBatchSampler's way); a bucket's remainder at the epoch's end is dropped.
class ClipBatcher {
 public:
  // Throws InputError when several groups exist and none holds a whole batch (`batch_size`: the global batch, the
  // training.batch_size of every process together); groups smaller than a batch are logged as never trained.
  ClipBatcher(std::shared_ptr<const ClipSource> source, int64_t batch_size, uint64_t seed);

  ClipBatch next();
  int64_t batches_per_epoch() const;
  data::LoaderPosition position() const { return {position_.epoch, position_.batch_in_epoch, batch_size_}; }
  // With several groups a saved position from another global batch size cannot continue the same batches (the
  // epoch's plan depends on the size): the run goes on from the next epoch, saying so.
  void restore(data::LoaderPosition position);

 private:
  std::shared_ptr<const ClipSource> source_;
  int64_t batch_size_;
  uint64_t seed_;
  data::LoaderPosition position_;
  int64_t planned_epoch_ = -1;
  std::vector<int64_t> order_;
  // Several groups: each clip's group, the batches per epoch, and this epoch's batches (clip indices).
  std::vector<int64_t> groups_;
  int64_t grouped_batches_ = 0;
  std::vector<std::vector<int64_t>> grouped_plan_;
};

}  // namespace tune::recipes::diffusion_common
