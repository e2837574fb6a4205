// Sana against Hugging Face diffusers' SanaTransformer2DModel: three tiny seeded models saved by diffusers'
// save_pretrained and their float64 outputs (scripts/make_diffusers_sana_fixture.py, run by CTest as
// sana_fixture_setup into the build tree), loaded by diffusers' parameter names with nothing missing or extra.
// Also: gradients through every checkpointing policy equal the plain run's (x, text and every parameter), the
// runner contract (one run_stack over tokens + timestep6 + caption), bf16 autocast, and config.json refusals.
// Without diffusers the fixture holds SKIPPED and the diffusers cases exit 77: CTest reports them skipped.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/reference_fixture.h"
#include "tune/core/error.h"
#include "tune/io/safetensors.h"
#include "tune/io/weights.h"
#include "tune/memory/checkpoint.h"
#include "tune/models/sana.h"
#include "tune/precision/mixed_precision.h"

using namespace tune;

namespace {

std::filesystem::path fixture_dir() { return test::reference_fixture_dir("diffusers_sana_fixture"); }

using test::relative_max_diff;

// `name`: a model folder of the fixture (plain, qk_norm, pos_embed, converted_plain, converted_qk_norm).
models::Sana load_model(const std::string& name) {
  test::skip_if_fixture_skipped(fixture_dir());
  const auto dir = fixture_dir() / name;
  models::Sana model(models::read_sana_config(dir / "config.json"));
  const auto source = io::WeightSource::open_directory(dir, "diffusion_pytorch_model.safetensors",
                                                       "diffusion_pytorch_model.safetensors.index.json");
  std::set<std::string> file_names, model_names;
  for (const auto& tensor_name : source.names()) file_names.insert(tensor_name);
  for (const auto& item : model->named_parameters()) model_names.insert(item.key());
  CHECK(model_names == file_names);
  CHECK(model->buffers().empty());
  CHECK(io::load_into_module(*model, source) == file_names.size());
  model->eval();
  return model;
}

struct Case {
  std::string name, model;
  torch::Tensor x, t, text, mask, output, output_stock;
};

std::vector<Case> load_cases() {
  test::skip_if_fixture_skipped(fixture_dir());
  const auto io = io::SafetensorsFile::open(fixture_dir() / "io.safetensors");
  // The fixture script's cases and the model folder each runs on.
  const std::vector<std::pair<std::string, std::string>> names = {
      {"main", "plain"}, {"no_mask", "plain"}, {"fractional", "plain"}, {"qk_norm", "qk_norm"},
      {"pos_embed", "pos_embed"}};
  std::vector<Case> cases;
  for (const auto& [name, model] : names) {
    const std::string prefix = name + ".";
    Case c;
    c.name = name;
    c.model = model;
    c.x = io.load(prefix + "x");
    c.t = io.load(prefix + "t");
    c.text = io.load(prefix + "text");
    if (io.contains(prefix + "mask")) c.mask = io.load(prefix + "mask");
    c.output = io.load(prefix + "output");
    c.output_stock = io.load(prefix + "output_stock");
    cases.push_back(c);
  }
  return cases;
}

torch::Tensor run_case(models::Sana& model, const Case& c, torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  return model->forward(c.x.to(dtype), c.t, c.text.to(dtype), c.mask);
}

// Gradients of a fixed random projection of the output with respect to x, text and every parameter.
std::map<std::string, torch::Tensor> gradients(models::Sana& model, const Case& c,
                                               std::shared_ptr<nn::BlockRunner> runner) {
  model->set_block_runner(std::move(runner));
  model->zero_grad();
  const auto x = c.x.clone().requires_grad_(true);
  const auto text = c.text.clone().requires_grad_(true);
  const auto output = model->forward(x, c.t, text, c.mask);
  const auto weights = torch::randn(output.sizes(), at::make_generator<at::CPUGeneratorImpl>(3),
                                    torch::TensorOptions().dtype(torch::kFloat64));
  (output * weights).sum().backward();
  std::map<std::string, torch::Tensor> grads{{"x", x.grad().clone()}, {"text", text.grad().clone()}};
  for (const auto& item : model->named_parameters()) {
    if (item.value().grad().defined()) grads[item.key()] = item.value().grad().clone();
  }
  return grads;
}

// Without a qk-norm, the cross-attention's key bias adds q . b to every score of a query row, which the softmax
// cancels: its gradient is zero up to rounding. (With norm_k between them it does not cancel; the linear
// self-attention has no key bias in these models: attention_bias false.)
bool is_cancelled_key_bias(const models::Sana& model, const std::string& name) {
  const std::string suffix = "to_k.bias";
  return !model->config().qk_norm && name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct TempConfig {
  std::filesystem::path path;
  TempConfig(const nlohmann::json& config, const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() / ("tune_sana_config_" + name);
    std::filesystem::create_directories(dir);
    path = dir / "config.json";
    std::ofstream(path) << config.dump(2);
  }
  ~TempConfig() { std::filesystem::remove_all(path.parent_path()); }
};

// Efficient-Large-Model/Sana_1600M_1024px_diffusers transformer/config.json, as published.
nlohmann::json sana_1600m_config() {
  return nlohmann::json::parse(R"({
    "_class_name": "SanaTransformer2DModel", "_diffusers_version": "0.32.0.dev0", "attention_bias": false,
    "attention_head_dim": 32, "caption_channels": 2304, "cross_attention_dim": 2240, "cross_attention_head_dim": 112,
    "dropout": 0.0, "in_channels": 32, "mlp_ratio": 2.5, "norm_elementwise_affine": false, "norm_eps": 1e-06,
    "num_attention_heads": 70, "num_cross_attention_heads": 20, "num_layers": 20, "out_channels": 32,
    "patch_size": 1, "sample_size": 32})");
}

std::string refusal_of(const nlohmann::json& config, const std::string& name) {
  const TempConfig file(config, name);
  try {
    models::read_sana_config(file.path);
  } catch (const InputError& error) {
    const std::string message = error.what();
    CHECK(message.find(file.path.string()) != std::string::npos);
    return message;
  }
  FAIL("config " << name << " was accepted");
  return {};
}

}  // namespace

