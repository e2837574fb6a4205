// DiT's TimestepEmbedder.
#include "tune/nn/timestep_embedder.h"

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include <cmath>

namespace tune::nn {

torch::Tensor timestep_embedding(const torch::Tensor& t, int64_t dim, double max_period, torch::ScalarType dtype) {
  const int64_t half = dim / 2;
  const auto options = torch::TensorOptions().dtype(torch::kFloat64).device(t.device());
  const torch::Tensor frequencies = torch::exp(-std::log(max_period) * torch::arange(half, options) / static_cast<double>(half));
  const torch::Tensor angles = t.reshape({-1, 1}).to(torch::kFloat64) * frequencies.unsqueeze(0);
  torch::Tensor embedding = torch::cat({torch::cos(angles), torch::sin(angles)}, -1);
  if (dim % 2 != 0) embedding = torch::cat({embedding, torch::zeros_like(embedding.narrow(1, 0, 1))}, -1);
  return embedding.to(dtype);
}

TimestepEmbedderImpl::TimestepEmbedderImpl(const TimestepEmbedderOptions& options_) : options(options_) { reset(); }

void TimestepEmbedderImpl::reset() {
  const int64_t hidden = options.hidden_size();
  linear_1 = torch::nn::Linear(torch::nn::LinearOptions(options.frequency_embedding_size(), hidden));
  linear_2 = torch::nn::Linear(torch::nn::LinearOptions(hidden, hidden));
  if (options.naming() == TimestepEmbedderNaming::dit) {
    // The Sequential holds the same two modules, so its children are named 0 and 2 as DiT's nn.Sequential.
    mlp = register_module("mlp", torch::nn::Sequential(linear_1, torch::nn::SiLU(), linear_2));
  } else {
    register_module("linear_1", linear_1);
    register_module("linear_2", linear_2);
  }
}

torch::Tensor TimestepEmbedderImpl::forward(const torch::Tensor& t) {
  const auto dtype = linear_1->weight.scalar_type();
  const torch::Tensor sinusoid = timestep_embedding(t, options.frequency_embedding_size(), options.max_period(), dtype);
  return linear_2(torch::silu(linear_1(sinusoid)));
}

}  // namespace tune::nn
