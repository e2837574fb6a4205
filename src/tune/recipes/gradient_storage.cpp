// make_compact_gradients: training.compact_gradients resolved against the run, and the log line that shows it.
#include "tune/recipes/gradient_storage.h"

#include <fmt/format.h>

#include "tune/core/log.h"
#include "tune/core/progress.h"

namespace tune::recipes {

std::string compact_gradients_unsupported(const RunSettings& run, bool data_parallel) {
  if (run.device != "cpu") return fmt::format("the run is on {} (the exactness check is a CPU kernel)", run.device);
  if (run.mixed_precision != precision::MixedPrecision::bf16) {
    return fmt::format("mixed_precision is {} (only bf16 autocast makes gradients that bf16 holds exactly)",
                       precision::to_string(run.mixed_precision));
  }
  if (data_parallel) return "the run has several processes (data parallelism reduces param.grad() in its own hooks)";
  return {};
}

namespace {

std::string reason_against(const RunSettings& run, const GradientStorageContext& context) {
  std::string reason = compact_gradients_unsupported(run, context.data_parallel);
  if (reason.empty() && context.loss_scaler) reason = "the run's loss scaler unscales param.grad() in place";
  return reason;
}

}  // namespace

bool compact_gradients_active(const TrainingSettings& training, const RunSettings& run, bool checkpointing,
                              int64_t accumulation, const GradientStorageContext& context) {
  if (training.compact_gradients == "false" || !reason_against(run, context).empty()) return false;
  return training.compact_gradients == "true" || (checkpointing && accumulation == 1);
}

std::unique_ptr<train::CompactGradients> make_compact_gradients(const config::Config& config,
                                                                const TrainingSettings& training,
                                                                const RunSettings& run,
                                                                const std::vector<torch::Tensor>& params,
                                                                const GradientStorageContext& context) {
  if (training.compact_gradients == "true") {
    const std::string reason = reason_against(run, context);
    if (!reason.empty()) config.fail("training.compact_gradients", "is true, but " + reason + "; use auto or false");
  }
  const bool checkpointing = run.gradient_checkpointing && run.checkpointing.policy != memory::Policy::off;
  if (!compact_gradients_active(training, run, checkpointing, training.gradient_accumulation_steps, context)) {
    return nullptr;
  }
  return std::make_unique<train::CompactGradients>(params);
}

std::string describe_held_gradients(const train::CompactGradients& store, const std::vector<torch::Tensor>& params) {
  int64_t fp32_bytes = 0;
  for (const auto& param : params) fp32_bytes += param.numel() * 4;
  const int64_t held_bytes = store.held_bytes();
  const auto now_bytes = static_cast<double>(fp32_bytes - held_bytes);  // each held element: 2 bytes, not 4
  return fmt::format("gradients: {} of {} tensors held as exact bf16 copies (training.compact_gradients), {} "
                     "instead of {}",
                     store.held_count(), params.size(), format_bytes(now_bytes),
                     format_bytes(static_cast<double>(fp32_bytes)));
}

}  // namespace tune::recipes
