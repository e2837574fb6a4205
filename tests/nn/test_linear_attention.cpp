// relu_linear_attention and GLUMBConv against explicit float64 loops (the quadratic form of linear attention: the
// same sums taken the other way round; the depthwise 3x3 with zero padding written out).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "tune/nn/glumb_conv.h"
#include "tune/nn/linear_attention.h"
#include "tune/precision/mixed_precision.h"

namespace {

// out_n = sum_m v_m (k_m . q_n) / (sum_m k_m . q_n + eps), one head at a time, in float64.
torch::Tensor quadratic_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  double eps) {
  auto out = torch::zeros_like(v, torch::kDouble);
  const auto qd = q.to(torch::kDouble), kd = k.to(torch::kDouble), vd = v.to(torch::kDouble);
  for (int64_t b = 0; b < q.size(0); ++b) {
    for (int64_t h = 0; h < q.size(1); ++h) {
      for (int64_t n = 0; n < q.size(2); ++n) {
        double normaliser = 0;
        auto numerator = torch::zeros({v.size(3)}, torch::kDouble);
        for (int64_t m = 0; m < k.size(2); ++m) {
          const double w = (kd[b][h][m] * qd[b][h][n]).sum().item<double>();
          normaliser += w;
          numerator += w * vd[b][h][m];
        }
        out[b][h][n] = numerator / (normaliser + eps);
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("relu_linear_attention equals the quadratic form in float64", "[nn][linear_attention]") {
  torch::manual_seed(0);
  const auto q = torch::relu(torch::randn({2, 3, 7, 4}));
  const auto k = torch::relu(torch::randn({2, 3, 7, 4}));
  const auto v = torch::randn({2, 3, 7, 4});
  const auto expected = quadratic_reference(q, k, v, 1e-15);
  const auto got = tune::nn::relu_linear_attention(q, k, v, 1e-15);
  CHECK(got.scalar_type() == torch::kFloat);
  CHECK((got.to(torch::kDouble) - expected).abs().max().item<double>() < 1e-5);
  // bf16 inputs: computed in fp32, returned in bf16.
  const auto low = tune::nn::relu_linear_attention(q.to(torch::kBFloat16), k.to(torch::kBFloat16),
                                                   v.to(torch::kBFloat16), 1e-15);
  CHECK(low.scalar_type() == torch::kBFloat16);
  // Under bf16 autocast the products stay fp32 (autocast would otherwise cast their fp32 operands to bf16).
  torch::Tensor under_autocast;
  {
    tune::precision::AutocastScope autocast(tune::precision::MixedPrecision::bf16, torch::Device(torch::kCPU));
    under_autocast = tune::nn::relu_linear_attention(q, k, v, 1e-15);
  }
  CHECK(torch::equal(under_autocast, got));
  // A query orthogonal to every key (all zero after ReLU) gives 0 / eps = 0, not NaN.
  auto zero_q = q.clone();
  zero_q[0][0][0].zero_();
  CHECK(tune::nn::relu_linear_attention(zero_q, k, v, 1e-15).isfinite().all().item<bool>());
}

TEST_CASE("GLUMBConv is conv1x1, SiLU, depthwise 3x3, SiLU gate, conv1x1", "[nn][glumb_conv]") {
  torch::manual_seed(1);
  tune::nn::GLUMBConv ff(tune::nn::GLUMBConvOptions(3, 2, 2.5));  // hidden int(7.5) = 7
  REQUIRE(ff->conv_inverted->weight.sizes() == torch::IntArrayRef({14, 3, 1, 1}));
  REQUIRE(ff->conv_depth->weight.sizes() == torch::IntArrayRef({14, 1, 3, 3}));
  REQUIRE(ff->conv_point->weight.sizes() == torch::IntArrayRef({2, 7, 1, 1}));
  REQUIRE(!ff->conv_point->bias.defined());
  ff->to(torch::kDouble);
  const auto x = torch::randn({1, 3, 4, 5}, torch::kDouble);
  const int64_t H = 4, W = 5;
  // conv_inverted: per pixel, W1 x + b1; SiLU.
  const auto w1 = ff->conv_inverted->weight.reshape({14, 3});
  auto a = torch::einsum("oc,bchw->bohw", {w1, x}) + ff->conv_inverted->bias.reshape({1, 14, 1, 1});
  a = a * torch::sigmoid(a);
  // depthwise 3x3 with zero padding, written out.
  auto d = torch::zeros_like(a);
  for (int64_t c = 0; c < 14; ++c) {
    for (int64_t y = 0; y < H; ++y) {
      for (int64_t xx = 0; xx < W; ++xx) {
        double s = ff->conv_depth->bias[c].item<double>();
        for (int64_t dy = -1; dy <= 1; ++dy) {
          for (int64_t dx = -1; dx <= 1; ++dx) {
            if (y + dy < 0 || y + dy >= H || xx + dx < 0 || xx + dx >= W) continue;
            s += ff->conv_depth->weight[c][0][dy + 1][dx + 1].item<double>() * a[0][c][y + dy][xx + dx].item<double>();
          }
        }
        d[0][c][y][xx] = s;
      }
    }
  }
  const auto value = d.narrow(1, 0, 7), gate = d.narrow(1, 7, 7);
  const auto gated = value * gate * torch::sigmoid(gate);
  const auto expected = torch::einsum("oc,bchw->bohw", {ff->conv_point->weight.reshape({2, 7}), gated});
  CHECK((ff->forward(x) - expected).abs().max().item<double>() < 1e-12);
}
