// RMSNorm against the formula evaluated element by element in double precision.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>

#include "tune/nn/rms_norm.h"

using tune::nn::RMSNorm;
using tune::nn::RMSNormOptions;

namespace {

// weight[k] * x[k] / sqrt(mean(x^2) + eps), row by row, in double.
torch::Tensor reference_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const auto rows = x.reshape({-1, x.size(-1)}).to(torch::kFloat64).contiguous();
  const auto w = weight.to(torch::kFloat64).contiguous();
  auto out = torch::empty_like(rows);
  const int64_t n = rows.size(1);
  for (int64_t r = 0; r < rows.size(0); ++r) {
    double sum_squares = 0.0;
    for (int64_t k = 0; k < n; ++k) sum_squares += rows[r][k].item<double>() * rows[r][k].item<double>();
    const double inverse_rms = 1.0 / std::sqrt(sum_squares / static_cast<double>(n) + eps);
    for (int64_t k = 0; k < n; ++k) out[r][k] = w[k].item<double>() * rows[r][k].item<double>() * inverse_rms;
  }
  return out.reshape(x.sizes());
}

}  // namespace

TEST_CASE("RMSNorm matches the float64 formula", "[nn][rms_norm]") {
  torch::manual_seed(0);
  RMSNorm norm(RMSNormOptions(8).eps(1e-5));
  REQUIRE(norm->named_parameters().size() == 1);
  REQUIRE(norm->named_parameters().contains("weight"));
  REQUIRE(torch::equal(norm->weight, torch::ones({8})));
  {
    torch::NoGradGuard no_grad;
    norm->weight.copy_(1.0 + 0.3 * torch::randn({8}));
  }
  // Rows of very different scales: the eps term matters for the small one.
  auto x = torch::randn({3, 5, 8});
  x[0] *= 100.0;
  x[1] *= 1e-3;
  const auto y = norm(x);
  REQUIRE(y.scalar_type() == torch::kFloat32);
  const auto expected = reference_rms_norm(x, norm->weight, 1e-5);
  CHECK((y.to(torch::kFloat64) - expected).abs().max().item<double>() < 1e-5);
}

TEST_CASE("RMSNorm keeps statistics in fp32 for bf16 input and casts before the weight", "[nn][rms_norm]") {
  torch::manual_seed(1);
  RMSNorm norm(RMSNormOptions(64).eps(1e-6));
  {
    torch::NoGradGuard no_grad;
    norm->weight.copy_(1.0 + 0.3 * torch::randn({64}));
  }
  // Large values: bf16 squares of ~300 summed over 64 features lose several bits if not upcast.
  const auto x = (300.0 * torch::randn({4, 64})).to(torch::kBFloat16);
  const auto y = norm(x);
  // HF semantics: fp32 weight * bf16 normalised value -> fp32 output.
  REQUIRE(y.scalar_type() == torch::kFloat32);
  // Expected: normalise the exact bf16 values in double, round to bf16 (the cast), then multiply by the weight.
  const auto normalized = reference_rms_norm(x, torch::ones({64}), 1e-6).to(torch::kBFloat16).to(torch::kFloat64);
  const auto expected = norm->weight.to(torch::kFloat64) * normalized;
  // One bf16 rounding of the normalised value can differ by one ulp (2^-8 relative) at most.
  const auto relative = ((y.to(torch::kFloat64) - expected).abs() / expected.abs().clamp_min(1e-3)).max().item<double>();
  CHECK(relative <= std::ldexp(1.0, -8) + 1e-6);
}

TEST_CASE("RMSNorm on CUDA (LibTorch's fused kernel) matches the float64 formula and its gradients", "[nn][rms_norm][cuda]") {
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device: the CUDA case is not exercised");
    return;
  }
  torch::manual_seed(2);
  const torch::Device cuda(torch::kCUDA, 0);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    RMSNorm norm(RMSNormOptions(256).eps(1e-5));
    {
      torch::NoGradGuard no_grad;
      norm->weight.copy_(1.0 + 0.3 * torch::randn({256}));
    }
    norm->to(cuda, dtype);
    const auto x_cpu = torch::randn({6, 7, 256}).to(dtype).to(torch::kFloat64).requires_grad_(true);
    const auto x = x_cpu.detach().to(cuda, dtype).requires_grad_(true);
    const auto y = norm(x);
    REQUIRE(y.scalar_type() == dtype);
    // The reference: the formula in float64 through autograd (weight and input gradients of sum(y * g)).
    const auto w64 = norm->weight.detach().to(torch::kCPU, torch::kFloat64).requires_grad_(true);
    const auto y64 = w64 * x_cpu * torch::rsqrt(x_cpu.pow(2).mean(-1, true) + 1e-5);
    const auto g = torch::randn(y64.sizes(), torch::kFloat64);
    (y64 * g).sum().backward();
    (y * g.to(cuda, dtype)).sum().backward();
    const double tolerance = dtype == torch::kFloat32 ? 1e-5 : 2e-2;
    const auto relative = [](const torch::Tensor& got, const torch::Tensor& want) {
      return ((got.to(torch::kCPU, torch::kFloat64) - want).norm() / want.norm()).item<double>();
    };
    INFO("dtype " << c10::toString(dtype));
    CHECK(relative(y.detach(), y64.detach()) < tolerance);
    CHECK(relative(x.grad(), x_cpu.grad()) < tolerance);
    CHECK(relative(norm->weight.grad(), w64.grad()) < tolerance);
  }
}
