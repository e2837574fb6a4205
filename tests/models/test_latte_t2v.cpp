// LatteT2V (Latte-1) against Hugging Face diffusers' LatteTransformer3DModel: a tiny seeded model saved by diffusers'
// save_pretrained and its float64 outputs (scripts/make_diffusers_latte_t2v_fixture.py, run by CTest as
// latte_t2v_fixture_setup into the build tree), loaded by diffusers' parameter names with nothing missing or extra.
// Also: gradients through every checkpointing policy equal the plain run's (x, text and every parameter), the
// runner contract (one run_stack, blocks in spatial/temporal order), bf16 autocast, and config.json refusals.
// Without diffusers the fixture holds SKIPPED and the diffusers cases exit 77: CTest reports them skipped.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
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
#include "tune/models/latte_t2v.h"
#include "tune/precision/mixed_precision.h"

using namespace tune;

namespace {

std::filesystem::path fixture_dir() { return test::reference_fixture_dir("diffusers_latte_t2v_fixture"); }

void skip_without_diffusers() { test::skip_if_fixture_skipped(fixture_dir()); }

using test::relative_max_diff;

models::LatteT2V load_model() {
  skip_without_diffusers();
  const auto dir = fixture_dir() / "transformer";
  models::LatteT2V model(models::read_latte_t2v_config(dir / "config.json"));
  const auto source = io::WeightSource::open_directory(dir, "diffusion_pytorch_model.safetensors",
                                                       "diffusion_pytorch_model.safetensors.index.json");
  // load_into_module refuses a missing or unexpected tensor; the name sets are compared as well, for the message.
  std::set<std::string> file_names, model_names;
  for (const auto& name : source.names()) file_names.insert(name);
  for (const auto& item : model->named_parameters()) model_names.insert(item.key());
  CHECK(model_names == file_names);
  CHECK(model->buffers().empty());
  CHECK(io::load_into_module(*model, source) == file_names.size());
  model->eval();
  return model;
}

struct Case {
  std::string name;
  torch::Tensor x, t, text, mask, output, output_stock;
  bool temporal = true;
};

std::vector<Case> load_cases() {
  skip_without_diffusers();
  const auto io = io::SafetensorsFile::open(fixture_dir() / "io.safetensors");
  std::vector<Case> cases;
  for (const char* name : {"main", "no_mask", "spatial_only", "single_frame", "single_frame_spatial_only",
                           "three_frames", "non_square"}) {
    const std::string prefix = std::string(name) + ".";
    Case c;
    c.name = name;
    c.x = io.load(prefix + "x");
    c.t = io.load(prefix + "t");
    c.text = io.load(prefix + "text");
    if (io.contains(prefix + "mask")) c.mask = io.load(prefix + "mask");
    c.output = io.load(prefix + "output");
    c.output_stock = io.load(prefix + "output_stock");
    c.temporal = io.load(prefix + "temporal").item<int64_t>() != 0;
    cases.push_back(c);
  }
  return cases;
}

torch::Tensor run_case(models::LatteT2V& model, const Case& c, torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  return model->forward(c.x.to(dtype), c.t, c.text.to(dtype), c.mask, c.temporal);
}

// Gradients of a fixed random projection of the output with respect to x, text and every parameter.
std::map<std::string, torch::Tensor> gradients(models::LatteT2V& model, const Case& c, std::shared_ptr<nn::BlockRunner> runner) {
  model->set_block_runner(std::move(runner));
  model->zero_grad();
  const auto x = c.x.clone().requires_grad_(true);
  const auto text = c.text.clone().requires_grad_(true);
  const auto output = model->forward(x, c.t, text, c.mask, c.temporal);
  const auto weights = torch::randn(output.sizes(), at::make_generator<at::CPUGeneratorImpl>(3),
                                    torch::TensorOptions().dtype(torch::kFloat64));
  (output * weights).sum().backward();
  std::map<std::string, torch::Tensor> grads{{"x", x.grad().clone()}, {"text", text.grad().clone()}};
  for (const auto& item : model->named_parameters()) {
    if (item.value().grad().defined()) grads[item.key()] = item.value().grad().clone();
  }
  return grads;
}

// A key bias adds q . b to every score of a query row, which the softmax cancels: its gradient is zero up to
// rounding (~1e-17 here), so it is checked to be tiny rather than compared relatively.
bool is_key_bias(const std::string& name) {
  const std::string suffix = "to_k.bias";
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A config.json in its own temporary directory, removed on destruction.
struct TempConfig {
  std::filesystem::path path;
  TempConfig(const nlohmann::json& config, const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() / ("tune_latte_t2v_config_" + name);
    std::filesystem::create_directories(dir);
    path = dir / "config.json";
    std::ofstream(path) << config.dump(2);
  }
  ~TempConfig() { std::filesystem::remove_all(path.parent_path()); }
};

// Latte-1's transformer/config.json (maxin-cn/Latte-1), as published.
nlohmann::json latte1_config() {
  return nlohmann::json::parse(R"({
    "_class_name": "LatteTransformer3DModel", "_diffusers_version": "0.30.0.dev0", "activation_fn": "gelu-approximate",
    "attention_bias": true, "attention_head_dim": 72, "caption_channels": 4096, "cross_attention_dim": 1152,
    "dropout": 0.0, "in_channels": 4, "norm_elementwise_affine": false, "norm_eps": 1e-06,
    "norm_type": "ada_norm_single", "num_attention_heads": 16, "num_embeds_ada_norm": 1000, "num_layers": 28,
    "out_channels": 8, "patch_size": 2, "sample_size": 64})");
}

std::string refusal_of(const nlohmann::json& config, const std::string& name) {
  const TempConfig file(config, name);
  try {
    models::read_latte_t2v_config(file.path);
  } catch (const InputError& error) {
    const std::string message = error.what();
    CHECK(message.find(file.path.string()) != std::string::npos);
    return message;
  }
  FAIL("config " << name << " was accepted");
  return {};
}

}  // namespace

