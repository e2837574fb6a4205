// RMSNorm as Llama-family models define it: normalise in fp32 whatever the activation dtype, then scale by a
// learned weight (T5LayerNorm / LlamaRMSNorm semantics).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace tune::nn {

struct RMSNormOptions {
  explicit RMSNormOptions(int64_t hidden_size) : hidden_size_(hidden_size) {}
  TORCH_ARG(int64_t, hidden_size);
  TORCH_ARG(double, eps) = 1e-6;
  // Gemma's form: the weight is stored as an offset from one (initialised to zeros) and the scale (1 + weight) is
  // applied in fp32 before the cast back to the input dtype, not after it as Llama's.
  TORCH_ARG(bool, zero_centred) = false;
};

// Whether RMSNorm may take LibTorch's fused CUDA kernel (on unless TUNE_FUSED_RMS_NORM=0).
bool fused_rms_norm_enabled();

class RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(const RMSNormOptions& options);
  void reset();  // weight = ones (zero_centred: zeros)
  // weight * cast_to_input_dtype(x_fp32 * rsqrt(mean(x_fp32^2) + eps)); the product follows type promotion,
  // so an fp32 weight times a bf16 input gives fp32, exactly as in Hugging Face's LlamaRMSNorm.
  // zero_centred: cast_to_input_dtype(x_fp32 * rsqrt(mean(x_fp32^2) + eps) * (1 + weight_fp32)) (Gemma2RMSNorm).
  torch::Tensor forward(const torch::Tensor& input);

  RMSNormOptions options;
  torch::Tensor weight;
};
TORCH_MODULE(RMSNorm);

}  // namespace tune::nn
