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

namespace {

void require_quarterable(int64_t dim) {
  if (dim <= 0 || dim % 4 != 0) {
    throw std::invalid_argument(fmt::format("sincos_2d_embedding: dim must be divisible by 4, got {}", dim));
  }
}

}  // namespace

torch::Tensor sincos_2d_embedding(int64_t dim, int64_t grid_size) {
  require_quarterable(dim);
  const torch::Tensor coordinate = torch::arange(grid_size, torch::kFloat64);
  // Row-major patches: the column index cycles fastest.
  const torch::Tensor column = coordinate.repeat({grid_size});
  const torch::Tensor row = coordinate.repeat_interleave(grid_size);
  return torch::cat({sincos_1d_embedding(dim / 2, column), sincos_1d_embedding(dim / 2, row)}, 1);
}

torch::Tensor sincos_2d_embedding(int64_t dim, int64_t grid_height, int64_t grid_width, double base_size,
                                  double interpolation_scale) {
  require_quarterable(dim);
  if (grid_height <= 0 || grid_width <= 0 || !(base_size > 0) || !(interpolation_scale > 0)) {
    throw std::invalid_argument(fmt::format("sincos_2d_embedding: grid {}x{}, base_size {} and interpolation_scale {} "
                                            "must be positive", grid_height, grid_width, base_size, interpolation_scale));
  }
  // The same float32 operations as diffusers' (arange / (n / base_size) / interpolation_scale), so the same bits.
  auto positions = [&](int64_t n) {
    return torch::arange(n, torch::kFloat32) / (static_cast<double>(n) / base_size) / interpolation_scale;
  };
  // Row-major patches: the column index cycles fastest.
  const torch::Tensor column = positions(grid_width).repeat({grid_height});
  const torch::Tensor row = positions(grid_height).repeat_interleave(grid_width);
  return torch::cat({sincos_1d_embedding(dim / 2, column), sincos_1d_embedding(dim / 2, row)}, 1);
}

}  // namespace tune::nn
