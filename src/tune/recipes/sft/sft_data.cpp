// Dataset preparation for the SFT recipe, with the counts logged so nothing is dropped silently.
#include "tune/recipes/sft/sft_data.h"

#include "tune/core/log.h"

namespace tune::recipes::sft {
namespace {

std::vector<data::TokenizedExample> read_and_tokenize(const std::string& path, const DataSettings& settings,
                                                      const data::Tokenizer& tokenizer) {
  data::ReadReport read_report;
  const auto conversations = data::read_jsonl(path, settings.format, settings.on_bad_line, &read_report);
  data::TokenizeReport tokenize_report;
  const auto chat_template = data::ChatTemplate::resolve(settings.chat_template, tokenizer);
  auto examples = data::tokenize_all(conversations, tokenizer, chat_template, settings.max_length,
                                     settings.train_on_prompt, &tokenize_report);
  log::info("data: {}: {} rows read, {} skipped as malformed, {} truncated to {} tokens, {} dropped with no "
            "response tokens; chat template {}{}", path, read_report.lines_read, read_report.lines_skipped,
            tokenize_report.truncated, settings.max_length, tokenize_report.dropped_no_loss, chat_template.name(),
            chat_template.is_jinja() ? " (Jinja, rendered whole)" : "");
  return examples;
}

}  // namespace

PreparedData prepare_data(const DataSettings& settings, const data::Tokenizer& tokenizer, uint64_t seed) {
  PreparedData prepared;
  auto train = read_and_tokenize(settings.train_path, settings, tokenizer);
  if (settings.eval_path) {
    prepared.train = std::move(train);
    prepared.eval = read_and_tokenize(*settings.eval_path, settings, tokenizer);
  } else {
    data::split_train_eval(std::move(train), settings.eval_fraction, seed, prepared.train, prepared.eval);
  }
  log::info("data: {} training and {} evaluation examples (template {}, packing {})", prepared.train.size(),
            prepared.eval.size(), settings.chat_template, settings.packing ? "on" : "off");
  return prepared;
}

}  // namespace tune::recipes::sft
