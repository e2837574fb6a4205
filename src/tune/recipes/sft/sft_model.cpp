// Model and tokenizer construction for the SFT recipe.
#include "tune/recipes/sft/sft_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/io/bnb_4bit.h"
#include "tune/io/json_file.h"
#include "tune/io/weights.h"
#include "tune/nn/lora_linear.h"
#include "tune/precision/nf4.h"

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
      item.value().fill_(model.config().is_gemma2() ? 0.0 : 1.0);  // Gemma 2 stores offsets from one
    } else if (item.value().dim() >= 2) {
      item.value().normal_(0.0, 0.02);
    } else {
      item.value().zero_();  // biases
    }
  }
}

// The NF4 projections of `model` with their HF weight names ("model.layers.0.self_attn.q_proj.weight").
std::vector<std::pair<std::string, nn::LoraLinearImpl*>> nf4_layers(torch::nn::Module& model) {
  std::vector<std::pair<std::string, nn::LoraLinearImpl*>> layers;
  for (const auto& item : model.named_modules()) {
    auto* linear = dynamic_cast<nn::LoraLinearImpl*>(item.value().get());
    if (linear != nullptr && linear->nf4_base()) layers.emplace_back(item.key() + ".weight", linear);
  }
  return layers;
}

// One dense weight from the file, checked as io::load_into_module checks a parameter, then quantised.
precision::Nf4Tensor quantize_from_file(const io::WeightSource& source, const std::string& name,
                                        const nn::LoraLinearImpl& layer, bool double_quant) {
  const std::filesystem::path& file = source.file_of(name).path();
  const torch::Tensor dense = source.load(name);
  const std::vector<int64_t> expected = {layer.options.out_features(), layer.options.in_features()};
  if (dense.sizes().vec() != expected) {
    throw InputError(fmt::format("{}: tensor '{}' has shape [{}], the model expects [{}]", file.string(), name,
                                 fmt::join(dense.sizes(), ", "), fmt::join(expected, ", ")));
  }
  const auto dtype = dense.scalar_type();
  if (dtype != torch::kBFloat16 && dtype != torch::kHalf && dtype != torch::kFloat32) {
    throw InputError(fmt::format("{}: tensor '{}' has dtype {}; lora.quantize_base nf4 quantises bf16, fp16 or fp32 "
                                 "weights", file.string(), name, c10::toString(dtype)));
  }
  io::require_finite(dense, file, name);
  return precision::quantize_nf4(dense, /*blocksize=*/64, double_quant);
}

// Fills every NF4 projection, one weight at a time (the dense tensor is freed before the next is read), and returns
// their names, which the dense loader must then skip.
std::vector<std::string> load_nf4_weights(models::LlamaForCausalLM& model, const io::WeightSource& source) {
  std::vector<std::string> names, missing;
  int64_t quantized = 0, prequantized = 0;
  for (auto& [name, layer] : nf4_layers(*model)) {
    if (!source.contains(name)) {
      missing.push_back(name);
      continue;
    }
    if (io::is_bnb_4bit_weight(source, name)) {
      layer->set_nf4_weight(io::read_bnb_4bit_weight(source, name));
      ++prequantized;
    } else {
      layer->set_nf4_weight(quantize_from_file(source, name, *layer, model->lora_options().double_quant));
      ++quantized;
    }
    names.push_back(name);
  }
  if (!missing.empty()) {
    throw InputError(fmt::format("{}: {} weight(s) the model needs are missing: '{}'", source.origin().string(),
                                 missing.size(), fmt::join(missing, "', '")));
  }
  if (quantized > 0) log::info("quantised {} projection weights to NF4 as they loaded", quantized);
  if (prequantized > 0) log::info("read {} NF4 weights pre-quantised by bitsandbytes", prequantized);
  return names;
}

}  // namespace

