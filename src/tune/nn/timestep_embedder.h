// Diffusion timestep embedding as DiT / Latte define it (from GLIDE): a sinusoid of the timestep, [cos, sin]
// order, then Linear -> SiLU -> Linear, registered under DiT's names (mlp.0.*, mlp.2.*) or diffusers'
// TimestepEmbedding names (linear_1.*, linear_2.*): the same maths, diffusers' Timesteps(flip_sin_to_cos=True,
// downscale_freq_shift=0) being this sinusoid.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

namespace tune::nn {

// t [N] (integer or fractional) -> [N, dim]: [cos(t * f_0..f_{h-1}), sin(t * f_0..)], h = dim / 2,
// f_i = exp(-ln(max_period) * i / h), zero-padded by one column when dim is odd. Computed in float64 (the
// official fp32 arithmetic rounds t * f by up to 3e-5 at t ~ 1000), returned as `dtype` on t's device.
torch::Tensor timestep_embedding(const torch::Tensor& t, int64_t dim, double max_period = 10000.0,
                                 torch::ScalarType dtype = torch::kFloat32);

// How the two Linear layers are named in named_parameters().
enum class TimestepEmbedderNaming {
  dit,        // mlp.0, mlp.2 (DiT, official Latte)
  diffusers,  // linear_1, linear_2 (diffusers' TimestepEmbedding: PixArt's and Latte-1's adaln_single)
};

struct TimestepEmbedderOptions {
  explicit TimestepEmbedderOptions(int64_t hidden_size) : hidden_size_(hidden_size) {}
  TORCH_ARG(int64_t, hidden_size);
  TORCH_ARG(int64_t, frequency_embedding_size) = 256;
  TORCH_ARG(double, max_period) = 10000.0;
  TORCH_ARG(TimestepEmbedderNaming, naming) = TimestepEmbedderNaming::dit;
};

class TimestepEmbedderImpl : public torch::nn::Module {
 public:
  explicit TimestepEmbedderImpl(const TimestepEmbedderOptions& options);
  void reset();
  // t [N] -> [N, hidden]. The sinusoid takes the dtype of the first Linear's weight (fp32 master weights; an
  // fp64 model stays fp64), so autocast decides the matmul precision as for any other Linear.
  torch::Tensor forward(const torch::Tensor& t);

  TimestepEmbedderOptions options;
  torch::nn::Linear linear_1{nullptr}, linear_2{nullptr};  // the two layers, whatever their registered names
  torch::nn::Sequential mlp{nullptr};  // Sequential(linear_1, SiLU, linear_2) under DiT naming; null otherwise
};
TORCH_MODULE(TimestepEmbedder);

}  // namespace tune::nn
