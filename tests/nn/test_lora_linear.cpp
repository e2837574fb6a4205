// LoraLinear: PEFT parameter names and init, the adapter's contribution, dropout placement and merging.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <set>
#include <string>

#include "tune/nn/lora_linear.h"

using namespace tune::nn;

namespace {

std::set<std::string> names_of(const torch::nn::Module& module) {
  std::set<std::string> names;
  for (const auto& item : module.named_parameters()) names.insert(item.key());
  return names;
}

LoraOptions lora(int64_t rank, double alpha, double dropout = 0.0) {
  LoraOptions options;
  options.rank = rank;
  options.alpha = alpha;
  options.dropout = dropout;
  return options;
}

}  // namespace

TEST_CASE("LoraLinear without an adapter is a plain linear layer", "[nn][lora]") {
  torch::manual_seed(0);
  LoraLinear plain(LoraLinearOptions(6, 4));
  CHECK(names_of(*plain) == std::set<std::string>{"weight"});
  LoraLinear biased(LoraLinearOptions(6, 4).bias(true));
  CHECK(names_of(*biased) == std::set<std::string>{"weight", "bias"});
  const auto x = torch::randn({3, 6});
  CHECK(torch::allclose(biased(x), x.matmul(biased->weight.t()) + biased->bias));
  CHECK(torch::equal(plain->merged_weight(), plain->weight));
}

TEST_CASE("LoraLinear adapter: PEFT names, shapes, zero B, scaling alpha/r", "[nn][lora]") {
  torch::manual_seed(1);
  LoraLinear layer(LoraLinearOptions(6, 4).bias(true).lora(lora(2, 8.0)));
  CHECK(names_of(*layer) == std::set<std::string>{"weight", "bias", "lora_A.weight", "lora_B.weight"});
  CHECK(layer->lora_A->weight.sizes() == torch::IntArrayRef({2, 6}));
  CHECK(layer->lora_B->weight.sizes() == torch::IntArrayRef({4, 2}));
  CHECK(layer->lora_B->weight.abs().sum().item<double>() == 0.0);
  CHECK(layer->lora_A->weight.abs().sum().item<double>() > 0.0);
  CHECK(layer->lora_scaling() == 4.0);

  const auto x = torch::randn({5, 6});
  const auto base = x.matmul(layer->weight.t()) + layer->bias;
  CHECK(torch::allclose(layer(x), base));  // B = 0: starts at the base layer

  {
    torch::NoGradGuard no_grad;
    layer->lora_B->weight.normal_();
  }
  const auto delta = x.matmul(layer->lora_A->weight.t()).matmul(layer->lora_B->weight.t()) * 4.0;
  const auto y = layer(x);
  CHECK((y - (base + delta)).abs().max().item<double>() < 1e-5);
  CHECK((delta.abs().max().item<double>() > 1e-2));  // the adapter really contributes

  // Merged weight reproduces the adapted layer; the module itself is unchanged.
  const auto weight_before = layer->weight.clone();
  const auto merged = layer->merged_weight();
  CHECK((x.matmul(merged.t()) + layer->bias - y).abs().max().item<double>() < 1e-5);
  CHECK(torch::equal(layer->weight, weight_before));
  CHECK_FALSE(merged.requires_grad());
}

TEST_CASE("LoraLinear dropout applies to the adapter input only, and only in training", "[nn][lora]") {
  torch::manual_seed(2);
  LoraLinear layer(LoraLinearOptions(16, 8).lora(lora(4, 4.0, 0.5)));
  const auto x = torch::randn({32, 16});
  const auto base = x.matmul(layer->weight.t());
  layer->train();
  // With B = 0 the adapter contributes nothing, dropped or not: the base path must see the undropped input.
  CHECK(torch::allclose(layer(x), base));
  {
    torch::NoGradGuard no_grad;
    layer->lora_B->weight.normal_();
  }
  const auto first = layer(x);
  const auto second = layer(x);
  CHECK_FALSE(torch::allclose(first, second));  // dropout active in training
  layer->eval();
  CHECK(torch::equal(layer(x), layer(x)));
  const auto delta = x.matmul(layer->lora_A->weight.t()).matmul(layer->lora_B->weight.t());
  CHECK(torch::allclose(layer(x), base + delta, 1e-4, 1e-5));
}

TEST_CASE("LoraLinear gradients reach lora_A and lora_B when the base is frozen", "[nn][lora]") {
  torch::manual_seed(3);
  LoraLinear layer(LoraLinearOptions(6, 4).lora(lora(2, 2.0)));
  layer->weight.set_requires_grad(false);
  layer(torch::randn({3, 6})).pow(2).sum().backward();
  CHECK_FALSE(layer->weight.grad().defined());
  // B = 0 makes A's first gradient zero but B's nonzero (PEFT's intended start).
  REQUIRE(layer->lora_B->weight.grad().defined());
  CHECK(layer->lora_B->weight.grad().abs().sum().item<double>() > 0.0);
  REQUIRE(layer->lora_A->weight.grad().defined());
}
