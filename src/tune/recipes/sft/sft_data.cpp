// Dataset preparation for the SFT recipe, with the counts logged so nothing is dropped silently.
#include "tune/recipes/sft/sft_data.h"

#include <optional>

#include "tune/core/log.h"
#include "tune/data/dataset_file.h"
#include "tune/data/text_dataset.h"

namespace tune::recipes::sft {
namespace {

struct ReadFile {
  std::string path;
  data::DatasetRows rows;
};

ReadFile read_file(const std::string& path, const DataSettings& settings) {
  ReadFile file{path, data::read_dataset_file(path, settings.format, settings.on_bad_line)};
  if (file.rows.report.rows_skipped > 0) log::warn("data: {}", data::skip_summary(path, file.rows.report));
  return file;
}

// Tokenizes one file's rows; examples are tagged with `source`, the file's place in data.train.
std::vector<data::TokenizedExample> tokenize(const ReadFile& file, int32_t source, const DataSettings& settings,
                                             const data::Tokenizer& tokenizer,
                                             const std::optional<data::ChatTemplate>& chat_template) {
  const data::ReadReport& read = file.rows.report;
  if (settings.format == data::DataFormat::text) {
    data::TextTokenizeReport report;
    auto examples = data::tokenize_documents(file.rows.documents, tokenizer, settings.max_length, source, &report);
    log::info("data: {}: {} documents ({} skipped as bad), {} tokens, {} longer than {} tokens split; {} chunks",
              file.path, report.documents, read.rows_skipped, report.tokens, report.split_documents,
              settings.max_length, report.chunks);
    return examples;
  }
  data::TokenizeReport report;
  auto examples = data::tokenize_all(file.rows.conversations, tokenizer, *chat_template, settings.max_length,
                                     settings.train_on_prompt, &report);
  for (auto& example : examples) example.source = source;
  log::info("data: {}: {} rows read, {} skipped as malformed, {} truncated to {} tokens, {} dropped with no "
            "response tokens; chat template {}{}", file.path, read.rows_read, read.rows_skipped, report.truncated,
            settings.max_length, report.dropped_no_loss, chat_template->name(),
            chat_template->is_jinja() ? " (Jinja, rendered whole)" : "");
  return examples;
}

}  // namespace

void log_mixture(const DataSettings& settings, const std::vector<int64_t>& counts, const std::string& items) {
  std::vector<double> weights;
  for (const auto& file : settings.train) weights.push_back(file.weight);
  if (settings.train.size() < 2 && !data::is_weighted(weights)) return;
  int64_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) total += data::examples_per_epoch(counts[i], settings.train[i].weight);
  for (size_t i = 0; i < counts.size(); ++i) {
    const int64_t per_epoch = data::examples_per_epoch(counts[i], settings.train[i].weight);
    log::info("data: mixture: {}: {} {} x weight {} -> {} per epoch ({:.1f}% of the epoch)",
              settings.train[i].path, counts[i], items, settings.train[i].weight, per_epoch,
              total > 0 ? 100.0 * static_cast<double>(per_epoch) / static_cast<double>(total) : 0.0);
  }
}

PreparedData prepare_data(const DataSettings& settings, const data::Tokenizer& tokenizer, uint64_t seed) {
  // Every row of every file is parsed and validated before anything is tokenized.
  std::vector<ReadFile> train_files;
  for (const auto& file : settings.train) train_files.push_back(read_file(file.path, settings));
  std::optional<ReadFile> eval_file;
  if (settings.eval_path) eval_file = read_file(*settings.eval_path, settings);

  std::optional<data::ChatTemplate> chat_template;
  if (settings.format != data::DataFormat::text) {
    chat_template = data::ChatTemplate::resolve(settings.chat_template, tokenizer);
  }
  std::vector<data::TokenizedExample> all;
  for (size_t i = 0; i < train_files.size(); ++i) {
    auto examples = tokenize(train_files[i], static_cast<int32_t>(i), settings, tokenizer, chat_template);
    all.insert(all.end(), std::make_move_iterator(examples.begin()), std::make_move_iterator(examples.end()));
    train_files[i].rows = {};  // the text is no longer needed
  }

  PreparedData prepared;
  for (const auto& file : settings.train) prepared.train.source_weights.push_back(file.weight);
  if (eval_file) {
    prepared.train.examples = std::move(all);
    prepared.eval = tokenize(*eval_file, 0, settings, tokenizer, chat_template);
  } else if (settings.format == data::DataFormat::text) {
    // By document, over all files together: no document's chunks on both sides.
    const auto held_out = data::split_train_eval_documents(std::move(all), settings.eval_fraction, seed,
                                                           prepared.train.examples, prepared.eval);
    if (settings.eval_fraction > 0.0) {
      log::info("data: {} held out for evaluation ({} chunks)",
                held_out.only_document_tail ? std::string("the only document's last chunks")
                                            : fmt::format("{} document{}", held_out.documents,
                                                          held_out.documents == 1 ? "" : "s"),
                prepared.eval.size());
    }
  } else {
    // One split over all files together: with a single file exactly the split it always was.
    data::split_train_eval(std::move(all), settings.eval_fraction, seed, prepared.train.examples, prepared.eval);
  }
  std::vector<int64_t> per_file(settings.train.size(), 0);
  for (const auto& example : prepared.train.examples) ++per_file[static_cast<size_t>(example.source)];
  log_mixture(settings, per_file, "training examples");
  log::info("data: {} training and {} evaluation examples ({}, packing {})", prepared.train.size(),
            prepared.eval.size(),
            settings.format == data::DataFormat::text ? "raw text" : "template " + settings.chat_template,
            settings.packing ? "on" : "off");
  return prepared;
}

}  // namespace tune::recipes::sft
