// tokenize_all (truncation, dropping loss-free examples) and the seeded, portable train/eval split.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "data_test_helpers.h"
#include "tune/core/error.h"
#include "tune/data/seeded_shuffle.h"

using namespace tune::data;
using tune::data::testing::tiny_tokenizer;

namespace {
Conversation exchange(const std::string& user, const std::string& reply) {
  return {{{"user", user}, {"assistant", reply}}, "test"};
}
}  // namespace

TEST_CASE("tokenize_all truncates keeping the start and drops examples left without loss", "[data][tokenize]") {
  const auto chat_template = ChatTemplate::by_name("plain");
  const Tokenizer& tokenizer = tiny_tokenizer();
  const auto short_one = exchange("Reverse: a b", "b a");
  const auto long_prompt = exchange("Reverse: a b c d e f g h i j k l m n o p q r s t u v w x y z", "z");
  const auto full_short = chat_template.encode(tokenizer, short_one, false);
  const auto prompt_length = static_cast<int64_t>(chat_template.encode_prompt(tokenizer, {{short_one.messages[0]}, ""}).size());
  const int64_t max_length = prompt_length + 2;  // room for one reply token of the short example (and its shift)
  REQUIRE(static_cast<int64_t>(full_short.input_ids.size()) > max_length);

  TokenizeReport report;
  const auto examples = tokenize_all({short_one, long_prompt}, tokenizer, chat_template, max_length, false, &report);
  CHECK(report.truncated == 2);
  CHECK(report.dropped_no_loss == 1);  // the long prompt fills the window before its reply
  REQUIRE(examples.size() == 1);
  CHECK(examples[0].input_ids ==
        std::vector<int64_t>(full_short.input_ids.begin(), full_short.input_ids.begin() + max_length));
  CHECK(examples[0].labels == std::vector<int64_t>(full_short.labels.begin(), full_short.labels.begin() + max_length));

  CHECK_THROWS_WITH(tokenize_all({long_prompt}, tokenizer, chat_template, max_length, false),
                    Catch::Contains("max_length") && Catch::Contains("HINT"));
  CHECK_THROWS_AS(tokenize_all({short_one}, tokenizer, chat_template, 1, false), tune::UsageError);
  // Untruncated examples come back whole.
  const auto whole = tokenize_all({short_one}, tokenizer, chat_template, 512, false, &report);
  CHECK(report.truncated == 0);
  CHECK(whole[0].input_ids == full_short.input_ids);
}

TEST_CASE("seeded permutation matches the Python reference, so data order is the same everywhere", "[data][split]") {
  // std::mt19937_64 is fully specified by the standard (its 10000th output from the default seed is fixed);
  // make_expected.py reimplements it and our Fisher-Yates independently in Python.
  std::mt19937_64 reference;
  reference.discard(9999);
  REQUIRE(reference() == 9981545732273789042ULL);
  std::ifstream file(tune::data::testing::fixture("tiny_expected.json"));
  const auto permutations = nlohmann::json::parse(file)["permutations"];
  REQUIRE(permutations.size() == 3);
  for (const auto& entry : permutations) {
    CHECK(seeded_permutation(entry["count"].get<int64_t>(), entry["seed"].get<uint64_t>()) ==
          entry["order"].get<std::vector<int64_t>>());
  }
  CHECK(seeded_permutation(0, 1).empty());
  CHECK(seeded_permutation(1, 1) == std::vector<int64_t>{0});
}

TEST_CASE("split_train_eval is disjoint, complete and deterministic", "[data][split]") {
  std::vector<TokenizedExample> all;
  for (int64_t i = 0; i < 50; ++i) all.push_back({{i, i}, {i, i}});
  auto ids = [](const std::vector<TokenizedExample>& examples) {
    std::vector<int64_t> result;
    for (const auto& example : examples) result.push_back(example.input_ids[0]);
    return result;
  };
  std::vector<TokenizedExample> train, eval, train_again, eval_again, train_other, eval_other;
  split_train_eval(all, 0.1, 7, train, eval);
  split_train_eval(all, 0.1, 7, train_again, eval_again);
  split_train_eval(all, 0.1, 8, train_other, eval_other);
  CHECK(eval.size() == 5);
  CHECK(train.size() == 45);
  CHECK(ids(eval) == ids(eval_again));
  CHECK(ids(train) == ids(train_again));
  CHECK(ids(eval) != ids(eval_other));
  std::set<int64_t> seen;
  for (int64_t id : ids(train)) seen.insert(id);
  for (int64_t id : ids(eval)) CHECK(seen.insert(id).second);  // disjoint
  CHECK(seen.size() == 50);                                    // complete
  const auto eval_ids = ids(eval);
  CHECK(std::is_sorted(eval_ids.begin(), eval_ids.end()));

  split_train_eval(all, 0.001, 7, train, eval);
  CHECK(eval.size() == 1);  // a positive fraction holds out at least one
  split_train_eval(all, 0.0, 7, train, eval);
  CHECK(eval.empty());
  CHECK(train.size() == 50);
  CHECK_THROWS_AS(split_train_eval(all, 1.0, 7, train, eval), tune::UsageError);
  CHECK_THROWS_AS(split_train_eval({all[0]}, 0.5, 7, train, eval), tune::UsageError);
}
