// The latte_t2v recipe's own keys (text-to-video Latte, diffusers' LattePipeline layout) as plain structs: where
// the pipeline's components are, and how `tune infer` samples from a prompt. The defaults are LattePipeline's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tune/config/config.h"
#include "tune/models/latte_t2v_layers.h"
#include "tune/recipes/diffusion/guidance_settings.h"
#include "tune/recipes/diffusion/pipeline_components.h"
#include "tune/recipes/diffusion/video_data_settings.h"

namespace tune::recipes::latte_t2v {

// model.path is a diffusers pipeline directory (model_index.json); each component may be replaced by another
// directory of the same class.
struct PipelineSettings : diffusion_common::PipelinePaths {
  std::string text_encoder_dtype = "auto";  // auto: bf16 under bf16/fp16 autocast, fp32 with mixed_precision no
  int64_t vae_chunk_frames = 14;            // LattePipeline's decode_chunk_size
};

struct SamplingSettings {
  int64_t steps = 50;
  double cfg_scale = 7.5;       // > 1: classifier-free guidance against the negative prompt
  double eta = 0.0;             // DDIM
  int64_t frames = 16;
  int64_t height = 512, width = 512;
  std::string negative_prompt;  // "" as LattePipeline
  int64_t max_text_tokens = 120;
  bool mask_feature = true;     // LattePipeline's mask_feature (see t2v_prompt.h)
  bool caption_mask = false;    // true: the transformer masks padded caption rows, as in training (t2v_prompt.h)
  bool temporal_attention = true;
  int64_t fps = 8;
};

// Training: captioned videos (data.path: a JSONL of {"video", "caption"} rows or a folder of videos with same-named
// .txt captions), trained from the latents and caption embeddings `tune prepare` writes (data.latents).
struct T2VDataSettings : diffusion_common::VideoDataSettings {
  double caption_dropout = 0.1;  // probability a clip trains on the empty prompt's embedding (for guidance)
  // Image-video joint training (the official use_image_num): captioned images (a JSONL of {"image", "caption"}
  // rows or a folder of images with .txt captions), use_image_num of them drawn at random and joined to each clip.
  std::optional<std::string> images;
  int64_t use_image_num = 0;
};

struct T2VSettings {
  PipelineSettings model;
  T2VDataSettings data;
  SamplingSettings sampling;
  diffusion_common::GuidanceSettings guidance;
  models::LatteT2VLora lora;    // lora.rank 0: full fine-tuning of the transformer
  double ema_decay = 0.9999;
  int64_t clip_start_step = 0;  // gradient clipping applies from this step on
};

config::Schema t2v_schema();
T2VSettings read_t2v_settings(const config::Config& config);
// Every check tune train makes before reading data or model files (tune validate, tune plan).
void validate_t2v_config(const config::Config& config);
// The checks training and inference share (tune plan --infer: param_dtype bf16 holds every weight in bf16 there).
void validate_t2v_common_config(const config::Config& config);

}  // namespace tune::recipes::latte_t2v
