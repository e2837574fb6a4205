// The progress line of a video recipe's sampling loop: sampling has no loss, so the line shows the step, the
// timestep the model saw, elapsed time and ETA, logged about five times (or redrawn on a terminal).
#pragma once

#include <cstdint>
#include <memory>

#include "tune/core/progress.h"
#include "tune/diffusion/sampler.h"

namespace tune::recipes::diffusion_common {

class SamplingProgress {
 public:
  explicit SamplingProgress(int64_t steps);
  // Installs the step callback into `options` (it refers to this object: keep it alive while sampling).
  void attach(diffusion::SamplerOptions& options);
  void finish() { progress_.finish(); }

 private:
  Progress progress_;
};

}  // namespace tune::recipes::diffusion_common
