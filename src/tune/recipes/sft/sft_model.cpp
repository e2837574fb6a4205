// Model and tokenizer construction for the SFT recipe.
#include "tune/recipes/sft/sft_model.h"

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/io/weights.h"

namespace tune::recipes::sft {

data::Tokenizer load_tokenizer(const SftSettings& settings) {
  if (settings.tokenizer_path) {
    auto tokenizer = data::Tokenizer::load(*settings.tokenizer_path);
    log::debug("tokenizer: {} ({} pieces)", tokenizer.model_path().string(), tokenizer.vocab_size());
    return tokenizer;
  }
  const std::filesystem::path directory(*settings.model.path);
  if (!data::Tokenizer::directory_has_tokenizer(directory)) {
    throw InputError(fmt::format("{}: no tokenizer.json or tokenizer.model in the model directory; set `tokenizer:` "
                                 "in the recipe to one",
                                 directory.string()));
  }
  auto tokenizer = data::Tokenizer::load(directory);  // tokenizer.json wins over tokenizer.model, as in transformers
  log::debug("tokenizer: {} ({} pieces)", tokenizer.model_path().string(), tokenizer.vocab_size());
  return tokenizer;
}

namespace {

void initialise_like_hf(models::LlamaForCausalLMImpl& model) {
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    if (name.find("lora_") != std::string::npos) continue;  // LoRA keeps PEFT's own init
    if (name.find("norm") != std::string::npos) {
      item.value().fill_(1.0);
    } else if (item.value().dim() >= 2) {
      item.value().normal_(0.0, 0.02);
    } else {
      item.value().zero_();  // biases
    }
  }
}

}  // namespace

void load_model_weights(models::LlamaForCausalLM& model, const std::filesystem::path& model_dir) {
  io::LoadOptions options;
  options.ignore_missing_containing = {"lora_"};
  options.ignore_unexpected_containing = {"rotary_emb.inv_freq"};
  const size_t loaded = io::load_into_module(*model, io::WeightSource::open_directory(model_dir), options);
  log::info("loaded {} tensors from {}", loaded, model_dir.string());
}

models::LlamaForCausalLM build_model(const SftSettings& settings, const data::Tokenizer& tokenizer, uint64_t seed,
                                     bool frozen_weights_bf16, ModelUse use) {
  torch::manual_seed(seed);
  models::LlamaConfig config;
  if (settings.model.path) {
    config = models::LlamaConfig::from_file((std::filesystem::path(*settings.model.path) / "config.json").string());
  } else {
    config = settings.model.architecture;
    if (config.vocab_size == 0) config.vocab_size = tokenizer.vocab_size();
    config.bos_token_id = tokenizer.bos_id();
    config.eos_token_ids = {tokenizer.eos_id()};
  }
  if (config.vocab_size < tokenizer.vocab_size()) {
    throw InputError(fmt::format("the model's vocab_size ({}) is smaller than the tokenizer's ({} pieces in {})",
                                 config.vocab_size, tokenizer.vocab_size(), tokenizer.model_path().string()));
  }
  models::LlamaLoraOptions lora = settings.model.lora;
  // Loaded weights overwrite the init, so the frozen ones can be built in bf16 straight away; a random init is
  // drawn over the whole model in fp32 (its values must not depend on param_dtype) and converted by the caller.
  lora.all_frozen = use == ModelUse::inference;
  if (frozen_weights_bf16 && (lora.lora.rank > 0 || lora.all_frozen) && settings.model.path) {
    lora.base_dtype = torch::kBFloat16;
  }
  models::LlamaForCausalLM model(config, lora);
  if (settings.model.path) {
    load_model_weights(model, *settings.model.path);
  } else {
    initialise_like_hf(*model);
  }
  if (lora.all_frozen) {
    for (auto& param : model->parameters()) param.set_requires_grad(false);
  } else if (model->has_lora()) {
    model->freeze_base_weights();
  }
  return model;
}

int64_t store_frozen_weights_in_bf16(models::LlamaForCausalLM& model) {
  torch::NoGradGuard no_grad;
  int64_t in_bf16 = 0;
  for (auto& param : model->parameters()) {
    if (param.requires_grad()) continue;
    if (param.scalar_type() != torch::kBFloat16) param.set_data(param.to(torch::kBFloat16));
    ++in_bf16;
  }
  return in_bf16;
}

std::vector<std::pair<std::string, torch::Tensor>> weights_to_save(const models::LlamaForCausalLM& model) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  const bool lora_only = model->has_lora();
  for (const auto& item : model->named_parameters()) {
    const bool is_lora = item.key().find("lora_") != std::string::npos;
    if (lora_only != is_lora) continue;
    tensors.emplace_back(lora_only ? "base_model.model." + item.key() : item.key(), item.value().detach());
  }
  return tensors;
}

}  // namespace tune::recipes::sft
