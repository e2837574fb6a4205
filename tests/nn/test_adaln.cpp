// nn/adaln.h: modulated_layer_norm against the two-op form it replaces (modulate(layer_norm_fp32(x))), whose
// gradients autograd derives from LayerNorm's and the multiply's own formulas: float64 (an independent derivation of
// the same maths), and the dtypes Latte runs it in (fp32 x, bf16 shift and scale under autocast); and what it keeps.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "tune/core/memory_tracker.h"
#include "tune/nn/adaln.h"

namespace {

struct Gradients {
  torch::Tensor output, x, shift, scale;
};

Gradients run(bool fused, const torch::Tensor& x0, const torch::Tensor& shift0, const torch::Tensor& scale0,
              const torch::Tensor& grad_output) {
  auto x = x0.clone().requires_grad_(true);
  auto shift = shift0.clone().requires_grad_(true);
  auto scale = scale0.clone().requires_grad_(true);
  const torch::Tensor output = fused ? tune::nn::modulated_layer_norm(x, shift, scale, 1e-6)
                                     : tune::nn::modulate(tune::nn::layer_norm_fp32(x, 1e-6), shift, scale);
  output.backward(grad_output);
  return {output.detach(), x.grad(), shift.grad(), scale.grad()};
}

}  // namespace

TEST_CASE("modulated_layer_norm equals modulate(layer_norm) in value and in every gradient", "[nn][adaln]") {
  torch::manual_seed(0);
  SECTION("float64") {
    const auto options = torch::TensorOptions().dtype(torch::kFloat64);
    const auto x = torch::randn({3, 7, 16}, options) * 3 + 1, shift = torch::randn({3, 16}, options);
    const auto scale = torch::randn({3, 16}, options), grad = torch::randn({3, 7, 16}, options);
    const Gradients fused = run(true, x, shift, scale, grad), plain = run(false, x, shift, scale, grad);
    CHECK(torch::equal(fused.output, plain.output));
    CHECK(torch::allclose(fused.x, plain.x, 1e-12, 1e-12));
    CHECK(torch::allclose(fused.shift, plain.shift, 1e-12, 1e-12));
    CHECK(torch::allclose(fused.scale, plain.scale, 1e-12, 1e-12));
  }
  SECTION("fp32 x with bf16 shift and scale, a non-contiguous x (Latte's view of its state)") {
    const auto state = torch::randn({4, 9, 32});
    const auto x = state.narrow(1, 0, 8);
    const auto shift = torch::randn({4, 32}).to(torch::kBFloat16), scale = torch::randn({4, 32}).to(torch::kBFloat16);
    const auto grad = torch::randn({4, 8, 32});
    const Gradients fused = run(true, x, shift, scale, grad), plain = run(false, x, shift, scale, grad);
    CHECK(fused.output.scalar_type() == torch::kFloat);
    CHECK(torch::equal(fused.output, plain.output));
    CHECK(fused.shift.scalar_type() == torch::kBFloat16);
    CHECK(fused.scale.scalar_type() == torch::kBFloat16);
    CHECK(torch::allclose(fused.x, plain.x, 1e-5, 1e-5));
    CHECK(torch::allclose(fused.shift.to(torch::kFloat), plain.shift.to(torch::kFloat), 1e-2, 1e-2));
    CHECK(torch::allclose(fused.scale.to(torch::kFloat), plain.scale.to(torch::kFloat), 1e-2, 1e-2));
  }
  SECTION("only the inputs that need a gradient get one") {
    const auto x = torch::randn({2, 5, 8}).requires_grad_(true);
    const auto shift = torch::randn({2, 8}), scale = torch::randn({2, 8});
    tune::nn::modulated_layer_norm(x, shift, scale).sum().backward();
    CHECK(x.grad().defined());
    CHECK_FALSE(shift.grad().defined());
  }
}

TEST_CASE("modulated_layer_norm keeps no normalised copy for backward", "[nn][adaln]") {
  tune::memory_tracker::install();
  const auto x = torch::randn({8, 256, 64}, torch::requires_grad());  // 512 KiB in fp32
  const auto shift = torch::randn({8, 64}, torch::requires_grad()), scale = torch::randn({8, 64}, torch::requires_grad());
  auto kept_after_forward = [&](bool fused) {
    const int64_t before = tune::memory_tracker::cpu_live_bytes();
    const torch::Tensor output = fused ? tune::nn::modulated_layer_norm(x, shift, scale)
                                       : tune::nn::modulate(tune::nn::layer_norm_fp32(x), shift, scale);
    return tune::memory_tracker::cpu_live_bytes() - before - output.numel() * 4;  // beyond the output itself
  };
  const int64_t fused = kept_after_forward(true), plain = kept_after_forward(false);
  const int64_t normalised = x.numel() * 4;
  INFO("kept beyond the output: fused " << fused << " bytes, two-op form " << plain);
  CHECK(plain >= normalised);        // the multiply keeps the fp32 normalised x
  CHECK(fused < normalised / 16);    // statistics per row only
}
