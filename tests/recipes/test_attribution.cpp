// Gradient attribution (tune infer --grad) against an outside truth: a float64 copy of the model, differentiated
// by central finite differences and by plain (uncheckpointed) autograd. Also checks that checkpointed blocks under
// the outer torch::autograd::grad that attribute() takes give the same gradients as plain blocks, and that the
// checkpointed path really recomputed the blocks.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "common/activation_memory.h"
#include "tune/core/memory_tracker.h"
#include "tune/memory/checkpoint.h"
#include "tune/models/llama.h"
#include "tune/precision/mixed_precision.h"
#include "tune/recipes/sft/generate.h"
#include "tune/recipes/sft/memory_report.h"

namespace {

using tune::precision::MixedPrecision;
using tune::recipes::sft::AttributionResult;

tune::models::LlamaConfig tiny_config() {
  tune::models::LlamaConfig config;
  config.vocab_size = 64;
  config.hidden_size = 32;
  config.intermediate_size = 64;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.max_position_embeddings = 128;
  return config;
}

// Counts how often each block function is called, then hands the call to the runner under test: a checkpointed
// block runs twice (no-grad forward, then the recompute in backward), a plain block once.
class CountingRunner : public tune::nn::BlockRunner {
 public:
  explicit CountingRunner(std::shared_ptr<tune::nn::BlockRunner> inner) : inner_(std::move(inner)) {}
  torch::Tensor run(int64_t block_index, const tune::nn::BlockFunction& block, const torch::Tensor& input,
                    const std::vector<torch::Tensor>& params) override {
    auto calls = calls_;
    return inner_->run(
        block_index, [block, calls](const torch::Tensor& h) { ++*calls; return block(h); }, input, params);
  }
  int64_t calls() const { return *calls_; }

 private:
  std::shared_ptr<tune::nn::BlockRunner> inner_;
  std::shared_ptr<int64_t> calls_ = std::make_shared<int64_t>(0);
};

// Runs blocks plainly and keeps the last block's output. The model returns float32 logits whatever its dtype, which
// would round away the float64 precision finite differences need, so the float64 reference takes the trunk's output
// from here and applies the final RMSNorm and lm_head itself.
class CapturingRunner : public tune::nn::BlockRunner {
 public:
  torch::Tensor run(int64_t, const tune::nn::BlockFunction& block, const torch::Tensor& input,
                    const std::vector<torch::Tensor>&) override {
    last_output = block(input);
    return last_output;
  }
  torch::Tensor last_output;
};

// log p(continuation | prompt) in float64 as a function of the prompt's input embeddings.
class Float64Reference {
 public:
  Float64Reference(tune::models::LlamaForCausalLM& model32, const std::vector<int64_t>& prompt,
                   const std::vector<int64_t>& continuation)
      : model_(model32->config()), prompt_length_(static_cast<int64_t>(prompt.size())) {
    torch::NoGradGuard no_grad;
    auto source = model32->named_parameters();
    for (auto& item : model_->named_parameters()) item.value().copy_(source[item.key()]);
    model_->to(torch::kDouble);
    model_->eval();
    model_->set_block_runner(capture_);
    std::vector<int64_t> all = prompt;
    all.insert(all.end(), continuation.begin(), continuation.end());
    ids_ = torch::tensor(all, torch::kLong).unsqueeze(0);
    const auto embeddings = model_->embed(ids_);
    prompt_embeddings = embeddings.narrow(1, 0, prompt_length_).clone();
    continuation_embeddings_ = embeddings.narrow(1, prompt_length_, embeddings.size(1) - prompt_length_).clone();
  }

  torch::Tensor log_prob(const torch::Tensor& prompt_embeddings_in) {
    model_->forward_embeddings(torch::cat({prompt_embeddings_in, continuation_embeddings_}, 1));
    const auto params = model_->named_parameters();
    const auto hidden = capture_->last_output;
    const double eps = model_->config().rms_norm_eps;
    const auto normed = hidden * torch::rsqrt(hidden.pow(2).mean(-1, true) + eps) * params["model.norm.weight"];
    const auto logits = torch::matmul(normed, params["lm_head.weight"].t());
    const auto log_probs = torch::log_softmax(logits, -1)[0];
    const int64_t total = ids_.size(1);
    const auto predicted = log_probs.slice(0, prompt_length_ - 1, total - 1);
    const auto targets = ids_[0].slice(0, prompt_length_, total).unsqueeze(1);
    return predicted.gather(1, targets).sum();
  }

  // d log p / d prompt embeddings by autograd in float64, no checkpointing: [prompt, hidden].
  torch::Tensor gradient() {
    torch::AutoGradMode grad_on(true);
    const auto x = prompt_embeddings.clone().requires_grad_(true);
    return torch::autograd::grad({log_prob(x)}, {x})[0][0].detach();
  }

