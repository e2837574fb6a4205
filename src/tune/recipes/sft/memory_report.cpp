// Analytic activation-memory estimate for Llama decoder layers.
#include "tune/recipes/sft/memory_report.h"

namespace tune::recipes::sft {

int64_t estimate_layer_activation_bytes(const models::LlamaConfig& config, const ActivationShape& shape) {
  const int64_t tokens = shape.batch * shape.sequence;
  const int64_t hidden = config.hidden_size;
  const int64_t head_dim = config.resolved_head_dim();
  const int64_t q_width = config.num_attention_heads * head_dim;
  const int64_t kv_width = config.num_key_value_heads * head_dim;
  const int64_t intermediate = config.intermediate_size;
  const int64_t c = shape.compute_bytes;
  // Two RMSNorms: fp32 input kept, normalised output cast for the matmuls.
  int64_t bytes = 2 * tokens * hidden * (4 + c);
  // q, k, v projections and their rotary-embedded copies; the attention output and its o_proj input.
  bytes += tokens * (q_width + 2 * kv_width) * c * 2 + tokens * q_width * c;
  // Attention probabilities: fp32 softmax output plus the compute-dtype copy used by the second matmul.
  bytes += shape.batch * config.num_attention_heads * shape.sequence * shape.sequence * (4 + c);
  // SwiGLU: gate and up outputs, silu(gate), and the product fed to down_proj.
  bytes += tokens * intermediate * c * 4;
  return bytes;
}

int64_t estimate_activation_bytes(const models::LlamaConfig& config, const ActivationShape& shape,
                                  int64_t checkpointed_layers) {
  const int64_t tokens = shape.batch * shape.sequence;
  const int64_t layer = estimate_layer_activation_bytes(config, shape);
  const int64_t plain_layers = config.num_hidden_layers - checkpointed_layers;
  const int64_t block_inputs = checkpointed_layers * tokens * config.hidden_size * 4;
  const int64_t recompute = checkpointed_layers > 0 ? layer : 0;
  // Logits in fp32, their log-softmax, and the compute-dtype copy from lm_head.
  const int64_t logits = tokens * config.vocab_size * (8 + shape.compute_bytes);
  return plain_layers * layer + block_inputs + recompute + logits;
}

}  // namespace tune::recipes::sft
