// `tune export` for text-to-video Latte: a checkpoint -> a diffusers pipeline directory that LattePipeline.
// from_pretrained loads. The trained transformer (the checkpoint's EMA weights, LoRA merged, diffusers' names, fp32)
// with its config.json replaces the pipeline's transformer/ (a LoRA checkpoint is also a PEFT adapter as it is); every other component (vae, text_encoder, tokenizer,
// scheduler) is the run's own, hard-linked where the filesystem allows (T5-XXL is ~9 GB) and copied otherwise.
// Written to OUT.tmp and renamed, so an interrupted export never leaves a half pipeline under OUT.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/diffusion/scheduler_config.h"
#include "tune/io/json_file.h"
#include "tune/io/safetensors.h"
#include "tune/recipes/diffusion/diffusion_checkpoint.h"
#include "tune/recipes/diffusion/diffusers_transformer.h"
#include "tune/recipes/latte_t2v/t2v_model.h"
#include "tune/recipes/latte_t2v/t2v_pipeline.h"
#include "tune/recipes/latte_t2v/t2v_recipe.h"

namespace tune::recipes::latte_t2v {
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

// The pipeline's model_index.json when model.path gives one (its classes are the ones resolve_components checked),
// else one naming the classes the components have.
nlohmann::json model_index(const T2VSettings& settings, const ComponentPaths& paths) {
  if (settings.model.path) return io::read_json_file(fs::path(*settings.model.path) / "model_index.json", "model_index.json");
  const auto scheduler = diffusion::read_scheduler_config(paths.scheduler / "scheduler_config.json");
  return {{"_class_name", "LattePipeline"},
          {"transformer", nlohmann::json::array({"diffusers", "LatteTransformer3DModel"})},
          {"vae", nlohmann::json::array({"diffusers", "AutoencoderKL"})},
          {"text_encoder", nlohmann::json::array({"transformers", "T5EncoderModel"})},
          {"tokenizer", nlohmann::json::array({"transformers", "T5Tokenizer"})},
          {"scheduler", nlohmann::json::array({"diffusers", scheduler.class_name})}};
}

}  // namespace

int export_pipeline(const ExportRequest& request) {
  if (request.base) {
    throw UsageError("--base does not apply to recipe latte_t2v: a LoRA run merges into its pipeline's transformer");
  }
  if (fs::exists(request.out) && !fs::is_empty(request.out)) {
    throw UsageError(fmt::format("--out {} exists and is not empty; choose a new directory (nothing was written)",
                                 request.out.string()));
  }
  const fs::path& checkpoint = request.checkpoint;
  for (const char* name : {"config.json", "model.safetensors"}) {
    if (!fs::exists(checkpoint / name)) {
      throw InputError(fmt::format("{}: no {}; not a checkpoint of recipe latte_t2v", checkpoint.string(), name));
    }
  }
  const T2VSettings settings = read_t2v_settings(request.config);
  const ComponentPaths paths = resolve_components(settings.model);

  const fs::path temporary = request.out.string() + ".tmp";
  fs::remove_all(temporary);
  fs::create_directories(temporary / "transformer");
  fs::copy_file(checkpoint / "config.json", temporary / "transformer" / "config.json");
  // The transformer's weights under diffusers' names and file name: a full fine-tuning checkpoint's EMA weights as
  // they are; a LoRA run's pipeline weights with the EMA adapters merged in (W + alpha/r B A).
  const fs::path weights = diffusion_common::sampling_weights_file(checkpoint);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  if (settings.lora.options.rank > 0) {
    const auto model = load_transformer(checkpoint / "config.json", paths.transformer, settings.lora, checkpoint);
    tensors = diffusion_common::merged_state(*model);
  } else {
    const auto file = io::SafetensorsFile::open(weights);
    for (const auto& [name, entry] : file.entries()) tensors.emplace_back(name, file.load(name));
  }
  io::save_safetensors(temporary / "transformer" / "diffusion_pytorch_model.safetensors", tensors, {{"format", "pt"}});
  bool linked = true;
  for (const auto& [name, from] : {std::pair{"vae", paths.vae}, std::pair{"text_encoder", paths.text_encoder},
                                   std::pair{"tokenizer", paths.tokenizer}, std::pair{"scheduler", paths.scheduler}}) {
    linked = link_or_copy_tree(from, temporary / name) && linked;
  }
  io::write_json_file(temporary / "model_index.json", model_index(settings, paths));
  fs::remove_all(request.out);
  fs::rename(temporary, request.out);
  log::info("exported {} to {}: a diffusers LattePipeline directory with the trained transformer ({}{}; {} tensors), "
            "the other components {} from the run's pipeline", checkpoint.string(), request.out.string(),
            weights.filename().string(), settings.lora.options.rank > 0 ? ", LoRA merged" : "", tensors.size(),
            linked ? "hard-linked" : "copied");
  return 0;
}

}  // namespace tune::recipes::latte_t2v
