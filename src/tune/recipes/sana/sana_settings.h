// The sana recipe's own keys (NVlabs' Sana, diffusers' SanaPipeline layout) as plain structs: where the pipeline's
// components are, how `tune infer` samples from a prompt (SanaPipeline's defaults), and how training sees its
// captioned images (the official trainer's flow matching: shift 3.0, logit-normal timesteps).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tune/config/config.h"
#include "tune/diffusion/flow_matching.h"
#include "tune/models/sana_layers.h"
#include "tune/recipes/diffusion/guidance_settings.h"
#include "tune/recipes/diffusion/pipeline_components.h"

namespace tune::recipes::sana {

// model.path is a diffusers Sana pipeline directory (model_index.json); each component may be replaced by another
// directory of the same class.
struct SanaPipelineSettings : diffusion_common::PipelinePaths {
  std::string text_encoder_dtype = "auto";  // auto: bf16 under bf16/fp16 autocast, fp32 with mixed_precision no
  bool vae_tiling = false;                  // decode in 512-pixel tiles (AutoencoderDC.enable_tiling's defaults)
};

struct SanaSamplingSettings {
  int64_t steps = 20;
  double cfg_scale = 4.5;        // > 1: classifier-free guidance against the negative prompt
  int64_t height = 1024, width = 1024;
  std::string negative_prompt;   // "" as SanaPipeline
  int64_t max_text_tokens = 300; // SanaPipeline's max_sequence_length
  bool complex_human_instruction = true;  // SanaPipeline's default instruction prefix on prompts
  // SanaPipeline's use_resolution_binning: generate at the nearest size of the model's aspect-ratio table, then
  // scale and crop the image to the size asked (diffusion/aspect_ratio_bins.h); models without a table sample at
  // the size asked.
  bool resolution_binning = true;
};

// Training: captioned images (data.path: a JSONL of {"image", "caption"} rows or a folder of images with same-named
// .txt captions), trained from the DC-AE latents and Gemma 2 caption embeddings `tune prepare` writes (data.latents).
struct SanaDataSettings {
  std::optional<std::string> path;
  std::optional<std::string> latents;
  int64_t image_size = 1024;             // square: the short side resized to it, then center-cropped
  // The official multi-scale training (model.multi_scale): each image at the aspect-ratio bucket of image_size's
  // table nearest its own shape (sana_training_sizes.h), batches drawn from one bucket at a time.
  bool aspect_ratio_buckets = false;
  double caption_dropout = 0.1;          // probability an image trains on the empty prompt (for guidance)
  bool skip_bad_images = false;          // data.on_bad_image: skip (logged and counted) or fail
  bool complex_human_instruction = true; // captions encoded with the instruction, as the official trainer and sampling
};

struct SanaSettings {
  SanaPipelineSettings model;
  SanaSamplingSettings sampling;
  diffusion_common::GuidanceSettings guidance;
  SanaDataSettings data;
  models::SanaLora lora;            // lora.rank 0: full fine-tuning of the transformer
  diffusion::FlowMatchingOptions flow;
  double ema_decay = 0.9999;
  int64_t clip_start_step = 0;      // gradient clipping applies from this step on
};

config::Schema sana_schema();
SanaSettings read_sana_settings(const config::Config& config);
void validate_sana_config(const config::Config& config);

}  // namespace tune::recipes::sana
