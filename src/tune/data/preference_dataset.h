// Preference data for DPO and its cousins: rows that pair a prompt with a chosen and a rejected completion, read
// from JSONL files or JSON arrays in TRL's three forms, and tokenized as TRL's DPOTrainer tokenizes them.
//   standard:        {"prompt": "text", "chosen": "text", "rejected": "text"}
//   conversational:  {"prompt": [messages], "chosen": [assistant message(s)], "rejected": [...]}
//   implicit prompt: {"chosen": [whole conversation], "rejected": [whole conversation]} (or two strings): the
//                    longest shared prefix is the prompt (TRL's extract_prompt).
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "tune/data/sft_dataset.h"
#include "tune/data/tokenizer.h"

namespace tune::data {

struct PreferenceRow {
  bool conversational = false;
  // Standard form: the texts (chosen and rejected continue the prompt's text directly, as TRL concatenates them).
  std::string prompt_text, chosen_text, rejected_text;
  // Conversational forms: the prompt's messages and each completion's messages.
  std::vector<ChatMessage> prompt_messages, chosen_messages, rejected_messages;
  std::string source;  // "FILE:LINE" or "FILE:index N"
};

// Reads every row of `path` (JSONL or a JSON array), validating each: the fields and their types, roles, a prompt
// that ends with a user turn and completions that are assistant turns (conversational forms), the same form for
// every row of a file (as TRL requires). A bad row throws tune::InputError naming FILE:LINE and what was expected,
// or with OnBadLine::skip is counted in `report` (an empty result is still an error).
std::vector<PreferenceRow> read_preference_file(const std::filesystem::path& path, OnBadLine on_bad_line,
                                                ReadReport* report = nullptr);

// One pair's token ids as TRL's DPOTrainer makes them: the prompt (conversational: rendered by the chat template
// with the generation prompt; standard: the text with the tokenizer's leading special tokens) and prompt +
// completion (conversational: the whole conversation rendered; standard: EOS text appended to a completion that
// does not end with it), each encoded once; the prompt is their common prefix (where the tokenizations diverge,
// when the template renders the prompt differently on its own), each completion what follows it.
struct TokenizedPair {
  std::vector<int64_t> prompt_ids, chosen_ids, rejected_ids;
  std::string source;
  int32_t file_index = 0;  // which of data.train's files it came from (a weighted mixture, dataset_mixture.h)
  // The reference model's summed completion log-probs, when computed once before training (dpo.precompute_reference):
  // they travel with the pair through shuffles and resumes. NaN: not computed.
  float reference_chosen = std::numeric_limits<float>::quiet_NaN();
  float reference_rejected = std::numeric_limits<float>::quiet_NaN();
};
TokenizedPair tokenize_pair(const PreferenceRow& row, const Tokenizer& tokenizer, const ChatTemplate& chat_template);

struct PreferenceTokenizeReport {
  int64_t dropped_prompt_too_long = 0;  // the prompt alone fills max_length: no completion token would be left
  int64_t truncated = 0;                // prompt + a completion longer than max_length, cut at the end (keep_start)
};
// Tokenizes every row; with max_length > 0, TRL's keep_start truncation: a pair whose prompt alone has max_length
// tokens or more is dropped (counted), and each completion is cut so that prompt + completion fits.
std::vector<TokenizedPair> tokenize_pairs(const std::vector<PreferenceRow>& rows, const Tokenizer& tokenizer,
                                          const ChatTemplate& chat_template, int64_t max_length,
                                          PreferenceTokenizeReport* report = nullptr);

}  // namespace tune::data
