// Text generation with a KV cache (greedy, temperature, top-p) and gradient-enabled attribution of a generated
// continuation to the prompt tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tune/models/llama.h"
#include "tune/precision/mixed_precision.h"

namespace tune::recipes::sft {

struct SamplingOptions {
  int64_t max_new_tokens = 64;
  double temperature = 0.0;  // 0: greedy
  double top_p = 1.0;
  uint64_t seed = 0;
  std::vector<int64_t> stop_ids;  // generation ends after emitting one of these (EOS)
  // Called with each id as soon as it is chosen (tune chat streams the text); may be empty.
  std::function<void(int64_t)> on_token;
};

// Runs under no-grad with the model's KV cache; returns the generated ids (stop id included if emitted).
std::vector<int64_t> generate(models::LlamaForCausalLM& model, const std::vector<int64_t>& prompt_ids,
                              const SamplingOptions& options, precision::MixedPrecision precision,
                              const torch::Device& device);

struct TokenAttribution {
  int64_t token_id = 0;
  double grad_norm = 0.0;      // || d log p(continuation) / d embedding_i ||
  double grad_x_input = 0.0;   // (d log p(continuation) / d embedding_i) . embedding_i
};

struct AttributionResult {
  double continuation_log_prob = 0.0;
  std::vector<TokenAttribution> prompt_tokens;
};

// With autograd on (block runner and autocast as installed by the caller), differentiates the log-probability
// of `continuation_ids` given `prompt_ids` with respect to the prompt's input embeddings.
AttributionResult attribute(models::LlamaForCausalLM& model, const std::vector<int64_t>& prompt_ids,
                            const std::vector<int64_t>& continuation_ids, precision::MixedPrecision precision,
                            const torch::Device& device);

}  // namespace tune::recipes::sft
