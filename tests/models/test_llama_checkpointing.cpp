// The Llama model under every checkpointing policy: logits and gradients equal to policy off (the plain run is
// the truth), with backward() and with autograd::grad w.r.t. the input embeddings, for full and LoRA training;
// sqrt's segments; selective's regions (which ones run, how often) and its measured activation memory.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/activation_memory.h"
#include "common/scoped_env.h"
#include "tune/core/memory_tracker.h"
#include "tune/memory/checkpoint.h"
#include "tune/models/llama.h"
#include "tune/precision/mixed_precision.h"

using namespace tune;
using memory::CheckpointOptions;
using memory::CheckpointRunner;
using memory::Policy;

namespace {

// Small and dropout-free, with grouped-query attention.
models::LlamaConfig tiny_config(int64_t layers) {
  models::LlamaConfig config;
  config.vocab_size = 64;
  config.hidden_size = 32;
  config.intermediate_size = 48;
  config.num_hidden_layers = layers;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.max_position_embeddings = 64;
  return config;
}

const std::array<CheckpointOptions, 5> kPolicies = {
    CheckpointOptions{Policy::off, 2}, CheckpointOptions{Policy::full, 2}, CheckpointOptions{Policy::every_k, 2},
    CheckpointOptions{Policy::sqrt, 2}, CheckpointOptions{Policy::selective, 2}};

struct Pass {
  torch::Tensor logits;
  std::map<std::string, torch::Tensor> grads;  // by parameter name; undefined where none arrived
};

Pass train_pass(models::LlamaForCausalLM& model, const torch::Tensor& ids, const torch::Tensor& upstream) {
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  torch::Tensor logits = model->forward(ids);
  (logits * upstream).sum().backward();
  Pass pass{logits.detach(), {}};
  for (const auto& item : model->named_parameters()) {
    pass.grads[item.key()] = item.value().grad().defined() ? item.value().grad().clone() : torch::Tensor();
  }
  return pass;
}

// Bitwise for the block policies: the recompute repeats the same kernels on the same inputs, and a tolerance
// would hide a recompute that differs (a wrong RNG or autocast state). Selective can differ in the last bits:
// a region node hands back the gradients of all its inputs at once, which changes the order in which autograd
// sums the gradients of a tensor with three consumers (the norm output feeding q, k and v). It is held to 1e-6
// relative to the tensor's largest entry.
void check_same(const torch::Tensor& got, const torch::Tensor& expected, const std::string& what, Policy policy) {
  INFO(what);
  REQUIRE(got.defined() == expected.defined());
  if (!got.defined()) return;
  const double diff = (got - expected).abs().max().item<double>();
  INFO("max |diff| " << diff);
  if (policy == Policy::selective) {
    CHECK(diff <= 1e-6 * std::max(1.0, expected.abs().max().item<double>()));
  } else {
    CHECK(torch::equal(got, expected));
  }
}

std::string name_of(const CheckpointOptions& options) { return memory::policy_name(options.policy); }

// Autograd nodes of `output`'s graph whose name contains `name`.
int64_t count_nodes(const torch::Tensor& output, const std::string& name) {
  std::unordered_set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> pending{output.grad_fn().get()};
  int64_t count = 0;
  while (!pending.empty()) {
    torch::autograd::Node* node = pending.back();
    pending.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    if (node->name().find(name) != std::string::npos) ++count;
    for (const auto& edge : node->next_edges()) pending.push_back(edge.function.get());
  }
  return count;
}

// Counts region calls by kind and hands them to `inner`.
class RegionCountingRunner : public nn::BlockRunner {
 public:
  explicit RegionCountingRunner(std::shared_ptr<nn::BlockRunner> inner) : inner_(std::move(inner)) {}
  torch::Tensor run(int64_t block_index, const nn::BlockFunction& block, const torch::Tensor& input,
                    const std::vector<torch::Tensor>& params) override {
    return inner_->run(block_index, block, input, params);
  }
  torch::Tensor run_stack(int64_t count, const nn::StackFunction& block, const torch::Tensor& input,
                          const nn::StackParamsFunction& params_of) override {
    return inner_->run_stack(count, block, input, params_of);
  }
  torch::Tensor run_region(nn::RegionKind kind, const nn::RegionFunction& region,
                           const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& params) override {
    auto counts = counts_;
    auto counted = [counts, kind, region](const std::vector<torch::Tensor>& x) {
      ++(*counts)[kind];
      return region(x);
    };
    return inner_->run_region(kind, counted, inputs, params);
  }
  bool recomputes(nn::RegionKind kind) const override { return inner_->recomputes(kind); }
  int64_t count(nn::RegionKind kind) const { return counts_->count(kind) ? counts_->at(kind) : 0; }

