// Fixed sine-cosine position embeddings as MAE, DiT and Latte define them (MAE's util/pos_embed.py): a 1D table
// over positions, a 2D table over a square grid of patches, and PixArt's 2D table over a grid of any shape whose
// positions are rescaled to a base size (diffusers' PatchEmbed). Computed in float64; callers cast.
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

// [grid_height * grid_width, dim] float64, diffusers' get_2d_sincos_pos_embed as PatchEmbed calls it (PixArt,
// Latte-1): patches in row-major order, the first half encoding the column and the second the row as above, at
// positions i / (n / base_size) / interpolation_scale for i < n (n = grid_width for the column, grid_height for the
// row), so any grid spans the positions of a base_size grid. The positions are computed in float32 as diffusers'
// (and the official numpy code's) are, the sines and cosines in float64. dim must be divisible by 4.
torch::Tensor sincos_2d_embedding(int64_t dim, int64_t grid_height, int64_t grid_width, double base_size,
                                  double interpolation_scale);

}  // namespace tune::nn
