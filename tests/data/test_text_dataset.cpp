// tokenize_documents: BOS + text + EOS, loss on every token, long documents split into overlapping chunks so that
// every token after BOS is trained exactly once when the chunks are packed.
#include <catch2/catch.hpp>

#include <set>

#include "data_test_helpers.h"
#include "tune/core/error.h"
#include "tune/data/sft_loader.h"
#include "tune/data/text_dataset.h"

using namespace tune::data;
using tune::data::testing::tiny_tokenizer;

TEST_CASE("raw text is BOS + document + EOS with every token trained", "[data][text]") {
  const Tokenizer& tokenizer = tiny_tokenizer();
  TextTokenizeReport report;
  const auto examples = tokenize_documents({{"a b c", "x.txt"}}, tokenizer, 512, 3, &report);
  REQUIRE(examples.size() == 1);
  std::vector<int64_t> expected{tokenizer.bos_id()};
  const auto body = tokenizer.encode("a b c", false, false);
  expected.insert(expected.end(), body.begin(), body.end());
  expected.push_back(tokenizer.eos_id());
  CHECK(examples[0].input_ids == expected);
  CHECK(examples[0].labels == expected);
  CHECK(examples[0].source == 3);
  CHECK(report.documents == 1);
  CHECK(report.split_documents == 0);
  CHECK(report.chunks == 1);
  CHECK(report.tokens == static_cast<int64_t>(expected.size()));
}

TEST_CASE("documents longer than max_length are split into consecutive chunks, not truncated", "[data][text]") {
  const Tokenizer& tokenizer = tiny_tokenizer();
  std::string long_text;
  for (int i = 0; i < 60; ++i) long_text += "abcdefghijklmnopqrstuvwxyz"[i % 26] + std::string(" ");
  const std::vector<TextDocument> documents{{long_text, "long.txt"}, {"a b", "short.txt"}};
  const auto whole = tokenize_documents(documents, tokenizer, 100000);
  REQUIRE(whole.size() == 2);
  const std::vector<int64_t>& ids = whole[0].input_ids;
  REQUIRE(whole[1].input_ids.size() <= 7);  // the short document fits every max_length below
  for (const int64_t max_length : {int64_t{7}, int64_t{8}, int64_t{16}, static_cast<int64_t>(ids.size()) - 1}) {
    TextTokenizeReport report;
    const auto chunks = tokenize_documents(documents, tokenizer, max_length, 0, &report);
    CHECK(report.split_documents == 1);
    // Chunk k starts at k * (max_length - 1): each chunk repeats the previous chunk's last token as its context.
    std::vector<int64_t> rebuilt;
    size_t k = 0;
    for (; k + 1 < chunks.size(); ++k) {
      REQUIRE(static_cast<int64_t>(chunks[k].input_ids.size()) <= max_length);
      CHECK(chunks[k].labels == chunks[k].input_ids);
      if (k > 0) CHECK(chunks[k].input_ids.front() == rebuilt.back());
      rebuilt.insert(rebuilt.end(), chunks[k].input_ids.begin() + (k == 0 ? 0 : 1), chunks[k].input_ids.end());
      if (rebuilt.size() == ids.size()) break;
    }
    CHECK(rebuilt == ids);
    CHECK(report.chunks == static_cast<int64_t>(chunks.size()));
    CHECK(chunks.back().input_ids == whole[1].input_ids);  // the short document, whole

    // Packed by the loader, every token after each document's BOS is a target exactly once.
    LoaderOptions options;
    options.batch_size = 1000;
    options.max_length = max_length;
    options.shuffle = false;
    const SftBatch batch = SftLoader(chunks, options).next();
    CHECK(batch.loss_tokens == static_cast<int64_t>(ids.size() - 1 + whole[1].input_ids.size() - 1));
  }
}

TEST_CASE("max_length 2: chunks of two tokens, one prediction each", "[data][text]") {
  const auto whole = tokenize_documents({{"a b c", "x"}}, tiny_tokenizer(), 512);
  const auto pairs = tokenize_documents({{"a b c", "x"}}, tiny_tokenizer(), 2);
  REQUIRE(pairs.size() == whole[0].input_ids.size() - 1);
  for (size_t k = 0; k < pairs.size(); ++k) {
    const std::vector<int64_t> expected{whole[0].input_ids[k], whole[0].input_ids[k + 1]};
    CHECK(pairs[k].input_ids == expected);
  }
}

