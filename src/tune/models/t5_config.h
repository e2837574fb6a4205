// The T5 encoder's architecture settings (transformers' T5EncoderModel, e.g. the T5 v1.1 XXL text encoder of
// Latte-1 and PixArt), read from a Hugging Face config.json.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace tune::models {

// The feed-forward activations tune's T5 implements (models/t5_layers.cpp): relu (T5 v1.0), gelu (the erf form),
// gelu_new and gelu_pytorch_tanh (the tanh approximation; "gated-gelu" means gelu_new), silu.
inline constexpr std::array<std::string_view, 5> kT5Activations = {"relu", "gelu", "gelu_new", "gelu_pytorch_tanh",
                                                                   "silu"};

// Defaults are transformers' T5Config defaults (t5-small), so a config.json that leaves a key out means what it
// means to transformers. Only the encoder's settings: decoder keys (num_decoder_layers, ...) are not read.
struct T5EncoderConfig {
  int64_t vocab_size = 32128;  // embedding rows; T5 pads it past the tokenizer's 32100 ids
  int64_t d_model = 512;
  int64_t d_kv = 64;           // per-head size; heads * d_kv need not equal d_model
  int64_t d_ff = 2048;
  int64_t num_layers = 6;
  int64_t num_heads = 8;
  int64_t relative_attention_num_buckets = 32;    // both directions together
  int64_t relative_attention_max_distance = 128;  // distances beyond it share the last bucket
  double layer_norm_epsilon = 1e-6;
  // From feed_forward_proj ("ACT" or "gated-ACT"), as T5Config derives them: gated means wo(act(wi_0 x) * wi_1 x)
  // (T5 v1.1), otherwise wo(act(wi x)) (T5 v1.0).
  bool is_gated_act = false;
  std::string dense_act_fn = "relu";  // one of kT5Activations

  int64_t inner_dim() const { return num_heads * d_kv; }

  friend bool operator==(const T5EncoderConfig&, const T5EncoderConfig&) = default;
};

// `source` names the file in errors. Values tune does not implement are refused by name with tune::InputError
// (model_type other than "t5", an unknown or unsupported feed_forward_proj, is_decoder true: a causal stack,
// quantization_config), as are inconsistent ones (non-positive sizes, too few buckets). dense_act_fn and
// is_gated_act are ignored as transformers ignores them: T5Config recomputes both from feed_forward_proj.
// dropout_rate is ignored too: tune runs the text encoder frozen, in eval mode.
T5EncoderConfig t5_encoder_config_from_json(const nlohmann::json& config_json, const std::string& source);
T5EncoderConfig read_t5_encoder_config(const std::filesystem::path& config_json);

}  // namespace tune::models
