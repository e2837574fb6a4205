#include "tune/models/generation_config.h"

#include <fmt/format.h>

#include <algorithm>

#include "tune/core/error.h"
#include "tune/io/json_file.h"

namespace tune::models {

std::vector<int64_t> generation_config_eos_ids(const std::filesystem::path& model_dir) {
  if (model_dir.empty()) return {};  // a randomly initialised model
  const auto path = model_dir / kGenerationConfigFile;
  if (!std::filesystem::exists(path)) return {};
  const nlohmann::json config = io::read_json_file(path, "the model's generation_config.json");
  if (!config.is_object() || !config.contains("eos_token_id") || config.at("eos_token_id").is_null()) return {};
  const nlohmann::json& eos = config.at("eos_token_id");
  std::vector<int64_t> ids;
  auto add = [&](const nlohmann::json& id) {
    if (!id.is_number_integer()) {
      throw InputError(fmt::format("{}: field 'eos_token_id' must be an integer or a list of integers, got {}",
                                   path.string(), eos.dump()));
    }
    ids.push_back(id.get<int64_t>());
  };
  if (eos.is_array()) {
    for (const auto& id : eos) add(id);
  } else {
    add(eos);
  }
  return ids;
}

std::vector<int64_t> merge_ids(std::vector<int64_t> ids, const std::vector<int64_t>& more) {
  for (const int64_t id : more) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

}  // namespace tune::models