TEST_CASE("raw text needs max_length >= 2", "[data][text]") {
  CHECK_THROWS_AS(tokenize_documents({{"a", "x"}}, tiny_tokenizer(), 1), tune::UsageError);
}

TEST_CASE("raw text is held out by document: no document has chunks on both sides", "[data][text]") {
  const Tokenizer& tokenizer = tiny_tokenizer();
  std::vector<TextDocument> documents;
  for (int d = 0; d < 20; ++d) {
    std::string text;
    for (int i = 0; i < 10 + d; ++i) text += "abcdefghijklmnopqrstuvwxyz"[(i + d) % 26] + std::string(" ");
    documents.push_back({text, "doc" + std::to_string(d) + ".txt"});
  }
  // Two files, chunks of 8 tokens: most documents are several chunks.
  auto all = tokenize_documents(documents, tokenizer, 8, 0);
  auto second = tokenize_documents({documents.begin(), documents.begin() + 5}, tokenizer, 8, 1);
  all.insert(all.end(), second.begin(), second.end());
  const auto chunks = all.size();
  std::vector<TokenizedExample> train, eval;
  const auto split = split_train_eval_documents(all, 0.2, 7, train, eval);
  CHECK_FALSE(split.only_document_tail);
  CHECK(split.documents == 5);  // round(0.2 x 25 documents)
  CHECK(train.size() + eval.size() == chunks);
  std::set<std::pair<int32_t, int64_t>> train_documents, eval_documents;
  for (const auto& chunk : train) train_documents.insert({chunk.source, chunk.document});
  for (const auto& chunk : eval) eval_documents.insert({chunk.source, chunk.document});
  CHECK(eval_documents.size() == 5);
  CHECK(train_documents.size() == 20);
  for (const auto& document : eval_documents) CHECK(train_documents.count(document) == 0);
  // A held-out document keeps all its chunks, in order.
  for (const auto& [source, document] : eval_documents) {
    std::vector<int64_t> expected, held;
    for (const auto& chunk : all) {
      if (chunk.source == source && chunk.document == document) {
        expected.insert(expected.end(), chunk.input_ids.begin(), chunk.input_ids.end());
      }
    }
    for (const auto& chunk : eval) {
      if (chunk.source == source && chunk.document == document) held.insert(held.end(), chunk.input_ids.begin(),
                                                                            chunk.input_ids.end());
    }
    CHECK(held == expected);
  }
  // The same seed, the same split.
  std::vector<TokenizedExample> train_again, eval_again;
  split_train_eval_documents(all, 0.2, 7, train_again, eval_again);
  REQUIRE(eval_again.size() == eval.size());
  for (size_t i = 0; i < eval.size(); ++i) CHECK(eval_again[i].input_ids == eval[i].input_ids);
}

TEST_CASE("a single raw-text document is held out as its last chunks", "[data][text]") {
  const Tokenizer& tokenizer = tiny_tokenizer();
  std::string text;
  for (int i = 0; i < 60; ++i) text += "abcdefghijklmnopqrstuvwxyz"[i % 26] + std::string(" ");
  const auto all = tokenize_documents({{text, "one.txt"}}, tokenizer, 8);
  REQUIRE(all.size() >= 8);
  std::vector<TokenizedExample> train, eval;
  const auto split = split_train_eval_documents(all, 0.2, 3, train, eval);
  CHECK(split.only_document_tail);
  const auto expected_eval = static_cast<size_t>(0.2 * static_cast<double>(all.size()) + 0.5);
  REQUIRE(eval.size() == expected_eval);
  for (size_t i = 0; i < train.size(); ++i) CHECK(train[i].input_ids == all[i].input_ids);
  for (size_t i = 0; i < eval.size(); ++i) CHECK(eval[i].input_ids == all[train.size() + i].input_ids);
  CHECK_THROWS_WITH(split_train_eval_documents(all, 0.99, 3, train, eval),
                    Catch::Contains("the only document's") && Catch::Contains("leaves nothing to train on"));
  // No evaluation asked: everything trains.
  split_train_eval_documents(all, 0.0, 3, train, eval);
  CHECK(train.size() == all.size());
  CHECK(eval.empty());
}
