// The tanh GELU's bf16 CPU kernel (nn/gelu_tanh.h) against the float64 formula, 0.5 x (1 + tanh(u)) with
// u = sqrt(2/pi)(x + 0.044715 x^3), and its derivative, on every bf16 value in a wide range; and against LibTorch's
// gelu / gelu_backward (at most one bf16 ulp apart).
#include <catch2/catch.hpp>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "tune/nn/gelu_tanh.h"

namespace {

// Every finite bf16 value of magnitude in [2^-20, 16], both signs, and zero: ~60k inputs.
torch::Tensor every_bf16_in_range() {
  std::vector<int16_t> bits;
  for (int32_t b = 0; b < 0x10000; ++b) {
    const uint32_t widened = static_cast<uint32_t>(b) << 16;
    float value;
    std::memcpy(&value, &widened, sizeof value);
    const float magnitude = std::fabs(value);
    if (value == 0.0f || (magnitude >= std::ldexp(1.0f, -20) && magnitude <= 16.0f)) {
      bits.push_back(static_cast<int16_t>(static_cast<uint16_t>(b)));
    }
  }
  return torch::tensor(bits, torch::kInt16).view(torch::kBFloat16);
}

// 0.5 (1 + tanh(u)) as sigmoid(2u) = 1 / (1 + exp(-2u)), the same function: in float64 too, 1 + tanh(u) cancels
// for x below about -6 (tanh(u) rounds to -1 + 1e-17), where sigmoid(2u) keeps its full relative precision.
torch::Tensor half_one_plus_tanh_float64(const torch::Tensor& x) {
  const auto u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x.pow(3));
  return torch::sigmoid(2 * u);
}

torch::Tensor gelu_float64(const torch::Tensor& x) { return x * half_one_plus_tanh_float64(x); }

// d/dx [x s(x)] with s = sigmoid(2u): s + x * 2 s (1 - s) * u'(x), u' = sqrt(2/pi)(1 + 3 * 0.044715 x^2).
torch::Tensor gelu_derivative_float64(const torch::Tensor& x) {
  const auto s = half_one_plus_tanh_float64(x);
  return s + x * 2 * s * (1 - s) * std::sqrt(2.0 / M_PI) * (1 + 3 * 0.044715 * x * x);
}

// |got - exact| in units of the bf16 spacing at exact (2^-7 relative), with values below 2^-100 counted as 0 (the
// kernel flushes GELU's far negative tail, x < -9.9, whose values are below 1e-36, to zero).
torch::Tensor bf16_ulps(const torch::Tensor& got, const torch::Tensor& exact) {
  const auto spacing = torch::clamp_min(exact.abs(), std::ldexp(1.0, -100)).log2().floor().sub(7).exp2();
  return (got.to(torch::kDouble) - exact).abs() / spacing;
}

}  // namespace

TEST_CASE("gelu_tanh's bf16 kernel rounds the float64 GELU correctly almost everywhere", "[nn][gelu_tanh]") {
  const torch::Tensor x = every_bf16_in_range();
  REQUIRE(tune::nn::gelu_tanh_uses_tune_kernel(x));
  const torch::Tensor exact = gelu_float64(x.to(torch::kDouble));
  const torch::Tensor got = tune::nn::gelu_tanh(x);
  REQUIRE(got.scalar_type() == torch::kBFloat16);
  const torch::Tensor ulps = bf16_ulps(got, exact);
  // Correct rounding is within half a ulp; an fp32 evaluation to a few fp32 ulps can round the other way only where
  // the exact value sits that close to the midpoint between two bf16 values.
  CHECK(ulps.max().item<double>() <= 0.5 + 1e-3);
  const torch::Tensor correctly_rounded = got.to(torch::kDouble) == exact.to(torch::kBFloat16).to(torch::kDouble);
  // About 0.1% round the other way here (6 of 6,148 with the AVX-512 build; other instruction sets contract the
  // polynomial into FMAs differently, moving a few more or fewer).
  CHECK(correctly_rounded.to(torch::kDouble).mean().item<double>() >= 0.995);

  // LibTorch's kernel agrees to a bf16 ulp where its 1 + tanh(u) does not cancel (x > -4).
  const torch::Tensor near = x.to(torch::kFloat) > -4;
  const torch::Tensor libtorch = torch::gelu(x, "tanh");
  CHECK(bf16_ulps(got, libtorch.to(torch::kDouble)).masked_select(near).max().item<double>() <= 1.0);
}

TEST_CASE("gelu_tanh_backward's bf16 kernel is the float64 derivative times the gradient", "[nn][gelu_tanh]") {
  const torch::Tensor x = every_bf16_in_range();
  torch::manual_seed(3);
  const torch::Tensor grad = torch::randn(x.sizes()).to(torch::kBFloat16);
  const torch::Tensor exact = grad.to(torch::kDouble) * gelu_derivative_float64(x.to(torch::kDouble));
  const torch::Tensor got = tune::nn::gelu_tanh_backward(grad, x);
  REQUIRE(got.scalar_type() == torch::kBFloat16);
  CHECK(bf16_ulps(got, exact).max().item<double>() <= 0.5 + 1e-3);
  const torch::Tensor libtorch = torch::gelu_backward(grad, x, "tanh");
  const torch::Tensor near = x.to(torch::kFloat) > -4;
  CHECK(bf16_ulps(got, libtorch.to(torch::kDouble)).masked_select(near).max().item<double>() <= 1.0);
}

