// A diffusers transformer (Latte-1's LatteTransformer3DModel, Sana's SanaTransformer2DModel) as the text-conditioned
// diffusion recipes train and ship it: its weights loaded from a pipeline's transformer/ folder, then a checkpoint's
// over them (all of them after full fine-tuning; the adapters after LoRA, whose checkpoints hold nothing else); the
// LoRA adapters alone trainable; and the ways a LoRA leaves tune: a PEFT adapter and diffusers' own LoRA file (keys
// under diffusers' module names), or merged into the weights for a pipeline directory.
#pragma once

#include <torch/nn/module.h>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tune/models/diffusers_layers.h"
#include "tune/recipes/diffusion/diffusion_train.h"

namespace tune::recipes::diffusion_common {

// `transformer_dir`: the pipeline's weights (diffusion_pytorch_model.safetensors, sharded or not), loaded unless a
// full fine-tuning checkpoint replaces them all; with adapters (`has_lora`) the pipeline holds none of them, so
// PEFT's initialisation stays. `checkpoint`: its sampling weights (ema.safetensors, else model.safetensors) last.
void load_diffusers_transformer(torch::nn::Module& model, bool has_lora, const std::filesystem::path& transformer_dir,
                                const std::optional<std::filesystem::path>& checkpoint = std::nullopt);

// Freezes every weight but the adapters' (LoRA); returns the number of trainable tensors.
int64_t freeze_all_but_adapters(torch::nn::Module& model);
// With lora.rank > 0: freezes all but the adapters and logs what trains, then with `frozen_weights_bf16`
// (param_dtype: bf16) stores the frozen weights in bf16; otherwise nothing (full fine-tuning, where
// check_training_param_dtype refused param_dtype bf16).
void train_adapters_only(torch::nn::Module& model, const models::DiffusersLora& lora, bool frozen_weights_bf16);

// diffusers' state dict with each adapter merged into its base weight (W + alpha/r B A, in fp32), no lora_ tensors.
std::vector<std::pair<std::string, torch::Tensor>> merged_state(const torch::nn::Module& model);

// DIR/adapter_config.json and DIR/adapter_model.safetensors as PEFT saves a LoRA on a diffusers transformer
// (keys "base_model.model.<diffusers name>.lora_A.weight"): `adapter` holds the lora_ tensors under tune's names,
// which are diffusers' module names.
void write_peft_adapter(const std::filesystem::path& dir, const models::DiffusersLora& lora,
                        const std::vector<std::pair<std::string, torch::Tensor>>& adapter,
                        const std::string& base_model_path);

// DIR/pytorch_lora_weights.safetensors as a diffusers pipeline's save_lora_weights writes it, which its
// load_lora_weights(DIR) reads: keys "transformer.<module>.lora_A.weight" / ".lora_B.weight", and the LoRA config
// (r, lora_alpha, lora_dropout, target_modules) in the file's "lora_adapter_metadata", keys prefixed "transformer."
// (without it diffusers would take alpha = r).
void write_diffusers_lora(const std::filesystem::path& dir, const models::DiffusersLora& lora,
                          const std::vector<std::pair<std::string, torch::Tensor>>& adapter);

// What a diffusers transformer's checkpoints hold, set on `trainee`: the transformer's config.json (copied from
// `config_file`) in every checkpoint; after LoRA the trained adapters only, which are also a PEFT adapter (on
// `base_model_path`) and, with `diffusers_lora_file`, a diffusers LoRA file, both of the EMA adapters (what
// sampling uses); loading a LoRA checkpoint leaves the pipeline's base weights as they are.
void set_checkpoint_files(DiffusionTrainee& trainee, torch::nn::Module& model, bool has_lora,
                          const std::filesystem::path& config_file, const models::DiffusersLora& lora,
                          const std::string& base_model_path, bool diffusers_lora_file);

}  // namespace tune::recipes::diffusion_common
