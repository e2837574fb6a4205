// Learning-rate schedules as HF transformers' lr_lambda functions, with the decay scaled into
// [min_lr_ratio, 1] as get_cosine_with_min_lr_schedule_with_warmup does.
#include "tune/train/lr_schedule.h"

#include "tune/core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tune::train {

double LrSchedule::at(int64_t step) const {
  if (kind != "cosine" && kind != "linear" && kind != "constant") {
    throw UsageError(fmt::format("unknown learning-rate schedule '{}': expected cosine, linear or constant", kind));
  }
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
