#include "tune/recipes/dpo/dpo_data.h"

#include "tune/core/error.h"
#include "tune/core/log.h"
#include "tune/data/dataset_file.h"
#include "tune/data/train_eval_split.h"
#include "tune/recipes/sft/sft_data.h"

namespace tune::recipes::dpo {
namespace {

std::vector<data::TokenizedPair> read_and_tokenize(const std::string& path, const sft::DataSettings& settings,
                                                   const data::Tokenizer& tokenizer,
                                                   const data::ChatTemplate& chat_template) {
  data::ReadReport read;
  const auto rows = data::read_preference_file(path, settings.on_bad_line, &read);
  if (read.rows_skipped > 0) log::warn("data: {}", data::skip_summary(path, read));
  data::PreferenceTokenizeReport report;
  auto pairs = data::tokenize_pairs(rows, tokenizer, chat_template, settings.max_length, &report);
  log::info("data: {}: {} pairs read, {} skipped as malformed, {} truncated to {} tokens, {} dropped (the prompt "
            "alone fills data.max_length); chat template {} for conversational rows",
            path, read.rows_read, read.rows_skipped, report.truncated, settings.max_length,
            report.dropped_prompt_too_long, chat_template.name());
  if (pairs.empty()) {
    throw InputError(fmt::format("{}: no pair is left to train on: every prompt fills data.max_length ({}); "
                                 "HINT: raise data.max_length", path, settings.max_length));
  }
  return pairs;
}

}  // namespace

PreparedPairs prepare_pairs(const sft::DataSettings& settings, const data::Tokenizer& tokenizer, uint64_t seed) {
  const data::ChatTemplate chat_template = data::ChatTemplate::resolve(settings.chat_template, tokenizer);
  std::vector<data::TokenizedPair> all;
  PreparedPairs prepared;
  for (size_t i = 0; i < settings.train.size(); ++i) {
    auto pairs = read_and_tokenize(settings.train[i].path, settings, tokenizer, chat_template);
    for (auto& pair : pairs) pair.file_index = static_cast<int32_t>(i);
    all.insert(all.end(), std::make_move_iterator(pairs.begin()), std::make_move_iterator(pairs.end()));
    prepared.file_weights.push_back(settings.train[i].weight);
  }
  if (settings.eval_path) {
    prepared.train = std::move(all);
    prepared.eval = read_and_tokenize(*settings.eval_path, settings, tokenizer, chat_template);
  } else {
    data::split_train_eval_items(std::move(all), settings.eval_fraction, seed, prepared.train, prepared.eval);
  }
  log::info("data: {} training and {} evaluation pairs", prepared.train.size(), prepared.eval.size());
  std::vector<int64_t> per_file(settings.train.size(), 0);
  for (const auto& pair : prepared.train) ++per_file[static_cast<size_t>(pair.file_index)];
  sft::log_mixture(settings, per_file, "pairs");
  return prepared;
}

}  // namespace tune::recipes::dpo
