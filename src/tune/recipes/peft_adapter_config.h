// PEFT's adapter_config.json for a LoRA adapter on any of tune's models (the SFT models' and diffusers
// transformers'): the fields PEFT writes, with the neutral value of each field that would change the adapter's maths.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "tune/nn/lora_linear.h"

namespace tune::recipes {

// PEFT LoraConfig fields that change what a loaded adapter computes, each with the value under which it does not.
const std::vector<std::pair<const char*, nlohmann::json>>& peft_neutral_fields();

// `task_type`: "CAUSAL_LM" for a language model's adapter, null for a diffusers model's (as PEFT writes it there).
nlohmann::json peft_lora_config(const nn::LoraOptions& lora, const std::vector<std::string>& target_modules,
                                const std::string& base_model_path, const nlohmann::json& task_type);

}  // namespace tune::recipes
