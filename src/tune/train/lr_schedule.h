// Learning-rate schedules: linear warmup, then cosine / linear decay to min_lr_ratio * lr, or constant.
// Matches HF transformers' get_cosine_schedule_with_warmup / get_linear_schedule_with_warmup for
// min_lr_ratio = 0 (cosine with num_cycles 0.5).
#pragma once

#include <cstdint>
#include <string>

namespace tune::train {

struct LrSchedule {
  std::string kind = "cosine";  // "cosine" | "linear" | "constant"
  double peak_lr = 1e-4;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr_ratio = 0.0;

  // Learning rate for optimizer step `step` (0-based: the first update uses step 0).
  double at(int64_t step) const;
};

}  // namespace tune::train
