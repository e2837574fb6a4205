// LoRA on the Llama model: PEFT names, zero-B start, freezing, and merged weights reproducing the adapted model.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <set>
#include <string>

#include "llama_fixture.h"
#include "tune/core/error.h"

using namespace tune;
using tune::test::load_llama_fixture;
using tune::test::max_abs_diff;

namespace {

models::LlamaLoraOptions all_projections(int64_t rank, double alpha) {
  models::LlamaLoraOptions options;
  options.lora.rank = rank;
  options.lora.alpha = alpha;
  options.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return options;
}

}  // namespace

TEST_CASE("LoRA parameter names are exactly HF/PEFT's", "[models][lora]") {
  models::LlamaLoraOptions lora;
  lora.lora.rank = 2;
  lora.target_modules = {"q_proj", "v_proj", "down_proj"};
  auto fixture = load_llama_fixture("llama", lora);
  std::set<std::string> lora_names;
  for (const auto& item : fixture.model->named_parameters()) {
    if (item.key().find("lora_") != std::string::npos) lora_names.insert(item.key());
  }
  std::set<std::string> expected;
  for (int layer = 0; layer < 2; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    for (const char* module : {"self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"}) {
      expected.insert(p + module + ".lora_A.weight");
      expected.insert(p + module + ".lora_B.weight");
    }
  }
  CHECK(lora_names == expected);
  const auto params = fixture.model->named_parameters();
  CHECK(params["model.layers.0.self_attn.q_proj.lora_A.weight"].sizes() == torch::IntArrayRef({2, 32}));
  CHECK(params["model.layers.0.self_attn.v_proj.lora_B.weight"].sizes() == torch::IntArrayRef({16, 2}));
  CHECK(params["model.layers.0.mlp.down_proj.lora_A.weight"].sizes() == torch::IntArrayRef({2, 64}));

  models::LlamaLoraOptions bad = lora;
  bad.target_modules = {"qkv_proj"};
  CHECK_THROWS_AS(models::LlamaForCausalLM(fixture.config, bad), tune::UsageError);
}

TEST_CASE("LoRA with zero B equals the base model; merged weights reproduce the adapted model", "[models][lora]") {
  torch::NoGradGuard no_grad;
  auto base = load_llama_fixture("qwen2");
  auto adapted = load_llama_fixture("qwen2", all_projections(4, 8.0));
  const auto base_logits = base.model->forward(base.input_ids);
  CHECK(max_abs_diff(adapted.model->forward(adapted.input_ids), base_logits) < 1e-6);

  torch::manual_seed(7);
  for (auto& item : adapted.model->named_parameters()) {
    if (item.key().find("lora_B") != std::string::npos) item.value().normal_(0.0, 0.2);
  }
  const auto adapted_logits = adapted.model->forward(adapted.input_ids);
  REQUIRE(max_abs_diff(adapted_logits, base_logits) > 1e-2);  // the adapters really change the output

  const auto merged = adapted.model->merged_state();
  std::set<std::string> merged_names;
  for (const auto& item : merged) merged_names.insert(item.first);
  std::set<std::string> base_names;
  for (const auto& item : base.model->named_parameters()) base_names.insert(item.key());
  CHECK(merged_names == base_names);  // HF names, no lora tensors

  // Load the merged state into a plain model: it must produce the adapted model's logits.
  auto plain = models::LlamaForCausalLM(adapted.config);
  auto plain_params = plain->named_parameters();
  for (const auto& [name, tensor] : merged) plain_params[name].copy_(tensor);
  const double diff = max_abs_diff(plain->forward(adapted.input_ids), adapted_logits);
  UNSCOPED_INFO("merged vs adapted max diff " << diff);
  CHECK(diff < 1e-4);
  // Biases and norms pass through unchanged.
  const auto adapted_params = adapted.model->named_parameters();
  CHECK(torch::equal(plain_params["model.layers.0.self_attn.q_proj.bias"], adapted_params["model.layers.0.self_attn.q_proj.bias"]));
}

TEST_CASE("freeze_base_weights leaves only LoRA parameters trainable", "[models][lora]") {
  auto fixture = load_llama_fixture("llama3_tied", all_projections(2, 4.0));
  fixture.model->freeze_base_weights();
  int64_t trainable = 0;
  for (const auto& item : fixture.model->named_parameters()) {
    const bool is_lora = item.key().find("lora_") != std::string::npos;
    INFO(item.key());
    CHECK(item.value().requires_grad() == is_lora);
    trainable += item.value().requires_grad() ? 1 : 0;
  }
  CHECK(trainable == 2 * 7 * 2);  // 2 layers x 7 projections x (A, B)

  // Training step shape: the loss reaches the adapters and nothing else.
  fixture.model->train();
  fixture.model->forward(fixture.input_ids).logsumexp(-1).sum().backward();
  for (const auto& item : fixture.model->named_parameters()) {
    if (item.key().find("lora_B") != std::string::npos) {
      INFO(item.key());
      REQUIRE(item.value().grad().defined());
      CHECK(item.value().grad().abs().sum().item<double>() > 0.0);
    } else if (item.key().find("lora_") == std::string::npos) {
      CHECK_FALSE(item.value().grad().defined());
    }
  }
}
