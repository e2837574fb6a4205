// Where a diffusers pipeline's parts come from: model_index.json naming each component's folder and class, each part
// replaceable by a directory of its own (the recipe's model.<component> key). Shared by the text-conditioned
// diffusion recipes (latte_t2v, sana).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tune::config {
class Config;
}

namespace tune::recipes::diffusion_common {

// model.path (a pipeline directory) and the model.<component> overrides, as a recipe's config gives them.
struct PipelinePaths {
  std::optional<std::string> path;
  std::optional<std::string> transformer, vae, text_encoder, tokenizer, scheduler;
};
PipelinePaths read_pipeline_paths(const config::Config& config);

struct ComponentSpec {
  std::string name;                          // model_index.json's key and the model.<name> override
  std::vector<std::string> classes;          // the classes tune implements for it
  std::optional<std::string> override_path;  // model.<name>, when the recipe sets it
};

// Each component's directory: the override, else model_index.json's entry (checked to be of an implemented class;
// an error naming the file, the component and its class otherwise). Without a pipeline directory every component
// must be overridden (UsageError naming the missing model.<name>). A directory that does not exist: InputError.
// `pipeline_kind` names the pipeline in messages, e.g. "Sana".
std::map<std::string, std::filesystem::path> resolve_pipeline_components(
    const std::optional<std::string>& pipeline_path, const std::vector<ComponentSpec>& components,
    const std::string& pipeline_kind);

}  // namespace tune::recipes::diffusion_common
