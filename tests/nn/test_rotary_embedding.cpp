// RoPE: frequencies (default and Llama 3 scaled) and the rotation, against float64 formulas written out here.
#include <catch2/catch.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "tune/compat/torch_compat.h"
#include "tune/nn/rotary_embedding.h"

using namespace tune::nn;

namespace {

std::vector<double> default_frequencies(int64_t dim, double theta) {
  std::vector<double> freqs;
  for (int64_t i = 0; i < dim / 2; ++i) freqs.push_back(std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(dim)));
  return freqs;
}

}  // namespace

TEST_CASE("RoPE inverse frequencies are theta^(-2i/d)", "[nn][rope]") {
  const auto inv_freq = rope_inverse_frequencies(RotaryEmbeddingOptions(16).theta(500000.0));
  REQUIRE(inv_freq.scalar_type() == torch::kFloat32);
  REQUIRE(inv_freq.numel() == 8);
  const auto expected = default_frequencies(16, 500000.0);
  for (int64_t i = 0; i < 8; ++i) CHECK(inv_freq[i].item<double>() == Approx(expected[static_cast<size_t>(i)]).epsilon(1e-6));
}

TEST_CASE("Llama 3 RoPE scaling keeps high, divides low and interpolates middle frequencies", "[nn][rope]") {
  // dim 8, theta 1e4: wavelengths 2pi * {1, 10, 100, 1000}; with an original context of 64 and factors 1 and 4
  // the bands are: < 16 kept, > 64 divided by 8, in between interpolated. All three occur.
  Llama3RopeScalingOptions scaling;
  scaling.factor = 8.0;
  scaling.low_freq_factor = 1.0;
  scaling.high_freq_factor = 4.0;
  scaling.original_max_position_embeddings = 64;
  const auto inv_freq = rope_inverse_frequencies(RotaryEmbeddingOptions(8).theta(10000.0).llama3_scaling(scaling));
  const auto base = default_frequencies(8, 10000.0);
  std::vector<double> expected;
  int kept = 0, divided = 0, interpolated = 0;
  for (double f : base) {
    const double wavelength = 2.0 * M_PI / f;
    if (wavelength < 64.0 / 4.0) {
      expected.push_back(f);
      ++kept;
    } else if (wavelength > 64.0 / 1.0) {
      expected.push_back(f / 8.0);
      ++divided;
    } else {
      const double smooth = (64.0 / wavelength - 1.0) / (4.0 - 1.0);
      expected.push_back((1.0 - smooth) * f / 8.0 + smooth * f);
      ++interpolated;
    }
  }
  REQUIRE(kept == 1);
  REQUIRE(interpolated == 1);
  REQUIRE(divided == 2);
  for (int64_t i = 0; i < 4; ++i) CHECK(inv_freq[i].item<double>() == Approx(expected[static_cast<size_t>(i)]).epsilon(1e-6));
}

TEST_CASE("RoPE rotates each pair (k, k + d/2) by position * inv_freq[k]", "[nn][rope]") {
  torch::manual_seed(0);
  const int64_t batch = 2, heads = 3, length = 5, dim = 8;
  RotaryEmbedding rope(RotaryEmbeddingOptions(dim).theta(10000.0));
  REQUIRE(rope->named_parameters().size() == 0);
  REQUIRE(rope->named_buffers().size() == 0);  // HF checkpoints carry no inv_freq
  const auto positions = torch::tensor({0, 1, 2, 3, 4, 100, 101, 102, 0, 1}, torch::kInt64).reshape({batch, length});
  const auto [cos, sin] = rope(positions);
  REQUIRE(cos.sizes() == torch::IntArrayRef({batch, length, dim}));
  const auto x = torch::randn({batch, heads, length, dim});
  const auto y = apply_rotary_embedding(x, cos, sin);

  const auto freqs = default_frequencies(dim, 10000.0);
  const auto xd = x.to(torch::kFloat64);
  auto expected = torch::empty_like(xd);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < length; ++t) {
      const double position = static_cast<double>(positions[b][t].item<int64_t>());
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t k = 0; k < dim / 2; ++k) {
          const double angle = position * freqs[static_cast<size_t>(k)];
          const double first = xd[b][h][t][k].item<double>(), second = xd[b][h][t][k + dim / 2].item<double>();
          expected[b][h][t][k] = first * std::cos(angle) - second * std::sin(angle);
          expected[b][h][t][k + dim / 2] = second * std::cos(angle) + first * std::sin(angle);
        }
      }
    }
  }
  CHECK((y.to(torch::kFloat64) - expected).abs().max().item<double>() < 1e-4);
}

TEST_CASE("rotate_half maps [a, b] to [-b, a]", "[nn][rope]") {
  const auto x = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f});
  CHECK(torch::equal(rotate_half(x), torch::tensor({-3.0f, -4.0f, 1.0f, 2.0f})));
}

TEST_CASE("RoPE tables stay fp32 under autocast and bf16 activations stay bf16", "[nn][rope]") {
  RotaryEmbedding rope(RotaryEmbeddingOptions(8));
  const bool was_enabled = tune::compat::autocast_cpu_enabled();
  const auto was_dtype = tune::compat::autocast_cpu_dtype();
  tune::compat::set_autocast_cpu_enabled(true);
  tune::compat::set_autocast_cpu_dtype(torch::kBFloat16);
  const auto positions = torch::arange(4000, 4004, torch::kInt64).unsqueeze(0);
  const auto [cos, sin] = rope(positions);
  const auto x = torch::randn({1, 2, 4, 8}).to(torch::kBFloat16);
  const auto y = apply_rotary_embedding(x, cos, sin);
  tune::compat::set_autocast_cpu_enabled(was_enabled);
  tune::compat::set_autocast_cpu_dtype(was_dtype);
  CHECK(cos.scalar_type() == torch::kFloat32);
  CHECK(sin.scalar_type() == torch::kFloat32);
  CHECK(y.scalar_type() == torch::kBFloat16);
  // Angle 4003 rad must be represented to fp32 accuracy (bf16 would be off by several radians).
  CHECK(cos[0][3][0].item<double>() == Approx(std::cos(4003.0)).margin(1e-3));
}

TEST_CASE("RoPE on CUDA: the device copy of the frequencies follows changes to them", "[nn][rope][cuda]") {
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device: the CUDA case is not exercised");
    return;
  }
  // The frequencies stay on the host; forward keeps one device copy (a copy per call would synchronise, which a
  // CUDA graph capture forbids), remade when they are replaced or changed in place.
  RotaryEmbedding rope(RotaryEmbeddingOptions(8));
  const auto positions = torch::arange(0, 16, torch::kInt64).unsqueeze(0);
  const auto on_gpu = positions.to(torch::kCUDA);
  // The GPU's cos/sin round differently from the CPU's (measured on an H200: not bit-equal), so within fp32
  // rounding of angles below 16 rad; a stale copy would be off by order 1 after the changes below.
  auto same_as_host = [&] {
    const auto [cos_host, sin_host] = rope(positions);
    const auto [cos_gpu, sin_gpu] = rope(on_gpu);
    return (cos_gpu.cpu() - cos_host).abs().max().item<double>() < 1e-5 &&
           (sin_gpu.cpu() - sin_host).abs().max().item<double>() < 1e-5;
  };
  CHECK(same_as_host());
  rope->inverse_frequencies.mul_(0.5);
  CHECK(same_as_host());
  rope->inverse_frequencies = rope->inverse_frequencies * 3.0;
  CHECK(same_as_host());
}
