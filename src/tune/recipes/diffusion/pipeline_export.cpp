#include "tune/recipes/diffusion/pipeline_export.h"

#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/io/json_file.h"
#include "tune/io/safetensors.h"
#include "tune/recipes/diffusion/diffusion_checkpoint.h"

namespace tune::recipes::diffusion_common {
namespace {

namespace fs = std::filesystem;

// Hard links when possible (returns true), copies otherwise; directories recursively.
bool link_or_copy_tree(const fs::path& from, const fs::path& to) {
  bool linked_all = true;
  fs::create_directories(to);
  for (const auto& entry : fs::directory_iterator(from)) {
    const auto target = to / entry.path().filename();
    if (entry.is_directory()) {
      linked_all = link_or_copy_tree(entry.path(), target) && linked_all;
      continue;
    }
    std::error_code error;
    fs::create_hard_link(fs::canonical(entry.path()), target, error);
    if (error) {
      fs::copy_file(entry.path(), target);
      linked_all = false;
    }
  }
  return linked_all;
}

}  // namespace

int export_diffusers_pipeline(const ExportRequest& request, const PipelineExportSpec& spec) {
  if (request.base) {
    throw UsageError(fmt::format("--base does not apply to recipe {}: a LoRA run merges into its pipeline's transformer",
                                 spec.recipe));
  }
  if (fs::exists(request.out) && !fs::is_empty(request.out)) {
    throw UsageError(fmt::format("--out {} exists and is not empty; choose a new directory (nothing was written)",
                                 request.out.string()));
  }
  const fs::path& checkpoint = request.checkpoint;
  for (const char* name : {"config.json", "model.safetensors"}) {
    if (!fs::exists(checkpoint / name)) {
      throw InputError(fmt::format("{}: no {}; not a checkpoint of recipe {}", checkpoint.string(), name, spec.recipe));
    }
  }
  const fs::path temporary = request.out.string() + ".tmp";
  fs::remove_all(temporary);
  fs::create_directories(temporary / "transformer");
  fs::copy_file(checkpoint / "config.json", temporary / "transformer" / "config.json");
  // The transformer's weights under diffusers' names and file name: a full fine-tuning checkpoint's EMA weights as
  // they are; a LoRA run's pipeline weights with the EMA adapters merged in (W + alpha/r B A).
  const fs::path weights = sampling_weights_file(checkpoint);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  if (spec.lora) {
    tensors = spec.merged_transformer();
  } else {
    const auto file = io::SafetensorsFile::open(weights);
    for (const auto& [name, entry] : file.entries()) tensors.emplace_back(name, file.load(name));
  }
  io::save_safetensors(temporary / "transformer" / "diffusion_pytorch_model.safetensors", tensors, {{"format", "pt"}});
  bool linked = true;
  for (const auto& [name, from] : spec.components) linked = link_or_copy_tree(from, temporary / name) && linked;
  const auto index = spec.pipeline_path
                         ? io::read_json_file(fs::path(*spec.pipeline_path) / "model_index.json", "model_index.json")
                         : spec.fallback_index;
  io::write_json_file(temporary / "model_index.json", index);
  fs::remove_all(request.out);
  fs::rename(temporary, request.out);
  log::info("exported {} to {}: a diffusers {} directory with the trained transformer ({}{}; {} tensors), the other "
            "components {} from the run's pipeline", checkpoint.string(), request.out.string(), spec.pipeline_class,
            weights.filename().string(), spec.lora ? ", LoRA merged" : "", tensors.size(),
            linked ? "hard-linked" : "copied");
  return 0;
}

}  // namespace tune::recipes::diffusion_common
