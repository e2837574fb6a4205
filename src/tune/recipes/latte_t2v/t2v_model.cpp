// Building, loading and exporting the latte_t2v transformer.
#include "tune/recipes/latte_t2v/t2v_model.h"

#include <fmt/format.h>

#include <map>

#include "tune/core/log.h"
#include "tune/io/json_file.h"
#include "tune/io/safetensors.h"
#include "tune/io/weights.h"
#include "tune/recipes/diffusion/diffusion_checkpoint.h"
#include "tune/recipes/peft_adapter_config.h"

namespace tune::recipes::latte_t2v {

models::LatteT2V load_transformer(const std::filesystem::path& config_file, const std::filesystem::path& transformer_dir,
                                  const models::LatteT2VLora& lora,
                                  const std::optional<std::filesystem::path>& checkpoint) {
  models::LatteT2V model(models::read_latte_t2v_config(config_file), lora);
  const bool adapters = model->has_lora();
  if (!checkpoint || adapters) {
    io::LoadOptions options;
    if (adapters) options.ignore_missing_containing = {"lora_"};  // the pipeline has no adapters: PEFT's init stays
    io::load_into_module(*model, io::WeightSource::open_directory(transformer_dir, "diffusion_pytorch_model.safetensors",
                                                                  "diffusion_pytorch_model.safetensors.index.json"),
                         options);
  }
  if (checkpoint) {
    io::LoadOptions options;
    // A LoRA checkpoint holds the adapters only: every base weight is absent there (loaded from the pipeline above).
    if (adapters) options.ignore_missing_containing = {""};
    const auto file = diffusion_common::sampling_weights_file(*checkpoint);
    const size_t loaded = io::load_into_module(*model, io::WeightSource::open_file(file), options);
    log::info("transformer: {} tensors from {}{}", loaded, file.string(), adapters ? " (LoRA adapters)" : "");
  }
  return model;
}

int64_t freeze_all_but_adapters(models::LatteT2VImpl& model) {
  int64_t trainable = 0;
  for (const auto& item : model.named_parameters()) {
    const bool adapter = item.key().find("lora_") != std::string::npos;
    item.value().set_requires_grad(adapter);
    trainable += adapter ? 1 : 0;
  }
  return trainable;
}

std::vector<std::pair<std::string, torch::Tensor>> merged_state(const models::LatteT2VImpl& model) {
  std::map<std::string, torch::Tensor> merged;  // "<module>.weight" -> W + scaling B A
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    const auto* layer = dynamic_cast<const nn::LoraLinearImpl*>(item.value().get());
    if (layer != nullptr && layer->has_lora()) merged[item.key() + ".weight"] = layer->merged_weight();
  }
  std::vector<std::pair<std::string, torch::Tensor>> state;
  for (const auto& item : model.named_parameters()) {
    if (item.key().find("lora_") != std::string::npos) continue;
    const auto found = merged.find(item.key());
    state.emplace_back(item.key(), found != merged.end() ? found->second : item.value().detach());
  }
  return state;
}

void write_peft_adapter(const std::filesystem::path& dir, const models::LatteT2VLora& lora,
                        const std::vector<std::pair<std::string, torch::Tensor>>& adapter,
                        const std::string& base_model_path) {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& [name, tensor] : adapter) named.emplace_back("base_model.model." + name, tensor);
  io::save_safetensors(dir / "adapter_model.safetensors", named, {{"format", "pt"}});
  io::write_json_file(dir / "adapter_config.json",
                      peft_lora_config(lora.options, lora.targets, base_model_path, nullptr));
}

}  // namespace tune::recipes::latte_t2v
