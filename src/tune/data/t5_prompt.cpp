// Batched, padded T5 prompt encoding (see t5_prompt.h).
#include "tune/data/t5_prompt.h"

#include <fmt/format.h>

#include <algorithm>

#include "tune/core/error.h"

namespace tune::data {

EncodedPrompts encode_t5_prompts(const Tokenizer& tokenizer, const std::vector<std::string>& prompts,
                                 int64_t max_length) {
  if (max_length < 1) {
    throw UsageError(fmt::format("the T5 prompt length must be at least 1 (room for the EOS token), got {}", max_length));
  }
  const auto batch = static_cast<int64_t>(prompts.size());
  EncodedPrompts encoded{torch::full({batch, max_length}, tokenizer.pad_id(), torch::kLong),
                         torch::zeros({batch, max_length}, torch::kLong)};
  auto ids = encoded.input_ids.accessor<int64_t, 2>();
  auto mask = encoded.attention_mask.accessor<int64_t, 2>();
  for (int64_t row = 0; row < batch; ++row) {
    std::vector<int64_t> tokens = tokenizer.encode(prompts[static_cast<size_t>(row)], /*add_bos=*/false,
                                                   /*add_eos=*/false);
    tokens.resize(std::min<size_t>(tokens.size(), static_cast<size_t>(max_length - 1)));
    tokens.push_back(tokenizer.eos_id());
    for (size_t column = 0; column < tokens.size(); ++column) {
      ids[row][static_cast<int64_t>(column)] = tokens[column];
      mask[row][static_cast<int64_t>(column)] = 1;
    }
  }
  return encoded;
}

}  // namespace tune::data
