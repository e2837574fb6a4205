// The Sana pipeline as the sana commands open it: its components (each overridable by a model.* key) and the
// transformer built from them, with LoRA adapters when lora.rank > 0 and a checkpoint's weights over the pipeline's.
#pragma once

#include <filesystem>
#include <optional>

#include "tune/models/sana.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/sana/sana_settings.h"

namespace tune::recipes::sana {

struct SanaComponents {
  std::filesystem::path transformer, vae, text_encoder, tokenizer, scheduler;
};

// model.path's model_index.json (SanaPipeline) and the model.* overrides; each component's class is checked.
SanaComponents resolve_sana_components(const SanaPipelineSettings& model);

// model.text_encoder_dtype: fp32, bf16, or auto (bf16 under bf16/fp16 autocast, fp32 with mixed_precision no).
torch::ScalarType text_encoder_dtype(const std::string& setting, precision::MixedPrecision mixed);

// `config_file`: the transformer's config.json (the pipeline's, or a checkpoint's copy of it). `checkpoint`: a run's
// checkpoint whose sampling weights (EMA) are loaded over the pipeline's (diffusion/diffusers_transformer.h).
models::Sana load_sana_transformer(const std::filesystem::path& config_file, const std::filesystem::path& transformer_dir,
                                   const models::SanaLora& lora,
                                   const std::optional<std::filesystem::path>& checkpoint = std::nullopt);

}  // namespace tune::recipes::sana
