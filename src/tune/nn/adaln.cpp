// adaLN helpers shared by DiT-style blocks (Latte).
#include "tune/nn/adaln.h"

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

namespace tune::nn {

torch::Tensor layer_norm_fp32(const torch::Tensor& input, double eps) {
  const auto compute_dtype = torch::promote_types(input.scalar_type(), torch::kFloat32);
  return torch::layer_norm(input.to(compute_dtype), {input.size(-1)}, /*weight=*/{}, /*bias=*/{}, eps);
}

torch::Tensor modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale) {
  return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1);
}

torch::nn::Sequential adaln_modulation(int64_t hidden_size, int64_t chunks) {
  return torch::nn::Sequential(torch::nn::SiLU(),
                               torch::nn::Linear(torch::nn::LinearOptions(hidden_size, chunks * hidden_size).bias(true)));
}

}  // namespace tune::nn
