// Loads a case of tests/fixtures/llama (written by scripts/make_llama_fixture.py): the config, a model holding
// the fixture's weights, and the reference inputs and logits. Weights are copied by HF name, independently of
// io::load_into_module, so a naming mistake in the model shows up here as a missing or unexpected tensor.
#pragma once

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <set>
#include <string>

#include "tune/io/safetensors.h"
#include "tune/models/llama.h"

namespace tune::test {

inline std::string llama_fixture_dir(const std::string& name) {
  return std::string(TUNE_SOURCE_DIR) + "/tests/fixtures/llama/" + name;
}

// Copies every tensor of `file` into the parameter of the same name; requires the two name sets to be equal.
inline void copy_weights(models::LlamaForCausalLMImpl& model, const io::SafetensorsFile& file) {
  torch::NoGradGuard no_grad;
  std::set<std::string> file_names, model_names;
  for (const auto& entry : file.entries()) file_names.insert(entry.first);
  for (auto& item : model.named_parameters()) {
    model_names.insert(item.key());
    if (file.contains(item.key())) item.value().copy_(file.load(item.key()));
  }
  REQUIRE(model_names == file_names);
}

struct LlamaFixture {
  models::LlamaConfig config;
  models::LlamaForCausalLM model{nullptr};
  torch::Tensor input_ids;     // [2, 7]
  torch::Tensor position_ids;  // [2, 7], row 1 starts at 50
  torch::Tensor logits;        // [2, 7, vocab] float32 reference
};

inline LlamaFixture load_llama_fixture(const std::string& name, const models::LlamaLoraOptions& lora = {}) {
  LlamaFixture fixture;
  const std::string dir = llama_fixture_dir(name);
  fixture.config = models::LlamaConfig::from_file(dir + "/config.json");
  fixture.model = models::LlamaForCausalLM(fixture.config, lora);
  auto weights = io::SafetensorsFile::open(dir + "/model.safetensors");
  // LoRA tensors are not in HF checkpoints; copy the base weights by name and leave the adapters as built.
  if (lora.lora.rank == 0) {
    copy_weights(*fixture.model, weights);
  } else {
    torch::NoGradGuard no_grad;
    for (auto& item : fixture.model->named_parameters()) {
      if (item.key().find("lora_") != std::string::npos) continue;
      REQUIRE(weights.contains(item.key()));
      item.value().copy_(weights.load(item.key()));
    }
  }
  fixture.model->eval();
  auto io = io::SafetensorsFile::open(dir + "/io.safetensors");
  fixture.input_ids = io.load("input_ids");
  fixture.position_ids = io.load("position_ids");
  fixture.logits = io.load("logits");
  return fixture;
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

}  // namespace tune::test
