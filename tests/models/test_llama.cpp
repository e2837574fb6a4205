// LlamaForCausalLM: logits against the independent float64 reference, packing, KV-cache decoding, the block
// runner contract and bf16 autocast.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <vector>

#include "llama_fixture.h"
#include "tune/compat/torch_compat.h"
#include "tune/models/llama.h"
#include "tune/models/llama_layers.h"

using namespace tune;
using tune::test::load_llama_fixture;
using tune::test::max_abs_diff;

namespace {

const char* const kCases[] = {"llama", "llama3_tied", "qwen2"};

class CountingRunner : public nn::BlockRunner {
 public:
  torch::Tensor run(int64_t block_index, const nn::BlockFunction& block, const torch::Tensor& input,
                    const std::vector<torch::Tensor>& params) override {
    indices.push_back(block_index);
    param_counts.push_back(static_cast<int64_t>(params.size()));
    return block(input);
  }
  std::vector<int64_t> indices;
  std::vector<int64_t> param_counts;
};

struct AutocastBf16 {
  AutocastBf16() : was_enabled(compat::autocast_cpu_enabled()), was_dtype(compat::autocast_cpu_dtype()) {
    compat::set_autocast_cpu_enabled(true);
    compat::set_autocast_cpu_dtype(torch::kBFloat16);
  }
  ~AutocastBf16() {
    compat::set_autocast_cpu_enabled(was_enabled);
    compat::set_autocast_cpu_dtype(was_dtype);
    at::autocast::clear_cache();
  }
  bool was_enabled;
  at::ScalarType was_dtype;
};

}  // namespace

TEST_CASE("Llama logits match the float64 reference for every fixture case", "[models][llama]") {
  torch::NoGradGuard no_grad;
  for (const char* name : kCases) {
    INFO("case " << name);
    auto fixture = load_llama_fixture(name);
    models::AttentionInputs inputs;
    inputs.position_ids = fixture.position_ids;
    const auto logits = fixture.model->forward(fixture.input_ids, inputs);
    REQUIRE(logits.scalar_type() == torch::kFloat32);
    REQUIRE(logits.sizes() == fixture.logits.sizes());
    const double diff = max_abs_diff(logits, fixture.logits);
    UNSCOPED_INFO(name << ": max |logits - reference| = " << diff);
    CHECK(diff < 1e-4);
  }
}

TEST_CASE("Llama in float64 matches the reference tightly (formulas, not just fp32 luck)", "[models][llama]") {
  // Everything but the fp32 RoPE tables (kept fp32 as HF computes them) runs in float64, so any remaining
  // difference is rounding of the angles and of the float32 output, far below the fp32 test's 1e-4.
  torch::NoGradGuard no_grad;
  for (const char* name : kCases) {
    INFO("case " << name);
    auto fixture = load_llama_fixture(name);
    fixture.model->to(torch::kFloat64);
    models::AttentionInputs inputs;
    inputs.position_ids = fixture.position_ids;
    const double diff = max_abs_diff(fixture.model->forward(fixture.input_ids, inputs), fixture.logits);
    UNSCOPED_INFO(name << ": float64 model max |logits - reference| = " << diff);
    CHECK(diff < 5e-6);
  }
}

TEST_CASE("Llama fixture structure: tied model has no lm_head, Qwen2 has q/k/v biases but no o_proj bias",
          "[models][llama]") {
  auto tied = load_llama_fixture("llama3_tied");
  CHECK_FALSE(tied.model->named_parameters().contains("lm_head.weight"));
  auto qwen = load_llama_fixture("qwen2");
  const auto names = qwen.model->named_parameters();
  CHECK(names.contains("model.layers.1.self_attn.q_proj.bias"));
  CHECK(names.contains("model.layers.1.self_attn.v_proj.bias"));
  CHECK_FALSE(names.contains("model.layers.1.self_attn.o_proj.bias"));
  CHECK(qwen.model->blocks().size() == 2);
  CHECK(qwen.model->num_blocks() == 2);
}