TEST_CASE("Sana matches diffusers' SanaTransformer2DModel in float64", "[sana][diffusers]") {
  std::map<std::string, models::Sana> models;
  for (const auto& c : load_cases()) {
    INFO("case " << c.name);
    if (!models.count(c.model)) {
      models.emplace(c.model, load_model(c.model));
      models.at(c.model)->to(torch::kFloat64);
    }
    const auto output = run_case(models.at(c.model), c, torch::kFloat64);
    REQUIRE(output.sizes() == c.output.sizes());
    const double diff = relative_max_diff(output, c.output);
    std::printf("diffusers (float64 tables), case %-11s float64 rel. max diff %.3g\n", c.name.c_str(), diff);
    // diffusers' SanaLinearAttnProcessor2_0 casts q, k and v to float32 (query.float()) even in a float64 model,
    // so the float64 reference carries float32 rounding from every self-attention (tune's core stays float64).
    CHECK(diff < 1e-6);
  }
}

TEST_CASE("Sana matches diffusers' SanaTransformer2DModel in float32", "[sana][diffusers]") {
  std::map<std::string, models::Sana> models;
  for (const auto& c : load_cases()) {
    INFO("case " << c.name);
    if (!models.count(c.model)) models.emplace(c.model, load_model(c.model));
    const auto output = run_case(models.at(c.model), c, torch::kFloat32);
    REQUIRE(output.scalar_type() == torch::kFloat32);
    const double diff = relative_max_diff(output, c.output);
    const double diff_stock = relative_max_diff(output, c.output_stock);
    std::printf("diffusers, case %-11s float32 rel. max diff %.3g (stock diffusers %.3g)\n", c.name.c_str(), diff,
                diff_stock);
    CHECK(diff < 1e-5);
    CHECK(diff_stock < 1e-5);
  }
}

TEST_CASE("Official Sana checkpoints converted by scripts/convert_sana_official.py load and match diffusers",
          "[sana][diffusers]") {
  for (const auto& c : load_cases()) {
    if (c.name != "main" && c.name != "qk_norm") continue;
    INFO("case " << c.name);
    auto model = load_model("converted_" + c.model);
    model->to(torch::kFloat64);
    const double diff = relative_max_diff(run_case(model, c, torch::kFloat64), c.output);
    std::printf("official checkpoint, converted: case %-8s float64 rel. max diff %.3g\n", c.name.c_str(), diff);
    CHECK(diff < 1e-6);
  }
}

