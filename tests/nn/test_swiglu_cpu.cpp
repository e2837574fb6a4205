// nn/swiglu_cpu.h: the SwiGLU product's CPU kernels against float64 evaluations of the op-by-op form's steps, with
// its bf16 roundings where they happen (silu's output, the product, the product's two gradients, silu's backward),
// and against LibTorch's bf16 ops themselves; odd sizes and two threads (tests/models/test_llama.cpp: the MLP takes it).
#include <ATen/Parallel.h>
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "tune/nn/swiglu_cpu.h"

namespace {

torch::Tensor bf16_round(const torch::Tensor& t) { return t.to(torch::kBFloat16).to(torch::kFloat64); }

// The largest distance of `got` (bf16) from `want` (float64) in bf16 ulps of want: a rounding of want's own
// value is half an ulp; one more rounding step decided differently at a boundary (tune's exp against Sleef's) one.
double ulps(const torch::Tensor& got, const torch::Tensor& want) {
  const auto ulp = torch::pow(2.0, torch::floor(torch::log2(want.abs().clamp_min(1e-30))) - 7.0);
  return ((got.to(torch::kFloat64) - want).abs() / ulp).max().item<double>();
}

}  // namespace

TEST_CASE("SwiGLU's CPU kernels follow the bf16 op-by-op form", "[nn][swiglu]") {
  torch::manual_seed(4);
  const int threads = at::get_num_threads();
  for (const int run_threads : {1, 2}) {
    at::set_num_threads(run_threads);
    for (const auto& sizes : {std::vector<int64_t>{3, 37}, std::vector<int64_t>{2, 70, 672}}) {
      INFO(run_threads << " thread(s), " << sizes.back() << " wide");
      // Gate values over silu's whole range: far negative (silu ~ 0), around 0, far positive (silu ~ x).
      const auto gate = (torch::randn(sizes) * 4).to(torch::kBFloat16).requires_grad_(true);
      const auto up = torch::randn(sizes).to(torch::kBFloat16).requires_grad_(true);
      REQUIRE(tune::nn::swiglu_cpu_fits(gate, up));
      const auto out = tune::nn::swiglu_cpu(gate, up);
      REQUIRE(out.scalar_type() == torch::kBFloat16);
      const auto grad = torch::randn(sizes).to(torch::kBFloat16);
      out.backward(grad);

      // The op-by-op form in float64 with its bf16 roundings.
      const auto g = gate.detach().to(torch::kFloat64), u = up.detach().to(torch::kFloat64);
      const auto dp = grad.to(torch::kFloat64);
      const auto sigmoid = 1.0 / (1.0 + torch::exp(-g));
      const auto silu = bf16_round(g * sigmoid);
      CHECK(ulps(out, silu * u) <= 1.0);
      CHECK(ulps(up.grad(), dp * silu) <= 1.0);
      const auto grad_silu = bf16_round(dp * u);
      CHECK(ulps(gate.grad(), grad_silu * sigmoid * (1.0 + g * (1.0 - sigmoid))) <= 1.0);

      // And LibTorch's bf16 ops: the same but for rare one-ulp steps.
      const auto gate_ref = gate.detach().clone().requires_grad_(true);
      const auto up_ref = up.detach().clone().requires_grad_(true);
      const auto out_ref = torch::silu(gate_ref) * up_ref;
      out_ref.backward(grad);
      const auto differ = [](const torch::Tensor& a, const torch::Tensor& b) {
        return (a != b).to(torch::kFloat64).mean().item<double>();
      };
      CHECK(differ(out, out_ref) < 0.01);
      CHECK(differ(up.grad(), up_ref.grad()) < 0.01);
      CHECK(differ(gate.grad(), gate_ref.grad()) < 0.01);
    }
  }
  at::set_num_threads(threads);
}

TEST_CASE("SwiGLU takes the CPU kernels only for contiguous bf16 gate and up of one shape", "[nn][swiglu]") {
  const auto a = torch::randn({4, 8}).to(torch::kBFloat16);
  CHECK(tune::nn::swiglu_cpu_fits(a, a));
  CHECK_FALSE(tune::nn::swiglu_cpu_fits(a.to(torch::kFloat), a.to(torch::kFloat)));
  CHECK_FALSE(tune::nn::swiglu_cpu_fits(a, a.slice(1, 0, 4)));
  CHECK_FALSE(tune::nn::swiglu_cpu_fits(a.t(), a.t()));
}
