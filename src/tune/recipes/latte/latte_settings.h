// The Latte recipe's own settings: model, VAE, video data, diffusion, sampling and gradient guidance. Keys follow
// Latte's train/sample YAML where one exists (model: Latte-S/2 -> model.variant, num_frames -> data.num_frames,
// frame_interval, image_size, learn_sigma, extras, num_classes, clip_max_norm -> training.clip_grad_norm,
// start_clip_iter -> training.clip_start_step, ckpt_every -> checkpoint.every, num_sampling_steps -> sampling.steps).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tune/config/config.h"
#include "tune/recipes/diffusion/guidance_settings.h"
#include "tune/recipes/diffusion/video_data_settings.h"

namespace tune::recipes::latte {

struct LatteModelSettings {
  std::optional<std::string> path;   // a run checkpoint or converted official weights (model.safetensors + latte_config.json)
  std::string variant;               // "Latte-S/2" ... "Latte-XL/8"; empty: explicit sizes below
  int64_t hidden_size = 0, depth = 0, num_heads = 0, patch_size = 0;  // 0: from the variant
  bool learn_sigma = true;
  int64_t extras = 2;                // 1 unconditional, 2 class-conditional
  int64_t num_classes = 0;           // extras 2: 0 = the number of class folders in data.path
  double class_dropout_prob = 0.1;
  std::optional<std::string> vae;    // diffusers AutoencoderKL directory; unset: diffusion in pixel space
  int64_t vae_chunk_frames = 8;      // frames encoded/decoded at a time
};

using diffusion_common::VideoDataSettings;  // data.path: class sub-folders of videos (UCF-101 layout)

struct DiffusionSettings {
  int64_t num_timesteps = 1000;
  std::string beta_schedule = "linear";
};

struct SamplingSettings {
  std::string sampler = "ddim";      // "ddim" | "ddpm"
  int64_t steps = 50;
  double eta = 0.0;
  double cfg_scale = 1.0;            // > 1: classifier-free guidance (extras 2)
  int64_t fps = 8;
  int64_t num_samples = 1;
};

using diffusion_common::GuidanceSettings;

struct LatteSettings {
  LatteModelSettings model;
  VideoDataSettings data;
  DiffusionSettings diffusion;
  SamplingSettings sampling;
  GuidanceSettings guidance;
  double ema_decay = 0.9999;
  int64_t clip_start_step = 0;            // gradient clipping applies from this step on (Latte's start_clip_iter)
};

config::Schema latte_schema();
LatteSettings read_latte_settings(const config::Config& config);
// Recipe::validate for latte: the run, training and distributed settings, the Latte keys, and the checks across them.
void validate_latte_config(const config::Config& config);

}  // namespace tune::recipes::latte
