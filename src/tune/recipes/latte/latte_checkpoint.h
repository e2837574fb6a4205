// A Latte checkpoint directory: model.safetensors and ema.safetensors (official parameter names; EMA is a full
// model state, what sampling loads), latte_config.json, and the training state: optimizer.safetensors,
// rng_state.safetensors (CPU and diffusion-noise generators), trainer_state.json (step, data position).
#pragma once

#include <ATen/core/Generator.h>

#include <filesystem>
#include <functional>

#include "tune/data/sft_loader.h"
#include "tune/models/latte.h"
#include "tune/recipes/checkpoint_files.h"
#include "tune/train/adamw.h"
#include "tune/train/ema.h"

namespace tune::recipes::latte {

using LatteTrainerState = TrainerProgress;  // Latte's trainer_state.json holds the common fields only

struct LatteTrainingObjects {
  models::Latte* model;
  train::AdamW* optimizer;
  train::ExponentialMovingAverage* ema;
  at::Generator* noise_generator;  // timesteps and noise of the diffusion loss
  // full_shard (the EMA and optimizer hold flat shards): the EMA as whole per-parameter tensors, gathered by every
  // rank before saving; a whole EMA state turned into this rank's shards; the optimizer state reader. Unset: the
  // EMA and optimizer are whole.
  const std::vector<std::pair<std::string, torch::Tensor>>* ema_whole_state = nullptr;
  std::function<std::vector<std::pair<std::string, torch::Tensor>>(
      const std::vector<std::pair<std::string, torch::Tensor>>&)>
      ema_shard_state;
  OptimizerStateReader read_optimizer;
};

// `optimizer_state_sharded`: each rank writes its share of the optimizer state (StepLoopHooks::save_optimizer_shard)
// and this writes none; reading takes the optimizer's share from one file or any number of ranks' shards.
void write_latte_checkpoint(const std::filesystem::path& dir, const LatteTrainingObjects& objects,
                            const LatteTrainerState& state, bool optimizer_state_sharded = false);
LatteTrainerState read_latte_checkpoint(const std::filesystem::path& dir, const LatteTrainingObjects& objects);

// The EMA weights of a checkpoint into `model` (what sampling uses); model.safetensors when there is no EMA file.
void load_sampling_weights(const std::filesystem::path& dir, models::Latte& model);

}  // namespace tune::recipes::latte
