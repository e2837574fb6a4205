// Parameter counts of the Llama family from the config (checked against built models by tests/recipes/test_sft_plan).
#include "tune/recipes/sft/parameter_bytes.h"

#include <algorithm>
#include <string>

#include "tune/precision/nf4.h"

namespace tune::recipes::sft {
namespace {

struct Projection {
  const char* name;
  int64_t in, out;
  bool bias;
};

bool targeted(const models::LlamaLoraOptions& lora, const std::string& name) {
  return lora.lora.rank > 0 &&
         std::find(lora.target_modules.begin(), lora.target_modules.end(), name) != lora.target_modules.end();
}

bool quantized(const models::LlamaLoraOptions& lora, const std::string& name) {
  return std::find(lora.nf4_modules.begin(), lora.nf4_modules.end(), name) != lora.nf4_modules.end();
}

}  // namespace

ParameterCounts count_parameters(const models::LlamaConfig& config, const models::LlamaLoraOptions& lora) {
  const int64_t hidden = config.hidden_size, head_dim = config.resolved_head_dim();
  const int64_t q_width = config.num_attention_heads * head_dim, kv_width = config.num_key_value_heads * head_dim;
  const int64_t inner = config.intermediate_size, vocab = config.vocab_size, rank = lora.lora.rank;
  // Qwen2 has q/k/v biases but none on o_proj; attention_bias covers all four elsewhere (llama_layers.cpp).
  const bool qkv_bias = config.attention_bias, o_bias = config.attention_bias && config.model_type != "qwen2";
  const Projection projections[] = {{"q_proj", hidden, q_width, qkv_bias},     {"k_proj", hidden, kv_width, qkv_bias},
                                    {"v_proj", hidden, kv_width, qkv_bias},    {"o_proj", q_width, hidden, o_bias},
                                    {"gate_proj", hidden, inner, config.mlp_bias}, {"up_proj", hidden, inner, config.mlp_bias},
                                    {"down_proj", inner, hidden, config.mlp_bias}};
  // input_layernorm, post_attention_layernorm (Gemma 2: also pre_ and post_feedforward_layernorm)
  int64_t base_layer = (config.is_gemma2() ? 4 : 2) * hidden;
  if (config.has_qk_norm()) base_layer += 2 * head_dim;
  int64_t adapters_layer = 0, largest_base = 0, largest_adapter = 0, nf4_layer = 0, nf4_bytes_layer = 0,
          largest_nf4 = 0;
  for (const Projection& p : projections) {
    base_layer += p.in * p.out + (p.bias ? p.out : 0);
    largest_base = std::max(largest_base, p.in * p.out);
    if (quantized(lora, p.name)) {
      nf4_layer += p.in * p.out;
      nf4_bytes_layer += precision::nf4_storage_bytes(p.in * p.out, 64, lora.double_quant);
      largest_nf4 = std::max(largest_nf4, p.in * p.out);
    }
    if (targeted(lora, p.name)) {
      adapters_layer += rank * p.in + p.out * rank;  // lora_A [r, in], lora_B [out, r]
      largest_adapter = std::max({largest_adapter, rank * p.in, rank * p.out});
    }
  }
  const int64_t layers = config.num_hidden_layers;
  const int64_t outside = vocab * hidden + hidden + (config.tie_word_embeddings ? 0 : vocab * hidden);
  ParameterCounts counts;
  counts.total = layers * (base_layer + adapters_layer) + outside;
  counts.nf4 = layers * nf4_layer;
  counts.nf4_bytes = layers * nf4_bytes_layer;
  counts.largest_nf4 = largest_nf4;
  if (rank > 0) {
    counts.trainable = layers * adapters_layer;
    counts.largest_trainable = largest_adapter;
    counts.trainable_per_layer = adapters_layer;
  } else {
    counts.trainable = counts.total;
    counts.largest_trainable = std::max(largest_base, vocab * hidden);
    counts.trainable_per_layer = base_layer;
    counts.trainable_head = vocab * hidden + hidden;
  }
  return counts;
}

ResidentBytes resident_bytes(const ParameterCounts& counts, bool frozen_weights_bf16, bool optimizer_state_bf16) {
  const int64_t frozen = counts.total - counts.trainable - counts.nf4;
  ResidentBytes bytes;
  bytes.parameters = counts.trainable * 4 + frozen * (frozen_weights_bf16 ? 2 : 4) + counts.nf4_bytes;
  bytes.gradients = counts.trainable * 4;
  bytes.optimizer_state = counts.trainable * (optimizer_state_bf16 ? 4 : 8);
  return bytes;
}

}  // namespace tune::recipes::sft