TEST_CASE("LatteT2V matches diffusers' LatteTransformer3DModel in float64", "[latte_t2v][diffusers]") {
  auto model = load_model();
  model->to(torch::kFloat64);
  for (const auto& c : load_cases()) {
    INFO("case " << c.name);
    const auto output = run_case(model, c, torch::kFloat64);
    REQUIRE(output.sizes() == c.output.sizes());
    const double diff = relative_max_diff(output, c.output);
    std::printf("diffusers (float64 tables), case %-26s float64 rel. max diff %.3g\n", c.name.c_str(), diff);
    CHECK(diff < 1e-10);
  }
}

TEST_CASE("LatteT2V matches diffusers' LatteTransformer3DModel in float32", "[latte_t2v][diffusers]") {
  auto model = load_model();
  for (const auto& c : load_cases()) {
    INFO("case " << c.name);
    const auto output = run_case(model, c, torch::kFloat32);
    REQUIRE(output.scalar_type() == torch::kFloat32);
    const double diff = relative_max_diff(output, c.output);
    // diffusers as shipped: its float32 timestep sinusoid and tables (the fixture's docstring).
    const double diff_stock = relative_max_diff(output, c.output_stock);
    std::printf("diffusers, case %-26s float32 rel. max diff %.3g (stock diffusers %.3g)\n", c.name.c_str(), diff,
                diff_stock);
    CHECK(diff < 1e-5);
    CHECK(diff_stock < 1e-5);
  }
}

TEST_CASE("LatteT2V takes a bool text mask as the integer one", "[latte_t2v][diffusers]") {
  auto model = load_model();
  model->to(torch::kFloat64);
  const auto c = load_cases().front();
  REQUIRE(c.mask.defined());
  Case as_bool = c;
  as_bool.mask = c.mask.to(torch::kBool);
  CHECK(relative_max_diff(run_case(model, as_bool, torch::kFloat64), run_case(model, c, torch::kFloat64)) == 0.0);
}