TEST_CASE("gelu_tanh_backward_ writes gelu_tanh_backward's values over the gradient", "[nn][gelu_tanh]") {
  const torch::Tensor x = every_bf16_in_range();
  torch::manual_seed(4);
  const torch::Tensor grad = torch::randn(x.sizes()).to(torch::kBFloat16);
  const torch::Tensor expected = tune::nn::gelu_tanh_backward(grad, x);
  torch::Tensor overwritten = grad.clone();
  const torch::Tensor got = tune::nn::gelu_tanh_backward_(overwritten, x);
  CHECK(got.data_ptr() == overwritten.data_ptr());
  CHECK(torch::equal(got, expected));
  // Where LibTorch's kernel runs (fp32), a new tensor with its values, the gradient untouched.
  const torch::Tensor x32 = x.to(torch::kFloat), grad32 = grad.to(torch::kFloat);
  const torch::Tensor kept = grad32.clone();
  const torch::Tensor fallback = tune::nn::gelu_tanh_backward_(grad32, x32);
  CHECK(torch::equal(grad32, kept));
  CHECK(torch::equal(fallback, torch::gelu_backward(kept, x32, "tanh")));
}

TEST_CASE("gelu_tanh at zero, infinities and NaN", "[nn][gelu_tanh]") {
  const float inf = std::numeric_limits<float>::infinity();
  const torch::Tensor x = torch::tensor({0.0f, -0.0f, inf, std::nanf("")}).to(torch::kBFloat16);
  const torch::Tensor got = tune::nn::gelu_tanh(x).to(torch::kFloat);
  CHECK(got[0].item<float>() == 0.0f);
  CHECK(got[1].item<float>() == 0.0f);
  CHECK(got[2].item<float>() == inf);
  CHECK(std::isnan(got[3].item<float>()));
  const torch::Tensor slope = tune::nn::gelu_tanh_backward(torch::ones_like(x), x).to(torch::kFloat);
  CHECK(slope[0].item<float>() == 0.5f);
  CHECK(slope[2].item<float>() == 1.0f);
  CHECK(std::isnan(slope[3].item<float>()));
}

TEST_CASE("gelu_tanh splits work across threads without changing a bit", "[nn][gelu_tanh]") {
  torch::manual_seed(5);
  const torch::Tensor x = (3 * torch::randn({300, 1000})).to(torch::kBFloat16);
  const torch::Tensor grad = torch::randn({300, 1000}).to(torch::kBFloat16);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const torch::Tensor one_forward = tune::nn::gelu_tanh(x), one_backward = tune::nn::gelu_tanh_backward(grad, x);
  at::set_num_threads(2);
  CHECK(torch::equal(tune::nn::gelu_tanh(x), one_forward));
  CHECK(torch::equal(tune::nn::gelu_tanh_backward(grad, x), one_backward));
  at::set_num_threads(threads);
}

TEST_CASE("gelu_tanh takes LibTorch's kernel for other dtypes and layouts", "[nn][gelu_tanh]") {
  torch::manual_seed(7);
  const torch::Tensor x = torch::randn({6, 10});
  CHECK_FALSE(tune::nn::gelu_tanh_uses_tune_kernel(x));
  CHECK(torch::equal(tune::nn::gelu_tanh(x), torch::gelu(x, "tanh")));
  const torch::Tensor transposed = x.to(torch::kBFloat16).t();
  CHECK_FALSE(tune::nn::gelu_tanh_uses_tune_kernel(transposed));
  CHECK(torch::equal(tune::nn::gelu_tanh(transposed), torch::gelu(transposed, "tanh")));
  const torch::Tensor grad = torch::randn({6, 10});
  CHECK(torch::equal(tune::nn::gelu_tanh_backward(grad, x), torch::gelu_backward(grad, x, "tanh")));
}

TEST_CASE("gelu_tanh_differentiable's gradient is gelu_tanh_backward's", "[nn][gelu_tanh]") {
  torch::manual_seed(9);
  const torch::Tensor x = (2 * torch::randn({4, 64})).to(torch::kBFloat16).requires_grad_();
  const torch::Tensor upstream = torch::randn({4, 64}).to(torch::kBFloat16);
  const torch::Tensor y = tune::nn::gelu_tanh_differentiable(x);
  CHECK(torch::equal(y, tune::nn::gelu_tanh(x.detach())));
  const torch::Tensor grad = torch::autograd::grad({y}, {x}, {upstream})[0];
  CHECK(torch::equal(grad, tune::nn::gelu_tanh_backward(upstream, x.detach())));
  // float64 keeps LibTorch's node (double backward works).
  const torch::Tensor wide = torch::randn({5}, torch::kDouble).requires_grad_();
  const torch::Tensor first = torch::autograd::grad({tune::nn::gelu_tanh_differentiable(wide).sum()}, {wide}, {},
                                                    /*retain_graph=*/true, /*create_graph=*/true)[0];
  const torch::Tensor second = torch::autograd::grad({first.sum()}, {wide})[0];
  CHECK(second.abs().sum().item<double>() > 0);
}
