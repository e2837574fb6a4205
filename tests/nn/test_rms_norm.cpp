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
