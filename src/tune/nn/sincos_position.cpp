// Sine-cosine position tables (MAE / DiT / Latte), in float64 as MAE's numpy code computes them.
#include "tune/nn/sincos_position.h"

#include <fmt/format.h>

#include <stdexcept>

namespace tune::nn {

torch::Tensor sincos_1d_embedding(int64_t dim, const torch::Tensor& positions) {
  if (dim <= 0 || dim % 2 != 0) {
    throw std::invalid_argument(fmt::format("sincos_1d_embedding: dim must be positive and even, got {}", dim));
  }
  const auto options = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor omega = torch::pow(10000.0, -torch::arange(dim / 2, options) / static_cast<double>(dim / 2));
  const torch::Tensor angles = positions.reshape({-1}).to(torch::kCPU, torch::kFloat64).unsqueeze(1) * omega.unsqueeze(0);
  return torch::cat({torch::sin(angles), torch::cos(angles)}, 1);
}

torch::Tensor sincos_temporal_embedding(int64_t dim, int64_t length) {
  return sincos_1d_embedding(dim, torch::arange(length, torch::kFloat64));
}

torch::Tensor sincos_2d_embedding(int64_t dim, int64_t grid_size) {
  if (dim <= 0 || dim % 4 != 0) {
    throw std::invalid_argument(fmt::format("sincos_2d_embedding: dim must be divisible by 4, got {}", dim));
  }
  const torch::Tensor coordinate = torch::arange(grid_size, torch::kFloat64);
  // Row-major patches: the column index cycles fastest.
  const torch::Tensor column = coordinate.repeat({grid_size});
  const torch::Tensor row = coordinate.repeat_interleave(grid_size);
  return torch::cat({sincos_1d_embedding(dim / 2, column), sincos_1d_embedding(dim / 2, row)}, 1);
}

}  // namespace tune::nn
