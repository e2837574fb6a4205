// `tune export` for the diffusers-pipeline recipes (text-to-video Latte, Sana): a checkpoint -> a pipeline directory
// that the pipeline class's from_pretrained loads. The trained transformer (the checkpoint's EMA weights, LoRA
// merged, diffusers' names, fp32) with its config.json replaces the pipeline's transformer/; every other component
// is the run's own, hard-linked where the filesystem allows (text encoders are gigabytes) and copied otherwise.
// Written to OUT.tmp and renamed, so an interrupted export never leaves a half pipeline under OUT.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tune/recipes/recipe.h"

namespace tune::recipes::diffusion_common {

struct PipelineExportSpec {
  std::string recipe;                        // for messages: "latte_t2v"
  std::string pipeline_class;                // for the log: "LattePipeline"
  std::optional<std::string> pipeline_path;  // model.path: its model_index.json is the export's
  nlohmann::json fallback_index;             // the model_index.json to write when there is no model.path
  std::vector<std::pair<std::string, std::filesystem::path>> components;  // name -> folder, the transformer aside
  bool lora = false;
  // LoRA: the transformer with the checkpoint's EMA adapters merged into the pipeline's weights.
  std::function<std::vector<std::pair<std::string, torch::Tensor>>()> merged_transformer;
};

int export_diffusers_pipeline(const ExportRequest& request, const PipelineExportSpec& spec);

}  // namespace tune::recipes::diffusion_common