// Image-video joint training (the official use_image_num): a sample's video frames and its captioned images in one
// forward equal, frame for frame, the video alone through the model and each image alone as a one-frame sample with
// temporal attention off (both paths checked against diffusers above): the spatial blocks treat every frame on its
// own with its own caption, the temporal blocks and their table see only the video's frames. Gradients (x, every
// caption, every parameter) are the same through full checkpointing as without.
TEST_CASE("LatteT2V joins captioned images to a video as the official use_image_num", "[latte_t2v][diffusers]") {
  auto model = load_model();
  model->to(torch::kFloat64);
  const auto c = load_cases().front();  // main: a padded batch of two prompts, temporal attention on
  REQUIRE(c.mask.defined());
  const int64_t batch = c.x.size(0), frames = c.x.size(1), tokens = c.text.size(1), images = 2;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(11);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const auto image_x = torch::randn({batch, images, c.x.size(2), c.x.size(3), c.x.size(4)}, generator, f64);
  const auto image_text = torch::randn({batch, images, tokens, c.text.size(2)}, generator, f64);
  // Image captions of 2 and 4 real tokens: their masks differ from the video's and from each other.
  auto image_mask = torch::zeros({batch, images, tokens}, torch::kLong);
  image_mask.narrow(2, 0, 2).fill_(1);
  image_mask[1][1].narrow(0, 0, 4).fill_(1);
  const auto x = torch::cat({c.x.to(torch::kFloat64), image_x}, 1);
  const auto text = torch::cat({c.text.to(torch::kFloat64).unsqueeze(1), image_text}, 1);
  const auto mask = torch::cat({c.mask.unsqueeze(1), image_mask}, 1);

  torch::NoGradGuard no_grad;
  const auto joint = model->forward(x, c.t, text, mask, true, images);
  REQUIRE(joint.sizes() == torch::IntArrayRef({batch, frames + images, c.output.size(2), c.x.size(3), c.x.size(4)}));
  const auto video = model->forward(c.x.to(torch::kFloat64), c.t, c.text.to(torch::kFloat64), c.mask, true);
  double worst = relative_max_diff(joint.narrow(1, 0, frames), video);
  CHECK(worst < 1e-12);
  for (int64_t j = 0; j < images; ++j) {
    const auto image = model->forward(image_x.narrow(1, j, 1), c.t, image_text.select(1, j), image_mask.select(1, j),
                                      /*temporal_attention=*/false);
    const double diff = relative_max_diff(joint.narrow(1, frames + j, 1), image);
    CHECK(diff < 1e-12);
    worst = std::max(worst, diff);
  }
  std::printf("use_image_num: joint forward against the video and images apart, rel. max diff %.3g\n", worst);
  // The image frames really are conditioned on their own captions: swapping them changes those frames.
  const auto swapped = model->forward(x, c.t, torch::cat({text.narrow(1, 0, 1), text.narrow(1, 2, 1), text.narrow(1, 1, 1)}, 1),
                                      torch::cat({mask.narrow(1, 0, 1), mask.narrow(1, 2, 1), mask.narrow(1, 1, 1)}, 1),
                                      true, images);
  CHECK(relative_max_diff(swapped.narrow(1, 0, frames), joint.narrow(1, 0, frames)) < 1e-12);
  CHECK(relative_max_diff(swapped.narrow(1, frames, images), joint.narrow(1, frames, images)) > 1e-3);

  // Gradients through full checkpointing equal the plain run's.
  torch::AutoGradMode grad_on(true);
  model->train();
  auto grads = [&](std::shared_ptr<nn::BlockRunner> runner) {
    model->set_block_runner(std::move(runner));
    model->zero_grad();
    const auto xg = x.clone().requires_grad_(true);
    const auto tg = text.clone().requires_grad_(true);
    const auto out = model->forward(xg, c.t, tg, mask, true, images);
    (out * torch::randn(out.sizes(), at::make_generator<at::CPUGeneratorImpl>(5), f64)).sum().backward();
    std::map<std::string, torch::Tensor> result{{"x", xg.grad().clone()}, {"text", tg.grad().clone()}};
    for (const auto& item : model->named_parameters()) {
      if (item.value().grad().defined()) result[item.key()] = item.value().grad().clone();
    }
    return result;
  };
  const auto plain = grads(std::make_shared<nn::PlainBlockRunner>());
  memory::CheckpointOptions options;
  options.policy = memory::Policy::full;
  const auto checkpointed = grads(std::make_shared<memory::CheckpointRunner>(options, model->num_blocks()));
  REQUIRE(checkpointed.size() == plain.size());
  CHECK(plain.size() == model->parameters().size() + 2);
  for (const auto& item : plain) {
    INFO(item.first);
    if (is_key_bias(item.first)) continue;
    CHECK(relative_max_diff(checkpointed.at(item.first), item.second) < 1e-10);
  }
  // Every image caption takes a gradient (frozen inputs must not silently get none).
  for (int64_t j = 0; j < 1 + images; ++j) CHECK(plain.at("text").select(1, j).abs().sum().item<double>() > 0);
  model->set_block_runner(std::make_shared<nn::PlainBlockRunner>());
  model->eval();
}

