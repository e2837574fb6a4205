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

}  // namespace tune::recipes::diffusion_common
