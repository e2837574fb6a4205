// The T5 encoder's layers under transformers' module names (T5Block.layer.0 = T5LayerSelfAttention, .layer.1 =
// T5LayerFF), so that named_parameters() are the checkpoint's tensor names. Every weight is allocated in the
// caller's dtype and device and left undrawn: T5EncoderImpl draws the random init or the loader fills them, so a
// bf16 T5-XXL (4.8 B parameters) never exists in fp32.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include "tune/models/t5_config.h"
#include "tune/nn/rms_norm.h"

namespace tune::models {

// Bucket of each relative position `key - query` (any integer tensor), bidirectional as in T5's encoder: half of
// the buckets for keys before the query and half for keys after it; in each half, distances below a quarter of the
// buckets get one bucket each, longer ones share logarithmically wider buckets up to max_distance, beyond which
// all share the last. Computed with transformers' float32 operations in their order, because a distance that falls
// on a bucket boundary (16, 32, 64 with the defaults) lands on whichever side float32 rounding puts it.
torch::Tensor t5_relative_position_buckets(const torch::Tensor& relative_position, int64_t num_buckets,
                                           int64_t max_distance);

// A bias-free linear layer (all of T5's are), its weight [out, in] in `options`' dtype and device.
class T5LinearImpl : public torch::nn::Module {
 public:
  T5LinearImpl(int64_t in_features, int64_t out_features, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& input);

  torch::Tensor weight;
};
TORCH_MODULE(T5Linear);

// T5Attention: q, k, v, o without bias and without the 1/sqrt(d_kv) scale (T5 folds it into the initialisation).
// Block 0's holds relative_attention_bias, the [buckets, heads] table whose bias every layer adds.
class T5AttentionImpl : public torch::nn::Module {
 public:
  T5AttentionImpl(const T5EncoderConfig& config, bool has_relative_attention_bias, const torch::TensorOptions& options);
  // hidden [B, L, d_model]; additive_mask broadcastable to [B, heads, L, L]: the position bias with the padded keys
  // at the dtype's lowest value. Returns [B, L, d_model].
  torch::Tensor forward(const torch::Tensor& hidden, const torch::Tensor& additive_mask);
  // [1, heads, L, L] in the table's dtype and device; only for the layer that has the table.
  torch::Tensor position_bias(int64_t length);

  T5Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  torch::nn::Embedding relative_attention_bias{nullptr};  // block 0 only

 private:
  T5EncoderConfig config_;
};
TORCH_MODULE(T5Attention);

// T5LayerSelfAttention: x + SelfAttention(layer_norm(x)).
class T5LayerSelfAttentionImpl : public torch::nn::Module {
 public:
  T5LayerSelfAttentionImpl(const T5EncoderConfig& config, bool has_relative_attention_bias,
                           const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& hidden, const torch::Tensor& additive_mask);

  T5Attention SelfAttention{nullptr};  // transformers' names, so the parameters carry the checkpoint's
  nn::RMSNorm layer_norm{nullptr};
};
TORCH_MODULE(T5LayerSelfAttention);

// DenseReluDense: wo(act(wi_0 x) * wi_1 x) when gated (T5 v1.1), wo(act(wi x)) otherwise (v1.0).
class T5DenseImpl : public torch::nn::Module {
 public:
  T5DenseImpl(const T5EncoderConfig& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& hidden);

  T5Linear wi{nullptr}, wi_0{nullptr}, wi_1{nullptr}, wo{nullptr};  // wi when not gated, wi_0 and wi_1 when gated

 private:
  torch::Tensor activation(const torch::Tensor& x) const;
  std::string activation_;
};
TORCH_MODULE(T5Dense);

// T5LayerFF: x + DenseReluDense(layer_norm(x)).
class T5LayerFFImpl : public torch::nn::Module {
 public:
  T5LayerFFImpl(const T5EncoderConfig& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& hidden);

  T5Dense DenseReluDense{nullptr};
  nn::RMSNorm layer_norm{nullptr};
};
TORCH_MODULE(T5LayerFF);

// T5Block (encoder): `layer` holds the self-attention sublayer (index 0) and the feed-forward one (index 1).
class T5BlockImpl : public torch::nn::Module {
 public:
  T5BlockImpl(const T5EncoderConfig& config, bool has_relative_attention_bias, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& hidden, const torch::Tensor& additive_mask);

  torch::nn::ModuleList layer{nullptr};
  T5LayerSelfAttention self_attention{nullptr};  // layer[0], typed
  T5LayerFF feed_forward{nullptr};               // layer[1], typed
};
TORCH_MODULE(T5Block);

// T5LayerNorm is tune's RMSNorm (fp32 statistics, cast to the input dtype, times the weight), in `options`.
nn::RMSNorm make_t5_layer_norm(const T5EncoderConfig& config, const torch::TensorOptions& options);

}  // namespace tune::models
