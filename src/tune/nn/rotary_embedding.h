// Rotary position embedding (RoPE) in the rotate-half layout used by Hugging Face Llama-family checkpoints,
// with optional Llama 3 frequency scaling for long contexts.
#pragma once

#include <mutex>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <c10/util/Optional.h>

#include <utility>

namespace tune::nn {

// Llama 3.x "rope_type": "llama3": low frequencies are divided by `factor`, high ones kept, and the band in
// between interpolated smoothly by wavelength.
struct Llama3RopeScalingOptions {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct RotaryEmbeddingOptions {
  explicit RotaryEmbeddingOptions(int64_t dim) : dim_(dim) {}
  TORCH_ARG(int64_t, dim);               // rotated features per head (= head_dim); must be even
  TORCH_ARG(double, theta) = 10000.0;    // base of the frequencies ("rope_theta")
  TORCH_ARG(c10::optional<Llama3RopeScalingOptions>, llama3_scaling) = c10::nullopt;
};

// inv_freq[i] = 1 / theta^(2i / dim) in fp32 (then Llama 3 scaling, if any), as Hugging Face computes it, so
// fp32 logits match theirs bit for bit in the frequencies.
torch::Tensor rope_inverse_frequencies(const RotaryEmbeddingOptions& options);

// [x1, x2] -> [-x2, x1] over the last dimension, split in halves.
torch::Tensor rotate_half(const torch::Tensor& x);

// x [B, heads, T, D]; cos, sin [B, T, D] (from RotaryEmbedding). cos/sin are cast to x's dtype so a bf16
// activation stays bf16.
torch::Tensor apply_rotary_embedding(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

class RotaryEmbeddingImpl : public torch::nn::Module {
 public:
  explicit RotaryEmbeddingImpl(const RotaryEmbeddingOptions& options);
  void reset();
  // position_ids [B, T] integer -> (cos, sin), each [B, T, dim] float32 (fp32 even under autocast: positions
  // in the thousands need more than bf16's 8 bits of mantissa).
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& position_ids);

  RotaryEmbeddingOptions options;
  // Deliberately not a registered buffer: it is derived from the config, never saved, and HF checkpoints
  // do not carry it. It follows the positions' device at use.
  torch::Tensor inverse_frequencies;

 private:
  // inverse_frequencies on the positions' device, copied once rather than at every forward: a host-to-device copy
  // synchronises, which a CUDA graph capture of the step (train/cuda_graph_step.h) does not allow.
  torch::Tensor on_device(const torch::Device& device);
  std::mutex cache_mutex_;
  torch::Tensor cached_;
  torch::Tensor cached_source_;  // the tensor cached_ was copied from (held, so its identity stays unique)
  int64_t cached_version_ = -1;  // and its version then (an in-place change to it invalidates the copy)
};
TORCH_MODULE(RotaryEmbedding);

}  // namespace tune::nn