 private:
  std::shared_ptr<nn::BlockRunner> inner_;
  std::shared_ptr<std::map<nn::RegionKind, int64_t>> counts_ = std::make_shared<std::map<nn::RegionKind, int64_t>>();
};

}  // namespace

TEST_CASE("every policy gives the logits and parameter gradients of policy off", "[models][checkpoint]") {
  const auto config = tiny_config(4);
  torch::manual_seed(1);
  models::LlamaForCausalLM model(config);
  model->train();
  const torch::Tensor ids = torch::randint(0, config.vocab_size, {2, 12}, torch::kLong);
  const torch::Tensor upstream = torch::randn({2, 12, config.vocab_size});
  model->set_block_runner(std::make_shared<CheckpointRunner>(kPolicies[0], config.num_hidden_layers));
  const Pass expected = train_pass(model, ids, upstream);
  for (const auto& options : kPolicies) {
    INFO("policy " << name_of(options));
    model->set_block_runner(std::make_shared<CheckpointRunner>(options, config.num_hidden_layers));
    const Pass got = train_pass(model, ids, upstream);
    check_same(got.logits, expected.logits, "logits", options.policy);
    for (const auto& [name, grad] : expected.grads) {
      REQUIRE(grad.defined());
      check_same(got.grads.at(name), grad, name, options.policy);
    }
  }
}

TEST_CASE("every policy on Qwen3 with sliding layers and a GELU MLP gives the gradients of policy off",
          "[models][checkpoint]") {
  // The query/key norms run as norm regions and the GELU product as an activation region (recomputed under
  // selective); the sliding-window mask (window 4 < 12 tokens, on layers 1 and 3) narrows the chunked core's keys.
  auto config = tiny_config(4);
  config.model_type = "qwen3";
  config.head_dim = 16;
  config.hidden_act = "gelu_pytorch_tanh";
  config.sliding_window = 4;
  config.layer_types = {"full_attention", "sliding_attention", "full_attention", "sliding_attention"};
  torch::manual_seed(4);
  models::LlamaForCausalLM model(config);
  model->train();
  const torch::Tensor ids = torch::randint(0, config.vocab_size, {2, 12}, torch::kLong);
  const torch::Tensor upstream = torch::randn({2, 12, config.vocab_size});
  model->set_block_runner(std::make_shared<CheckpointRunner>(kPolicies[0], config.num_hidden_layers));
  const Pass expected = train_pass(model, ids, upstream);
  REQUIRE(expected.grads.count("model.layers.1.self_attn.q_norm.weight") == 1);
  CHECK(expected.grads.at("model.layers.1.self_attn.k_norm.weight").abs().sum().item<double>() > 0.0);
  for (const auto& options : kPolicies) {
    INFO("policy " << name_of(options));
    model->set_block_runner(std::make_shared<CheckpointRunner>(options, config.num_hidden_layers));
    const Pass got = train_pass(model, ids, upstream);
    check_same(got.logits, expected.logits, "logits", options.policy);
    for (const auto& [name, grad] : expected.grads) {
      REQUIRE(grad.defined());
      check_same(got.grads.at(name), grad, name, options.policy);
    }
  }
}

TEST_CASE("every policy: autograd::grad w.r.t. input embeddings equals off and leaves params alone",
          "[models][checkpoint]") {
  const auto config = tiny_config(4);
  torch::manual_seed(2);
  models::LlamaForCausalLM model(config);
  const torch::Tensor ids = torch::randint(0, config.vocab_size, {2, 10}, torch::kLong);
  const torch::Tensor upstream = torch::randn({2, 10, config.vocab_size});
  auto input_grad = [&](const CheckpointOptions& options) {
    model->set_block_runner(std::make_shared<CheckpointRunner>(options, config.num_hidden_layers));
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    torch::Tensor embeddings = model->embed(ids).detach().requires_grad_(true);
    torch::Tensor logits = model->forward_embeddings(embeddings);
    torch::Tensor grad = torch::autograd::grad({(logits * upstream).sum()}, {embeddings})[0];
    for (const auto& item : model->named_parameters()) {
      INFO(item.key());
      CHECK_FALSE(item.value().grad().defined());
    }
    return grad;
  };
  const torch::Tensor expected = input_grad(kPolicies[0]);
  for (const auto& options : kPolicies) {
    INFO("policy " << name_of(options));
    check_same(input_grad(options), expected, "input embedding gradient", options.policy);
  }
}

