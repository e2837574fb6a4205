// RoPE frequencies (default and Llama 3 scaled), cos/sin tables from position ids, and their application.
#include "tune/nn/rotary_embedding.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace tune::nn {

torch::Tensor rope_inverse_frequencies(const RotaryEmbeddingOptions& options) {
  const int64_t dim = options.dim();
  if (dim <= 0 || dim % 2 != 0) {
    throw std::invalid_argument(fmt::format("rotary embedding dim must be even and positive, got {}", dim));
  }
  const torch::Tensor exponents = torch::arange(0, dim, 2, torch::kInt64).to(torch::kFloat32) / static_cast<double>(dim);
  torch::Tensor inv_freq = 1.0 / torch::pow(options.theta(), exponents);
  if (!options.llama3_scaling()) return inv_freq;

  const Llama3RopeScalingOptions& s = *options.llama3_scaling();
  const double old_context = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / s.low_freq_factor;
  const double high_freq_wavelen = old_context / s.high_freq_factor;
  const torch::Tensor wavelen = 2.0 * M_PI / inv_freq;
  // Long wavelengths (low frequencies) are stretched by `factor`; short ones are left alone.
  torch::Tensor scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  // In between, blend the two linearly in (context / wavelength) so the spectrum has no step.
  const torch::Tensor smooth = (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const torch::Tensor smoothed = (1.0 - smooth) * scaled / s.factor + smooth * scaled;
  const torch::Tensor is_medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return torch::where(is_medium, smoothed, scaled);
}

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor x1 = x.narrow(-1, 0, half);
  const torch::Tensor x2 = x.narrow(-1, half, x.size(-1) - half);
  return torch::cat({-x2, x1}, -1);
}

torch::Tensor apply_rotary_embedding(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const torch::Tensor c = cos.unsqueeze(1).to(x.scalar_type());  // broadcast over heads
  const torch::Tensor s = sin.unsqueeze(1).to(x.scalar_type());
  // The contiguous term first: an elementwise op lays its output out like its first operand, so the sum comes out
  // as [B, H, T, D] (what the attention core's products take) even from a head-transposed x, with no copy. The
  // same bits as x * c + rotate_half(x) * s (an addition commutes exactly).
  return rotate_half(x) * s + x * c;
}

RotaryEmbeddingImpl::RotaryEmbeddingImpl(const RotaryEmbeddingOptions& options_) : options(options_) { reset(); }

void RotaryEmbeddingImpl::reset() { inverse_frequencies = rope_inverse_frequencies(options); }

torch::Tensor RotaryEmbeddingImpl::on_device(const torch::Device& device) {
  if (inverse_frequencies.device() == device) return inverse_frequencies;
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (!cached_.defined() || cached_.device() != device || !cached_source_.is_same(inverse_frequencies) ||
      cached_version_ != static_cast<int64_t>(inverse_frequencies._version())) {
    cached_ = inverse_frequencies.to(device);
    cached_source_ = inverse_frequencies;
    cached_version_ = static_cast<int64_t>(inverse_frequencies._version());
  }
  return cached_;
}

std::pair<torch::Tensor, torch::Tensor> RotaryEmbeddingImpl::forward(const torch::Tensor& position_ids) {
  // Element-wise product rather than a matmul: autocast leaves it in fp32 and the result equals HF's
  // fp32 outer product exactly (one multiply per element either way).
  const torch::Tensor inv_freq = on_device(position_ids.device());
  const torch::Tensor freqs = position_ids.to(torch::kFloat32).unsqueeze(-1) * inv_freq;  // [B, T, dim/2]
  const torch::Tensor angles = torch::cat({freqs, freqs}, -1);
  return {angles.cos(), angles.sin()};
}

}  // namespace tune::nn
