#include "tune/recipes/diffusion/sampling_progress.h"

#include <fmt/format.h>

#include <algorithm>

namespace tune::recipes::diffusion_common {
namespace {

ProgressOptions sampling_progress_options(int64_t steps) {
  ProgressOptions options;
  options.total_steps = steps;
  options.log_every = std::max<int64_t>(1, steps / 5);
  return options;
}

}  // namespace

SamplingProgress::SamplingProgress(int64_t steps) : progress_(sampling_progress_options(steps)) {}

void SamplingProgress::attach(diffusion::SamplerOptions& options) {
  options.on_step = [this](int64_t done, int64_t, int64_t timestep) {
    progress_.update_status(done, fmt::format("timestep {}", timestep));
  };
}

}  // namespace tune::recipes::diffusion_common
