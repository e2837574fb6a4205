// RMSNorm: fp32 statistics regardless of the activation dtype (bf16 squares lose too much precision).
#include "tune/nn/rms_norm.h"

#include <cstdlib>
#include <cstring>

#include "tune/compat/torch_compat.h"
#include "tune/nn/rms_norm_cpu.h"

namespace tune::nn {

bool fused_rms_norm_enabled() {
  // TUNE_FUSED_RMS_NORM=0 turns the fused kernel off (benchmarks measure it against the op-by-op norm).
  static const bool enabled = [] {
    const char* value = std::getenv("TUNE_FUSED_RMS_NORM");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  return enabled;
}

RMSNormImpl::RMSNormImpl(const RMSNormOptions& options_) : options(options_) { reset(); }

void RMSNormImpl::reset() {
  weight = register_parameter("weight", options.zero_centred() ? torch::zeros({options.hidden_size()})
                                                               : torch::ones({options.hidden_size()}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& input) {
  const auto input_dtype = input.scalar_type();
  // On CUDA, LibTorch's fused kernel: one pass forward and one backward instead of ~6 elementwise kernels each way,
  // and only the input and the per-row rstd kept for backward. Taken where it computes what the formula below does
  // up to rounding: same-dtype input and weight (the fp32 residual stream under autocast, a bf16 LoRA base), fp32
  // statistics; it rounds once where the formula rounds the normalised value to the input dtype first.
  // A zero-centred norm takes it only with fp32 weights, where 1 + weight is exact as Gemma's fp32 formula has it.
  const bool fused_weight_ok = !options.zero_centred() || weight.scalar_type() == torch::kFloat32;
  if (input.is_cuda() && input_dtype == weight.scalar_type() && input_dtype != torch::kDouble && fused_weight_ok &&
      fused_rms_norm_enabled()) {
    const torch::Tensor scale = options.zero_centred() ? weight + 1.0 : weight;
    if (auto fused = compat::fused_rms_norm(input, scale, options.eps())) return *fused;
  }
  // On the CPU, tune's kernels for fp32 inputs and weights (nn/rms_norm_cpu.h: LibTorch has no CPU kernel), one
  // pass over each row each way, keeping the input and a per-row rstd.
  if (rms_norm_cpu_fits(input, weight)) return rms_norm_cpu(input, weight, options.eps(), options.zero_centred());
  // Wider inputs (fp64 in tests) keep their precision; narrower ones are promoted to fp32.
  const auto compute_dtype = torch::promote_types(input_dtype, torch::kFloat32);
  const torch::Tensor x = input.to(compute_dtype);
  const torch::Tensor variance = x.pow(2).mean(-1, /*keepdim=*/true);
  const torch::Tensor normalized = x * torch::rsqrt(variance + options.eps());
  if (options.zero_centred()) return (normalized * (weight.to(compute_dtype) + 1.0)).to(input_dtype);
  return weight * normalized.to(input_dtype);
}

}  // namespace tune::nn