  // Central difference of log p along `direction` ([hidden]) applied to prompt token `token`.
  double directional_derivative(int64_t token, const torch::Tensor& direction, double step) {
    torch::NoGradGuard no_grad;
    auto plus = prompt_embeddings.clone();
    auto minus = prompt_embeddings.clone();
    plus[0][token] += step * direction;
    minus[0][token] -= step * direction;
    return (log_prob(plus).item<double>() - log_prob(minus).item<double>()) / (2.0 * step);
  }

  torch::Tensor prompt_embeddings;  // [1, prompt, hidden] float64

 private:
  tune::models::LlamaForCausalLM model_;
  int64_t prompt_length_;
  std::shared_ptr<CapturingRunner> capture_ = std::make_shared<CapturingRunner>();
  torch::Tensor ids_;
  torch::Tensor continuation_embeddings_;
};

AttributionResult attribute_with(tune::models::LlamaForCausalLM& model, std::shared_ptr<CountingRunner> runner,
                                 const std::vector<int64_t>& prompt, const std::vector<int64_t>& continuation) {
  model->set_block_runner(runner);
  return tune::recipes::sft::attribute(model, prompt, continuation, MixedPrecision::no, torch::kCPU);
}

}  // namespace

TEST_CASE("attribution gradients match float64 finite differences, with and without checkpointing",
          "[recipes][attribution][checkpoint]") {
  torch::manual_seed(11);
  const auto config = tiny_config();
  tune::models::LlamaForCausalLM model(config);
  const std::vector<int64_t> prompt = {1, 17, 42, 5, 33, 60, 8};
  const std::vector<int64_t> continuation = {25, 3, 50, 12};
  const auto num_prompt = static_cast<int64_t>(prompt.size());

  // Runner full vs off, each wrapped to count block calls.
  tune::memory::CheckpointOptions full_options;
  full_options.policy = tune::memory::Policy::full;
  auto checkpointed = std::make_shared<CountingRunner>(
      std::make_shared<tune::memory::CheckpointRunner>(full_options, config.num_hidden_layers));
  const auto with_checkpointing = attribute_with(model, checkpointed, prompt, continuation);
  auto plain = std::make_shared<CountingRunner>(std::make_shared<tune::nn::PlainBlockRunner>());
  const auto without_checkpointing = attribute_with(model, plain, prompt, continuation);

  // The checkpointed path really recomputed every block in backward; the plain one ran each once.
  CHECK(checkpointed->calls() == 2 * config.num_hidden_layers);
  CHECK(plain->calls() == config.num_hidden_layers);
  REQUIRE(with_checkpointing.prompt_tokens.size() == prompt.size());
  REQUIRE(without_checkpointing.prompt_tokens.size() == prompt.size());

  Float64Reference reference(model, prompt, continuation);
  const auto gradient = reference.gradient();                  // [prompt, hidden] float64
  const auto embeddings = reference.prompt_embeddings[0];      // [prompt, hidden]
  torch::manual_seed(3);
  const double step = 1e-4;
  double worst_fd_random = 0.0, worst_fd_norm = 0.0, worst_fd_x_input = 0.0;
  double worst_norm = 0.0, worst_x_input = 0.0, worst_runner = 0.0;

  {
    torch::NoGradGuard no_grad;
    const double log_prob64 = reference.log_prob(reference.prompt_embeddings).item<double>();
    CHECK(std::abs(with_checkpointing.continuation_log_prob - log_prob64) <= 1e-5 * std::abs(log_prob64));
  }

  for (int64_t i = 0; i < num_prompt; ++i) {
    const auto g = gradient[i];
    const auto e = embeddings[i];
    const double g_norm = g.norm().item<double>();
    const double e_norm = e.norm().item<double>();
    const double g_dot_e = (g * e).sum().item<double>();
    REQUIRE(g_norm > 1e-6);  // every prompt token influences the continuation through attention
    INFO("prompt token " << i << ": float64 |g| " << g_norm << ", g.e " << g_dot_e);

    // The float64 autograd gradient is itself right: directional derivatives along random directions.
    for (int k = 0; k < 3; ++k) {
      const auto d = torch::randn({config.hidden_size}, torch::kDouble);
      const double fd = reference.directional_derivative(i, d, step);
      const double relative = std::abs(fd - (g * d).sum().item<double>()) / (g_norm * d.norm().item<double>());
      CHECK(relative < 1e-4);
      worst_fd_random = std::max(worst_fd_random, relative);
    }
    // Finite differences along the unit gradient give its norm, and along the embedding itself give g.e: the
    // two numbers attribute() reports, checked here without any autograd.
    const double fd_norm = reference.directional_derivative(i, g / g_norm, step);
    const double fd_x_input = reference.directional_derivative(i, e, step);
    const auto& got = with_checkpointing.prompt_tokens[static_cast<size_t>(i)];
    CHECK(got.token_id == prompt[static_cast<size_t>(i)]);
    const double fd_norm_error = std::abs(got.grad_norm - fd_norm) / fd_norm;
    // grad_x_input is a signed sum that can nearly cancel: its error is measured against |g| |e|.
    const double fd_x_input_error = std::abs(got.grad_x_input - fd_x_input) / (g_norm * e_norm);
    CHECK(fd_norm_error < 1e-4);
    CHECK(fd_x_input_error < 1e-4);
    worst_fd_norm = std::max(worst_fd_norm, fd_norm_error);
    worst_fd_x_input = std::max(worst_fd_x_input, fd_x_input_error);

    // attribute() (float32, checkpointed) against float64 autograd without checkpointing.
    const double norm_error = std::abs(got.grad_norm - g_norm) / g_norm;
    const double x_input_error = std::abs(got.grad_x_input - g_dot_e) / (g_norm * e_norm);
    CHECK(norm_error < 1e-4);
    CHECK(x_input_error < 1e-4);
    worst_norm = std::max(worst_norm, norm_error);
    worst_x_input = std::max(worst_x_input, x_input_error);

    // Checkpointing under the outer autograd::grad does not change the gradients.
    const auto& off = without_checkpointing.prompt_tokens[static_cast<size_t>(i)];
    const double runner_norm = std::abs(got.grad_norm - off.grad_norm) / off.grad_norm;
    const double runner_x_input = std::abs(got.grad_x_input - off.grad_x_input) / (off.grad_norm * e_norm);
    CHECK(runner_norm < 1e-5);
    CHECK(runner_x_input < 1e-5);
    worst_runner = std::max({worst_runner, runner_norm, runner_x_input});
  }
  CHECK(std::abs(with_checkpointing.continuation_log_prob - without_checkpointing.continuation_log_prob) <=
        1e-6 * std::abs(without_checkpointing.continuation_log_prob));
  WARN("attribution: float64 FD vs float64 autograd (random directions) worst " << worst_fd_random
       << "; attribute() vs FD: grad_norm " << worst_fd_norm << ", grad_x_input " << worst_fd_x_input
       << "; vs float64 autograd: grad_norm " << worst_norm << ", grad_x_input " << worst_x_input
       << "; checkpointed vs plain " << worst_runner);
}

