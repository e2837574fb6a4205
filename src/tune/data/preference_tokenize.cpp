// Tokenizing preference pairs as TRL's DPOTrainer does (trl 1.16, DPOTrainer._prepare_dataset and its collator),
// so the same rows give the same ids, prompts and completions in tune and in TRL.
#include <algorithm>

#include "tune/data/preference_dataset.h"

namespace tune::data {
namespace {

size_t common_prefix_length(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t shared = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < shared && a[i] == b[i]) ++i;
  return i;
}

std::vector<ChatMessage> concatenated(const std::vector<ChatMessage>& prompt, const std::vector<ChatMessage>& reply) {
  std::vector<ChatMessage> all = prompt;
  all.insert(all.end(), reply.begin(), reply.end());
  return all;
}

}  // namespace

TokenizedPair tokenize_pair(const PreferenceRow& row, const Tokenizer& tokenizer, const ChatTemplate& chat_template) {
  std::vector<int64_t> prompt, with_chosen, with_rejected;
  if (row.conversational) {
    // Rendered whole and encoded once, special-token text as special tokens (the template writes BOS itself).
    auto encode = [&](const std::vector<ChatMessage>& messages, bool generation_prompt) {
      return tokenizer.encode(chat_template.render_text(messages, generation_prompt), false, false);
    };
    prompt = encode(row.prompt_messages, true);
    with_chosen = encode(concatenated(row.prompt_messages, row.chosen_messages), false);
    with_rejected = encode(concatenated(row.prompt_messages, row.rejected_messages), false);
  } else {
    // Plain text: the tokenizer's leading special tokens, and EOS text appended to a completion lacking it, so
    // the model learns to stop after the preferred answer.
    const std::string eos = tokenizer.piece(tokenizer.eos_id());
    auto with_eos = [&](const std::string& text) {
      return text.size() >= eos.size() && text.compare(text.size() - eos.size(), eos.size(), eos) == 0 ? text
                                                                                                     : text + eos;
    };
    prompt = tokenizer.encode(row.prompt_text);
    with_chosen = tokenizer.encode(row.prompt_text + with_eos(row.chosen_text));
    with_rejected = tokenizer.encode(row.prompt_text + with_eos(row.rejected_text));
  }
  // The completion starts where the prompt's tokens and the whole text's diverge: usually the prompt's end, earlier
  // when tokens merge across the boundary or the template renders a lone prompt differently (TRL does the same).
  const size_t prompt_length = std::min(common_prefix_length(prompt, with_chosen),
                                        common_prefix_length(prompt, with_rejected));
  TokenizedPair pair;
  pair.prompt_ids.assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(prompt_length));
  pair.chosen_ids.assign(with_chosen.begin() + static_cast<std::ptrdiff_t>(prompt_length), with_chosen.end());
  pair.rejected_ids.assign(with_rejected.begin() + static_cast<std::ptrdiff_t>(prompt_length), with_rejected.end());
  pair.source = row.source;
  return pair;
}

std::vector<TokenizedPair> tokenize_pairs(const std::vector<PreferenceRow>& rows, const Tokenizer& tokenizer,
                                          const ChatTemplate& chat_template, int64_t max_length,
                                          PreferenceTokenizeReport* report) {
  PreferenceTokenizeReport local;
  PreferenceTokenizeReport& counts = report != nullptr ? *report : local;
  std::vector<TokenizedPair> pairs;
  pairs.reserve(rows.size());
  for (const PreferenceRow& row : rows) {
    TokenizedPair pair = tokenize_pair(row, tokenizer, chat_template);
    if (max_length > 0) {
      const auto prompt_length = static_cast<int64_t>(pair.prompt_ids.size());
      // keep_start: a prompt that fills the window leaves no completion token, so nothing to learn from.
      if (prompt_length >= max_length) {
        ++counts.dropped_prompt_too_long;
        continue;
      }
      const auto room = static_cast<size_t>(max_length - prompt_length);
      bool cut = false;
      for (auto* completion : {&pair.chosen_ids, &pair.rejected_ids}) {
        if (completion->size() > room) {
          completion->resize(room);
          cut = true;
        }
      }
      if (cut) ++counts.truncated;
    }
    pairs.push_back(std::move(pair));
  }
  return pairs;
}

}  // namespace tune::data
