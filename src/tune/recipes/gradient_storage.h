// training.compact_gradients: whether a run keeps its parameter gradients as exact bf16 copies
// (train/compact_gradients.h), decided once at the start and said in the log.
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "tune/config/config.h"
#include "tune/recipes/common_schema.h"
#include "tune/train/compact_gradients.h"

namespace tune::recipes {

// Why training.compact_gradients cannot apply to a run with these settings (several processes: `data_parallel`),
// or empty when it can: the CPU only (the exactness check is a CPU kernel), bf16 autocast only (fp32 training makes
// no bf16 gradients; fp16's scaler unscales param.grad() in place), one process (data parallelism reduces
// param.grad() in its own hooks). read_training_settings refuses `true` with this reason, naming the key.
std::string compact_gradients_unsupported(const RunSettings& run, bool data_parallel);

struct GradientStorageContext {
  bool data_parallel = false;  // more than one process: DataParallel's hooks read param.grad()
  bool loss_scaler = false;    // fp16: the scaler unscales param.grad() in place
};

// Whether a run holds its gradients compact: training.compact_gradients true, or auto with `checkpointing` on and one
// micro-batch a step (`accumulation` 1: a second micro-batch's contribution turns every held gradient back into
// fp32, so the step's peak is fp32 gradients' anyway and the copies would only cost their passes), where
// compact_gradients_unsupported finds nothing against it. tune plan asks it for each setting it weighs.
bool compact_gradients_active(const TrainingSettings& training, const RunSettings& run, bool checkpointing,
                              int64_t accumulation, const GradientStorageContext& context);

// The store for `params`, or null where the run keeps fp32 gradients. auto: on for a single-process CPU run under
// bf16 autocast with gradient checkpointing on and no gradient accumulation. Its memory then peaks late in backward, where most gradients
// exist; without checkpointing the peak is at the loss, before any gradient is made, and the copy to bf16 and back
// would cost a pass each for nothing. true where it cannot apply: a ConfigError naming training.compact_gradients
// (read_training_settings raises it first).
std::unique_ptr<train::CompactGradients> make_compact_gradients(const config::Config& config,
                                                                const TrainingSettings& training,
                                                                const RunSettings& run,
                                                                const std::vector<torch::Tensor>& params,
                                                                const GradientStorageContext& context);

// One line for the log after the first step's backward: how many gradients were held in bf16 and their bytes
// against fp32's ("gradients: 74 of 80 tensors held as exact bf16 copies, 61.9 MiB instead of 123.8 MiB").
std::string describe_held_gradients(const train::CompactGradients& store, const std::vector<torch::Tensor>& params);

}  // namespace tune::recipes
