#include "tune/recipes/sana/sana_prompt.h"

#include <fmt/format.h>

#include <torch/torch.h>

#include <algorithm>

#include "tune/core/error.h"
#include "tune/recipes/diffusion/prompt_text.h"

namespace tune::recipes::sana {

const std::vector<std::string>& default_complex_human_instruction() {
  // Verbatim from diffusers' SanaPipeline (pipelines/sana/pipeline_sana.py, __call__'s default), itself the
  // official configs' chi_prompt.
  static const std::vector<std::string> lines = {
      "Given a user prompt, generate an 'Enhanced prompt' that provides detailed visual descriptions suitable for "
      "image generation. Evaluate the level of detail in the user prompt:",
      "- If the prompt is simple, focus on adding specifics about colors, shapes, sizes, textures, and spatial "
      "relationships to create vivid and concrete scenes.",
      "- If the prompt is already detailed, refine and enhance the existing details slightly without "
      "overcomplicating.",
      "Here are examples of how to transform or refine prompts:",
      "- User Prompt: A cat sleeping -> Enhanced: A small, fluffy white cat curled up in a round shape, sleeping "
      "peacefully on a warm sunny windowsill, surrounded by pots of blooming red flowers.",
      "- User Prompt: A busy city street -> Enhanced: A bustling city street scene at dusk, featuring glowing street "
      "lamps, a diverse crowd of people in colorful clothing, and a double-decker bus passing by towering glass "
      "skyscrapers.",
      "Please generate only the enhanced description for the prompt below and avoid including any additional "
      "commentary or evaluations:",
      "User Prompt: ",
  };
  return lines;
}

SanaPromptTokens tokenize_sana_prompts(const data::Tokenizer& tokenizer, const std::vector<std::string>& prompts,
                                       int64_t max_sequence_length,
                                       const std::vector<std::string>& complex_human_instruction) {
  if (max_sequence_length < 2) {
    throw UsageError(fmt::format("sampling.max_text_tokens must be at least 2 (BOS and one token), got {}",
                                 max_sequence_length));
  }
  std::string instruction;
  for (size_t i = 0; i < complex_human_instruction.size(); ++i) {
    if (i > 0) instruction += "\n";
    instruction += complex_human_instruction[i];
  }
  int64_t budget = max_sequence_length;
  if (!complex_human_instruction.empty()) {
    budget = static_cast<int64_t>(tokenizer.encode(instruction).size()) + max_sequence_length - 2;
  }
  const auto batch = static_cast<int64_t>(prompts.size());
  SanaPromptTokens tokens;
  tokens.ids = torch::full({batch, budget}, tokenizer.pad_id(), torch::kLong);
  tokens.mask = torch::zeros({batch, budget}, torch::kLong);
  for (int64_t row = 0; row < batch; ++row) {
    const auto text = instruction + diffusion_common::preprocess_prompt(prompts[static_cast<size_t>(row)]);
    const auto ids = tokenizer.encode(text, /*add_bos=*/true);
    const auto kept = std::min<int64_t>(budget, static_cast<int64_t>(ids.size()));
    for (int64_t j = 0; j < kept; ++j) tokens.ids[row][j] = ids[static_cast<size_t>(j)];
    tokens.mask[row].narrow(0, 0, kept).fill_(1);
  }
  return tokens;
}

torch::Tensor select_sana_tokens(const torch::Tensor& per_token, int64_t max_sequence_length) {
  const int64_t length = per_token.size(1);
  if (length < max_sequence_length) {
    throw Error(fmt::format("select_sana_tokens: {} positions, fewer than the {} kept", length, max_sequence_length));
  }
  return torch::cat({per_token.narrow(1, 0, 1), per_token.narrow(1, length - (max_sequence_length - 1),
                                                                  max_sequence_length - 1)},
                    1);
}

SanaCaptions encode_sana_captions(const TextEncoderFn& encoder, const data::Tokenizer& tokenizer,
                                  const std::vector<std::string>& prompts, int64_t max_sequence_length,
                                  const std::vector<std::string>& complex_human_instruction) {
  torch::NoGradGuard no_grad;
  const auto tokens = tokenize_sana_prompts(tokenizer, prompts, max_sequence_length, complex_human_instruction);
  const auto hidden = encoder(tokens.ids, tokens.mask);
  return {select_sana_tokens(hidden, max_sequence_length),
          select_sana_tokens(tokens.mask.to(hidden.device()), max_sequence_length)};
}

}  // namespace tune::recipes::sana
