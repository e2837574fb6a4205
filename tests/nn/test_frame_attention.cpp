// nn::frame_attention (attention over the frames at each token, straight from a [B, F, T, 3 * H * hd] projection)
// against the textbook formula in float64: the projection split into q, k and v, laid out as [B, T, H, F, hd],
// softmax(q k^T * scale) v by LibTorch's ops, laid back out as token rows; its gradients by autograd through them.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include "tune/nn/frame_attention.h"

namespace {

struct Sizes {
  int64_t samples, frames, tokens, heads, head_dim;
};

torch::Tensor reference(const torch::Tensor& qkv, const Sizes& s, double scale) {
  const auto parts = qkv.reshape({s.samples, s.frames, s.tokens, 3, s.heads, s.head_dim})
                         .permute({3, 0, 2, 4, 1, 5})  // [3, B, T, H, F, hd]
                         .unbind(0);
  const auto probabilities = torch::softmax(torch::matmul(parts[0], parts[1].transpose(-1, -2)) * scale, -1);
  return torch::matmul(probabilities, parts[2])
      .permute({0, 3, 1, 2, 4})  // [B, F, T, H, hd]
      .reshape({s.samples, s.frames, s.tokens, s.heads * s.head_dim});
}

// Half the spacing of bf16 values around each of `exact` (8 significant bits): the most a correct rounding moves it.
torch::Tensor half_bf16_spacing(const torch::Tensor& exact) {
  return torch::clamp_min(exact.abs(), std::ldexp(1.0, -100)).log2().floor().sub(8).exp2();
}

torch::Tensor random_qkv(const Sizes& s, torch::ScalarType dtype, uint64_t seed) {
  torch::manual_seed(seed);
  return (torch::randn({s.samples, s.frames, s.tokens, 3 * s.heads * s.head_dim}, torch::kFloat64) * 1.5).to(dtype);
}

}  // namespace

TEST_CASE("frame_attention is the float64 softmax attention over each token's frames", "[nn][frame_attention]") {
  // head_dim 20 leaves a tail after the 16-lane dot products; 64 has none; one frame attends to itself alone.
  for (const Sizes s : {Sizes{2, 5, 3, 2, 20}, Sizes{1, 8, 4, 3, 64}, Sizes{2, 1, 3, 2, 16}}) {
    INFO("frames " << s.frames << ", head_dim " << s.head_dim);
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
    const torch::Tensor qkv = random_qkv(s, torch::kFloat64, 1).requires_grad_();
    REQUIRE(tune::nn::frame_attention_applies(qkv));
    const torch::Tensor got = tune::nn::frame_attention(qkv, s.heads, scale);
    const torch::Tensor exact = reference(qkv, s, scale);
    REQUIRE(got.sizes() == exact.sizes());
    CHECK((got - exact).abs().max().item<double>() < 1e-12);

    // Gradients under a random upstream gradient, against autograd through the reference's ops.
    const torch::Tensor upstream = torch::randn(exact.sizes(), torch::kFloat64);
    const torch::Tensor grad = torch::autograd::grad({(got * upstream).sum()}, {qkv})[0];
    const torch::Tensor grad_exact = torch::autograd::grad({(exact * upstream).sum()}, {qkv})[0];
    CHECK((grad - grad_exact).abs().max().item<double>() < 1e-12);
  }
}

TEST_CASE("frame_attention on bf16 computes in fp32 and rounds once", "[nn][frame_attention]") {
  const Sizes s{2, 8, 6, 2, 64};
  const double scale = 1.0 / std::sqrt(64.0);
  const torch::Tensor qkv = random_qkv(s, torch::kBFloat16, 2);
  const torch::Tensor got = tune::nn::frame_attention(qkv, s.heads, scale);
  REQUIRE(got.scalar_type() == torch::kBFloat16);
  // The float64 formula on the same bf16 inputs: the kernel's fp32 arithmetic is far below bf16's spacing, so each
  // value is that result rounded once: within half a spacing (and fp32 noise, 1e-6 of values around 1).
  const torch::Tensor exact = reference(qkv.to(torch::kFloat64), s, scale);
  const torch::Tensor error = (got.to(torch::kFloat64) - exact).abs();
  CHECK((error - half_bf16_spacing(exact) - 1e-6).max().item<double>() <= 0.0);
  // Correct rounding everywhere but where the exact value lies within fp32 noise of a midpoint.
  CHECK(got.eq(exact.to(torch::kBFloat16)).to(torch::kDouble).mean().item<double>() >= 0.99);

  // Gradients: each of q's, k's and v's rounded once from an fp32 computation on the bf16 gradient.
  const torch::Tensor upstream = torch::randn(exact.sizes(), torch::kFloat64).to(torch::kBFloat16);
  const torch::Tensor qkv_grad = qkv.clone().requires_grad_();
  const torch::Tensor grad =
      torch::autograd::grad({tune::nn::frame_attention(qkv_grad, s.heads, scale)}, {qkv_grad}, {upstream})[0];
  REQUIRE(grad.scalar_type() == torch::kBFloat16);
  const torch::Tensor qkv_exact = qkv.to(torch::kFloat64).requires_grad_();
  const torch::Tensor grad_exact =
      torch::autograd::grad({reference(qkv_exact, s, scale)}, {qkv_exact}, {upstream.to(torch::kFloat64)})[0];
  // Cancellation in the softmax backward (p (dp - sum p dp)) makes fp32's absolute error, not bf16's spacing,
  // the bound for small entries: 1e-5 of the largest gradient.
  const double largest = grad_exact.abs().max().item<double>();
  const torch::Tensor grad_error = (grad.to(torch::kFloat64) - grad_exact).abs();
  CHECK((grad_error - half_bf16_spacing(grad_exact) - 1e-5 * largest).max().item<double>() <= 0.0);
}

TEST_CASE("frame_attention refuses what it does not take", "[nn][frame_attention]") {
  const Sizes s{1, 4, 2, 2, 8};
  const torch::Tensor qkv = random_qkv(s, torch::kFloat32, 3);
  CHECK_FALSE(tune::nn::frame_attention_applies(qkv.transpose(1, 2)));  // not contiguous
  CHECK_FALSE(tune::nn::frame_attention_applies(qkv.to(torch::kInt32)));
  CHECK_FALSE(tune::nn::frame_attention_applies(
      torch::zeros({1, tune::nn::kFrameAttentionMaxFrames + 1, 1, 3 * 2 * 8})));
  CHECK_THROWS_AS(tune::nn::frame_attention(qkv.transpose(1, 2), s.heads, 1.0), std::invalid_argument);
  CHECK_THROWS_AS(tune::nn::frame_attention(qkv, 5, 1.0), std::invalid_argument);  // 48 channels are not 3 x 5 heads
}
