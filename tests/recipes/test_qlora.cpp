// QLoRA's model side (recipes/sft/sft_model, models/llama with nf4_modules): a directory transformers + bitsandbytes
// saved in 4-bit loads as published, each NF4 weight equal to bitsandbytes' dequantisation of it (expected.safetensors
// from scripts/make_nf4_fixture.py); a dense directory quantised
// as it loads holds exactly quantize_nf4 of each file tensor; LoRA gradients over the NF4 base are the same under
// every checkpointing policy; the planner counts NF4 bytes.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/scratch_dir.h"
#include "common/tiny_llama.h"
#include "tune/data/tokenizer.h"
#include "tune/io/safetensors.h"
#include "tune/io/weights.h"
#include "tune/memory/checkpoint.h"
#include "tune/models/llama.h"
#include "tune/nn/lora_linear.h"
#include "tune/precision/nf4.h"
#include "tune/recipes/sft/parameter_bytes.h"
#include "tune/recipes/sft/sft_checkpoint.h"
#include "tune/recipes/sft/sft_model.h"

using namespace tune;

namespace {

const std::vector<std::string> kAllProjections = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                  "gate_proj", "up_proj", "down_proj"};

std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(TUNE_SOURCE_DIR) / "tests/fixtures/nf4" / name;
}

nn::LoraLinearImpl* projection(models::LlamaForCausalLM& model, const std::string& name) {
  for (const auto& item : model->named_modules()) {
    if (item.key() == name) return dynamic_cast<nn::LoraLinearImpl*>(item.value().get());
  }
  return nullptr;
}

}  // namespace

