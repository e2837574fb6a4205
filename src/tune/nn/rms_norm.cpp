// RMSNorm: fp32 statistics regardless of the activation dtype (bf16 squares lose too much precision).
#include "tune/nn/rms_norm.h"

namespace tune::nn {

RMSNormImpl::RMSNormImpl(const RMSNormOptions& options_) : options(options_) { reset(); }

void RMSNormImpl::reset() { weight = register_parameter("weight", torch::ones({options.hidden_size()})); }

torch::Tensor RMSNormImpl::forward(const torch::Tensor& input) {
  const auto input_dtype = input.scalar_type();
  // Wider inputs (fp64 in tests) keep their precision; narrower ones are promoted to fp32.
  const auto compute_dtype = torch::promote_types(input_dtype, torch::kFloat32);
  const torch::Tensor x = input.to(compute_dtype);
  const torch::Tensor variance = x.pow(2).mean(-1, /*keepdim=*/true);
  const torch::Tensor normalized = x * torch::rsqrt(variance + options.eps());
  return weight * normalized.to(input_dtype);
}

}  // namespace tune::nn
