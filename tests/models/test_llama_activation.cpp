// The gated MLP's activations (config.json hidden_act) against their formulas evaluated in double precision, one
// element at a time with <cmath>, and the MLP's act(gate) * up product.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <string>

#include "tune/models/llama.h"
#include "tune/models/llama_layers.h"

using namespace tune::models;

namespace {

double silu(double x) { return x / (1.0 + std::exp(-x)); }
double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}

// Inputs over the range where the functions differ (large negative to large positive), float64.
torch::Tensor sample_inputs() { return torch::linspace(-8.0, 8.0, 161, torch::kFloat64); }

torch::Tensor apply_formula(const std::function<double(double)>& formula, const torch::Tensor& x) {
  auto out = torch::empty_like(x);
  auto in = x.accessor<double, 1>();
  auto result = out.accessor<double, 1>();
  for (int64_t i = 0; i < x.size(0); ++i) result[i] = formula(in[i]);
  return out;
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST_CASE("every supported hidden_act computes its formula", "[models][activation]") {
  const auto x = sample_inputs();
  const std::pair<const char*, std::function<double(double)>> cases[] = {
      {"silu", silu}, {"swish", silu}, {"gelu", gelu_erf}, {"gelu_pytorch_tanh", gelu_tanh}, {"gelu_new", gelu_tanh}};
  for (const auto& [name, formula] : cases) {
    INFO("hidden_act " << name);
    const auto activation = hidden_activation_from_name(name);
    const double difference = max_diff(apply_hidden_activation(activation, x), apply_formula(formula, x));
    UNSCOPED_INFO(name << ": max |tune - formula| = " << difference);
    CHECK(difference < 1e-12);
  }
  // The two GELUs really differ (else the test could not tell them apart).
  CHECK(max_diff(apply_formula(gelu_erf, x), apply_formula(gelu_tanh, x)) > 1e-4);
  // Every name the config reader accepts has an implementation.
  for (const auto name : kSupportedHiddenActs) CHECK_NOTHROW(hidden_activation_from_name(std::string(name)));
  CHECK_THROWS_AS(hidden_activation_from_name("relu"), std::invalid_argument);
}

TEST_CASE("the MLP computes down(act(gate x) * up x) with the configured activation", "[models][activation]") {
  torch::NoGradGuard no_grad;
  LlamaConfig config;
  config.hidden_size = 8;
  config.intermediate_size = 12;
  config.hidden_act = "gelu";
  LlamaMLP mlp(config, LlamaLoraOptions{});
  mlp->to(torch::kFloat64);
  torch::manual_seed(3);
  for (auto& parameter : mlp->parameters()) parameter.normal_(0.0, 0.7);
  const auto x = torch::randn({2, 3, 8}, torch::kFloat64);
  const auto gate = torch::matmul(x, mlp->gate_proj->weight.t());
  const auto up = torch::matmul(x, mlp->up_proj->weight.t());
  const auto activated = apply_formula(gelu_erf, gate.flatten()).reshape(gate.sizes());
  const auto expected = torch::matmul(activated * up, mlp->down_proj->weight.t());
  CHECK(max_diff(mlp->forward(x), expected) < 1e-12);

  config.hidden_act = "tanh";
  CHECK_THROWS_AS(LlamaMLP(config, LlamaLoraOptions{}), std::invalid_argument);
}
