#include "tune/recipes/diffusion/pipeline_components.h"

#include <fmt/format.h>

#include "tune/config/config.h"
#include "tune/core/error.h"
#include "tune/io/pipeline_index.h"

namespace tune::recipes::diffusion_common {

PipelinePaths read_pipeline_paths(const config::Config& config) {
  PipelinePaths paths;
  auto optional_path = [&](const char* key, std::optional<std::string>& out) {
    if (config.has(key)) out = config.get_string(key);
  };
  optional_path("model.path", paths.path);
  optional_path("model.transformer", paths.transformer);
  optional_path("model.vae", paths.vae);
  optional_path("model.text_encoder", paths.text_encoder);
  optional_path("model.tokenizer", paths.tokenizer);
  optional_path("model.scheduler", paths.scheduler);
  return paths;
}

std::map<std::string, std::filesystem::path> resolve_pipeline_components(
    const std::optional<std::string>& pipeline_path, const std::vector<ComponentSpec>& components,
    const std::string& pipeline_kind) {
  std::optional<io::PipelineIndex> index;
  if (pipeline_path) index = io::read_pipeline_index(*pipeline_path);
  std::map<std::string, std::filesystem::path> paths;
  for (const auto& component : components) {
    std::filesystem::path directory;
    if (component.override_path) {
      directory = *component.override_path;
    } else if (index) {
      directory = index->require(component.name, component.classes).directory;
    } else {
      throw UsageError(fmt::format("no model.path (a diffusers {} pipeline directory) and no model.{}: set "
                                   "model.path, or give every component's directory",
                                   pipeline_kind, component.name));
    }
    if (!std::filesystem::is_directory(directory)) {
      throw InputError(fmt::format("{}: the {} directory does not exist", directory.string(), component.name));
    }
    paths[component.name] = directory;
  }
  return paths;
}

}  // namespace tune::recipes::diffusion_common
