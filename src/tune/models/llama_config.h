// The Llama-family architecture settings, read from and written to Hugging Face config.json
// (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma2ForCausalLM and Gemma2Model).
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tune::models {

struct RopeScaling {
  std::string rope_type = "default";  // "default" (none) or "llama3"; others are rejected with a clear error
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;

  friend bool operator==(const RopeScaling&, const RopeScaling&) = default;
};

// hidden_act values the gated MLP implements (models/llama_layers.cpp): silu and swish are one function; gelu is
// the erf form; gelu_pytorch_tanh and gelu_new the tanh approximation. A config.json naming another is refused.
inline constexpr std::array<std::string_view, 5> kSupportedHiddenActs = {"silu", "swish", "gelu", "gelu_pytorch_tanh",
                                                                         "gelu_new"};

// Layer types of Qwen2/Qwen3/Gemma2's config.json "layer_types".
inline constexpr std::string_view kFullAttention = "full_attention";
inline constexpr std::string_view kSlidingAttention = "sliding_attention";

struct LlamaConfig {
  std::string architecture = "LlamaForCausalLM";  // written back to config.json "architectures"
  std::string model_type = "llama";               // "llama" | "mistral" | "qwen2" | "qwen3" | "gemma2"
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;               // < num_attention_heads: grouped-query attention
  int64_t head_dim = 0;                           // 0: hidden_size / num_attention_heads (from_json resolves it)
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;                    // q/k/v/o biases (Llama, Qwen3); Qwen2: q/k/v only, always
  bool mlp_bias = false;                          // Llama only
  std::string hidden_act = "silu";                // the gated MLP's act(gate) * up (kSupportedHiddenActs); Gemma2's
                                                  // config.json calls it hidden_activation
  // Sliding-window attention: a query sees the keys less than `sliding_window` positions behind it (itself
  // included); 0: none (null in config.json). Mistral applies it on every layer; Qwen2/Qwen3 only with
  // use_sliding_window, on the layers layer_types marks sliding_attention (by default those from
  // max_window_layers on). Mistral v0.1 has 4096; later Mistral releases and most Qwen checkpoints have none.
  int64_t sliding_window = 0;
  int64_t max_window_layers = 0;                  // Qwen2/Qwen3 (HF default 28); kept for the round trip
  // Qwen2/Qwen3/Gemma2: one of kFullAttention / kSlidingAttention per layer; empty: every layer alike (sliding iff
  // sliding_window > 0). Gemma2's default: even layers (0, 2, ...) sliding, odd ones full.
  std::vector<std::string> layer_types;
  // Gemma 2 only (0 elsewhere, and for Gemma 2 a null in config.json): the attention scale is
  // query_pre_attn_scalar^-0.5 instead of head_dim^-0.5; the scaled scores s become
  // attn_logit_softcapping * tanh(s / attn_logit_softcapping) before the mask; the LM head's logits l become
  // final_logit_softcapping * tanh(l / final_logit_softcapping).
  int64_t query_pre_attn_scalar = 0;            // an integer in Gemma2Config (a float fails its validation)
  double attn_logit_softcapping = 0.0;
  double final_logit_softcapping = 0.0;
  int64_t pad_token_id = -1;                      // Gemma2 only, kept for the round trip (-1: null)
  int64_t bos_token_id = 1;
  std::vector<int64_t> eos_token_ids = {2};       // config.json may give one id or a list
  std::string torch_dtype = "float32";

  int64_t resolved_head_dim() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
  // Qwen3: RMSNorm over head_dim on each query and key head, after the projections and before RoPE.
  bool has_qk_norm() const { return model_type == "qwen3"; }
  // Gemma 2: embeddings times sqrt(hidden_size); RMSNorm weights stored as offsets from one; four norms per layer
  // (the attention and MLP outputs are normalised before their residual adds).
  bool is_gemma2() const { return model_type == "gemma2"; }
  double embedding_multiplier() const;
  double attention_scale() const;  // query_pre_attn_scalar^-0.5 when set, else head_dim^-0.5
  // The window layer `layer` attends with; 0: the full causal context.
  int64_t layer_sliding_window(int64_t layer) const;

  // `source` names the file in error messages. Missing optional fields take HF's defaults for the model_type
  // (Qwen2: attention_bias true; Qwen3: head_dim 128; Gemma2: Gemma2Config's 2B values). Inconsistent values (heads not dividing hidden size, kv
  // heads not dividing heads) and values tune does not implement (hidden_act, attention_dropout,
  // partial_rotary_factor, RoPE scaling types, quantization) throw tune::InputError naming the file and field:
  // a model is never run with different maths than its config.json asks for. Fields HF's class for the
  // model_type does not read either (Mistral's attention_bias) are ignored as HF ignores them.
  static LlamaConfig from_json(const nlohmann::json& json, const std::string& source);
  static LlamaConfig from_file(const std::string& config_json_path);
  // What was read: from_json(to_json()) equals the config.
  nlohmann::json to_json() const;

  friend bool operator==(const LlamaConfig&, const LlamaConfig&) = default;
};

}  // namespace tune::models
