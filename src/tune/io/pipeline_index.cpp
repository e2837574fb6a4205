// model_index.json: component entries, metadata and pipeline settings told apart; errors name file and key.
#include "tune/io/pipeline_index.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "tune/core/error.h"
#include "tune/io/python_json.h"

namespace tune::io {
namespace {

constexpr char kIndexName[] = "model_index.json";

// diffusers writes a component as [library, class]; an optional one that is unused as [null, null].
bool looks_like_component(const nlohmann::json& value) {
  return value.is_array() && value.size() == 2 &&
         std::all_of(value.begin(), value.end(), [](const auto& v) { return v.is_string() || v.is_null(); });
}

// _class_name is a string, or [module, class] for a custom pipeline class.
std::string pipeline_class(const nlohmann::json& value, const std::filesystem::path& file) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array() && value.size() == 2 && value[1].is_string()) return value[1].get<std::string>();
  throw InputError(fmt::format("{}: key '_class_name' must be the pipeline's class name, got {}", file.string(),
                               value.dump()));
}

}  // namespace

const PipelineComponent& PipelineIndex::require(const std::string& name,
                                                const std::vector<std::string>& accepted_classes) const {
  const auto found = components.find(name);
  if (found == components.end()) {
    std::vector<std::string> present;
    for (const auto& [key, component] : components) present.push_back(key);
    throw InputError(fmt::format("{}: the {} needs the component '{}', which this pipeline does not have "
                                 "(its components: {})",
                                 file.string(), class_name.empty() ? "pipeline" : class_name, name,
                                 fmt::join(present, ", ")));
  }
  const auto& component = found->second;
  if (!accepted_classes.empty() &&
      std::find(accepted_classes.begin(), accepted_classes.end(), component.class_name) == accepted_classes.end()) {
    throw InputError(fmt::format("{}: key '{}' is {} ({}), which tune cannot load as the pipeline's {}; "
                                 "accepted: {}",
                                 file.string(), name, component.class_name, component.library, name,
                                 fmt::join(accepted_classes, ", ")));
  }
  return component;
}

PipelineIndex read_pipeline_index(const std::filesystem::path& pipeline_dir) {
  PipelineIndex index;
  index.file = pipeline_dir / kIndexName;
  const auto json = read_python_json_file(index.file, "the pipeline's model_index.json");
  if (!json.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object mapping component names to [library, class], got {}",
                                 index.file.string(), json.type_name()));
  }
  if (!json.contains("_class_name")) {
    throw InputError(fmt::format("{}: key '_class_name' (the pipeline's class) is missing; is this a diffusers "
                                 "pipeline directory?",
                                 index.file.string()));
  }
  for (const auto& [key, value] : json.items()) {
    if (key == "_class_name") {
      index.class_name = pipeline_class(value, index.file);
      continue;
    }
    if (key == "_diffusers_version" && value.is_string()) index.diffusers_version = value.get<std::string>();
    if (!key.empty() && key[0] == '_') continue;  // metadata: _diffusers_version, _name_or_path
    if (!value.is_array()) continue;  // a pipeline setting such as "requires_safety_checker": true
    if (!looks_like_component(value) || value[0].is_null() != value[1].is_null()) {
      throw InputError(fmt::format("{}: key '{}' must be a component [library, class] (or [null, null] when the "
                                   "pipeline has none), got {}",
                                   index.file.string(), key, value.dump()));
    }
    if (value[0].is_null()) continue;
    PipelineComponent component{key, value[0].get<std::string>(), value[1].get<std::string>(), pipeline_dir / key};
    if (!std::filesystem::is_directory(component.directory)) {
      throw InputError(fmt::format("{}: key '{}' names the component {} ({}), but its directory {} is missing",
                                   index.file.string(), key, component.class_name, component.library,
                                   component.directory.string()));
    }
    index.components.emplace(key, std::move(component));
  }
  return index;
}

bool is_pipeline_directory(const std::filesystem::path& dir) {
  std::error_code error;
  return std::filesystem::is_regular_file(dir / kIndexName, error);
}

}  // namespace tune::io
