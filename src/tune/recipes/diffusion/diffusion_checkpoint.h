// A video-diffusion checkpoint directory: model.safetensors and ema.safetensors (the model's own parameter names;
// the EMA file is a whole model state, what sampling loads), the model's config file(s), and the training state:
// optimizer.safetensors, rng_state.safetensors (CPU and diffusion-noise generators), trainer_state.json (step,
// data position). The same layout for every denoiser family; each brings how its config is written and its weights
// are loaded.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <functional>

#include "tune/recipes/checkpoint_files.h"
#include "tune/train/adamw.h"
#include "tune/train/ema.h"

namespace tune::recipes::diffusion_common {

struct DiffusionTrainingObjects {
  torch::nn::Module* model = nullptr;
  std::function<void(const std::filesystem::path& dir)> save_config;     // the family's config file(s) into dir
  std::function<void(const std::filesystem::path& file)> load_weights;   // a weights file of this layout into model
  train::AdamW* optimizer = nullptr;
  train::ExponentialMovingAverage* ema = nullptr;
  at::Generator* noise_generator = nullptr;  // timesteps, noise and condition dropout of the diffusion loss
  // model.safetensors and ema.safetensors hold the trained parameters only (LoRA: the adapters; the frozen base
  // comes from the model's own files), not the whole model.
  bool trainable_only = false;
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
void write_diffusion_checkpoint(const std::filesystem::path& dir, const DiffusionTrainingObjects& objects,
                                const TrainerProgress& state, bool optimizer_state_sharded = false);
TrainerProgress read_diffusion_checkpoint(const std::filesystem::path& dir, const DiffusionTrainingObjects& objects);

// The weights sampling uses: DIR/ema.safetensors, or DIR/model.safetensors when there is no EMA file.
std::filesystem::path sampling_weights_file(const std::filesystem::path& dir);

}  // namespace tune::recipes::diffusion_common
