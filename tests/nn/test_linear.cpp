// nn::linear (nn/linear.h) against torch::linear: under bf16 autocast the same output and gradients bit for bit,
// with the fp32 weight kept instead of its bf16 copy from forward to backward; elsewhere torch::linear itself.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "tune/core/memory_tracker.h"
#include "tune/nn/block_runner.h"
#include "tune/nn/linear.h"
#include "tune/precision/mixed_precision.h"

namespace {

// A [2, 5, 8] fp32 input (as a LayerNorm's output under autocast) into an 8 -> 6 layer with bias.
struct Layer {
  torch::nn::Linear linear{nullptr};
  torch::Tensor input;
};

Layer make_layer() {
  torch::manual_seed(31);
  Layer layer;
  layer.linear = torch::nn::Linear(torch::nn::LinearOptions(8, 6).bias(true));
  layer.input = torch::randn({2, 5, 8}).requires_grad_();
  return layer;
}

std::vector<torch::Tensor> grads_of(const Layer& layer, const torch::Tensor& output, const torch::Tensor& upstream) {
  return torch::autograd::grad({output}, {layer.input, layer.linear->weight, layer.linear->bias}, {upstream});
}

std::string node_name(const torch::Tensor& output) {
  return output.grad_fn() ? output.grad_fn()->name() : std::string("none");
}

}  // namespace

TEST_CASE("nn::linear under bf16 autocast: torch::linear's bits, forward and backward", "[nn][linear]") {
  const Layer layer = make_layer();
  const auto upstream = torch::randn({2, 5, 6}).to(torch::kBFloat16);
  torch::Tensor plain, recasting;
  {
    tune::precision::AutocastScope autocast(tune::precision::MixedPrecision::bf16, torch::kCPU);
    plain = torch::linear(layer.input, layer.linear->weight, layer.linear->bias);
    recasting = tune::nn::linear(layer.linear, layer.input);
  }
  REQUIRE(node_name(recasting).find("WeightRecastingLinear") != std::string::npos);
  REQUIRE(plain.scalar_type() == torch::kBFloat16);
  CHECK(recasting.scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(plain, recasting));
  const auto expected = grads_of(layer, plain, upstream);
  const auto got = grads_of(layer, recasting, upstream);
  for (size_t i = 0; i < 3; ++i) {
    INFO("input " << i);
    CHECK(got[i].scalar_type() == expected[i].scalar_type());
    CHECK(got[i].sizes() == expected[i].sizes());
    CHECK(torch::equal(got[i], expected[i]));
  }
  // And against float64: the bf16 product's gradients to bf16 rounding.
  const auto x = layer.input.detach().to(torch::kBFloat16).to(torch::kDouble).reshape({10, 8});
  const auto g = upstream.to(torch::kDouble).reshape({10, 6});
  const auto w = layer.linear->weight.detach().to(torch::kBFloat16).to(torch::kDouble);
  CHECK(torch::allclose(got[1].to(torch::kDouble), g.t().mm(x), 1e-2, 1e-2));
  CHECK(torch::allclose(got[0].to(torch::kDouble).reshape({10, 8}), g.mm(w), 1e-2, 1e-2));
  CHECK(torch::allclose(got[2].to(torch::kDouble), g.sum(0), 1e-2, 1e-2));
}

TEST_CASE("nn::linear under autocast keeps no bf16 copy of the weight from forward to backward",
          "[nn][linear][memory]") {
  tune::memory_tracker::install();
  torch::manual_seed(32);
  const int64_t rows = 4, in = 512, out = 1024;  // a weight far larger than the activations
  const auto input = torch::randn({rows, in}, torch::TensorOptions().requires_grad(true));
  const torch::nn::Linear layer(torch::nn::LinearOptions(in, out).bias(true));
  auto held_after_forward = [&](bool recast) {
    const int64_t before = tune::memory_tracker::cpu_live_bytes();
    torch::Tensor output;
    {
      tune::precision::AutocastScope autocast(tune::precision::MixedPrecision::bf16, torch::kCPU);
      output = recast ? tune::nn::linear(layer, input) : torch::linear(input, layer->weight, layer->bias);
    }
    const int64_t held = tune::memory_tracker::cpu_live_bytes() - before;
    output.sum().backward();
    return held;
  };
  const int64_t weight_copy = in * out * 2;
  const int64_t plain = held_after_forward(false);
  const int64_t recasting = held_after_forward(true);
  INFO("held after forward: plain " << plain << " bytes, recasting " << recasting << " bytes");
  CHECK(plain >= weight_copy);
  CHECK(recasting < weight_copy / 4);  // the output and the input's copy
}

TEST_CASE("nn::linear recasts only where the graph lives until backward under autocast and the weight trains",
          "[nn][linear]") {
  Layer layer = make_layer();
  auto node = [&] {
    tune::precision::AutocastScope autocast(tune::precision::MixedPrecision::bf16, torch::kCPU);
    return node_name(tune::nn::linear(layer.linear, layer.input));
  };
  CHECK(node().find("WeightRecastingLinear") != std::string::npos);
  {
    // A checkpointed block's recompute: its graph lives through its own backward only.
    const tune::nn::RecomputeScope in_recompute;
    CHECK(node().find("WeightRecastingLinear") == std::string::npos);
    CHECK(node() != "none");
    const tune::nn::SegmentBlockScope outliving;  // a multi-block segment's block before its last
    CHECK(node().find("WeightRecastingLinear") != std::string::npos);
  }
  {
    const torch::NoGradGuard no_grad;
    CHECK(node() == "none");
  }
  // No autocast: the weight is the product's operand itself.
  CHECK(node_name(tune::nn::linear(layer.linear, layer.input)).find("WeightRecastingLinear") == std::string::npos);
  // A frozen weight (infer --grad): nothing of it is needed for a weight gradient.
  layer.linear->weight.requires_grad_(false);
  CHECK(node().find("WeightRecastingLinear") == std::string::npos);
  CHECK(!tune::nn::linear_recasts_weight(false, true, true));
  CHECK(!tune::nn::linear_recasts_weight(true, false, true));
  CHECK(!tune::nn::linear_recasts_weight(true, true, false));
  CHECK(tune::nn::linear_recasts_weight(true, true, true));
}
