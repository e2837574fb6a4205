#include "tune/recipes/diffusion/diffusers_transformer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <map>

#include "tune/core/log.h"
#include "tune/io/json_file.h"
#include "tune/io/safetensors.h"
#include "tune/io/weights.h"
#include "tune/nn/lora_linear.h"
#include "tune/recipes/checkpoint_files.h"
#include "tune/recipes/diffusion/diffusion_checkpoint.h"
#include "tune/recipes/peft_adapter_config.h"

namespace tune::recipes::diffusion_common {

void load_diffusers_transformer(torch::nn::Module& model, bool has_lora, const std::filesystem::path& transformer_dir,
                                const std::optional<std::filesystem::path>& checkpoint) {
  if (!checkpoint || has_lora) {
    io::LoadOptions options;
    if (has_lora) options.ignore_missing_containing = {"lora_"};  // the pipeline has no adapters: PEFT's init stays
    io::load_into_module(model, io::WeightSource::open_directory(transformer_dir, "diffusion_pytorch_model.safetensors",
                                                                 "diffusion_pytorch_model.safetensors.index.json"),
                         options);
  }
  if (checkpoint) {
    io::LoadOptions options;
    // A LoRA checkpoint holds the adapters only: every base weight is absent there (loaded from the pipeline above).
    if (has_lora) options.ignore_missing_containing = {""};
    const auto file = sampling_weights_file(*checkpoint);
    const size_t loaded = io::load_into_module(model, io::WeightSource::open_file(file), options);
    log::info("transformer: {} tensors from {}{}", loaded, file.string(), has_lora ? " (LoRA adapters)" : "");
  }
}

int64_t freeze_all_but_adapters(torch::nn::Module& model) {
  int64_t trainable = 0;
  for (const auto& item : model.named_parameters()) {
    const bool adapter = item.key().find("lora_") != std::string::npos;
    item.value().set_requires_grad(adapter);
    trainable += adapter ? 1 : 0;
  }
  return trainable;
}

void train_adapters_only(torch::nn::Module& model, const models::DiffusersLora& lora, bool frozen_weights_bf16) {
  if (lora.options.rank == 0) return;
  const int64_t adapters = freeze_all_but_adapters(model);
  log::info("LoRA: rank {}, alpha {}, on {} ({} adapter tensors train; the transformer's weights are frozen)",
            lora.options.rank, lora.options.alpha, fmt::join(lora.targets, ", "), adapters);
  if (frozen_weights_bf16) {
    log::info("param_dtype bf16: {} frozen tensors stored in bf16 (the adapters train in fp32)",
              nn::store_frozen_parameters_in_bf16(model));
  }
}

std::vector<std::pair<std::string, torch::Tensor>> merged_state(const torch::nn::Module& model) {
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

void write_peft_adapter(const std::filesystem::path& dir, const models::DiffusersLora& lora,
                        const std::vector<std::pair<std::string, torch::Tensor>>& adapter,
                        const std::string& base_model_path) {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& [name, tensor] : adapter) named.emplace_back("base_model.model." + name, tensor);
  io::save_safetensors(dir / "adapter_model.safetensors", named, {{"format", "pt"}});
  io::write_json_file(dir / "adapter_config.json",
                      peft_lora_config(lora.options, lora.targets, base_model_path, nullptr));
}

void write_diffusers_lora(const std::filesystem::path& dir, const models::DiffusersLora& lora,
                          const std::vector<std::pair<std::string, torch::Tensor>>& adapter) {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& [name, tensor] : adapter) named.emplace_back("transformer." + name, tensor);
  const nlohmann::json config = {{"transformer.r", lora.options.rank},
                                 {"transformer.lora_alpha", lora.options.alpha},
                                 {"transformer.lora_dropout", lora.options.dropout},
                                 {"transformer.target_modules", lora.targets},
                                 {"transformer.bias", "none"}};
  io::save_safetensors(dir / "pytorch_lora_weights.safetensors", named,
                       {{"format", "pt"}, {"lora_adapter_metadata", config.dump(2)}});
}

void set_checkpoint_files(DiffusionTrainee& trainee, torch::nn::Module& model, bool has_lora,
                          const std::filesystem::path& config_file, const models::DiffusersLora& lora,
                          const std::string& base_model_path, bool diffusers_lora_file) {
  trainee.save_trainable_only = has_lora;
  trainee.save_config = [config_file, has_lora, lora, base_model_path, diffusers_lora_file](const std::filesystem::path& dir) {
    std::filesystem::copy_file(config_file, dir / "config.json", std::filesystem::copy_options::overwrite_existing);
    if (!has_lora) return;
    const auto adapter = read_named_tensors(dir / "ema.safetensors");
    write_peft_adapter(dir, lora, adapter, base_model_path);
    if (diffusers_lora_file) write_diffusers_lora(dir, lora, adapter);
  };
  trainee.load_weights = [&model, has_lora](const std::filesystem::path& file) {
    io::LoadOptions options;
    if (has_lora) options.ignore_missing_containing = {""};  // adapters only; the base is the pipeline's
    io::load_into_module(model, io::WeightSource::open_file(file), options);
  };
}

}  // namespace tune::recipes::diffusion_common
