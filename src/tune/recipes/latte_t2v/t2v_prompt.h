// Prompts to the caption embeddings Latte-1 is conditioned on, as diffusers' LattePipeline.encode_prompt makes them:
// each prompt lower-cased and stripped, tokenised by T5's tokenizer (EOS appended, padded to max_length tokens),
// encoded by the T5 encoder with its attention mask; for classifier-free guidance the negative prompt the same way.
// mask_feature: with one prompt the embeddings are cut to its real tokens (the negative's to the same count), and
// the transformer sees no mask; with several, each prompt's padded rows are zeroed (the negative's are not).
// The attention masks come along (cut as the embeddings are) for sampling.caption_mask, which hands them to the
// transformer as training does: LattePipeline's negative prompt attends to T5's outputs at its padding, rows the
// training's empty caption never showed the transformer.
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

#include "tune/data/tokenizer.h"
#include "tune/models/t5_encoder.h"

namespace tune::recipes::latte_t2v {

struct PromptEmbeddings {
  torch::Tensor text;      // [B, L, D], the T5 encoder's dtype
  torch::Tensor negative;  // [B, L, D] or undefined (no classifier-free guidance)
  torch::Tensor text_mask, negative_mask;  // [B, L] int64, 1 = a real token (EOS included); negative's as negative
  std::vector<int64_t> token_counts;  // real tokens (EOS included) of each prompt, for the log
};

// Training captions: each preprocessed as a prompt, padded (or cut) to max_length tokens and encoded with its
// attention mask; the padded rows are kept (the transformer masks them). Under no-grad.
struct CaptionEmbeddings {
  torch::Tensor text;  // [B, max_length, D], the T5 encoder's dtype
  torch::Tensor mask;  // [B, max_length] int64, 1 = a real token (EOS included)
};
CaptionEmbeddings encode_captions(models::T5EncoderImpl& encoder, const data::Tokenizer& tokenizer,
                                  const std::vector<std::string>& captions, int64_t max_length);

// Runs under no-grad: the text encoder never takes part in a gradient.
PromptEmbeddings encode_prompts(models::T5EncoderImpl& encoder, const data::Tokenizer& tokenizer,
                                const std::vector<std::string>& prompts, const std::string& negative_prompt,
                                bool classifier_free_guidance, int64_t max_length, bool mask_feature);

}  // namespace tune::recipes::latte_t2v