TEST_CASE("LatteT2V gradients are the same through every checkpointing policy", "[latte_t2v][diffusers]") {
  auto model = load_model();
  model->to(torch::kFloat64);
  model->train();
  const auto cases = load_cases();
  for (const auto& c : {cases[0], cases[2]}) {  // main (temporal on), spatial_only
    INFO("case " << c.name);
    const auto plain = gradients(model, c, std::make_shared<nn::PlainBlockRunner>());
    // Every parameter trains: with temporal attention off, all but the temporal blocks'.
    size_t expected = 2;
    for (const auto& item : model->named_parameters()) {
      if (c.temporal || item.key().rfind("temporal_transformer_blocks.", 0) != 0) ++expected;
    }
    CHECK(plain.size() == expected);
    for (const auto& item : plain) {
      INFO(item.first);
      if (is_key_bias(item.first)) {
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
        if (is_key_bias(item.first)) {
          CHECK(checkpointed.at(item.first).abs().max().item<double>() < 1e-12);
          continue;
        }
        const double diff = relative_max_diff(checkpointed.at(item.first), item.second);
        worst = std::max(worst, diff);
        CHECK(diff < 1e-10);
      }
      std::printf("checkpointing %-9s case %-12s worst gradient rel. max diff %.3g\n", memory::policy_name(policy),
                  c.name.c_str(), worst);
    }
  }
  model->set_block_runner(std::make_shared<nn::PlainBlockRunner>());
}

