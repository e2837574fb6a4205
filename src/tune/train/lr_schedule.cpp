// Learning-rate schedules as HF transformers' lr_lambda functions, with the decay scaled into
// [min_lr_ratio, 1] as get_cosine_with_min_lr_schedule_with_warmup does.
#include "tune/train/lr_schedule.h"

#include "tune/core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tune::train {

// transformers' _get_wsd_scheduler_lambda (linear warmup, cosine decay, num_cycles 0.5): unlike the other kinds its
// warmup starts at min_lr_ratio, not 0. A decay longer than what follows the warmup starts right after it.
double LrSchedule::wsd_factor(int64_t step) const {
  const auto scaled = [this](double factor) { return std::max(0.0, factor * (1.0 - min_lr_ratio) + min_lr_ratio); };
  if (step < warmup_steps) {
    return scaled(static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_steps)));
  }
  const int64_t decay_begin = std::max(warmup_steps, total_steps - decay_steps);
  if (step < decay_begin) return 1.0;
  if (step >= decay_begin + decay_steps) return min_lr_ratio;
  const double progress =
      static_cast<double>(step - decay_begin) / static_cast<double>(std::max<int64_t>(1, decay_steps));
  return scaled(0.5 * (1.0 + std::cos(M_PI * progress)));
}

double LrSchedule::at(int64_t step) const {
  if (kind != "cosine" && kind != "linear" && kind != "constant" && kind != "wsd") {
    throw UsageError(
        fmt::format("unknown learning-rate schedule '{}': expected cosine, linear, constant or wsd", kind));
  }
  if (kind == "wsd") return peak_lr * wsd_factor(step);
  // HF's warmup starts at 0: the first update (step 0) uses lr 0 when there is any warmup.
  if (step < warmup_steps) {
    return peak_lr * static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_steps));
  }
  if (kind == "constant") return peak_lr;
  // Clamped so steps past total_steps stay at the floor (HF's cosine would start rising again).
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) /
                                            static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps)));
  const double decay = kind == "cosine" ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
  return peak_lr * (min_lr_ratio + (1.0 - min_lr_ratio) * decay);
}

}  // namespace tune::train