TEST_CASE("Sana takes a bool text mask as the integer one, and the mask matters", "[sana][diffusers]") {
  auto model = load_model("plain");
  model->to(torch::kFloat64);
  const auto cases = load_cases();
  const auto& c = cases.front();
  REQUIRE(c.mask.defined());
  Case as_bool = c;
  as_bool.mask = c.mask.to(torch::kBool);
  CHECK(relative_max_diff(run_case(model, as_bool, torch::kFloat64), run_case(model, c, torch::kFloat64)) == 0.0);
  CHECK(relative_max_diff(run_case(model, cases[1], torch::kFloat64), c.output) > 1e-3);  // no_mask differs
}

TEST_CASE("Sana gradients are the same through every checkpointing policy", "[sana][diffusers]") {
  for (const auto& c : load_cases()) {
    if (c.name != "main" && c.name != "qk_norm") continue;
    INFO("case " << c.name);
    auto model = load_model(c.model);
    model->to(torch::kFloat64);
    model->train();
    const auto plain = gradients(model, c, std::make_shared<nn::PlainBlockRunner>());
    CHECK(plain.size() == model->parameters().size() + 2);  // every parameter trains, and x and text get gradients
    for (const auto& item : plain) {
      INFO(item.first);
      if (is_cancelled_key_bias(model, item.first)) {
        CHECK(item.second.abs().max().item<double>() < 1e-12);
      } else {
        CHECK(item.second.abs().sum().item<double>() > 0);
      }
    }
    for (const auto policy : {memory::Policy::full, memory::Policy::every_k, memory::Policy::sqrt, memory::Policy::selective}) {
      INFO("policy " << memory::policy_name(policy));
      memory::CheckpointOptions options;
      options.policy = policy;
      const auto checkpointed = gradients(model, c, std::make_shared<memory::CheckpointRunner>(options, model->num_blocks()));
      REQUIRE(checkpointed.size() == plain.size());
      double worst = 0;
      for (const auto& item : plain) {
        INFO(item.first);
        if (is_cancelled_key_bias(model, item.first)) {
          CHECK(checkpointed.at(item.first).abs().max().item<double>() < 1e-12);
          continue;
        }
        const double diff = relative_max_diff(checkpointed.at(item.first), item.second);
        worst = std::max(worst, diff);
        CHECK(diff < 1e-10);
      }
      std::printf("checkpointing %-9s case %-8s worst gradient rel. max diff %.3g\n", memory::policy_name(policy),
                  c.name.c_str(), worst);
    }
  }
}

namespace {

struct RecordingRunner : nn::BlockRunner {
  int64_t stacks = 0, stack_count = 0, state_rows = 0;
  std::vector<int64_t> runs;
  std::vector<size_t> param_counts;
  torch::Tensor run(int64_t block_index, const nn::BlockFunction& block, const torch::Tensor& input,
                    const std::vector<torch::Tensor>& params) override {
    runs.push_back(block_index);
    param_counts.push_back(params.size());
    return block(input);
  }
  torch::Tensor run_stack(int64_t count, const nn::StackFunction& block, const torch::Tensor& input,
                          const nn::StackParamsFunction& params_of) override {
    ++stacks;
    stack_count = count;
    state_rows = input.size(1);
    return nn::BlockRunner::run_stack(count, block, input, params_of);
  }
};

}  // namespace