TEST_CASE("Packed sequences with segment ids give the same logits as each sequence alone", "[models][llama]") {
  torch::NoGradGuard no_grad;
  auto fixture = load_llama_fixture("llama");
  auto& model = fixture.model;
  const auto first = fixture.input_ids[0].slice(0, 0, 4).unsqueeze(0);   // 4 tokens
  const auto second = fixture.input_ids[1].slice(0, 0, 3).unsqueeze(0);  // 3 tokens
  const auto first_alone = model->forward(first);
  const auto second_alone = model->forward(second);

  // One row: first, second, then two padding tokens (segment -1).
  const auto packed_ids = torch::cat({first, second, torch::zeros({1, 2}, torch::kInt64)}, 1);
  models::AttentionInputs inputs;
  inputs.position_ids = torch::tensor({0, 1, 2, 3, 0, 1, 2, 0, 0}, torch::kInt64).unsqueeze(0);
  inputs.segment_ids = torch::tensor({0, 0, 0, 0, 1, 1, 1, -1, -1}, torch::kInt64).unsqueeze(0);
  const auto packed = model->forward(packed_ids, inputs);
  REQUIRE(torch::isfinite(packed).all().item<bool>());
  const double diff_first = max_abs_diff(packed.slice(1, 0, 4), first_alone);
  const double diff_second = max_abs_diff(packed.slice(1, 4, 7), second_alone);
  UNSCOPED_INFO("packing: max diff " << diff_first << ", " << diff_second);
  CHECK(diff_first < 1e-5);
  CHECK(diff_second < 1e-5);

  // Without segment ids the second sequence would see the first: the test must be able to tell.
  models::AttentionInputs unsegmented;
  unsegmented.position_ids = inputs.position_ids;
  CHECK(max_abs_diff(model->forward(packed_ids, unsegmented).slice(1, 4, 7), second_alone) > 1e-3);
}

TEST_CASE("KV-cache decoding reproduces the full forward's logits", "[models][llama]") {
  torch::NoGradGuard no_grad;
  for (const char* name : {"llama", "llama3_tied"}) {
    INFO("case " << name);
    auto fixture = load_llama_fixture(name);
    auto& model = fixture.model;
    auto runner = std::make_shared<CountingRunner>();
    model->set_block_runner(runner);
    const auto full = model->forward(fixture.input_ids);

    models::KVCache cache;
    models::AttentionInputs prefill;
    prefill.cache = &cache;
    std::vector<torch::Tensor> pieces{model->forward(fixture.input_ids.slice(1, 0, 3), prefill)};
    REQUIRE(cache.length() == 3);
    REQUIRE(cache.keys.size() == 2);
    for (int64_t t = 3; t < 7; ++t) {
      models::AttentionInputs step;
      step.cache = &cache;
      pieces.push_back(model->forward(fixture.input_ids.slice(1, t, t + 1), step));
    }
    CHECK(cache.length() == 7);
    const double diff = max_abs_diff(torch::cat(pieces, 1), full);
    UNSCOPED_INFO(name << ": cached decoding max diff " << diff);
    CHECK(diff < 1e-5);
    // Only the full (uncached) forward went through the runner.
    CHECK(runner->indices == std::vector<int64_t>{0, 1});
  }
}

TEST_CASE("Each decoder layer runs once through the block runner with its trainable parameters", "[models][llama]") {
  auto fixture = load_llama_fixture("qwen2");
  auto runner = std::make_shared<CountingRunner>();
  fixture.model->set_block_runner(runner);
  fixture.model->forward(fixture.input_ids);
  CHECK(runner->indices == std::vector<int64_t>{0, 1});
  // q/k/v weight + bias (6), o, gate, up, down (4), two norms (2) = 12 parameters per Qwen2 layer.
  CHECK(runner->param_counts == std::vector<int64_t>{12, 12});

  // A frozen layer passes no parameters (the runner recomputes only what needs gradients).
  for (auto& parameter : fixture.model->parameters()) parameter.set_requires_grad(false);
  runner->param_counts.clear();
  fixture.model->forward(fixture.input_ids);
  CHECK(runner->param_counts == std::vector<int64_t>{0, 0});
}

