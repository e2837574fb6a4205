// The sana recipe's own keys (NVlabs' Sana, diffusers' SanaPipeline layout) as plain structs: where the pipeline's
// components are, and how `tune infer` samples from a prompt. The defaults are SanaPipeline's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tune/config/config.h"
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
};

struct SanaSettings {
  SanaPipelineSettings model;
  SanaSamplingSettings sampling;
  diffusion_common::GuidanceSettings guidance;
};

config::Schema sana_schema();
SanaSettings read_sana_settings(const config::Config& config);
void validate_sana_config(const config::Config& config);

}  // namespace tune::recipes::sana
