// Writing and reading PEFT adapter_config.json (field meanings from peft.tuners.lora.config.LoraConfig).
#include "tune/recipes/sft/peft_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "tune/core/error.h"
#include "tune/io/json_fields.h"
#include "tune/io/json_file.h"
#include "tune/recipes/peft_adapter_config.h"

namespace tune::recipes::sft {
namespace {

using nlohmann::json;

const std::vector<std::string> kProjections = {"q_proj", "k_proj", "v_proj", "o_proj",
                                               "gate_proj", "up_proj", "down_proj"};

// Empty lists and objects mean "none" as much as null does.
bool is_neutral(const json& value, const json& neutral) {
  if (value == neutral) return true;
  const bool empty = (value.is_array() || value.is_object()) && value.empty();
  return empty && (neutral.is_null() || neutral.is_object());
}

std::vector<std::string> read_target_modules(const json& config, const io::JsonFields& reader) {
  if (!reader.has("target_modules")) reader.fail("target_modules", "is required");
  const json& targets = config.at("target_modules");
  if (targets.is_string()) {
    if (targets.get<std::string>() == "all-linear") return kProjections;
    reader.fail("target_modules", fmt::format("is the regular expression {}; tune supports a list of projection names "
                                              "({}) or \"all-linear\"", targets.dump(), fmt::join(kProjections, ", ")));
  }
  std::vector<std::string> modules = reader.string_list("target_modules", {});
  for (const auto& module : modules) {
    if (std::find(kProjections.begin(), kProjections.end(), module) == kProjections.end()) {
      reader.fail("target_modules", fmt::format("has '{}'; tune's Llama-family models adapt {}", module,
                                                fmt::join(kProjections, ", ")));
    }
  }
  return modules;
}

}  // namespace

json peft_adapter_config(const models::LlamaLoraOptions& lora, const std::string& base_model_path) {
  return peft_lora_config(lora.lora, lora.target_modules, base_model_path, "CAUSAL_LM");
}

models::LlamaLoraOptions lora_from_peft_config(const std::filesystem::path& adapter_config_json) {
  const json config = io::read_json_file(adapter_config_json, "the PEFT adapter config");
  const std::string source = adapter_config_json.string();
  if (!config.is_object()) throw InputError(fmt::format("{}: expected a JSON object (a PEFT adapter config)", source));
  const io::JsonFields reader(config, source);
  const std::string peft_type = reader.string("peft_type", "LORA");
  if (peft_type != "LORA") reader.fail("peft_type", fmt::format("is '{}'; tune loads LORA adapters only", peft_type));
  for (const auto& [field, neutral] : peft_neutral_fields()) {
    if (config.contains(field) && !is_neutral(config.at(field), neutral)) {
      reader.fail(field, fmt::format("is {}, which tune does not implement (it would change the adapter's output); "
                                     "supported: {}", config.at(field).dump(), neutral.dump()));
    }
  }
  models::LlamaLoraOptions lora;
  if (!reader.has("r")) reader.fail("r", "is required (the LoRA rank)");
  if (!reader.has("lora_alpha")) reader.fail("lora_alpha", "is required");
  lora.lora.rank = reader.positive("r", 0);
  lora.lora.alpha = reader.real("lora_alpha", 0.0);
  lora.lora.dropout = reader.real("lora_dropout", 0.0);
  if (lora.lora.dropout < 0 || lora.lora.dropout >= 1) {
    reader.fail("lora_dropout", fmt::format("must be in [0, 1), got {}", lora.lora.dropout));
  }
  lora.target_modules = read_target_modules(config, reader);
  return lora;
}

}  // namespace tune::recipes::sft
