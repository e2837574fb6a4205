// Where a text-to-video Latte's parts come from: a diffusers pipeline directory (model_index.json naming each
// component's folder and class), each part replaceable by a directory of its own (model.transformer, ...).
#pragma once

#include <c10/core/ScalarType.h>

#include <filesystem>
#include <string>

#include "tune/precision/mixed_precision.h"
#include "tune/recipes/latte_t2v/t2v_settings.h"

namespace tune::recipes::latte_t2v {

struct ComponentPaths {
  std::filesystem::path transformer;  // LatteTransformer3DModel: config.json + diffusion_pytorch_model*.safetensors
  std::filesystem::path vae;          // AutoencoderKL
  std::filesystem::path text_encoder; // T5EncoderModel: config.json + model*.safetensors
  std::filesystem::path tokenizer;    // spiece.model (+ tokenizer_config.json)
  std::filesystem::path scheduler;    // scheduler_config.json
};

// model_index.json's components, each checked to be of a class tune implements (an error naming the file, the
// component and its class otherwise), with the recipe's overrides in their place. Without model.path every
// component must be given. Throws InputError / ConfigError naming the file or key.
ComponentPaths resolve_components(const PipelineSettings& settings);

// model.text_encoder_dtype: "fp32", "bf16", or "auto" (bf16 under bf16/fp16 autocast, fp32 without).
torch::ScalarType text_encoder_dtype(const std::string& setting, precision::MixedPrecision mixed);

}  // namespace tune::recipes::latte_t2v