namespace {

// Records what the model hands its runner, running every block plainly.
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

TEST_CASE("LatteT2V runs its blocks as one stack over tokens plus payload", "[latte_t2v]") {
  models::LatteT2VConfig config;
  config.num_attention_heads = 2;
  config.attention_head_dim = 4;
  config.cross_attention_dim = 8;
  config.caption_channels = 6;
  config.num_layers = 2;
  config.sample_size = 4;
  torch::manual_seed(1);
  models::LatteT2V model(config);
  REQUIRE(model->num_blocks() == 4);
  const auto blocks = model->blocks();
  REQUIRE(blocks.size() == 4);
  CHECK(blocks[0].get() == model->transformer_blocks->ptr(0).get());
  CHECK(blocks[1].get() == model->temporal_transformer_blocks->ptr(0).get());
  CHECK(blocks[2].get() == model->transformer_blocks->ptr(1).get());
  CHECK(std::string(models::LatteT2VImpl::block_type(0)) == "LatteSpatialBlock");
  CHECK(std::string(models::LatteT2VImpl::block_type(3)) == "LatteTemporalBlock");

  auto runner = std::make_shared<RecordingRunner>();
  model->set_block_runner(runner);
  const auto x = torch::randn({2, 3, 4, 4, 6});  // 3 frames of 2x3 patches
  const auto text = torch::randn({2, 5, 6});
  const auto output = model->forward(x, torch::tensor({3, 900}), text);
  CHECK(output.sizes() == torch::IntArrayRef({2, 3, 8, 4, 6}));
  CHECK(runner->stacks == 1);
  CHECK(runner->stack_count == 4);
  CHECK(runner->state_rows == 6 + 4);  // 6 patches + ceil((6 + 5) / 3) payload tokens
  CHECK(runner->runs == std::vector<int64_t>({0, 1, 2, 3}));
  for (int64_t i = 0; i < 4; ++i) CHECK(runner->param_counts[i] == blocks[i]->parameters().size());

  auto spatial_only = std::make_shared<RecordingRunner>();
  model->set_block_runner(spatial_only);
  model->forward(x, torch::tensor({3, 900}), text, {}, /*temporal_attention=*/false);
  CHECK(spatial_only->stacks == 0);
  CHECK(spatial_only->runs == std::vector<int64_t>({0, 2}));
  model->set_block_runner(std::make_shared<nn::PlainBlockRunner>());
}

TEST_CASE("LatteT2V under CPU bf16 autocast is finite and close to float32", "[latte_t2v][diffusers]") {
  auto model = load_model();
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

TEST_CASE("read_latte_t2v_config reads Latte-1's config.json", "[latte_t2v][config]") {
  const auto config = models::read_latte_t2v_config(TempConfig(latte1_config(), "latte1").path);
  CHECK(config.inner_dim() == 1152);
  CHECK(config.num_layers == 28);
  CHECK(config.caption_channels == 4096);
  CHECK(config.out_channels == 8);
  CHECK(config.learned_sigma());
  CHECK(config.video_length == 16);  // not in the file: diffusers' default
  CHECK(config.norm_eps == 1e-6);
  CHECK(config.attention_bias);
  CHECK(config.base_size() == 32);
  CHECK(config.interpolation_scale() == 1);
}

TEST_CASE("read_latte_t2v_config reads the official LatteT2V's config as diffusers' (the same parameter names)",
          "[latte_t2v][config]") {
  // What Vchitect/Latte's LatteT2V.save_pretrained writes for Latte-1: its own class name and the Transformer2DModel
  // keys it registers (norm_num_groups, use_linear_projection act on non-patch inputs only).
  auto official = latte1_config();
  official["_class_name"] = "LatteT2V";
  official["norm_num_groups"] = 32;
  official["use_linear_projection"] = false;
  official["num_vector_embeds"] = nullptr;
  official["video_length"] = 16;
  const auto config = models::read_latte_t2v_config(TempConfig(official, "official").path);
  const auto diffusers = models::read_latte_t2v_config(TempConfig(latte1_config(), "diffusers").path);
  CHECK(config.inner_dim() == diffusers.inner_dim());
  CHECK(config.num_layers == diffusers.num_layers);
  CHECK(config.caption_channels == diffusers.caption_channels);
  CHECK(config.sample_size == diffusers.sample_size);
  official["sample_size"] = 128;  // the official class then conditions on resolution (use_additional_conditions)
  CHECK_THAT(refusal_of(official, "official128"), Catch::Contains("'sample_size'") && Catch::Contains("additional"));
}

TEST_CASE("read_latte_t2v_config refuses what tune does not implement, naming file and key", "[latte_t2v][config]") {
  auto with = [](const char* key, const nlohmann::json& value) {
    auto config = latte1_config();
    config[key] = value;
    return config;
  };
  CHECK_THAT(refusal_of(with("norm_type", "layer_norm"), "norm_type"), Catch::Contains("'norm_type'") && Catch::Contains("layer_norm"));
  CHECK_THAT(refusal_of(with("activation_fn", "geglu"), "activation"), Catch::Contains("'activation_fn'") && Catch::Contains("geglu"));
  CHECK_THAT(refusal_of(with("norm_elementwise_affine", true), "affine"), Catch::Contains("'norm_elementwise_affine'"));
  CHECK_THAT(refusal_of(with("dropout", 0.1), "dropout"), Catch::Contains("'dropout'"));
  CHECK_THAT(refusal_of(with("cross_attention_dim", 4096), "cross"), Catch::Contains("'cross_attention_dim'") && Catch::Contains("1152"));
  CHECK_THAT(refusal_of(with("cross_attention_dim", nullptr), "cross_null"), Catch::Contains("'cross_attention_dim'"));
  CHECK_THAT(refusal_of(with("upcast_attention", true), "upcast"), Catch::Contains("'upcast_attention'"));
  CHECK_THAT(refusal_of(with("num_vector_embeds", 8), "vector"), Catch::Contains("'num_vector_embeds'"));
  CHECK_THAT(refusal_of(with("_class_name", "Transformer2DModel"), "class"), Catch::Contains("'_class_name'"));
  auto missing = latte1_config();
  missing.erase("in_channels");
  CHECK_THAT(refusal_of(missing, "missing"), Catch::Contains("'in_channels'") && Catch::Contains("missing"));
  auto defaults = latte1_config();
  defaults.erase("norm_type");  // diffusers' default is "layer_norm"
  CHECK_THAT(refusal_of(defaults, "default_norm"), Catch::Contains("'norm_type'"));
  // Values that mean Latte's behaviour pass, and bias-free q/k/v is implemented.
  auto accepted = with("upcast_attention", false);
  accepted["attention_bias"] = false;
  CHECK_FALSE(models::read_latte_t2v_config(TempConfig(accepted, "accepted").path).attention_bias);
}

TEST_CASE("LatteT2V without attention biases has no q/k/v bias parameters", "[latte_t2v]") {
  models::LatteT2VConfig config;
  config.num_attention_heads = 2;
  config.attention_head_dim = 4;
  config.cross_attention_dim = 8;
  config.caption_channels = 6;
  config.num_layers = 1;
  config.sample_size = 4;
  config.attention_bias = false;
  models::LatteT2V model(config);
  const auto parameters = model->named_parameters();
  CHECK_FALSE(parameters.contains("transformer_blocks.0.attn1.to_q.bias"));
  CHECK_FALSE(parameters.contains("temporal_transformer_blocks.0.attn1.to_v.bias"));
  CHECK(parameters.contains("transformer_blocks.0.attn2.to_out.0.bias"));
  const auto output = model->forward(torch::randn({1, 2, 4, 4, 4}), torch::tensor({5}), torch::randn({1, 3, 6}));
  CHECK(torch::isfinite(output).all().item<bool>());
}