TEST_CASE("Sana runs its blocks as one stack over tokens, timestep6 and caption", "[sana]") {
  models::SanaConfig config;
  config.num_attention_heads = 2;
  config.attention_head_dim = 4;
  config.num_cross_attention_heads = 2;
  config.cross_attention_head_dim = 3;
  config.cross_attention_dim = 8;
  config.caption_channels = 6;
  config.in_channels = config.out_channels = 4;
  config.num_layers = 3;
  config.sample_size = 4;
  torch::manual_seed(1);
  models::Sana model(config);
  REQUIRE(model->num_blocks() == 3);
  const auto blocks = model->blocks();
  REQUIRE(blocks.size() == 3);
  CHECK(blocks[1].get() == model->transformer_blocks->ptr(1).get());
  CHECK(std::string(models::SanaImpl::block_type()) == "SanaTransformerBlock");
  // A fresh model's caption norm starts at the official 0.01 and its cross-attention outputs and proj_out at zero.
  CHECK(model->caption_norm->weight.eq(0.01f).all().item<bool>());
  CHECK(model->proj_out->weight.abs().sum().item<double>() == 0);

  auto runner = std::make_shared<RecordingRunner>();
  model->set_block_runner(runner);
  const auto x = torch::randn({2, 4, 4, 6});
  const auto text = torch::randn({2, 5, 6});
  const auto output = model->forward(x, torch::tensor({3, 900}), text);
  CHECK(output.sizes() == torch::IntArrayRef({2, 4, 4, 6}));
  CHECK(runner->stacks == 1);
  CHECK(runner->stack_count == 3);
  CHECK(runner->state_rows == 24 + 6 + 5);  // 4x6 tokens, timestep6, 5 caption tokens
  CHECK(runner->runs == std::vector<int64_t>({0, 1, 2}));
  for (int64_t i = 0; i < 3; ++i) CHECK(runner->param_counts[i] == blocks[i]->parameters().size());
}

TEST_CASE("Sana under CPU bf16 autocast is finite and close to float32", "[sana][diffusers]") {
  auto model = load_model("plain");
  const auto c = load_cases().front();
  torch::NoGradGuard no_grad;
  torch::Tensor output;
  {
    precision::AutocastScope autocast(precision::MixedPrecision::bf16, torch::Device(torch::kCPU));
    output = model->forward(c.x.to(torch::kFloat32), c.t, c.text.to(torch::kFloat32), c.mask);
  }
  REQUIRE(output.scalar_type() == torch::kFloat32);
  CHECK(torch::isfinite(output).all().item<bool>());
  const double diff = relative_max_diff(output, c.output);
  std::printf("bf16 autocast: rel. max diff %.3g\n", diff);
  CHECK(diff < 0.05);
}

TEST_CASE("read_sana_config reads Sana 1600M's config.json", "[sana][config]") {
  const auto config = models::read_sana_config(TempConfig(sana_1600m_config(), "1600m").path);
  CHECK(config.inner_dim() == 2240);
  CHECK(config.cross_inner_dim() == 2240);
  CHECK(config.num_layers == 20);
  CHECK(config.caption_channels == 2304);
  CHECK(config.in_channels == 32);
  CHECK(config.out_channels == 32);
  CHECK(!config.interpolation_scale);
  CHECK(!config.qk_norm);
  CHECK(config.timestep_scale == 1.0);  // not in the file: diffusers' default
  auto sana15 = sana_1600m_config();
  sana15["qk_norm"] = "rms_norm_across_heads";
  sana15["interpolation_scale"] = 1.0;
  const auto config15 = models::read_sana_config(TempConfig(sana15, "15").path);
  CHECK(config15.qk_norm);
  CHECK(config15.interpolation_scale == 1.0);
  auto no_out = sana_1600m_config();
  no_out["out_channels"] = nullptr;
  CHECK(models::read_sana_config(TempConfig(no_out, "no_out").path).out_channels == 32);
}

TEST_CASE("read_sana_config refuses what tune does not implement, naming file and key", "[sana][config]") {
  const std::vector<std::pair<std::string, nlohmann::json>> refusals = {
      {"guidance_embeds", true},
      {"norm_elementwise_affine", true},
      {"dropout", 0.1},
      {"qk_norm", "layer_norm"},
      {"cross_attention_dim", 1152},
      {"cross_attention_dim", nullptr},
      {"_class_name", "SanaMS"},
      {"interpolation_scale", -1.0},
  };
  int index = 0;
  for (const auto& [key, value] : refusals) {
    INFO(key << " = " << value.dump());
    auto config = sana_1600m_config();
    config[key] = value;
    const auto message = refusal_of(config, "refusal" + std::to_string(index++));
    CHECK(message.find("'" + key + "'") != std::string::npos);
  }
}
