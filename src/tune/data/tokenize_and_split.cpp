// Turning conversations into training examples (truncated, without loss-free ones) and the seeded eval split.
#include <fmt/format.h>

#include <algorithm>

#include "tune/core/error.h"
#include "tune/data/seeded_shuffle.h"
#include "tune/data/sft_dataset.h"
#include "tune/data/train_eval_split.h"

namespace tune::data {

std::vector<TokenizedExample> tokenize_all(const std::vector<Conversation>& conversations, const Tokenizer& tokenizer,
                                           const ChatTemplate& chat_template, int64_t max_length,
                                           bool train_on_prompt, TokenizeReport* report) {
  if (max_length < 2) {
    throw UsageError(fmt::format("max_length must be at least 2 (one token to read, one to predict), got {}",
                                 max_length));
  }
  TokenizeReport counts;
  std::vector<TokenizedExample> examples;
  examples.reserve(conversations.size());
  for (const auto& conversation : conversations) {
    TokenizedExample example = chat_template.encode(tokenizer, conversation, train_on_prompt);
    if (static_cast<int64_t>(example.input_ids.size()) > max_length) {
      example.input_ids.resize(static_cast<size_t>(max_length));
      example.labels.resize(static_cast<size_t>(max_length));
      ++counts.truncated;
    }
    // The loss compares labels[1:] with predictions from tokens[:-1], so the first label never counts.
    const bool has_loss = std::any_of(example.labels.begin() + (example.labels.empty() ? 0 : 1), example.labels.end(),
                                      [](int64_t label) { return label != kIgnoreIndex; });
    if (!has_loss) {
      ++counts.dropped_no_loss;
      continue;
    }
    examples.push_back(std::move(example));
  }
  if (examples.empty() && !conversations.empty()) {
    throw InputError(fmt::format("no example keeps a trained token after truncation to max_length {} ({} of {} "
                                 "truncated); HINT: raise max_length",
                                 max_length, counts.truncated, conversations.size()));
  }
  if (report != nullptr) *report = counts;
  return examples;
}

void split_train_eval(std::vector<TokenizedExample> all, double eval_fraction, uint64_t seed,
                      std::vector<TokenizedExample>& train, std::vector<TokenizedExample>& eval) {
  split_train_eval_items(std::move(all), eval_fraction, seed, train, eval);
}

}  // namespace tune::data
