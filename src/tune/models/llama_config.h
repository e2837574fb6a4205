// The Llama-family architecture settings, read from and written to Hugging Face config.json
// (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tune::models {

struct RopeScaling {
  std::string rope_type = "default";  // "default" (none) or "llama3"; others are rejected with a clear error
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct LlamaConfig {
  std::string architecture = "LlamaForCausalLM";  // written back to config.json "architectures"
  std::string model_type = "llama";               // "llama" | "mistral" | "qwen2"
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;               // < num_attention_heads: grouped-query attention
  int64_t head_dim = 0;                           // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;                    // q/k/v biases (Qwen2 has them; its o_proj has none)
  bool mlp_bias = false;
  // Mistral / Qwen2 sliding-window attention span; 0: none (null in config.json). Kept only so config.json
  // round-trips: tune attends over the full causal context, which equals HF's sliding-window attention
  // whenever sequences (prompt + generated) are no longer than the window. Mistral v0.1 has 4096; later
  // Mistral releases and most Qwen2 checkpoints have none.
  int64_t sliding_window = 0;
  int64_t bos_token_id = 1;
  std::vector<int64_t> eos_token_ids = {2};       // config.json may give one id or a list
  std::string torch_dtype = "float32";

  int64_t resolved_head_dim() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }

  // `source` names the file in error messages. Missing optional fields take HF's defaults for the model_type
  // (Qwen2: attention_bias true). Inconsistent values (heads not dividing hidden size, kv heads not dividing
  // heads) throw tune::InputError naming the file and field.
  static LlamaConfig from_json(const nlohmann::json& json, const std::string& source);
  static LlamaConfig from_file(const std::string& config_json_path);
  nlohmann::json to_json() const;
};

}  // namespace tune::models
