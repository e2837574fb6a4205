// The T5 encoder's layers (transformers' models/t5/modeling_t5.py is the reference for the maths).
#include "tune/models/t5_layers.h"

#include <cmath>

#include "tune/nn/attention_core.h"
#include "tune/nn/gelu_tanh.h"

namespace tune::models {

torch::Tensor t5_relative_position_buckets(const torch::Tensor& relative_position, int64_t num_buckets,
                                           int64_t max_distance) {
  const int64_t per_direction = num_buckets / 2;
  const torch::Tensor after_query = (relative_position > 0).to(torch::kLong) * per_direction;
  const torch::Tensor distance = relative_position.abs().to(torch::kLong);
  const int64_t max_exact = per_direction / 2;
  // Distances 0 give log(0) = -inf here, whose integer conversion is meaningless: torch::where discards them.
  torch::Tensor logarithmic =
      max_exact + (torch::log(distance.to(torch::kFloat) / max_exact) /
                   std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)) *
                   (per_direction - max_exact))
                      .to(torch::kLong);
  logarithmic = torch::clamp_max(logarithmic, per_direction - 1);
  return after_query + torch::where(distance < max_exact, distance, logarithmic);
}

T5LinearImpl::T5LinearImpl(int64_t in_features, int64_t out_features, const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::empty({out_features, in_features}, options));
}

torch::Tensor T5LinearImpl::forward(const torch::Tensor& input) { return torch::linear(input, weight); }

nn::RMSNorm make_t5_layer_norm(const T5EncoderConfig& config, const torch::TensorOptions& options) {
  nn::RMSNorm norm(nn::RMSNormOptions(config.d_model).eps(config.layer_norm_epsilon));
  norm->to(options.device(), options.dtype().toScalarType());  // d_model floats: built in fp32, then moved
  return norm;
}

T5AttentionImpl::T5AttentionImpl(const T5EncoderConfig& config, bool has_relative_attention_bias,
                                 const torch::TensorOptions& options)
    : config_(config) {
  q = register_module("q", T5Linear(config.d_model, config.inner_dim(), options));
  k = register_module("k", T5Linear(config.d_model, config.inner_dim(), options));
  v = register_module("v", T5Linear(config.d_model, config.inner_dim(), options));
  o = register_module("o", T5Linear(config.inner_dim(), config.d_model, options));
  if (has_relative_attention_bias) {
    // Given its (undrawn) weight, Embedding allocates nothing of its own in the default dtype.
    const auto table = torch::empty({config.relative_attention_num_buckets, config.num_heads}, options);
    relative_attention_bias = register_module(
        "relative_attention_bias",
        torch::nn::Embedding(torch::nn::EmbeddingOptions(config.relative_attention_num_buckets, config.num_heads)
                                 ._weight(table)));
  }
}

torch::Tensor T5AttentionImpl::position_bias(int64_t length) {
  TORCH_CHECK(!relative_attention_bias.is_empty(), "T5Attention::position_bias: this layer has no bias table");
  // The buckets on the CPU whatever the model's device: the float32 log at bucket boundaries then rounds as in a
  // CPU reference, the same on every device ([L, L] integers: nothing to speed up).
  const torch::Tensor positions = torch::arange(length, torch::kLong);
  const torch::Tensor relative = positions.unsqueeze(0) - positions.unsqueeze(1);  // [query, key]: key - query
  const torch::Tensor buckets = t5_relative_position_buckets(relative, config_.relative_attention_num_buckets,
                                                             config_.relative_attention_max_distance);
  const torch::Tensor values = relative_attention_bias(buckets.to(relative_attention_bias->weight.device()));
  return values.permute({2, 0, 1}).unsqueeze(0);  // [L, L, heads] -> [1, heads, L, L]
}

torch::Tensor T5AttentionImpl::forward(const torch::Tensor& hidden, const torch::Tensor& additive_mask) {
  const int64_t batch = hidden.size(0), length = hidden.size(1);
  auto heads = [&](const torch::Tensor& x) {
    return x.view({batch, length, config_.num_heads, config_.d_kv}).transpose(1, 2);
  };
  const torch::Tensor context = nn::run_attention_core(nullptr, heads(q(hidden)), heads(k(hidden)), heads(v(hidden)),
                                                       additive_mask, /*scale=*/1.0);
  return o(context.transpose(1, 2).reshape({batch, length, config_.inner_dim()}));
}

T5LayerSelfAttentionImpl::T5LayerSelfAttentionImpl(const T5EncoderConfig& config, bool has_relative_attention_bias,
                                                   const torch::TensorOptions& options) {
  SelfAttention = register_module("SelfAttention", T5Attention(config, has_relative_attention_bias, options));
  layer_norm = register_module("layer_norm", make_t5_layer_norm(config, options));
}

torch::Tensor T5LayerSelfAttentionImpl::forward(const torch::Tensor& hidden, const torch::Tensor& additive_mask) {
  return hidden + SelfAttention(layer_norm(hidden), additive_mask);
}

T5DenseImpl::T5DenseImpl(const T5EncoderConfig& config, const torch::TensorOptions& options)
    : activation_(config.dense_act_fn) {
  if (config.is_gated_act) {
    wi_0 = register_module("wi_0", T5Linear(config.d_model, config.d_ff, options));
    wi_1 = register_module("wi_1", T5Linear(config.d_model, config.d_ff, options));
  } else {
    wi = register_module("wi", T5Linear(config.d_model, config.d_ff, options));
  }
  wo = register_module("wo", T5Linear(config.d_ff, config.d_model, options));
}

torch::Tensor T5DenseImpl::activation(const torch::Tensor& x) const {
  if (activation_ == "relu") return torch::relu(x);
  if (activation_ == "gelu") return torch::gelu(x);
  if (activation_ == "silu") return torch::silu(x);
  // gelu_new is transformers' Python spelling of the tanh formula that gelu_pytorch_tanh fuses (last-bit rounding).
  return nn::gelu_tanh_differentiable(x);
}

torch::Tensor T5DenseImpl::forward(const torch::Tensor& hidden) {
  if (wi.is_empty()) return wo(activation(wi_0(hidden)) * wi_1(hidden));
  return wo(activation(wi(hidden)));
}

T5LayerFFImpl::T5LayerFFImpl(const T5EncoderConfig& config, const torch::TensorOptions& options) {
  DenseReluDense = register_module("DenseReluDense", T5Dense(config, options));
  layer_norm = register_module("layer_norm", make_t5_layer_norm(config, options));
}

torch::Tensor T5LayerFFImpl::forward(const torch::Tensor& hidden) { return hidden + DenseReluDense(layer_norm(hidden)); }

T5BlockImpl::T5BlockImpl(const T5EncoderConfig& config, bool has_relative_attention_bias,
                         const torch::TensorOptions& options) {
  layer = register_module("layer", torch::nn::ModuleList());
  self_attention = T5LayerSelfAttention(config, has_relative_attention_bias, options);
  feed_forward = T5LayerFF(config, options);
  layer->push_back(self_attention);
  layer->push_back(feed_forward);
}

torch::Tensor T5BlockImpl::forward(const torch::Tensor& hidden, const torch::Tensor& additive_mask) {
  return feed_forward(self_attention(hidden, additive_mask));
}

}  // namespace tune::models
