// Config keys every recipe shares: the headline memory switches, run settings, optimizer, schedule, logging and
// checkpoint cadence. Recipes add their own keys on top.
#pragma once

#include <cstdint>
#include <string>

#include "tune/config/config.h"
#include "tune/memory/checkpoint.h"
#include "tune/precision/loss_scaler.h"
#include "tune/precision/mixed_precision.h"
#include "tune/train/adamw.h"
#include "tune/train/lr_schedule.h"

namespace tune::recipes {

config::Schema common_schema(const std::string& recipe_name);

// The shared settings as plain structs: nothing above this reads these keys again.
struct RunSettings {
  uint64_t seed = 0;
  int threads = 0;                       // 0: all cores
  std::string device = "cpu";            // resolved: "cpu" or "cuda"
  bool gradient_checkpointing = true;
  memory::CheckpointOptions checkpointing;
  precision::MixedPrecision mixed_precision = precision::MixedPrecision::bf16;
  bool grad_inference = true;
  bool frozen_weights_bf16 = false;      // param_dtype: bf16
  precision::LossScalerOptions loss_scale;  // fp16 only
};

struct TrainingSettings {
  int64_t batch_size = 8;
  int64_t gradient_accumulation_steps = 1;
  int64_t max_steps = 0;                 // 0: derived from epochs
  int64_t epochs = 1;
  double clip_grad_norm = 1.0;           // <= 0: no clipping (norm still logged)
  double weight_decay = 0.0;
  train::AdamWOptions adamw;
  train::LrSchedule schedule;            // total_steps filled in by the recipe
  int64_t log_every = 10;
  bool tensorboard = true;  // logging.tensorboard
  int64_t eval_every = 0;                // 0: only at the end
  int64_t save_every = 0;                // 0: only at the end
  int64_t keep_last = 2;                 // 0: keep all
  std::string on_nan = "stop";           // "stop" | "skip"
  std::string compact_gradients = "auto";  // "auto" | "true" | "false" (recipes/gradient_storage.h)

  // Optimizer steps of the run: max_steps when set, else enough steps that every micro-batch of every epoch is
  // trained: ceil(epochs * batches_per_epoch / accumulation). Rounding down would never train an epoch's last
  // batches. With accumulation the final step may draw up to accumulation - 1 micro-batches of the next epoch.
  int64_t total_steps(int64_t batches_per_epoch) const;
};

RunSettings read_run_settings(const config::Config& config);

// The integer at `key`; a ConfigError naming the key's location when it is below `minimum`.
int64_t get_int_at_least(const config::Config& config, const std::string& key, int64_t minimum);
TrainingSettings read_training_settings(const config::Config& config);

}  // namespace tune::recipes
