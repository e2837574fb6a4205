// tune's Llama family against transformers itself: the logits of a batch and greedy generation through tune's
// KV cache, for every model scripts/make_hf_fixtures.py builds (Llama with GQA, Llama 3 RoPE with tied
// embeddings, Mistral, Qwen2).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <vector>

#include "hf_fixture.h"
#include "tune/io/safetensors.h"
#include "tune/recipes/sft/generate.h"

using namespace tune;
using tune::test::hf_fixture_dir;
using tune::test::load_hf_model;
using tune::test::max_abs_diff;

namespace {

const char* const kCases[] = {"llama_gqa", "llama_tied", "mistral", "qwen2"};

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
