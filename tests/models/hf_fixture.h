// The fixtures scripts/make_hf_fixtures.py writes at test time into the build tree (CTest fixture hf_fixtures):
// Hugging Face model directories saved by transformers, each with reference.safetensors holding its outputs.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <string>

#include "llama_fixture.h"  // max_abs_diff
#include "tune/models/llama.h"
#include "tune/recipes/sft/sft_model.h"

namespace tune::test {

inline std::filesystem::path hf_fixture_dir(const std::string& name) {
  return std::filesystem::path(TUNE_HF_FIXTURES) / name;
}

// A model directory loaded as `tune infer` loads one: config.json, then the weights by HF name.
inline models::LlamaForCausalLM load_hf_model(const std::filesystem::path& dir, const models::LlamaLoraOptions& lora = {}) {
  models::LlamaForCausalLM model(models::LlamaConfig::from_file((dir / "config.json").string()), lora);
  recipes::sft::load_model_weights(model, dir);
  model->eval();
  return model;
}

}  // namespace tune::test
