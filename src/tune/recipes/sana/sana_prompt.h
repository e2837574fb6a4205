// Prompts to the caption embeddings Sana is conditioned on, as diffusers' SanaPipeline.encode_prompt makes them:
// each prompt lower-cased and stripped; with the complex human instruction (CHI, the pipeline's default for
// prompts; never for the negative prompt) the instruction lines joined by newlines are prepended and the token budget
// grows by the instruction's length; Gemma's tokenizer with BOS, truncated and right-padded to the budget; the text
// encoder's final-norm hidden states; then only position 0 (BOS) and the last max_sequence_length - 1 positions are
// kept, with the mask sliced alike (for a prompt shorter than the budget, the kept tail is mostly padding, masked).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tune/data/tokenizer.h"

namespace tune::recipes::sana {

// SanaPipeline.__call__'s complex_human_instruction default, line by line.
const std::vector<std::string>& default_complex_human_instruction();

struct SanaPromptTokens {
  torch::Tensor ids;   // [B, budget] int64, right-padded with the tokenizer's pad id
  torch::Tensor mask;  // [B, budget] int64, 1 = a real token (BOS included)
};

// _get_gemma_prompt_embeds's tokenisation. budget = max_sequence_length without an instruction, else
// len(encode(instruction)) + max_sequence_length - 2 (diffusers' count: the instruction's tokens with BOS). A prompt
// longer than the budget is cut at its end.
SanaPromptTokens tokenize_sana_prompts(const data::Tokenizer& tokenizer, const std::vector<std::string>& prompts,
                                       int64_t max_sequence_length,
                                       const std::vector<std::string>& complex_human_instruction);

// encode_prompt's selection along dim 1 of [B, budget, ...]: index 0, then the last max_sequence_length - 1.
torch::Tensor select_sana_tokens(const torch::Tensor& per_token, int64_t max_sequence_length);

// The text encoder: ids [B, L] and mask [B, L] -> final-norm hidden states [B, L, D].
using TextEncoderFn = std::function<torch::Tensor(const torch::Tensor& ids, const torch::Tensor& mask)>;

struct SanaCaptions {
  torch::Tensor text;  // [B, max_sequence_length, D], the encoder's dtype
  torch::Tensor mask;  // [B, max_sequence_length] int64
};

// Tokenise (as above), encode under no-grad, select. An empty instruction encodes without one (the negative prompt,
// and training captions unless the recipe asks for it).
SanaCaptions encode_sana_captions(const TextEncoderFn& encoder, const data::Tokenizer& tokenizer,
                                  const std::vector<std::string>& prompts, int64_t max_sequence_length,
                                  const std::vector<std::string>& complex_human_instruction);

}  // namespace tune::recipes::sana
