// The lora.* keys of the diffusers-transformer recipes (text-to-video Latte, Sana): rank (0 = full fine-tuning),
// alpha, dropout and the projections adapted, checked against the model's own list.
#pragma once

#include <string>
#include <vector>

#include "tune/config/config.h"
#include "tune/models/diffusers_layers.h"

namespace tune::recipes::diffusion_common {

void add_lora_keys(config::Schema& schema, const std::vector<std::string>& default_targets, const std::string& targets_help);
// `known`: the module names the model can adapt; an unknown one fails naming lora.target_modules and the valid names.
models::DiffusersLora read_lora_settings(const config::Config& config, const std::vector<std::string>& known);
// Training with param_dtype bf16: a LoRA run's frozen transformer weights are stored in bf16 (train_adapters_only);
// full fine-tuning trains every weight, so there it fails naming param_dtype. (Inference, which trains nothing,
// takes param_dtype bf16 for every weight.)
void check_training_param_dtype(const config::Config& config, const models::DiffusersLora& lora);

}  // namespace tune::recipes::diffusion_common