// bitsandbytes quantises every Linear but those llm_int8_skip_modules names (and lm_head), so the answer is read from
// the tensors themselves.
PrequantizedBase prequantized_base(const std::filesystem::path& model_dir, const models::LlamaConfig& config) {
  const auto config_file = model_dir / "config.json";
  const nlohmann::json config_json = io::read_json_file(config_file, "the model config");
  if (!config_json.is_object() || !config_json.contains("quantization_config")) return {};
  const io::BnbQuantizationConfig quantization =
      io::parse_bnb_quantization_config(config_json.at("quantization_config"), config_file.string());
  PrequantizedBase base;
  base.double_quant = quantization.double_quant;
  const io::WeightSource source = io::WeightSource::open_directory(model_dir);
  static const std::array<std::pair<const char*, const char*>, 7> kProjections = {{{"self_attn", "q_proj"},
      {"self_attn", "k_proj"}, {"self_attn", "v_proj"}, {"self_attn", "o_proj"}, {"mlp", "gate_proj"},
      {"mlp", "up_proj"}, {"mlp", "down_proj"}}};
  for (const auto& [parent, projection] : kProjections) {
    int64_t layers = 0;
    for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
      layers += io::is_bnb_4bit_weight(
          source, fmt::format("model.layers.{}.{}.{}.weight", layer, parent, projection)) ? 1 : 0;
    }
    if (layers == config.num_hidden_layers) base.projections.emplace_back(projection);
    if (layers != 0 && layers != config.num_hidden_layers) {
      throw InputError(fmt::format(
          "{}: {} of {} layers hold {} in bitsandbytes 4-bit and the rest unquantised (quantization_config."
          "llm_int8_skip_modules: [{}]); tune stores a projection in NF4 in every layer or in none",
          model_dir.string(), layers, config.num_hidden_layers, projection,
          fmt::join(quantization.skip_modules.value_or(std::vector<std::string>{}), ", ")));
    }
  }
  return base;
}

void load_model_weights(models::LlamaForCausalLM& model, const std::filesystem::path& model_dir) {
  const io::WeightSource source = io::WeightSource::open_directory(model_dir);
  io::LoadOptions options;
  options.ignore_missing_containing = {"lora_", ".nf4_"};  // adapters start fresh; NF4 buffers are filled below
  options.ignore_unexpected_containing = {"rotary_emb.inv_freq"};
  // First, so a quantised weight's dense copy is gone before the next is read. A full name also covers the
  // quant-state tensors bitsandbytes saves beside it ("<name>.absmax", ...).
  for (const std::string& name : load_nf4_weights(model, source)) options.ignore_unexpected_containing.push_back(name);
  const size_t loaded = io::load_into_module(*model, source, options);
  log::info("loaded {} tensors from {}", loaded, model_dir.string());
}

Nf4Footprint nf4_footprint(const models::LlamaForCausalLM& model) {
  Nf4Footprint footprint;
  for (const auto& item : model->named_modules()) {
    const auto* linear = dynamic_cast<const nn::LoraLinearImpl*>(item.value().get());
    if (linear == nullptr || !linear->nf4_base() || !linear->nf4_weight_loaded()) continue;
    const precision::Nf4Tensor weight = linear->nf4_weight();
    ++footprint.tensors;
    footprint.elements += weight.numel();
    footprint.bytes += weight.storage_bytes();
  }
  return footprint;
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
  if (settings.model.path) {
    // A pre-quantised directory loads as published: its NF4 projections stay NF4 (with quantize_base nf4, tune
    // quantises any the directory left dense).
    for (const std::string& projection : prequantized_base(*settings.model.path, config).projections) {
      if (std::find(lora.nf4_modules.begin(), lora.nf4_modules.end(), projection) == lora.nf4_modules.end()) {
        lora.nf4_modules.push_back(projection);
      }
    }
    if (!lora.nf4_modules.empty() && lora.lora.rank == 0 && use == ModelUse::training) {
      throw UsageError(fmt::format("lora.rank is 0 (full fine-tuning), but {} holds bitsandbytes 4-bit weights, "
                                   "which cannot train; set lora.rank > 0 to train LoRA adapters on the NF4 base "
                                   "(QLoRA)", *settings.model.path));
    }
  }
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
    // An NF4 projection has no dense weight to initialise: HF's init is drawn for it and quantised, in module order.
    torch::NoGradGuard no_grad;
    for (auto& [name, layer] : nf4_layers(*model)) {
      const torch::Tensor dense =
          torch::empty({layer->options.out_features(), layer->options.in_features()}).normal_(0.0, 0.02);
      layer->set_nf4_weight(precision::quantize_nf4(dense, /*blocksize=*/64, lora.double_quant));
    }
  }
  if (lora.all_frozen) {
    for (auto& param : model->parameters()) param.set_requires_grad(false);
  } else if (model->has_lora()) {
    model->freeze_base_weights();
  }
  return model;
}

int64_t store_frozen_weights_in_bf16(models::LlamaForCausalLM& model) {
  return nn::store_frozen_parameters_in_bf16(*model);
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
