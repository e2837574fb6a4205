#include "tune/recipes/diffusion/lora_settings.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "tune/recipes/common_schema.h"

namespace tune::recipes::diffusion_common {

void add_lora_keys(config::Schema& schema, const std::vector<std::string>& default_targets, const std::string& targets_help) {
  schema.integer("lora.rank", 0, "LoRA rank on the transformer's projections; 0 = full fine-tuning");
  schema.real("lora.alpha", 16.0, "LoRA scaling numerator (scaling = alpha / rank)");
  schema.real("lora.dropout", 0.0, "dropout on the LoRA input");
  schema.string_list("lora.target_modules", default_targets, targets_help);
}

models::DiffusersLora read_lora_settings(const config::Config& config, const std::vector<std::string>& known) {
  models::DiffusersLora lora;
  lora.options.rank = get_int_at_least(config, "lora.rank", 0);
  lora.options.alpha = config.get_real("lora.alpha");
  lora.options.dropout = config.get_real("lora.dropout");
  if (lora.options.dropout < 0 || lora.options.dropout >= 1) config.fail("lora.dropout", "must be in [0, 1)");
  lora.targets = config.get_strings("lora.target_modules");
  for (const auto& target : lora.targets) {
    if (std::find(known.begin(), known.end(), target) == known.end()) {
      config.fail("lora.target_modules", fmt::format("has unknown module '{}'; valid: {}", target, fmt::join(known, ", ")));
    }
  }
  if (lora.options.rank > 0 && lora.targets.empty()) config.fail("lora.target_modules", "must not be empty");
  return lora;
}

void check_training_param_dtype(const config::Config& config, const models::DiffusersLora& lora) {
  if (config.get_string("param_dtype") == "bf16" && lora.options.rank == 0) {
    config.fail("param_dtype", "is 'bf16', which stores the frozen weights of a LoRA run in bf16, but full fine-tuning "
                               "(lora.rank 0) trains every weight; use fp32, or set lora.rank");
  }
}

}  // namespace tune::recipes::diffusion_common
