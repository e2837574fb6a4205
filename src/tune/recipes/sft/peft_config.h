// PEFT's adapter_config.json: written beside every LoRA checkpoint and read back wherever an adapter is loaded
// (tune infer on a LoRA run, tune export --merge-lora, a PEFT-saved adapter). The adapter's own config decides its
// maths, so every PEFT field that would change them and that tune does not implement is refused by name.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "tune/models/llama.h"

namespace tune::recipes::sft {

// adapter_config.json for the model's LoRA options (PEFT's field names and neutral values).
nlohmann::json peft_adapter_config(const models::LlamaLoraOptions& lora, const std::string& base_model_path);

// Reads a PEFT LoRA adapter config. target_modules may be a list of projection names or "all-linear" (all seven
// projections, as PEFT expands it for Llama-family models). Throws tune::InputError naming the file and the field
// for an unreadable file, a non-LoRA adapter, a regular-expression target, or any field with a value that changes
// the adapter's maths in a way tune does not implement (use_dora, use_rslora, rank_pattern, alpha_pattern,
// layers_to_transform, modules_to_save, bias, fan_in_fan_out, ...).
models::LlamaLoraOptions lora_from_peft_config(const std::filesystem::path& adapter_config_json);

}  // namespace tune::recipes::sft
