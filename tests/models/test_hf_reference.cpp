// tune's Llama family against transformers itself: the logits of a batch and greedy generation through tune's
// KV cache, for every model scripts/make_hf_fixtures.py builds (Llama with GQA, Llama 3 RoPE with tied
// embeddings, Mistral, Qwen2, Qwen3 with its query/key norms, sliding windows shorter than the sequences, a GELU
// MLP).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <vector>

#include "hf_fixture.h"
#include "tune/io/safetensors.h"
#include "tune/models/llama.h"
#include "tune/recipes/sft/generate.h"

using namespace tune;
using tune::test::hf_fixture_dir;
using tune::test::load_hf_model;
using tune::test::max_abs_diff;

namespace {

const char* const kCases[] = {"llama_gqa",    "llama_tied", "mistral",      "qwen2",     "mistral_window",
                              "qwen2_window", "qwen3",      "qwen3_window", "llama_gelu"};

std::vector<int64_t> to_vector(const torch::Tensor& ids) {
  const auto contiguous = ids.to(torch::kInt64).contiguous();
  return {contiguous.data_ptr<int64_t>(), contiguous.data_ptr<int64_t>() + contiguous.numel()};
}

}  // namespace

TEST_CASE("fp32 logits equal transformers' within 1e-5 for every HF fixture model", "[models][hf]") {
  torch::NoGradGuard no_grad;
  for (const char* name : kCases) {
    INFO("case " << name);
    auto model = load_hf_model(hf_fixture_dir(name));
    const auto reference = io::SafetensorsFile::open(hf_fixture_dir(name) / "reference.safetensors");
    const auto logits = model->forward(reference.load("input_ids"));
    REQUIRE(logits.sizes() == reference.load("logits").sizes());
    const double difference = max_abs_diff(logits, reference.load("logits"));
    UNSCOPED_INFO(name << ": max |tune - transformers| logits = " << difference);
    CHECK(difference < 1e-5);
  }
}

TEST_CASE("greedy generation with the KV cache gives transformers' generate() ids", "[models][hf]") {
  for (const char* name : kCases) {
    INFO("case " << name);
    auto model = load_hf_model(hf_fixture_dir(name));
    const auto reference = io::SafetensorsFile::open(hf_fixture_dir(name) / "reference.safetensors");
    const auto expected = to_vector(reference.load("greedy_ids"));
    recipes::sft::SamplingOptions options;  // temperature 0: greedy; no stop ids, as the fixture generates
    options.max_new_tokens = static_cast<int64_t>(expected.size());
    const auto prompt = to_vector(reference.load("input_ids")[0]);
    CHECK(recipes::sft::generate(model, prompt, options, precision::MixedPrecision::no, torch::kCPU) == expected);
  }
}

TEST_CASE("the window fixtures depend on their sliding window", "[models][hf]") {
  // Without the window the same weights give other logits: the 1e-5 agreement above is evidence of the window.
  torch::NoGradGuard no_grad;
  for (const char* name : {"mistral_window", "qwen2_window", "qwen3_window"}) {
    INFO("case " << name);
    auto config = models::LlamaConfig::from_file((hf_fixture_dir(name) / "config.json").string());
    REQUIRE(config.sliding_window == 4);
    config.sliding_window = 0;
    models::LlamaForCausalLM unwindowed(config);
    recipes::sft::load_model_weights(unwindowed, hf_fixture_dir(name));
    unwindowed->eval();
    const auto reference = io::SafetensorsFile::open(hf_fixture_dir(name) / "reference.safetensors");
    CHECK(max_abs_diff(unwindowed->forward(reference.load("input_ids")), reference.load("logits")) > 1e-2);
  }
}

TEST_CASE("decoding through the KV cache keeps window - 1 positions on sliding layers and transformers' logits",
          "[models][hf]") {
  torch::NoGradGuard no_grad;
  for (const char* name : {"mistral_window", "qwen2_window", "qwen3_window"}) {
    INFO("case " << name);
    auto model = load_hf_model(hf_fixture_dir(name));
    const auto reference = io::SafetensorsFile::open(hf_fixture_dir(name) / "reference.safetensors");
    const auto input_ids = reference.load("input_ids").slice(0, 0, 1);
    const auto expected = reference.load("logits").slice(0, 0, 1);
    // A prefill of 2 tokens (shorter than the window), then one token at a time past it.
    models::KVCache cache;
    models::AttentionInputs prefill;
    prefill.cache = &cache;
    std::vector<torch::Tensor> pieces{model->forward(input_ids.slice(1, 0, 2), prefill)};
    for (int64_t t = 2; t < input_ids.size(1); ++t) {
      models::AttentionInputs step;
      step.cache = &cache;
      pieces.push_back(model->forward(input_ids.slice(1, t, t + 1), step));
    }
    const double difference = max_abs_diff(torch::cat(pieces, 1), expected);
    UNSCOPED_INFO(name << ": cached decoding max |tune - transformers| logits = " << difference);
    CHECK(difference < 1e-5);
    CHECK(cache.length() == input_ids.size(1));
    for (int64_t layer = 0; layer < model->config().num_hidden_layers; ++layer) {
      const int64_t window = model->config().layer_sliding_window(layer);
      CHECK(cache.keys[static_cast<size_t>(layer)].size(2) == (window > 0 ? window - 1 : input_ids.size(1)));
    }
  }
}

TEST_CASE("both prompts packed into one row with segment ids give transformers' per-row logits", "[models][hf]") {
  // The packed (block-diagonal) mask with the window inside each segment: transformers' logits of each row alone
  // are the reference.
  torch::NoGradGuard no_grad;
  for (const char* name : {"mistral_window", "qwen2_window", "qwen3_window", "qwen3"}) {
    INFO("case " << name);
    auto model = load_hf_model(hf_fixture_dir(name));
    const auto reference = io::SafetensorsFile::open(hf_fixture_dir(name) / "reference.safetensors");
    const auto input_ids = reference.load("input_ids");
    const int64_t length = input_ids.size(1);
    models::AttentionInputs packed;
    const auto positions = torch::arange(length, torch::kInt64);
    packed.position_ids = torch::cat({positions, positions}).unsqueeze(0);
    packed.segment_ids = torch::cat({torch::zeros({length}, torch::kInt64), torch::ones({length}, torch::kInt64)}).unsqueeze(0);
    const auto logits = model->forward(input_ids.reshape({1, 2 * length}), packed);
    const double difference = max_abs_diff(logits.reshape({2, length, -1}), reference.load("logits"));
    UNSCOPED_INFO(name << ": packed max |tune - transformers| logits = " << difference);
    CHECK(difference < 1e-5);
  }
}
