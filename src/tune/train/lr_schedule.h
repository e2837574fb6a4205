// Learning-rate schedules: linear warmup, then cosine / linear decay to min_lr_ratio * lr, or constant.
// Matches HF transformers' get_cosine_schedule_with_warmup / get_linear_schedule_with_warmup for
// min_lr_ratio = 0 (cosine with num_cycles 0.5). "wsd" (warmup-stable-decay) is transformers' get_wsd_schedule with
// its defaults (linear warmup from min_lr_ratio * lr, constant, then a cosine decay over the last decay_steps to
// min_lr_ratio * lr): a constant rate for as long as the run needs it, and a short anneal at the end.
#pragma once

#include <cstdint>
#include <string>

namespace tune::train {

struct LrSchedule {
  std::string kind = "cosine";  // "cosine" | "linear" | "constant" | "wsd"
  double peak_lr = 1e-4;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr_ratio = 0.0;
  int64_t decay_steps = 0;  // wsd: the decay phase's length, ending at total_steps (the stable phase gives way)

  // Learning rate for optimizer step `step` (0-based: the first update uses step 0).
  double at(int64_t step) const;

 private:
  double wsd_factor(int64_t step) const;
};

}  // namespace tune::train