TEST_CASE("every policy: frozen base + LoRA, only the adapters get gradients, equal to off", "[models][checkpoint]") {
  const auto config = tiny_config(4);
  models::LlamaLoraOptions lora;
  lora.lora.rank = 4;
  lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  torch::manual_seed(3);
  models::LlamaForCausalLM model(config, lora);
  model->freeze_base_weights();
  {
    // lora_B starts at zero (PEFT), which would make every lora_A gradient zero: give it values.
    torch::NoGradGuard no_grad;
    for (auto& item : model->named_parameters()) {
      if (item.key().find("lora_B") != std::string::npos) item.value().normal_(0.0, 0.1);
    }
  }
  const torch::Tensor ids = torch::randint(0, config.vocab_size, {2, 12}, torch::kLong);
  const torch::Tensor upstream = torch::randn({2, 12, config.vocab_size});
  model->set_block_runner(std::make_shared<CheckpointRunner>(kPolicies[0], config.num_hidden_layers));
  const Pass expected = train_pass(model, ids, upstream);
  for (const auto& options : kPolicies) {
    INFO("policy " << name_of(options));
    model->set_block_runner(std::make_shared<CheckpointRunner>(options, config.num_hidden_layers));
    const Pass got = train_pass(model, ids, upstream);
    check_same(got.logits, expected.logits, "logits", options.policy);
    for (const auto& [name, grad] : expected.grads) {
      const bool adapter = name.find("lora_") != std::string::npos;
      INFO(name);
      CHECK(grad.defined() == adapter);
      if (adapter) CHECK(grad.abs().sum().item<double>() > 0.0);
      check_same(got.grads.at(name), grad, name, options.policy);
    }
  }
}

TEST_CASE("sqrt on a 16-layer Llama checkpoints 4 segments; full 16 blocks; selective one per region",
          "[models][checkpoint]") {
  const auto config = tiny_config(16);
  torch::manual_seed(4);
  models::LlamaForCausalLM model(config);
  const torch::Tensor ids = torch::randint(0, config.vocab_size, {1, 6}, torch::kLong);
  auto nodes = [&](Policy policy, const std::string& name) {
    model->set_block_runner(std::make_shared<CheckpointRunner>(CheckpointOptions{policy, 2}, 16));
    return count_nodes(model->forward(ids), name);
  };
  CHECK(nodes(Policy::off, "CheckpointFunction") == 0);
  CHECK(nodes(Policy::sqrt, "CheckpointFunction") == 4);
  CHECK(nodes(Policy::full, "CheckpointFunction") == 16);
  CHECK(nodes(Policy::selective, "CheckpointFunction") == 16 * 3);  // two norms and the activation per layer
  // The attention core recomputes its probabilities through its own node (nn/attention_core.h), only in selective:
  // inside a fully checkpointed block it runs plainly, since the block's recompute covers it.
  CHECK(nodes(Policy::selective, "RecomputingAttention") == 16);
  CHECK(nodes(Policy::off, "RecomputingAttention") == 0);
  CHECK(nodes(Policy::full, "RecomputingAttention") == 0);
}

TEST_CASE("region functions run once in forward and once more in backward, only where recomputed",
          "[models][checkpoint]") {
  // The norms as ATen's ops: tune's CPU norm kernel (fp32 here) runs outside the norm regions, keeping what one
  // would (tests/nn/test_rms_norm_cpu.cpp).
  const testing::ScopedEnv aten_norms("TUNE_CPU_NORM", "libtorch");
  const auto config = tiny_config(3);
  torch::manual_seed(5);
  models::LlamaForCausalLM model(config);
  const torch::Tensor ids = torch::randint(0, config.vocab_size, {2, 8}, torch::kLong);
  const int64_t layers = config.num_hidden_layers;
  struct Expected {
    Policy policy;
    int64_t after_backward;  // calls of each per-layer region, times the layer count
  };
  // off: no recompute. selective: each region recomputed once. full: each block recomputed once, its regions
  // run plainly inside that recompute (a nested region checkpoint would make it 3).
  for (const Expected& e : {Expected{Policy::off, 1}, Expected{Policy::selective, 2}, Expected{Policy::full, 2}}) {
    INFO("policy " << memory::policy_name(e.policy));
    auto runner = std::make_shared<RegionCountingRunner>(
        std::make_shared<CheckpointRunner>(CheckpointOptions{e.policy, 2}, layers));
    model->set_block_runner(runner);
    torch::Tensor logits = model->forward(ids);
    CHECK(runner->count(nn::RegionKind::norm) == 2 * layers);
    CHECK(runner->count(nn::RegionKind::activation) == layers);
    logits.pow(2).mean().backward();
    CHECK(runner->count(nn::RegionKind::norm) == 2 * layers * e.after_backward);
    CHECK(runner->count(nn::RegionKind::activation) == layers * e.after_backward);
  }
  // Under no-grad nothing is recomputed and no graph is kept.
  auto runner = std::make_shared<RegionCountingRunner>(
      std::make_shared<CheckpointRunner>(CheckpointOptions{Policy::selective, 2}, layers));
  model->set_block_runner(runner);
  torch::NoGradGuard no_grad;
  CHECK(model->forward(ids).grad_fn() == nullptr);
  CHECK(runner->count(nn::RegionKind::norm) == 2 * layers);
}

