// Fixed sine-cosine position embeddings as MAE, DiT and Latte define them (MAE's util/pos_embed.py): a 1D table
// over positions and a 2D table over a square grid of patches. Computed in float64; callers cast.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace tune::nn {

// [M, dim] float64 for positions [M] (any numeric dtype): row m = [sin(p_m * w_0..w_{k-1}), cos(p_m * w_0..)],
// k = dim / 2, w_i = 10000^(-i / k). dim must be even.
torch::Tensor sincos_1d_embedding(int64_t dim, const torch::Tensor& positions);

// [length, dim] float64: sincos_1d_embedding over positions 0..length-1 (Latte's temp_embed).
torch::Tensor sincos_temporal_embedding(int64_t dim, int64_t length);

// [grid_size * grid_size, dim] float64 for patches in row-major order (n = row * grid_size + column):
// [sincos_1d(dim / 2, column), sincos_1d(dim / 2, row)]. The column comes first because MAE builds the grid with
// np.meshgrid(w, h) and encodes grid[0] (the w coordinate) in the first half. dim must be divisible by 4.
torch::Tensor sincos_2d_embedding(int64_t dim, int64_t grid_size);

}  // namespace tune::nn
