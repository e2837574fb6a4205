// The one training loop of the video-diffusion recipes (class-conditional Latte, text-to-video Latte): a model
// family brings its denoiser (how it runs on a batch and its condition, its blocks, its config and weight files)
// and its clips; the loop does the rest the same way for all of them: gradient checkpointing over the family's
// blocks, data parallel (ddp, shard_grad_op, full_shard by the block types the model really has), global-batch
// timesteps, noise and condition dropout drawn by the loop's own generator (so a run does not depend on the
// process count and the model draws nothing random), the family's objective (the IDDPM loss: eps MSE plus the
// variational bound of a learned variance; or flow matching: the velocity's MSE), AdamW, EMA, fp16 loss scaling,
// exact resume and the memory plan.
#pragma once

#include <torch/nn/module.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tune/diffusion/flow_matching.h"
#include "tune/memory/checkpoint.h"
#include "tune/nn/block_runner.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/diffusion/clip_batches.h"
#include "tune/recipes/recipe.h"

namespace tune::recipes::diffusion_common {

// A denoiser as the loop trains it.
struct DiffusionTrainee {
  std::shared_ptr<torch::nn::Module> model;  // on the run's device; its requires_grad parameters train
  std::string description;                   // the log's "model: ..." text
  std::vector<std::shared_ptr<torch::nn::Module>> blocks;  // in execution order
  std::vector<std::string> block_types;                    // one per block (distributed.shard_blocks)
  std::vector<std::string> default_block_types;            // what full_shard wraps by default
  std::map<std::string, std::string> block_type_aliases;   // other names shard_blocks accepts (alias -> type)
  std::function<void(std::shared_ptr<nn::BlockRunner>)> set_block_runner;
  bool learned_sigma = true;        // the output's second half is the variance (learned range)
  double condition_dropout = 0.0;   // probability a row trains unconditionally (for guidance); 0: none drawn
  // The prediction for x at integer timesteps t [B] (the objective's: IDDPM's indices, or flow matching's
  // trunc(sigma T)): `condition` holds this rank's rows on the device; `drop` [B] int64 (1 = this row trains
  // unconditionally) or undefined (none). x is a batch of clips [B, F, C, H, W] (images: F = 1).
  std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& t, const Conditioning& condition,
                              const torch::Tensor& drop)>
      forward;
  // The activation estimate (bytes) for a micro-batch under the runner's policy; unset: not estimated.
  std::function<int64_t(const memory::CheckpointRunner&)> activation_estimate;
  bool save_trainable_only = false;  // checkpoints hold the trained parameters only (LoRA), not the frozen base
  std::function<void(const std::filesystem::path& dir)> save_config;    // written into every checkpoint
  std::function<void(const std::filesystem::path& file)> load_weights;  // model.safetensors of a checkpoint
};

struct DiffusionTrainingData {
  std::shared_ptr<const ClipSource> clips;
  // Pixel clips -> what the denoiser sees (the VAE's latents); unset: the clips are prepared latents already.
  std::function<torch::Tensor(const torch::Tensor& videos)> to_model_space;
  std::string description;  // for the log
};

// What the denoiser learns: IDDPM's noise prediction (with a learned variance when the trainee has one), or flow
// matching's velocity (Sana).
enum class DiffusionObjectiveKind { iddpm, flow_matching };

struct DiffusionLoopSettings {
  DiffusionObjectiveKind objective = DiffusionObjectiveKind::iddpm;
  diffusion::FlowMatchingOptions flow;  // objective flow_matching: the timestep density and the shift
  int64_t num_timesteps = 1000;
  std::string beta_schedule = "linear";
  std::vector<double> betas;    // non-empty: this training process (a pipeline's scheduler config), not the above
  double ema_decay = 0.9999;
  int64_t clip_start_step = 0;  // gradient clipping applies from this step on (Latte's start_clip_iter)
  int threads = 1;              // for the log
};

// Runs `tune train` from the prepared run directory on: setup of the checkpointing runner, data parallel, optimizer,
// EMA and resume, then the step loop. Returns the process exit code.
int run_diffusion_training(const TrainRequest& request, const RunSettings& run, TrainingSettings training,
                           const DiffusionLoopSettings& settings, DiffusionTrainee& trainee,
                           const DiffusionTrainingData& data);

}  // namespace tune::recipes::diffusion_common