namespace {

// Activation memory of one bf16-autocast training step (tests/common/activation_memory.h).
int64_t measure_activation_bytes(models::LlamaForCausalLM& model, const torch::Tensor& ids) {
  return testing::measure_step_activation_bytes(*model, [&] { return model->forward(ids).pow(2).mean(); });
}

std::map<Policy, int64_t> measure_policies(const models::LlamaConfig& config, const std::vector<Policy>& policies) {
  torch::manual_seed(6);
  models::LlamaForCausalLM model(config);
  model->train();
  const torch::Tensor ids = torch::randint(0, config.vocab_size, {2, 256}, torch::kLong);
  model->set_block_runner(std::make_shared<CheckpointRunner>(CheckpointOptions{Policy::off, 2}, config.num_hidden_layers));
  measure_activation_bytes(model, ids);  // warm-up: allocates parameter gradients
  std::map<Policy, int64_t> measured;
  for (Policy policy : policies) {
    auto runner = std::make_shared<CheckpointRunner>(CheckpointOptions{policy, 2}, config.num_hidden_layers);
    model->set_block_runner(runner);
    measured[policy] = measure_activation_bytes(model, ids);
    WARN(runner->describe() << ": measured activation memory " << measured[policy] / 1048576.0 << " MiB");
  }
  return measured;
}

}  // namespace

TEST_CASE("selective: measured activation memory at least 10% under off and above full", "[models][checkpoint][memory]") {
  // Selective's region recomputes (the norms keep their inputs alone, the SwiGLU product its gate and up) against
  // off's layers. Both take tune's recomputing attention core here (nn::attention_core_form: off's layers keep their
  // graphs until backward too), so the attention probabilities are in neither: measured 0.83x off on LibTorch 2.13.
  // The norms and the SwiGLU product as ATen's ops: tune's CPU kernels for them keep what selective's regions keep,
  // so with them (the default on the CPU) selective runs those parts as off does.
  const testing::ScopedEnv plain_core("TUNE_CPU_ATTENTION", "plain");
  const testing::ScopedEnv aten_norms("TUNE_CPU_NORM", "libtorch");
  const testing::ScopedEnv aten_swiglu("TUNE_CPU_SWIGLU", "libtorch");
  memory_tracker::install();
  const auto config = testing::activation_heavy_llama_config();
  auto measured = measure_policies(config, {Policy::off, Policy::full, Policy::selective});
  CHECK(measured[Policy::full] > 0);
  CHECK(static_cast<double>(measured[Policy::selective]) <= 0.9 * static_cast<double>(measured[Policy::off]));
  CHECK(measured[Policy::selective] > measured[Policy::full]);
}

TEST_CASE("sqrt on 16 layers: measured activation memory between full and off, under 0.6 x off",
          "[models][checkpoint][memory]") {
  memory_tracker::install();
  models::LlamaConfig config;
  config.vocab_size = 128;
  config.hidden_size = 128;
  config.intermediate_size = 344;
  config.num_hidden_layers = 16;
  config.num_attention_heads = 2;
  config.num_key_value_heads = 2;
  config.max_position_embeddings = 512;
  auto measured = measure_policies(config, {Policy::off, Policy::full, Policy::sqrt});
  CHECK(static_cast<double>(measured[Policy::sqrt]) < 0.6 * static_cast<double>(measured[Policy::off]));
  CHECK(measured[Policy::sqrt] > measured[Policy::full]);
}
