// Turning conversations into training examples (truncated, without loss-free ones) and the seeded eval split.
#include <fmt/format.h>

#include <algorithm>

#include "tune/core/error.h"
#include "tune/data/seeded_shuffle.h"
#include "tune/data/sft_dataset.h"

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
  if (!(eval_fraction >= 0.0 && eval_fraction < 1.0)) {
    throw UsageError(fmt::format("eval_fraction must be in [0, 1), got {}", eval_fraction));
  }
  const auto count = static_cast<int64_t>(all.size());
  int64_t eval_count = 0;
  if (eval_fraction > 0.0) {
    eval_count = std::max<int64_t>(1, static_cast<int64_t>(eval_fraction * static_cast<double>(count) + 0.5));
  }
  if (eval_count >= count && eval_count > 0) {
    throw UsageError(fmt::format("eval_fraction {} of {} examples leaves nothing to train on; HINT: lower "
                                 "eval_fraction or give a separate eval file",
                                 eval_fraction, count));
  }
  std::vector<int64_t> order = seeded_permutation(count, seed);
  std::vector<int64_t> train_indices(order.begin(), order.end() - eval_count);
  std::vector<int64_t> eval_indices(order.end() - eval_count, order.end());
  // Each side keeps the file's order: the split is random, the listing stays readable.
  std::sort(train_indices.begin(), train_indices.end());
  std::sort(eval_indices.begin(), eval_indices.end());
  train.clear();
  eval.clear();
  for (int64_t index : train_indices) train.push_back(std::move(all[static_cast<size_t>(index)]));
  for (int64_t index : eval_indices) eval.push_back(std::move(all[static_cast<size_t>(index)]));
}

}  // namespace tune::data
