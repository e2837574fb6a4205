// Tokenizing raw-text documents into overlapping chunks of at most max_length tokens (see text_dataset.h).
#include "tune/data/text_dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "tune/core/error.h"
#include "tune/data/train_eval_split.h"

namespace tune::data {

std::vector<TokenizedExample> tokenize_documents(const std::vector<TextDocument>& documents,
                                                 const Tokenizer& tokenizer, int64_t max_length, int32_t source,
                                                 TextTokenizeReport* report) {
  if (max_length < 2) {
    throw UsageError(fmt::format("max_length must be at least 2 (one token to read, one to predict), got {}",
                                 max_length));
  }
  if (tokenizer.eos_id() < 0) {
    throw InputError(fmt::format("tokenizer '{}' has no EOS token; raw-text documents end with one so the model "
                                 "learns where a document stops",
                                 tokenizer.model_path().string()));
  }
  TextTokenizeReport counts;
  std::vector<TokenizedExample> examples;
  for (const auto& document : documents) {
    std::vector<int64_t> ids;
    if (tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
    const std::vector<int64_t> text_ids = tokenizer.encode(document.text, false, false);
    ids.insert(ids.end(), text_ids.begin(), text_ids.end());
    ids.push_back(tokenizer.eos_id());
    const auto length = static_cast<int64_t>(ids.size());
    ++counts.documents;
    counts.tokens += length;
    if (length > max_length) ++counts.split_documents;
    // Chunk k starts where chunk k-1 ended, minus one token: that token is the context for the next prediction.
    for (int64_t start = 0;; start += max_length - 1) {
      const int64_t end = std::min(start + max_length, length);
      TokenizedExample example;
      example.input_ids.assign(ids.begin() + start, ids.begin() + end);
      example.labels = example.input_ids;
      example.source = source;
      example.document = counts.documents - 1;
      examples.push_back(std::move(example));
      ++counts.chunks;
      if (end == length) break;
    }
  }
  if (report != nullptr) *report = counts;
  return examples;
}

TextEvalSplit split_train_eval_documents(std::vector<TokenizedExample> all, double eval_fraction, uint64_t seed,
                                        std::vector<TokenizedExample>& train, std::vector<TokenizedExample>& eval) {
  std::vector<std::vector<TokenizedExample>> documents;
  for (auto& chunk : all) {
    const bool same = !documents.empty() && documents.back().back().source == chunk.source &&
                      documents.back().back().document == chunk.document;
    if (!same) documents.emplace_back();
    documents.back().push_back(std::move(chunk));
  }
  train.clear();
  eval.clear();
  if (documents.size() == 1 && eval_fraction > 0.0) {
    auto& chunks = documents.front();
    const auto count = static_cast<int64_t>(chunks.size());
    const int64_t eval_count =
        std::max<int64_t>(1, static_cast<int64_t>(eval_fraction * static_cast<double>(count) + 0.5));
    if (eval_count >= count) {
      throw UsageError(fmt::format("eval_fraction {} of the only document's {} chunks leaves nothing to train on; "
                                   "HINT: lower eval_fraction, give a separate eval file or more documents",
                                   eval_fraction, count));
    }
    std::move(chunks.begin(), chunks.end() - eval_count, std::back_inserter(train));
    std::move(chunks.end() - eval_count, chunks.end(), std::back_inserter(eval));
    return {1, true};
  }
  std::vector<std::vector<TokenizedExample>> train_documents, eval_documents;
  split_train_eval_items(std::move(documents), eval_fraction, seed, train_documents, eval_documents);
  for (auto& document : train_documents) std::move(document.begin(), document.end(), std::back_inserter(train));
  for (auto& document : eval_documents) std::move(document.begin(), document.end(), std::back_inserter(eval));
  return {static_cast<int64_t>(eval_documents.size()), false};
}

}  // namespace tune::data
