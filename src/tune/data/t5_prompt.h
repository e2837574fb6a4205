// Prompts for a T5 text encoder, batched as diffusers' text-to-video pipelines (Latte, PixArt) tokenize them:
// transformers' tokenizer(prompts, padding="max_length", max_length=N, truncation=True, add_special_tokens=True).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tune/data/tokenizer.h"

namespace tune::data {

struct EncodedPrompts {
  torch::Tensor input_ids;       // [B, max_length] int64: the prompt's tokens, EOS, then pad ids
  torch::Tensor attention_mask;  // [B, max_length] int64: 1 for the tokens and EOS, 0 for padding
};

// Each prompt is encoded without BOS, cut to max_length - 1 tokens (the end is dropped, as transformers' right-side
// truncation does, keeping room for the EOS), given the EOS and right-padded with the tokenizer's pad id. An empty
// `prompts` gives [0, max_length] tensors. max_length < 1 throws tune::UsageError.
EncodedPrompts encode_t5_prompts(const Tokenizer& tokenizer, const std::vector<std::string>& prompts,
                                 int64_t max_length);

}  // namespace tune::data