TEST_CASE("Gradients flow to the input embeddings (gradient-enabled inference)", "[models][llama]") {
  auto fixture = load_llama_fixture("llama");
  const auto embeddings = fixture.model->embed(fixture.input_ids).detach().requires_grad_(true);
  const auto logits = fixture.model->forward_embeddings(embeddings);
  const auto grad = torch::autograd::grad({logits.select(1, 6).sum()}, {embeddings})[0];
  // Causality: the last token's logits depend on every earlier token.
  const auto per_token = grad.abs().sum(torch::IntArrayRef{0, 2});
  CHECK(per_token.min().item<double>() > 0.0);
}

TEST_CASE("bf16 autocast forward gives finite logits close to fp32", "[models][llama][autocast]") {
  torch::NoGradGuard no_grad;
  for (const char* name : kCases) {
    INFO("case " << name);
    auto fixture = load_llama_fixture(name);
    models::AttentionInputs inputs;
    inputs.position_ids = fixture.position_ids;
    const auto reference = fixture.model->forward(fixture.input_ids, inputs);
    torch::Tensor logits;
    {
      AutocastBf16 autocast;
      logits = fixture.model->forward(fixture.input_ids, inputs);
    }
    REQUIRE(logits.scalar_type() == torch::kFloat32);
    REQUIRE(torch::isfinite(logits).all().item<bool>());
    for (const auto& parameter : fixture.model->parameters()) REQUIRE(parameter.scalar_type() == torch::kFloat32);
    const double diff = max_abs_diff(logits, reference);
    const double scale = reference.abs().max().item<double>();
    UNSCOPED_INFO(name << ": bf16 autocast max diff " << diff << " (max |logit| " << scale << ")");
    CHECK(diff > 0.0);            // autocast really ran in bf16
    CHECK(diff < 0.08 * scale);   // bf16 has ~3 significant digits: measured 3-4% of the largest logit
  }
}

TEST_CASE("The Llama MLP's SwiGLU product takes the CPU kernel on bf16 projections, as the op-by-op form",
          "[models][llama][swiglu]") {
  torch::manual_seed(7);
  models::LlamaConfig config;
  config.hidden_size = 16;
  config.intermediate_size = 40;
  models::LlamaMLP mlp(config, models::LlamaLoraOptions{});
  mlp->to(torch::kBFloat16);  // bf16 projection outputs, as autocast's
  const auto hidden = torch::randn({2, 5, 16}).to(torch::kBFloat16);
  const auto output = mlp->forward(hidden, nullptr);
  // The product's node, a few edges behind down_proj's.
  bool kernel_node = false;
  std::vector<torch::autograd::Node*> frontier = {output.grad_fn().get()};
  for (int depth = 0; depth < 4 && !kernel_node; ++depth) {
    std::vector<torch::autograd::Node*> next;
    for (auto* node : frontier) {
      if (std::string(node->name()).find("CpuSwiglu") != std::string::npos) kernel_node = true;
      for (const auto& edge : node->next_edges()) {
        if (edge.function) next.push_back(edge.function.get());
      }
    }
    frontier = std::move(next);
  }
  CHECK(kernel_node);
  torch::NoGradGuard no_grad;
  const auto by_ops = mlp->down_proj->forward(torch::silu(mlp->gate_proj->forward(hidden)) *
                                              mlp->up_proj->forward(hidden));
  CHECK(max_abs_diff(output.to(torch::kFloat), by_ops.to(torch::kFloat)) <=
        0.02 * by_ops.abs().max().item<double>());
}
