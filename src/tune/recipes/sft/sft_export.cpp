// `tune export` for the SFT recipe: a checkpoint as a Hugging Face model directory (LoRA merged on request) or as
// a PEFT adapter directory.
#include <fstream>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/io/safetensors.h"
#include "tune/recipes/checkpoint_files.h"
#include "tune/recipes/common_schema.h"
#include "tune/recipes/sft/sft_checkpoint.h"
#include "tune/recipes/sft/sft_model.h"
#include "tune/recipes/sft/sft_recipe.h"

namespace tune::recipes::sft {
namespace {

void copy_into(const std::filesystem::path& from_dir, const std::filesystem::path& to_dir,
               const std::vector<std::string>& names) {
  for (const auto& name : names) {
    std::filesystem::copy_file(from_dir / name, to_dir / name, std::filesystem::copy_options::overwrite_existing);
  }
}

// The tokenizer files the checkpoint holds (tokenizer.json or tokenizer.model, and tokenizer_config.json).
void copy_tokenizer(const std::filesystem::path& from_dir, const std::filesystem::path& to_dir) {
  for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json"}) {
    if (std::filesystem::exists(from_dir / name)) copy_into(from_dir, to_dir, {name});
  }
}

}  // namespace

int export_model(const ExportRequest& request) {
  const auto& checkpoint = request.checkpoint;
  if (std::filesystem::exists(request.out) && !std::filesystem::is_empty(request.out)) {
    throw UsageError(fmt::format("--out {} exists and is not empty; choose a new directory (nothing was written)",
                                 request.out.string()));
  }
  const bool lora = is_lora_checkpoint(checkpoint);
  require_checkpoint_files(checkpoint, checkpoint_weight_files(checkpoint));
  const auto temporary = request.out.string() + ".tmp";
  std::filesystem::remove_all(temporary);
  std::filesystem::create_directories(temporary);
  if (!lora) {
    if (request.merge_lora) log::warn("{} is a full fine-tuning checkpoint: there is no LoRA adapter to merge", checkpoint.string());
    copy_into(checkpoint, temporary, {"config.json", "model.safetensors"});
    copy_tokenizer(checkpoint, temporary);
  } else if (!request.merge_lora) {
    copy_into(checkpoint, temporary, {"adapter_config.json", "adapter_model.safetensors"});
    copy_tokenizer(checkpoint, temporary);
  } else {
    SftSettings sft = read_sft_settings(request.config);
    sft.model.lora = lora_from_peft_config(checkpoint / "adapter_config.json");
    sft.tokenizer_path = checkpoint.string();
    const auto tokenizer = load_tokenizer(sft);
    auto model = build_model(sft, tokenizer, 0);
    load_checkpoint_weights(checkpoint, model);
    io::save_safetensors(std::filesystem::path(temporary) / "model.safetensors", model->merged_state(), {{"format", "pt"}});
    std::ofstream(std::filesystem::path(temporary) / "config.json") << model->config().to_json().dump(2) << "\n";
    copy_tokenizer(checkpoint, temporary);
  }
  std::filesystem::remove_all(request.out);
  std::filesystem::rename(temporary, request.out);
  log::info("exported {} to {} ({})", checkpoint.string(), request.out.string(),
            !lora ? "Hugging Face model" : request.merge_lora ? "Hugging Face model, LoRA merged" : "PEFT adapter");
  return 0;
}

}  // namespace tune::recipes::sft
