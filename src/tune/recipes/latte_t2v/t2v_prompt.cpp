#include "tune/recipes/latte_t2v/t2v_prompt.h"

#include <torch/torch.h>

#include "tune/data/t5_prompt.h"
#include "tune/recipes/diffusion/prompt_text.h"

namespace tune::recipes::latte_t2v {

namespace {

torch::Tensor encode(models::T5EncoderImpl& encoder, const data::Tokenizer& tokenizer,
                     const std::vector<std::string>& texts, int64_t max_length, torch::Tensor* mask_out) {
  std::vector<std::string> processed;
  processed.reserve(texts.size());
  for (const auto& text : texts) processed.push_back(diffusion_common::preprocess_prompt(text));
  const auto tokens = data::encode_t5_prompts(tokenizer, processed, max_length);
  const auto device = encoder.parameters().front().device();
  const auto mask = tokens.attention_mask.to(device);
  if (mask_out != nullptr) *mask_out = mask;
  return encoder.forward(tokens.input_ids.to(device), mask);
}

}  // namespace

CaptionEmbeddings encode_captions(models::T5EncoderImpl& encoder, const data::Tokenizer& tokenizer,
                                  const std::vector<std::string>& captions, int64_t max_length) {
  torch::NoGradGuard no_grad;
  CaptionEmbeddings result;
  result.text = encode(encoder, tokenizer, captions, max_length, &result.mask);
  return result;
}

PromptEmbeddings encode_prompts(models::T5EncoderImpl& encoder, const data::Tokenizer& tokenizer,
                                const std::vector<std::string>& prompts, const std::string& negative_prompt,
                                bool classifier_free_guidance, int64_t max_length, bool mask_feature) {
  torch::NoGradGuard no_grad;
  PromptEmbeddings result;
  result.text = encode(encoder, tokenizer, prompts, max_length, &result.text_mask);
  const auto& mask = result.text_mask;
  for (int64_t i = 0; i < mask.size(0); ++i) result.token_counts.push_back(mask[i].sum().item<int64_t>());
  if (classifier_free_guidance) {
    const std::vector<std::string> negatives(prompts.size(), negative_prompt);
    result.negative = encode(encoder, tokenizer, negatives, max_length, &result.negative_mask);
  }
  if (!mask_feature) return result;
  if (prompts.size() == 1) {
    const int64_t keep = result.token_counts.front();
    result.text = result.text.narrow(1, 0, keep);
    result.text_mask = result.text_mask.narrow(1, 0, keep);
    if (result.negative.defined()) {
      result.negative = result.negative.narrow(1, 0, keep);
      result.negative_mask = result.negative_mask.narrow(1, 0, keep);
    }
  } else {
    result.text = result.text * mask.unsqueeze(-1).to(result.text.dtype());
  }
  return result;
}

}  // namespace tune::recipes::latte_t2v
