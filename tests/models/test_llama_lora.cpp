// LoRA on the Llama model: PEFT names, zero-B start, freezing, and merged weights reproducing the adapted model.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <set>
#include <string>

#include "llama_fixture.h"
#include "tune/core/error.h"
#include "tune/core/memory_tracker.h"
#include "tune/io/weights.h"

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

namespace {

// Untied (an lm_head), grouped-query, several layers: enough modules that "one module in fp32" and "the whole model
// in fp32" are far apart.
models::LlamaConfig bf16_base_config() {
  models::LlamaConfig config;
  config.vocab_size = 512;
  config.hidden_size = 64;
  config.intermediate_size = 256;
  config.num_hidden_layers = 6;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.head_dim = 16;
  config.max_position_embeddings = 64;
  return config;
}

// What param_dtype: bf16 did before the base could be built in bf16: every non-LoRA parameter converted afterwards.
void convert_base_to_bf16(models::LlamaForCausalLMImpl& model) {
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_parameters()) {
    if (item.key().find("lora_") == std::string::npos) item.value().set_data(item.value().to(torch::kBFloat16));
  }
}

void check_same_parameters(const models::LlamaForCausalLMImpl& expected, const models::LlamaForCausalLMImpl& actual) {
  const auto want = expected.named_parameters();
  const auto got = actual.named_parameters();
  REQUIRE(want.size() == got.size());
  for (const auto& item : want) {
    INFO(item.key());
    REQUIRE(got.contains(item.key()));
    const bool is_lora = item.key().find("lora_") != std::string::npos;
    CHECK(got[item.key()].scalar_type() == (is_lora ? torch::kFloat32 : torch::kBFloat16));
    CHECK(got[item.key()].scalar_type() == item.value().scalar_type());
    CHECK(torch::equal(got[item.key()], item.value()));
  }
}

}  // namespace

TEST_CASE("a bf16 base is built module by module: the values of converting afterwards, never the fp32 model",
          "[models][lora][param_dtype]") {
  memory_tracker::install();
  const models::LlamaConfig config = bf16_base_config();
  models::LlamaLoraOptions lora;
  lora.lora.rank = 4;
  lora.target_modules = {"q_proj", "v_proj", "down_proj"};

  torch::manual_seed(11);
  models::LlamaForCausalLM reference(config, lora);
  convert_base_to_bf16(*reference);

  models::LlamaLoraOptions bf16_lora = lora;
  bf16_lora.base_dtype = torch::kBFloat16;
  torch::manual_seed(11);
  const int64_t live_before = memory_tracker::cpu_live_bytes();
  memory_tracker::reset_cpu_peak();
  models::LlamaForCausalLM built(config, bf16_lora);
  const int64_t peak = memory_tracker::cpu_peak_bytes() - live_before;

  // Same values (the init is drawn in fp32 and rounded once), and LoRA's init drew from the same random stream.
  check_same_parameters(*reference, *built);

  int64_t resident = 0, fp32_model = 0;
  for (const auto& tensor : built->parameters()) {
    resident += tensor.numel() * static_cast<int64_t>(tensor.element_size());
    fp32_model += tensor.numel() * 4;
  }
  for (const auto& tensor : built->buffers()) resident += tensor.numel() * static_cast<int64_t>(tensor.element_size());
  int64_t largest_module_fp32 = config.vocab_size * config.hidden_size * 4;  // embed_tokens, lm_head
  for (const auto& layer : built->blocks()) {
    int64_t layer_fp32 = 0;
    for (const auto& tensor : layer->parameters()) layer_fp32 += tensor.numel() * 4;
    largest_module_fp32 = std::max(largest_module_fp32, layer_fp32);
  }
  INFO("peak " << peak << " resident " << resident << " largest module in fp32 " << largest_module_fp32
               << " fp32 model " << fp32_model);
  // At most one module is ever held in fp32 next to what is already bf16; the fp32 model never exists.
  CHECK(peak <= resident + largest_module_fp32);
  CHECK(peak < fp32_model * 3 / 4);
}

TEST_CASE("weights load into a bf16 base as into an fp32 model converted afterwards", "[models][lora][param_dtype]") {
  const auto dir = tune::test::llama_fixture_dir("llama");
  const auto config = models::LlamaConfig::from_file(dir + "/config.json");
  models::LlamaLoraOptions lora;
  lora.lora.rank = 2;
  lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"};
  io::LoadOptions options;
  options.ignore_missing_containing = {"lora_"};
  const auto weights = io::WeightSource::open_file(dir + "/model.safetensors");  // fp32 values: rounded on load

  torch::manual_seed(3);
  models::LlamaForCausalLM reference(config, lora);
  io::load_into_module(*reference, weights, options);
  convert_base_to_bf16(*reference);

  models::LlamaLoraOptions bf16_lora = lora;
  bf16_lora.base_dtype = torch::kBFloat16;
  torch::manual_seed(3);
  models::LlamaForCausalLM loaded(config, bf16_lora);
  io::load_into_module(*loaded, weights, options);
  check_same_parameters(*reference, *loaded);

  // A bf16 base without LoRA would leave nothing in fp32 to train: refused.
  models::LlamaLoraOptions no_lora;
  no_lora.base_dtype = torch::kBFloat16;
  CHECK_THROWS_AS(models::LlamaForCausalLM(config, no_lora), tune::UsageError);
  models::LlamaLoraOptions int_base = lora;
  int_base.base_dtype = torch::kInt32;
  CHECK_THROWS_AS(models::LlamaForCausalLM(config, int_base), tune::UsageError);
}