TEST_CASE("a bitsandbytes 4-bit directory loads as published: its NF4 weights equal bitsandbytes' dequantisation",
          "[recipes][qlora]") {
  // model_bf16_storage: packed bytes stored as bf16, no double quantisation, down_proj left dense
  // (llm_int8_skip_modules); model_double_quant: every projection NF4 with double quantisation.
  const std::map<std::string, std::vector<std::string>> cases = {
      {"model_double_quant", kAllProjections},
      {"model_bf16_storage", {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"}}};
  for (const auto& [name, nf4_modules] : cases) {
    INFO(name);
    const auto directory = fixture(name);
    const auto config = models::LlamaConfig::from_file((directory / "config.json").string());
    models::LlamaLoraOptions lora;
    lora.all_frozen = true;
    lora.nf4_modules = nf4_modules;
    models::LlamaForCausalLM model(config, lora);
    recipes::sft::load_model_weights(model, directory);
    // Every NF4 layer's weight equals bitsandbytes' own dequantisation of the saved tensors (expected.safetensors).
    const auto expected = io::WeightSource::open_file(directory / "expected.safetensors");
    int64_t compared = 0;
    for (const auto& weight_name : expected.names()) {
      INFO(weight_name);
      auto* layer = projection(model, weight_name.substr(0, weight_name.size() - std::string(".weight").size()));
      REQUIRE(layer != nullptr);
      if (!layer->nf4_base()) continue;  // lm_head: bitsandbytes dequantises it too, tune keeps the dense file tensor
      CHECK(torch::equal(layer->base_weight(), expected.load(weight_name)));
      ++compared;
    }
    CHECK(compared == static_cast<int64_t>(nf4_modules.size()));
    // Not the dense weights: the NF4 fields themselves, as bitsandbytes stored them.
    auto* q_proj = projection(model, "model.layers.0.self_attn.q_proj");
    REQUIRE(q_proj != nullptr);
    CHECK(q_proj->nf4_base());
    CHECK(q_proj->nf4_weight().double_quantized() == (name == "model_double_quant"));
  }
}

TEST_CASE("a bitsandbytes 4-bit directory gives transformers' fp32 logits", "[recipes][qlora]") {
  // logits.safetensors (scripts/make_nf4_fixture.py): `logits`, transformers + bitsandbytes' own 4-bit forward
  // (fp32 compute, train mode so bitsandbytes multiplies dequantised weights rather than repacking them for its bf16
  // CPU kernel); `dense_logits`, plain transformers' fp32 forward with every NF4 weight dequantised straight to fp32
  // as that forward does (the script checked the two agree within 1e-5).
  const std::map<std::string, std::vector<std::string>> cases = {
      {"model_double_quant", kAllProjections},
      {"model_bf16_storage", {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"}}};
  for (const auto& [name, nf4_modules] : cases) {
    INFO(name);
    const auto directory = fixture(name);
    models::LlamaLoraOptions lora;
    lora.all_frozen = true;
    lora.nf4_modules = nf4_modules;
    models::LlamaForCausalLM model(models::LlamaConfig::from_file((directory / "config.json").string()), lora);
    recipes::sft::load_model_weights(model, directory);
    model->eval();
    const auto reference = io::WeightSource::open_file(directory / "logits.safetensors");
    torch::NoGradGuard no_grad;
    const torch::Tensor logits = model->forward(reference.load("input_ids")).to(torch::kDouble);
    auto difference = [&](const std::string& key) {
      const torch::Tensor expected = reference.load(key).to(torch::kDouble);
      REQUIRE(logits.sizes() == expected.sizes());
      return (logits - expected).abs().max().item<double>();
    };
    const double from_dense = difference("dense_logits"), from_4bit = difference("logits");
    INFO("max |tune - transformers dense| = " << from_dense << ", max |tune - transformers 4-bit| = " << from_4bit);
    CHECK(from_dense < 1e-4);
    CHECK(from_4bit < 1e-4);
  }
}

TEST_CASE("an adapter tune writes over a bitsandbytes 4-bit base gives transformers + PEFT + bitsandbytes tune's logits",
          "[recipes][qlora]") {
  // The QLoRA parity: the 4-bit base as published, a LoRA adapter on every projection (random, so that it
  // matters), written by tune's checkpoint writer as `tune export` hands it out; PEFT applies it to the same
  // directory loaded 4-bit by transformers + bitsandbytes (scripts/peft_logits.py), fp32 compute on both sides.
  const auto directory = fixture("model_double_quant");
  models::LlamaLoraOptions lora;
  lora.lora.rank = 4;
  lora.lora.alpha = 8.0;
  lora.target_modules = kAllProjections;
  lora.nf4_modules = kAllProjections;
  models::LlamaForCausalLM model(models::LlamaConfig::from_file((directory / "config.json").string()), lora);
  recipes::sft::load_model_weights(model, directory);
  torch::NoGradGuard no_grad;
  torch::manual_seed(11);
  for (auto& item : model->named_parameters()) {
    if (item.key().find("lora_") != std::string::npos) {
      item.value().normal_(0.0, 1.0 / std::sqrt(static_cast<double>(item.value().size(1))));
    }
  }
  model->eval();
  const auto reference = io::WeightSource::open_file(directory / "logits.safetensors");
  const torch::Tensor ids = reference.load("input_ids");
  const torch::Tensor logits = model->forward(ids).to(torch::kDouble);
  REQUIRE((logits - reference.load("logits").to(torch::kDouble)).abs().max().item<double>() > 0.1);  // it matters

  const testing::ScratchDir scratch;
  const auto adapter = scratch.path() / "adapter";
  const auto tokenizer = data::Tokenizer::load(std::string(TUNE_SOURCE_DIR) + "/tests/fixtures/data/tiny.model");
  recipes::sft::write_checkpoint(adapter, model, tokenizer, directory.string(), nullptr, {});
  io::save_safetensors(scratch.path() / "input.safetensors", {{"input_ids", ids}});
  const auto peft_logits = scratch.path() / "peft_logits.safetensors";
  const auto command = fmt::format("'{}' '{}/scripts/peft_logits.py' '{}' '{}' '{}' '{}'", TUNE_PYTHON, TUNE_SOURCE_DIR,
                                   directory.string(), adapter.string(), (scratch.path() / "input.safetensors").string(),
                                   peft_logits.string());
  REQUIRE(std::system(command.c_str()) == 0);
  const torch::Tensor expected = io::SafetensorsFile::open(peft_logits).load("logits").to(torch::kDouble);
  REQUIRE(expected.sizes() == logits.sizes());
  const double difference = (logits - expected).abs().max().item<double>();
  INFO("max |tune - transformers + PEFT + bitsandbytes| logits = " << difference);
  CHECK(difference < 1e-4);
}

TEST_CASE("a dense directory is quantised as it loads: each weight equals quantize_nf4 of the file's tensor",
          "[recipes][qlora]") {
  torch::manual_seed(5);
  models::LlamaConfig config = testing::tiny_llama_config();
  config.vocab_size = 40;
  // A dense model written as a HF directory, then loaded with every projection NF4 (double quantisation off).
  models::LlamaForCausalLM dense(config);
  const auto directory = std::filesystem::temp_directory_path() / "tune-test-qlora-dense";
  std::filesystem::remove_all(directory);
  std::filesystem::create_directories(directory);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& item : dense->named_parameters()) tensors.emplace_back(item.key(), item.value().detach());
  io::save_safetensors(directory / "model.safetensors", tensors);

  models::LlamaLoraOptions lora;
  lora.lora.rank = 2;
  lora.target_modules = {"q_proj", "v_proj"};
  lora.nf4_modules = kAllProjections;
  lora.double_quant = false;
  models::LlamaForCausalLM qlora(config, lora);
  recipes::sft::load_model_weights(qlora, directory);
  for (const auto& [name, tensor] : tensors) {
    if (name.find("_proj.weight") == std::string::npos || name.rfind("model.layers.", 0) != 0) continue;
    INFO(name);
    auto* layer = projection(qlora, name.substr(0, name.size() - std::string(".weight").size()));
    REQUIRE(layer != nullptr);
    const auto expected = precision::quantize_nf4(tensor, 64, false);
    CHECK(torch::equal(layer->nf4_weight().packed, expected.packed));
    CHECK(torch::equal(layer->nf4_weight().absmax, expected.absmax));
  }
  // Embeddings, norms and lm_head stay dense parameters; the projections have no weight parameter.
  for (const auto& item : qlora->named_parameters()) {
    const bool projection_weight = item.key().find("_proj.weight") != std::string::npos &&
                                   item.key().find("lora_") == std::string::npos;
    CHECK_FALSE(projection_weight);
  }
  std::filesystem::remove_all(directory);
}

TEST_CASE("LoRA gradients over an NF4 base are the same under every checkpointing policy", "[recipes][qlora]") {
  torch::manual_seed(6);
  models::LlamaConfig config;
  config.vocab_size = 40;
  config.hidden_size = 32;
  config.intermediate_size = 48;
  config.num_hidden_layers = 3;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.max_position_embeddings = 64;
  models::LlamaLoraOptions lora;
  lora.lora.rank = 4;
  lora.target_modules = {"q_proj", "v_proj", "down_proj"};
  lora.nf4_modules = kAllProjections;
  models::LlamaForCausalLM model(config, lora);
  {
    torch::NoGradGuard no_grad;
    for (const auto& item : model->named_modules()) {
      auto* layer = dynamic_cast<nn::LoraLinearImpl*>(item.value().get());
      if (layer == nullptr || !layer->nf4_base()) continue;
      layer->set_nf4_weight(precision::quantize_nf4(
          torch::randn({layer->options.out_features(), layer->options.in_features()}) * 0.1, 64, true));
      if (layer->has_lora()) layer->lora_B->weight.normal_(0.0, 0.1);
    }
  }
  model->freeze_base_weights();
  const auto ids = torch::randint(0, 40, {2, 12});
  const auto upstream = torch::randn({2, 12, 40});
  auto pass = [&](memory::Policy policy) {
    model->set_block_runner(
        std::make_shared<memory::CheckpointRunner>(memory::CheckpointOptions{policy, 2}, config.num_hidden_layers));
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    (model->forward(ids) * upstream).sum().backward();
    std::map<std::string, torch::Tensor> grads;
    for (const auto& item : model->named_parameters()) {
      if (item.value().requires_grad()) grads[item.key()] = item.value().grad().clone();
    }
    return grads;
  };
  const auto reference = pass(memory::Policy::off);
  REQUIRE(reference.size() == 3 * 3 * 2);  // 3 layers x 3 adapted projections x (A, B)
  for (const auto policy : {memory::Policy::full, memory::Policy::every_k, memory::Policy::sqrt,
                            memory::Policy::selective}) {
    const auto grads = pass(policy);
    for (const auto& [name, grad] : reference) {
      INFO(memory::policy_name(policy) << ": " << name);
      REQUIRE(grads.at(name).defined());
      // Recompute dequantises again: the same values; selective may reorder gradient sums (last bits).
      CHECK((grads.at(name) - grad).abs().max().item<double>() <= 1e-6 * std::max(1.0, grad.abs().max().item<double>()));
    }
  }
}

TEST_CASE("the planner counts NF4 projections at their packed size", "[recipes][qlora][plan]") {
  models::LlamaConfig config;
  config.vocab_size = 128256;
  config.hidden_size = 2048;
  config.intermediate_size = 8192;
  config.num_hidden_layers = 16;
  config.num_attention_heads = 32;
  config.num_key_value_heads = 8;
  models::LlamaLoraOptions lora;
  lora.lora.rank = 8;
  const auto plain = recipes::sft::count_parameters(config, lora);
  lora.nf4_modules = kAllProjections;
  const auto quantized = recipes::sft::count_parameters(config, lora);
  CHECK(quantized.total == plain.total);
  // Every projection of Llama-3.2-1B's shape: q, o 2048x2048; k, v 512x2048; gate, up, down 8192x2048.
  const int64_t per_layer = 2 * 2048 * 2048 + 2 * 512 * 2048 + 3 * 8192 * 2048;
  CHECK(quantized.nf4 == 16 * per_layer);
  // Packed nibbles plus one byte per 64-block, a float32 per 256 blocks and the two code books, per tensor.
  int64_t bytes = 0;
  for (const int64_t n : {2048LL * 2048, 512LL * 2048, 512LL * 2048, 2048LL * 2048, 8192LL * 2048, 8192LL * 2048,
                          8192LL * 2048}) {
    bytes += n / 2 + n / 64 + (n / 64 + 255) / 256 * 4 + 16 * 4 + 256 * 4;
  }
  CHECK(quantized.nf4_bytes == 16 * bytes);
  const double bytes_per_parameter = static_cast<double>(quantized.nf4_bytes) / static_cast<double>(quantized.nf4);
  CHECK(bytes_per_parameter == Approx(0.516).margin(0.01));
  const auto plain_bytes = recipes::sft::resident_bytes(plain, /*frozen_weights_bf16=*/true, false);
  const auto nf4_bytes = recipes::sft::resident_bytes(quantized, /*frozen_weights_bf16=*/true, false);
  CHECK(plain_bytes.parameters - nf4_bytes.parameters == 2 * quantized.nf4 - quantized.nf4_bytes);
}
