// The text-to-video transformer as the latte_t2v commands build it: the pipeline's LatteTransformer3DModel, with
// LoRA adapters when lora.rank > 0, and the trained weights of a checkpoint over it (all of them after full
// fine-tuning; the adapters after LoRA, whose checkpoints hold nothing else): recipes/diffusion/diffusers_transformer.h
// does the loading, freezing and LoRA files for every diffusers transformer.
#pragma once

#include <filesystem>
#include <optional>

#include "tune/models/latte_t2v.h"

namespace tune::recipes::latte_t2v {

// `config_file`: the transformer's config.json (the pipeline's, or a checkpoint's copy of it). `transformer_dir`:
// the pipeline's weights, loaded unless a full fine-tuning checkpoint replaces them all. `checkpoint`: its
// sampling weights (ema.safetensors, else model.safetensors) are loaded last.
models::LatteT2V load_transformer(const std::filesystem::path& config_file, const std::filesystem::path& transformer_dir,
                                  const models::LatteT2VLora& lora,
                                  const std::optional<std::filesystem::path>& checkpoint = std::nullopt);

}  // namespace tune::recipes::latte_t2v