TEST_CASE("attribution under full checkpointing needs forward-only memory plus about one block's working set",
          "[recipes][attribution][memory]") {
  tune::memory_tracker::install();
  torch::manual_seed(12);
  const auto config = tune::testing::activation_heavy_llama_config(8, 1024);
  tune::models::LlamaForCausalLM model(config);
  model->eval();
  std::vector<int64_t> prompt(504), continuation(8);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int64_t>((i * 37) % 256);
  for (size_t i = 0; i < continuation.size(); ++i) continuation[i] = static_cast<int64_t>((i * 11) % 256);
  std::vector<int64_t> all = prompt;
  all.insert(all.end(), continuation.begin(), continuation.end());
  const auto tokens = static_cast<int64_t>(all.size());

  auto peak_of = [](const std::function<void()>& work) {
    const int64_t before = tune::memory_tracker::cpu_live_bytes();
    tune::memory_tracker::reset_cpu_peak();
    work();
    return tune::memory_tracker::cpu_peak_bytes() - before;
  };
  model->set_block_runner(std::make_shared<tune::nn::PlainBlockRunner>());
  const int64_t forward_only = peak_of([&] {
    torch::NoGradGuard no_grad;
    tune::precision::AutocastScope autocast(MixedPrecision::bf16, torch::kCPU);
    model->forward(torch::tensor(all).unsqueeze(0));
  });
  auto attribution_peak = [&](tune::memory::Policy policy) {
    tune::memory::CheckpointOptions options;
    options.policy = policy;
    model->set_block_runner(std::make_shared<tune::memory::CheckpointRunner>(options, config.num_hidden_layers));
    return peak_of([&] { tune::recipes::sft::attribute(model, prompt, continuation, MixedPrecision::bf16, torch::kCPU); });
  };
  const int64_t full = attribution_peak(tune::memory::Policy::full);
  const int64_t off = attribution_peak(tune::memory::Policy::off);
  const tune::recipes::sft::ActivationShape shape{1, tokens, 2};
  const int64_t one_block = tune::recipes::sft::estimate_layer_working_set_bytes(config, shape);
  const int64_t block_inputs = config.num_hidden_layers * tokens * config.hidden_size * 4;
  WARN("attribution over " << tokens << " tokens: forward-only inference " << forward_only / 1048576.0
                           << " MiB; --grad with full checkpointing " << full / 1048576.0 << " MiB, off "
                           << off / 1048576.0 << " MiB; one block's working set " << one_block / 1048576.0
                           << " MiB, block inputs " << block_inputs / 1048576.0 << " MiB");
  CHECK(full <= forward_only + block_inputs + one_block);
  CHECK(off >= 2 * full);
}
