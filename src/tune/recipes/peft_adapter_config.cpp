// PEFT adapter_config.json fields (meanings from peft.tuners.lora.config.LoraConfig).
#include "tune/recipes/peft_adapter_config.h"

namespace tune::recipes {

using nlohmann::json;

const std::vector<std::pair<const char*, json>>& peft_neutral_fields() {
  // An adapter with any other value would load without error and compute something else. (Fields that only affect
  // how a new adapter is initialised or trained, such as init_lora_weights or loftq_config, do not matter once the
  // weights exist and are not listed.)
  static const std::vector<std::pair<const char*, json>> fields = {
      {"use_rslora", false},         {"use_dora", false},           {"use_qalora", false},
      {"lora_bias", false},          {"fan_in_fan_out", false},     {"bias", "none"},
      {"rank_pattern", json::object()}, {"alpha_pattern", json::object()},
      {"layers_to_transform", nullptr}, {"modules_to_save", nullptr}, {"exclude_modules", nullptr},
      {"layer_replication", nullptr},   {"target_parameters", nullptr}, {"trainable_token_indices", nullptr},
      {"alora_invocation_tokens", nullptr}, {"use_bdlora", nullptr},  {"megatron_config", nullptr},
  };
  return fields;
}

json peft_lora_config(const nn::LoraOptions& lora, const std::vector<std::string>& target_modules,
                      const std::string& base_model_path, const json& task_type) {
  json config = {{"peft_type", "LORA"},
                 {"task_type", task_type},
                 {"base_model_name_or_path", base_model_path},
                 {"r", lora.rank},
                 {"lora_alpha", lora.alpha},
                 {"lora_dropout", lora.dropout},
                 {"target_modules", target_modules},
                 {"inference_mode", true},
                 {"init_lora_weights", true},
                 {"layers_pattern", nullptr},
                 {"revision", nullptr}};
  for (const auto& [field, neutral] : peft_neutral_fields()) config[field] = neutral;
  return config;
}

}  // namespace tune::recipes
