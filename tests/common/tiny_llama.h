// The tests' smallest Llama: two layers of width 32, grouped-query attention (4 query, 2 key/value heads), a
// 64-token vocabulary, no dropout.
#pragma once

#include "tune/models/llama_config.h"

namespace tune::testing {

inline models::LlamaConfig tiny_llama_config(bool tie_word_embeddings = false) {
  models::LlamaConfig config;
  config.vocab_size = 64;
  config.hidden_size = 32;
  config.intermediate_size = 48;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.max_position_embeddings = 64;
  config.tie_word_embeddings = tie_word_embeddings;
  return config;
}

}  // namespace tune::testing
