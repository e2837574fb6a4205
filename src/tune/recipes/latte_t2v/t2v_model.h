// The text-to-video transformer as the latte_t2v commands build it: the pipeline's LatteTransformer3DModel, with
// LoRA adapters when lora.rank > 0, and the trained weights of a checkpoint over it (all of them after full
// fine-tuning; the adapters after LoRA, whose checkpoints hold nothing else). Also the two ways a LoRA transformer
// leaves tune: a PEFT adapter (diffusers' module names) and a merged state for a pipeline directory.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tune/models/latte_t2v.h"

namespace tune::recipes::latte_t2v {

// `config_file`: the transformer's config.json (the pipeline's, or a checkpoint's copy of it). `transformer_dir`:
// the pipeline's weights, loaded unless a full fine-tuning checkpoint replaces them all. `checkpoint`: its
// sampling weights (ema.safetensors, else model.safetensors) are loaded last.
models::LatteT2V load_transformer(const std::filesystem::path& config_file, const std::filesystem::path& transformer_dir,
                                  const models::LatteT2VLora& lora,
                                  const std::optional<std::filesystem::path>& checkpoint = std::nullopt);

// Freezes every weight but the adapters' (LoRA); returns the number of trainable tensors.
int64_t freeze_all_but_adapters(models::LatteT2VImpl& model);

// diffusers' state dict with each adapter merged into its base weight (W + alpha/r B A, in fp32), no lora_ tensors.
std::vector<std::pair<std::string, torch::Tensor>> merged_state(const models::LatteT2VImpl& model);

// DIR/adapter_config.json and DIR/adapter_model.safetensors as PEFT saves a LoRA on a diffusers transformer
// (keys "base_model.model.<diffusers name>.lora_A.weight"): `adapter` holds the lora_ tensors under tune's names.
void write_peft_adapter(const std::filesystem::path& dir, const models::LatteT2VLora& lora,
                        const std::vector<std::pair<std::string, torch::Tensor>>& adapter,
                        const std::string& base_model_path);

}  // namespace tune::recipes::latte_t2v
